#include "train.h"

#include "faults.h"
#include "float8.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "checkpoint.h"
#include "comm.h"
#include "compat.h"
#include "data.h"
#include "generate.h"
#include "model.h"
#include "optim.h"
#include "outputs.h"
#include "parallelize.h"
#include "pipeline.h"
#include "profile.h"
#include "train_state.h"

namespace meshtrain {

namespace {

torch::Tensor to_tensor(const std::vector<int64_t>& ids, int64_t rows, int64_t cols,
                        const torch::Device& device) {
  return torch::tensor(ids, torch::kInt64).view({rows, cols}).to(device);
}

// torchtitan's validator: the mean loss over the first `steps` global batches of held-out
// text, under the run's mesh and without gradients (pipeline stages run forwards only).
// Every validation sees the same batches. Collective: every rank calls it.
double validation_loss(ParallelModel& pm, const pp::PipelinePlan& pipeline, const DataLoader& held_out, int64_t steps,
                       int64_t global_batch, int64_t accum_steps) {
  torch::NoGradGuard no_grad;
  const MeshGroups& g = pm.groups;
  const int64_t dp_rank = dp_rank_of(g.coord, g.shape), dp_degree = g.shape.dp();
  if (steps < 0) steps = std::max<int64_t>(1, held_out.windows_per_epoch() / global_batch);
  DataLoader data = held_out;  // from its first sample
  auto sum = torch::zeros({}, torch::dtype(torch::kFloat32).device(g.device));
  for (int64_t s = 0; s < steps; ++s, data.advance(global_batch)) {
    for (int64_t micro = 0; micro < accum_steps; ++micro) {
      Batch batch = data.micro_batch(global_batch, dp_rank, dp_degree, micro, accum_steps);
      auto inputs = pm.local_tokens(to_tensor(batch.inputs, batch.samples, batch.seq_len, g.device));
      auto targets = pm.local_tokens(to_tensor(batch.targets, batch.samples, batch.seq_len, g.device));
      const auto positions = pm.positions(batch.seq_len);
      sum += pipeline.stages ? pp::pipeline_forward(pm, *pipeline.stages, pipeline.options, inputs, targets, positions)
                             : pm.loss(pm.model(inputs, positions), targets);
    }
  }
  auto loss = sum / static_cast<double>(steps * accum_steps);
  if (!injected(Fault::kValidationLossLocal)) g.dp_cp->all_reduce_mean(loss);
  return loss.item<double>();
}

// The optimizer in backward: steps each bucket's parameters when their gradients are final
// (ParallelModel::on_gradients_ready), adding their squared norms to the step's grad norm
// first and freeing the gradients after; finish() steps the parameters no bucket covers.
struct EarlyStep {
  EarlyStep(ParallelModel& pm, AdamW& optimizer) : pm(pm), norms(pm), optimizer(optimizer) {
    rest = pm.on_gradients_ready([this](const std::vector<torch::Tensor>& ps) { step(ps); });
  }
  ~EarlyStep() { pm.on_gradients_ready(nullptr); }  // the buckets outlive this
  void step(const std::vector<torch::Tensor>& ps) {
    for (const auto& p : ps) norms.add(p);
    optimizer.update(lr, ps);
    if (injected(Fault::kOptInBwdStepsTwice)) return;  // the planted bug keeps them for a second step
    for (auto p : ps) p.mutable_grad() = torch::Tensor();
  }
  void finish(double step_lr) {
    lr = step_lr;
    step(rest);
  }
  ParallelModel& pm;
  GradNormAccumulator norms;
  AdamW& optimizer;
  std::vector<torch::Tensor> rest;
  double lr = 0;
};

// The auxiliary-loss-free balance after an optimizer step: every MoE layer's routing bias
// moves by the tokens its experts received over the whole batch (all data-parallel ranks).
void balance_experts(ParallelModel& pm, double speed) {
  std::vector<MoE> layers;
  std::vector<torch::Tensor> counts;
  for (int64_t id : pm.model->layer_ids())
    if (auto moe = pm.model->block(id)->moe) {
      layers.push_back(moe);
      counts.push_back(moe->tokens_per_expert);
    }
  if (layers.empty()) return;
  auto total = torch::stack(counts);  // [layers, E], one all-reduce for all of them
  if (!injected(Fault::kExpertBiasLocalCounts)) pm.groups.dp_cp->all_reduce_sum(total);
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->update_expert_bias(total[static_cast<int64_t>(i)], speed);
}

// The run as the options describe it, every option checked before anything expensive
// (and before any rendezvous, so a bad flag fails on every rank alike).
struct RunPlan {
  Backend backend;
  ModelArgs args;
  MeshShape shape;
  ParallelConfig parallel;
  int64_t global_batch = 0;
  int64_t accum_steps = 1;  // micro-batches per step
  pp::PipelinePlan pipeline;
  float8::Mode float8_mode;
};

ParallelConfig parallel_config(const TrainConfig& cfg) {
  ParallelConfig parallel;
  parallel.reshard_after_forward = parse_reshard(cfg.reshard_after_forward);
  parallel.ac = parse_ac(cfg.ac);
  parallel.param_dtype = parse_dtype(cfg.param_dtype);
  parallel.reduce_dtype = parse_dtype(cfg.reduce_dtype);
  parallel.loss_parallel = cfg.loss_parallel;
  parallel.sequence_parallel = cfg.sequence_parallel;
  parallel.seq_len = cfg.seq_len;
  parallel.cp_rotate = cp::parse_rotate(cfg.cp_rotate);
  parallel.bucketing = parse_bucketing(cfg.fsdp_bucketing);
  parallel.cpu_offload = cfg.cpu_offload;
  parallel.bucket_bytes = static_cast<int64_t>(cfg.fsdp_bucket_mb * (1 << 20));
  return parallel;
}

RunPlan plan_run(const TrainConfig& cfg, const LaunchEnv& env) {
  RunPlan plan;
  plan.backend = parse_backend(cfg.backend);
  plan.args = model_flavor(cfg.model);
  if (injected(Fault::kRopeTheta10k)) plan.args.rope_theta = 10000.0;
  validate(plan.args, cfg.seq_len);
  if (cfg.steps < 0) throw std::invalid_argument("--steps must be >= 0");
  if (cfg.validation_freq < 0) throw std::invalid_argument("--validation.freq must be >= 0");
  if (cfg.validation_steps == 0 || cfg.validation_steps < -1)
    throw std::invalid_argument("--validation.steps must be >= 1, or -1 for the whole validation corpus");
  if (cfg.local_batch_size < 1) throw std::invalid_argument("--local-batch-size must be >= 1");
  if (cfg.profile_step >= 0 && !tracing_available())
    throw std::invalid_argument("--profile-step needs the CUDA build (Kineto)");
  const MeshShape shape = plan.shape = parse_mesh(cfg.mesh, env.world_size);
  plan.parallel = parallel_config(cfg);
  validate_tp(plan.args, shape, plan.parallel.sequence_parallel, plan.parallel.seq_len);
  validate_ep(plan.args, shape, cfg.ep);
  const int64_t dp_degree = shape.dp();
  plan.global_batch = cfg.global_batch_size > 0 ? cfg.global_batch_size : cfg.local_batch_size * dp_degree;
  if (plan.global_batch % (cfg.local_batch_size * dp_degree) != 0)
    throw std::invalid_argument("--global-batch-size " + std::to_string(plan.global_batch) +
                                " is not a multiple of local batch x dp degree " +
                                std::to_string(cfg.local_batch_size * dp_degree));
  plan.accum_steps = plan.global_batch / (cfg.local_batch_size * dp_degree);
  const int64_t activation_tokens = cfg.seq_len / shape.cp / (plan.parallel.sequence_parallel ? shape.tp : 1);
  plan.pipeline = pp::plan_pipeline(cfg.pp, plan.args.n_layers, shape, env.rank, cfg.local_batch_size,
                                    activation_tokens, plan.parallel.param_dtype);
  plan.float8_mode = float8::parse_mode(cfg.float8);
  if (plan.float8_mode == float8::Mode::kScaledMm && !computes_on_cuda(plan.backend))
    throw std::invalid_argument("--float8 scaled_mm needs the CUDA build and a GPU (--backend nccl or shm); --float8 "
                                "emulate runs on CPU");
  return plan;
}

// Full tensors from the seed on every rank (so every layout cuts the same tensors), then
// this rank's pipeline stage, float8 and parallelize keep its part. `shapes` gets the whole
// model's names and shapes first.
std::unique_ptr<ParallelModel> build_model(const TrainConfig& cfg, const RunPlan& plan, MeshGroups& groups,
                                           ModelShapes& shapes) {
  Transformer full_model(plan.args);
  init_weights(full_model, cfg.seed);
  for (const auto& item : full_model->named_parameters()) shapes.params.emplace_back(item.key(), item.value().sizes().vec());
  for (const auto& item : full_model->named_buffers())
    if (item.key().find(".expert_bias") != std::string::npos) shapes.buffers.emplace_back(item.key(), item.value().sizes().vec());
  if (plan.pipeline.stages) {
    const auto& st = *plan.pipeline.stages;
    full_model->keep_only(st.layers_held(), /*embedding=*/st.rank == 0, /*head=*/st.rank == st.pp - 1);
  }
  full_model->to(groups.device);
  float8::convert(full_model, plan.float8_mode);
  return parallelize(full_model, groups, plan.parallel);
}

// Optimizer in backward (torchtitan's early_step_in_backward): each bucket's parameters
// take their AdamW step as soon as their reduced gradients land, and the gradients go.
std::unique_ptr<EarlyStep> early_step_if_asked(const TrainConfig& cfg, const RunPlan& plan, ParallelModel& pm,
                                               AdamW& optimizer) {
  if (!cfg.early_step_in_backward) return nullptr;
  if (cfg.max_norm > 0)
    throw std::invalid_argument("--optimizer.early-step-in-backward cannot clip gradients (the global norm is known "
                                "only after every parameter has stepped); pass --max-norm 0");
  if (plan.accum_steps > 1)
    throw std::invalid_argument("--optimizer.early-step-in-backward needs one micro-batch per step (global batch = "
                                "local batch x data-parallel degree): accumulated gradients are not final in backward");
  if (plan.pipeline.stages) throw std::invalid_argument("--optimizer.early-step-in-backward is not supported with pp > 1");
  return std::make_unique<EarlyStep>(pm, optimizer);
}

// `meshtrain generate`: the weights are loaded; decode and write generate.json.
int run_generate(const TrainConfig& cfg, const RunPlan& plan, const TrainState& state, const StartPoint& start,
                 ParallelModel& pm, bool is_logger) {
  const CheckpointConfig& c = state.config();
  check_can_generate(start.resume_step || !c.initial_load_path.empty(), c.folder, plan.parallel.sequence_parallel,
                     plan.pipeline.stages.has_value());
  const Generation g = generate(pm.model, pm.groups.device, cfg.prompt, cfg.max_new_tokens);
  if (is_logger) {
    const std::string text = ByteTokenizer::decode(g.generated_ids);
    write_generate_report(cfg.dump_folder,
                          {start.resume_step ? state.checkpointer().step_dir(*start.resume_step) : c.initial_load_path,
                           plan.shape.to_string(), cfg.prompt, g.prompt_ids, g.generated_ids, text, g.prompt_loss});
    if (!cfg.quiet) std::printf("%s%s\n", cfg.prompt.c_str(), text.c_str());
  }
  pm.groups.world->barrier();
  return 0;
}

// One row of metrics.jsonl (and of the console table).
struct StepFacts {
  int64_t step;
  double loss, grad_norm, lr;
  int64_t tokens;
  std::vector<int64_t> windows;  // the global batch's sample windows
  double step_time_s;
  std::optional<double> validation;
};

void log_step(MetricsWriter& metrics, const StepFacts& f, const torch::Device& device, bool quiet) {
  namespace m = contract::dump_files::metrics;
  nlohmann::json row = {{m::kStep, f.step},
                        {m::kLoss, f.loss},
                        {m::kGradNorm, f.grad_norm},
                        {m::kLr, f.lr},
                        {m::kTokens, f.tokens},
                        {m::kSampleWindows, f.windows},
                        {m::kStepTimeS, f.step_time_s},
                        {m::kTokensPerS, f.tokens / f.step_time_s},
                        {m::kHostPeakRssBytes, host_peak_rss_bytes()},
                        {m::kCommBytes, {{"all_gather", comm_volume().all_gather_bytes},
                                         {"reduce_scatter", comm_volume().reduce_scatter_bytes},
                                         {"all_reduce", comm_volume().all_reduce_bytes}}},
                        {m::kCommCalls, {{"all_gather", comm_volume().all_gather_calls},
                                         {"reduce_scatter", comm_volume().reduce_scatter_calls},
                                         {"all_reduce", comm_volume().all_reduce_calls}}}};
  if (device.is_cuda()) row[m::kDevicePeakBytes] = compat::device_peak_bytes(device);
  if (f.validation) row[m::kValidationLoss] = *f.validation;
  metrics.write(row);
  if (!quiet)
    std::printf("%6lld %12.6f %12.6f %10.3g %12.0f%s\n", static_cast<long long>(f.step), f.loss, f.grad_norm, f.lr,
                f.tokens / f.step_time_s,
                f.validation ? ("   validation loss " + std::to_string(*f.validation)).c_str() : "");
  std::fflush(stdout);
}

// The first step pays for allocation and kernel selection: leave it out.
void print_median_throughput(const std::vector<double>& tokens_per_s, int64_t first_step, int64_t last_step) {
  std::vector<double> steady(tokens_per_s.begin() + 1, tokens_per_s.end());
  std::nth_element(steady.begin(), steady.begin() + steady.size() / 2, steady.end());
  std::printf("meshtrain: median tokens/s over steps %lld..%lld: %.0f\n", static_cast<long long>(first_step),
              static_cast<long long>(last_step), steady[steady.size() / 2]);
}

// param_digest.json: every parameter of the whole model, summed over the stages.
void write_digests(const TrainConfig& cfg, const ParallelModel& pm, const ModelShapes& shapes, int64_t step,
                   bool is_logger) {
  std::vector<std::string> names;
  for (const auto& [name, dims] : shapes.params) names.push_back(name);
  const auto sums = global_sums(pm, names);  // collective
  std::vector<Digest> digests;
  for (const auto& [name, dims] : shapes.params) {
    const auto& [sum, sum_sq] = sums.at(name);
    int64_t numel = 1;
    for (auto d : dims) numel *= d;
    digests.push_back(Digest{state_keys::model(name), sum, std::sqrt(sum_sq), numel});
  }
  if (is_logger) write_param_digest(cfg.dump_folder + "/" + contract::dump_files::kParamDigestFile, step, digests);
}

RankReport rank_report(const LaunchEnv& env, ParallelModel& pm, const AdamW& optimizer, const TrainState& state,
                       int64_t grad_bytes) {
  RankReport r;
  r.rank = env.rank, r.world_size = env.world_size;
  r.mesh = pm.groups.shape, r.coord = pm.groups.coord;
  r.device = pm.groups.device.str();
  for (const auto& item : pm.model->named_parameters()) r.param_bytes += item.value().nbytes();
  r.grad_bytes = grad_bytes;
  r.optimizer_bytes = optimizer.state_bytes();
  r.device_peak_bytes = compat::device_peak_bytes(pm.groups.device);
  const CheckpointIo& io = state.checkpointer().io();
  r.checkpoint_bytes_written = io.bytes_written, r.checkpoint_tensor_bytes_written = io.tensor_bytes_written;
  r.checkpoint_steps_saved = io.steps_saved, r.checkpoint_bytes_read = io.bytes_read;
  r.checkpoint_folder = state.config().folder;
  r.initial_load_bytes_read = state.initial_load_bytes();
  r.checkpoint_save_s = state.save_s(), r.checkpoint_load_s = state.load_s();
  for (const auto& l : pm.layouts())
    r.local_params[state_keys::model(l.name)] =
        local_digest(pm.model->named_parameters()[l.name], l.chunk.offsets, l.chunk.sizes);
  return r;
}

}  // namespace

// One thread per rank keeps many ranks on few cores fair; a host optimizer (CPU offload)
// wants every core this host's ranks can share.
static int cpu_threads(const TrainConfig& cfg, const LaunchEnv& env) {
  if (cfg.threads > 0) return cfg.threads;
  if (!cfg.cpu_offload) return 1;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world_size);
}

int train(const TrainConfig& cfg) {
  inject_fault(parse_fault(cfg.inject_fault));
  // ---- configuration, checked before anything expensive
  const LaunchEnv env = LaunchEnv::from_environment();
  const RunPlan plan = plan_run(cfg, env);
  const MeshShape& shape = plan.shape;
  const int64_t global_batch = plan.global_batch, accum_steps = plan.accum_steps;
  const pp::PipelinePlan& pipeline = plan.pipeline;
  prepare_dump_folder(cfg.dump_folder);
  torch::set_num_threads(cpu_threads(cfg, env));
  if (cfg.deterministic) compat::use_deterministic_algorithms();

  // ---- the job: peers, model, data, optimizer
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.timeout_s * 1000));
  MeshGroups groups = join_mesh(env, shape, plan.backend, timeout, cfg.ep);
  const torch::Device device = groups.device;
  const int64_t dp_rank = dp_rank_of(groups.coord, shape), dp_degree = shape.dp();
  const bool is_logger = env.rank == 0;
  ModelShapes shapes;
  auto pm = build_model(cfg, plan, groups, shapes);
  Transformer& model = pm->model;

  DataLoader loader(load_corpus(cfg.corpus), cfg.seq_len, cfg.seed);
  std::optional<DataLoader> held_out;
  if (cfg.validation_freq > 0) held_out.emplace(load_corpus(cfg.validation_corpus), cfg.seq_len, cfg.seed);

  std::vector<std::pair<std::string, torch::Tensor>> named_params;
  std::vector<torch::Tensor> params;
  for (auto& item : model->named_parameters()) {
    named_params.emplace_back(item.key(), item.value());
    params.push_back(item.value());
  }
  AdamWConfig adamw;
  adamw.lr = cfg.lr;
  AdamW optimizer(named_params, adamw);
  const auto early_step = early_step_if_asked(cfg, plan, *pm, optimizer);

  // ---- checkpoint: what this rank saves and loads; resume or initial weights
  TrainState state(checkpoint_config(cfg, plan.args), groups, env.rank, *pm, optimizer, loader,
                   RunFacts{cfg.steps, cfg.warmup_steps, cfg.lr, cfg.model, plan.args, global_batch,
                            is_logger && !cfg.quiet});
  const CheckpointConfig& ckpt = state.config();
  if (ckpt.enable && !cfg.generate) state.checkpointer().check_writable();
  if (is_logger) state.write_keys(cfg.dump_folder + "/" + contract::dump_files::kStateDictKeysFile, shapes);
  const StartPoint start = state.restore();
  if (cfg.generate) return run_generate(cfg, plan, state, start, *pm, is_logger);

  std::unique_ptr<MetricsWriter> metrics;
  if (is_logger) metrics = std::make_unique<MetricsWriter>(cfg.dump_folder + "/" + contract::dump_files::kMetricsFile);
  if (is_logger && !cfg.quiet) {
    std::printf("meshtrain: model %s (%.2fM parameters), %s, mesh %s, data parallel %s, seq %lld, "
                "global batch %lld, %lld steps\n",
                plan.args.flavor.c_str(), plan.args.num_parameters() / 1e6, device.str().c_str(),
                shape.to_string().c_str(), to_string(pm->mode()).c_str(), static_cast<long long>(cfg.seq_len),
                static_cast<long long>(global_batch), static_cast<long long>(cfg.steps));
    std::printf("%6s %12s %12s %10s %12s\n", "step", "loss", "grad_norm", "lr", "tokens/s");
  }

  // ---- the training loop
  int64_t grad_bytes = 0;
  std::vector<double> tokens_per_s;
  const int64_t last_step = cfg.stop_at >= 0 ? std::min(cfg.stop_at, cfg.steps) : cfg.steps;
  const int64_t lr_step_offset = start.lr_step_offset;
  // A fresh run with nothing to train (--stop-at 0) still saves: its initial weights.
  if (ckpt.enable && !start.resume_step && last_step == 0) state.save(0, lr_step_offset);
  for (int64_t step = start.step + 1; step <= last_step; ++step) {
    const bool traced = step == cfg.profile_step;
    if (traced) {
      compat::synchronize(device);
      start_trace();
    }
    comm_volume() = CommVolume{};
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = lr_at(step - lr_step_offset, cfg.steps - lr_step_offset, cfg.warmup_steps, cfg.lr);

    optimizer.zero_grad();
    optimizer.begin_step();
    if (early_step) early_step->lr = lr;
    auto loss_sum = torch::zeros({}, torch::dtype(torch::kFloat32).device(device));
    for (int64_t micro = 0; micro < accum_steps; ++micro) {
      Batch batch = loader.micro_batch(global_batch, dp_rank, dp_degree, micro, accum_steps);
      // This rank's tokens: [b, T], or [b, T / cp] under context parallel.
      auto inputs = pm->local_tokens(to_tensor(batch.inputs, batch.samples, batch.seq_len, device));
      auto targets = pm->local_tokens(to_tensor(batch.targets, batch.samples, batch.seq_len, device));
      if (pipeline.stages) {  // this rank's stages, every microbatch, in the schedule's order
        loss_sum += pp::pipeline_step(*pm, *pipeline.stages, pipeline.options, inputs, targets,
                                      pm->positions(batch.seq_len), 1.0 / static_cast<double>(accum_steps));
        continue;
      }
      // The logits [b, T, V] die with this expression: backward needs only the loss's
      // own saved tensors (at batch 4 on 1B the bf16 logits are 2.1 GB).
      auto loss = pm->loss(model(inputs, pm->positions(batch.seq_len)), targets);
      (loss / accum_steps).backward();
      loss_sum += loss.detach();
    }
    auto loss = loss_sum / accum_steps;
    groups.dp_cp->all_reduce_mean(loss);  // each rank's mean over an equal share of the tokens

    double norm = 0;
    if (early_step) {  // the buckets' parameters stepped during backward; the rest step now
      early_step->finish(lr);
      norm = early_step->norms.norm();
    } else {
      norm = global_grad_norm(*pm);
      clip_grads(params, norm, cfg.max_norm);
    }
    grad_bytes = 0;
    for (const auto& p : params) grad_bytes += p.grad().defined() ? p.grad().nbytes() : 0;
    if (!early_step || injected(Fault::kOptInBwdStepsTwice)) optimizer.update(lr, params);
    balance_experts(*pm, plan.args.moe_bias_update_speed);
    std::vector<int64_t> windows;  // the global batch, for whoever checks the data or replays the step
    if (is_logger)
      for (int64_t i = 0; i < global_batch; ++i) windows.push_back(loader.window_of_sample(loader.samples_consumed() + i));
    loader.advance(global_batch);

    const double loss_value = loss.item<double>();
    compat::synchronize(device);
    const double step_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (traced) stop_trace(cfg.dump_folder + "/trace_step" + std::to_string(step) + "_rank" + std::to_string(env.rank) + ".json");
    const int64_t tokens = global_batch * cfg.seq_len;
    tokens_per_s.push_back(tokens / step_time);
    std::optional<double> validation;
    if (held_out && step % cfg.validation_freq == 0)
      validation = validation_loss(*pm, pipeline, *held_out, cfg.validation_steps, global_batch, accum_steps);
    if (is_logger) log_step(*metrics, {step, loss_value, norm, lr, tokens, windows, step_time, validation}, device, cfg.quiet);
    if (ckpt.enable && ((ckpt.interval > 0 && step % ckpt.interval == 0) || step == last_step))
      state.save(step, lr_step_offset);
  }
  if (is_logger && !cfg.quiet && tokens_per_s.size() > 1) print_median_throughput(tokens_per_s, start.step + 2, last_step);

  // ---- final facts: parameter digests and this rank's memory
  write_digests(cfg, *pm, shapes, last_step, is_logger);
  write_rank_report(cfg.dump_folder, rank_report(env, *pm, optimizer, state, grad_bytes));
  groups.world->barrier();
  return 0;
}

}  // namespace meshtrain
