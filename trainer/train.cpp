#include "train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>

#include "base/compat.h"
#include "base/faults.h"
#include "components/checkpoint.h"
#include "components/data.h"
#include "components/device_batch.h"
#include "components/generate.h"
#include "components/metrics.h"
#include "components/optim.h"
#include "components/outputs.h"
#include "components/profile.h"
#include "components/validation.h"
#include "contract/model_names.h"
#include "distributed/comm.h"
#include "distributed/digests.h"
#include "distributed/grad_norm.h"
#include "distributed/parallelize.h"
#include "distributed/pipeline.h"
#include "model/float8.h"
#include "model/model.h"
#include "train_state.h"

namespace meshtrain {

namespace {

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
  ModelArgs args;
  MeshShape shape;
  int64_t global_batch = 0;
  int64_t accum_steps = 1;  // micro-batches per step
  pp::PipelinePlan pipeline;
};

RunPlan plan_run(const TrainConfig& cfg, const LaunchEnv& env) {
  const TrainingConfig& t = cfg.training;
  const ParallelConfig& parallel = cfg.parallel;
  RunPlan plan;
  plan.args = model_flavor(t.model);
  if (injected(Fault::kRopeTheta10k)) plan.args.rope_theta = 10000.0;
  validate(plan.args, t.seq_len);
  if (t.steps < 0) throw std::invalid_argument("--steps must be >= 0");
  if (t.local_batch_size < 1) throw std::invalid_argument("--local-batch-size must be >= 1");
  if (cfg.profiling.step >= 0 && !tracing_available())
    throw std::invalid_argument("--profile-step needs the CUDA build (Kineto)");
  const MeshShape shape = plan.shape = parse_mesh(parallel.mesh, env.world_size);
  validate_tp(plan.args, shape, parallel.tp.sequence_parallel, t.seq_len);
  validate_ep(plan.args, shape, parallel.ep.degree);
  const int64_t dp_degree = shape.dp();
  plan.global_batch = t.global_batch_size > 0 ? t.global_batch_size : t.local_batch_size * dp_degree;
  if (plan.global_batch % (t.local_batch_size * dp_degree) != 0)
    throw std::invalid_argument("--global-batch-size " + std::to_string(plan.global_batch) +
                                " is not a multiple of local batch x dp degree " +
                                std::to_string(t.local_batch_size * dp_degree));
  plan.accum_steps = plan.global_batch / (t.local_batch_size * dp_degree);
  const int64_t activation_tokens = t.seq_len / shape.cp / (parallel.tp.sequence_parallel ? shape.tp : 1);
  plan.pipeline = pp::plan_pipeline(cfg.pipeline, plan.args.n_layers, shape, env.rank, t.local_batch_size,
                                    activation_tokens, parallel.dp.param_dtype);
  if (cfg.float8.mode == float8::Mode::kScaledMm && !computes_on_cuda(cfg.job.backend))
    throw std::invalid_argument(
        "--float8 scaled_mm needs the CUDA build and a GPU (--backend nccl or shm); --float8 "
        "emulate runs on CPU");
  return plan;
}

// Full tensors from the seed on every rank (so every layout cuts the same tensors), then
// this rank's pipeline stage, float8 and parallelize keep its part. `shapes` gets the whole
// model's names and shapes first.
std::unique_ptr<ParallelModel> build_model(const TrainConfig& cfg, const RunPlan& plan, MeshGroups& groups,
                                           ModelShapes& shapes) {
  Transformer full_model(plan.args);
  init_weights(full_model, cfg.training.seed);
  for (const auto& item : full_model->named_parameters())
    shapes.params.emplace_back(item.key(), item.value().sizes().vec());
  for (const auto& item : full_model->named_buffers())
    if (contract::model_names::goes_through(item.key(), contract::model_names::kExpertBias))
      shapes.buffers.emplace_back(item.key(), item.value().sizes().vec());
  if (plan.pipeline.stages) {
    const auto& st = *plan.pipeline.stages;
    full_model->keep_only(st.layers_held(), /*embedding=*/st.rank == 0, /*head=*/st.rank == st.pp - 1);
  }
  full_model->to(groups.device);
  float8::convert(full_model, cfg.float8.mode);
  return parallelize(full_model, groups, cfg.parallel, cfg.training.seq_len);
}

// Optimizer in backward (torchtitan's early_step_in_backward): each bucket's parameters
// take their AdamW step as soon as their reduced gradients land, and the gradients go.
std::unique_ptr<EarlyStep> early_step_if_asked(const OptimizerConfig& config, const RunPlan& plan, ParallelModel& pm,
                                               AdamW& optimizer) {
  if (!config.early_step_in_backward) return nullptr;
  if (config.max_norm > 0)
    throw std::invalid_argument(
        "--optimizer.early-step-in-backward cannot clip gradients (the global norm is known "
        "only after every parameter has stepped); pass --max-norm 0");
  if (plan.accum_steps > 1)
    throw std::invalid_argument(
        "--optimizer.early-step-in-backward needs one micro-batch per step (global batch = "
        "local batch x data-parallel degree): accumulated gradients are not final in backward");
  if (plan.pipeline.stages)
    throw std::invalid_argument("--optimizer.early-step-in-backward is not supported with pp > 1");
  return std::make_unique<EarlyStep>(pm, optimizer);
}

// `meshtrain generate`: the weights are loaded; decode and write generate.json.
int run_generate(const TrainConfig& cfg, const RunPlan& plan, const TrainState& state, const StartPoint& start,
                 ParallelModel& pm, bool is_logger) {
  const CheckpointConfig& c = state.config();
  const GenerateConfig& asked = *cfg.generate;
  check_can_generate(start.resume_step || !c.initial_load_path.empty(), c.folder, cfg.parallel.tp.sequence_parallel,
                     plan.pipeline.stages.has_value());
  const Generation g = generate(pm.model, pm.groups.device, asked.prompt, asked.max_new_tokens);
  if (is_logger) {
    const std::string text = ByteTokenizer::decode(g.generated_ids);
    write_generate_report(cfg.job.dump_folder,
                          {start.resume_step ? state.checkpointer().step_dir(*start.resume_step) : c.initial_load_path,
                           plan.shape.to_string(), asked.prompt, g.prompt_ids, g.generated_ids, text, g.prompt_loss});
    if (!cfg.job.quiet) std::printf("%s%s\n", asked.prompt.c_str(), text.c_str());
  }
  pm.groups.world->barrier();
  return 0;
}

// param_digest.json: every parameter of the whole model, summed over the stages.
void write_digests(const JobConfig& job, const ParallelModel& pm, const ModelShapes& shapes, int64_t step,
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
  if (is_logger) write_param_digest(job.dump_folder + "/" + contract::dump_files::kParamDigestFile, step, digests);
}

RankReport rank_report(const LaunchEnv& env, ParallelModel& pm, const AdamW& optimizer, const TrainState& state) {
  RankReport r;
  r.rank = env.rank, r.world_size = env.world_size;
  r.mesh = pm.groups.shape, r.coord = pm.groups.coord;
  r.device = pm.groups.device.str();
  for (const auto& item : pm.model->named_parameters()) {
    r.param_bytes += item.value().nbytes();
    r.grad_bytes += item.value().grad().defined() ? item.value().grad().nbytes() : 0;  // the last step's
  }
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

// One thread per rank keeps many ranks on few cores fair; a host optimizer (CPU offload)
// wants every core this host's ranks can share.
int cpu_threads(const TrainConfig& cfg, const LaunchEnv& env) {
  if (cfg.job.threads > 0) return cfg.job.threads;
  if (!cfg.parallel.dp.cpu_offload) return 1;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world_size);
}

// The job: the dump folder, this process's threads and kernels, and the mesh's groups.
MeshGroups start_job(const TrainConfig& cfg, const LaunchEnv& env, const RunPlan& plan) {
  prepare_dump_folder(cfg.job.dump_folder);
  torch::set_num_threads(cpu_threads(cfg, env));
  if (cfg.job.deterministic) compat::use_deterministic_algorithms();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.job.timeout_s * 1000));
  return join_mesh(env, plan.shape, cfg.job.backend, timeout, cfg.parallel.ep.degree);
}

std::unique_ptr<AdamW> make_optimizer(ParallelModel& pm, double lr) {
  std::vector<std::pair<std::string, torch::Tensor>> named_params;
  for (auto& item : pm.model->named_parameters()) named_params.emplace_back(item.key(), item.value());
  AdamWConfig adamw;
  adamw.lr = lr;
  return std::make_unique<AdamW>(named_params, adamw);
}

std::vector<torch::Tensor> parameters_of(ParallelModel& pm) {
  std::vector<torch::Tensor> out;
  for (auto& item : pm.model->named_parameters()) out.push_back(item.value());
  return out;
}

// Everything a run holds once set up, built in this order (later members refer to earlier
// ones, so a Run never moves). Every option was checked before anything expensive.
struct Run {
  explicit Run(const TrainConfig& config);
  bool is_logger() const { return env.rank == 0; }

  const TrainConfig& cfg;
  const LaunchEnv env;
  const RunPlan plan;
  MeshGroups groups;
  ModelShapes shapes;  // filled by build_model
  std::unique_ptr<ParallelModel> pm;
  DataLoader loader;
  const Validator validator;
  const std::vector<torch::Tensor> params;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<EarlyStep> early_step;
  std::unique_ptr<TrainState> state;
};

// What this rank saves and loads; state_dict_keys.json is written before any load.
std::unique_ptr<TrainState> make_state(Run& run) {
  const TrainConfig& cfg = run.cfg;
  auto state = std::make_unique<TrainState>(
      checked(cfg.checkpoint, cfg.job.dump_folder, run.plan.args), run.groups, run.env.rank, *run.pm, *run.optimizer,
      run.loader,
      RunFacts{cfg.training.steps, cfg.optimizer.warmup_steps, cfg.optimizer.lr, cfg.training.model, run.plan.args,
               run.plan.global_batch, run.is_logger() && !cfg.job.quiet});
  if (state->config().enable && !cfg.generate) state->checkpointer().check_writable();
  if (run.is_logger())
    state->write_keys(cfg.job.dump_folder + "/" + contract::dump_files::kStateDictKeysFile, run.shapes);
  return state;
}

Run::Run(const TrainConfig& config)
    : cfg(config),
      env(LaunchEnv::from_environment()),
      plan(plan_run(cfg, env)),
      groups(start_job(cfg, env, plan)),
      pm(build_model(cfg, plan, groups, shapes)),
      loader(load_corpus(cfg.data.corpus), cfg.training.seq_len, cfg.training.seed),
      validator(cfg.validation, cfg.training.seq_len, cfg.training.seed),
      params(parameters_of(*pm)),
      optimizer(make_optimizer(*pm, cfg.optimizer.lr)),
      early_step(early_step_if_asked(cfg.optimizer, plan, *pm, *optimizer)),
      state(make_state(*this)) {}

std::string run_description(const Run& run) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "model %s (%.2fM parameters), %s, mesh %s, data parallel %s, seq %lld, global batch %lld, %lld steps",
                run.plan.args.flavor.c_str(), run.plan.args.num_parameters() / 1e6, run.groups.device.str().c_str(),
                run.plan.shape.to_string().c_str(), to_string(run.pm->mode()).c_str(),
                static_cast<long long>(run.cfg.training.seq_len), static_cast<long long>(run.plan.global_batch),
                static_cast<long long>(run.cfg.training.steps));
  return line;
}

// After backward: the global gradient norm and its clip, then AdamW. With the optimizer in
// backward the buckets have stepped already and the rest step now. Returns the norm.
double step_optimizer(Run& run, double lr) {
  double norm = 0;
  if (run.early_step) {
    run.early_step->finish(lr);
    norm = run.early_step->norms.norm();
  } else {
    norm = global_grad_norm(*run.pm);
    clip_grads(run.params, norm, run.cfg.optimizer.max_norm);
  }
  if (!run.early_step || injected(Fault::kOptInBwdStepsTwice)) run.optimizer->update(lr, run.params);
  return norm;
}

// One optimizer step over the global batch: each micro-batch's forward and backward (or the
// pipeline schedule's), the loss averaged over data parallel, the optimizer, the MoE balance,
// then the data position moves on. Collective: every rank calls it.
StepFacts train_step(Run& run, double lr) {
  ParallelModel& pm = *run.pm;
  const RunPlan& plan = run.plan;
  const int64_t dp_rank = dp_rank_of(run.groups.coord, plan.shape), dp_degree = plan.shape.dp();
  comm_volume() = CommVolume{};
  const auto t0 = std::chrono::steady_clock::now();

  run.optimizer->zero_grad();
  run.optimizer->begin_step();
  if (run.early_step) run.early_step->lr = lr;
  auto loss_sum = torch::zeros({}, torch::dtype(torch::kFloat32).device(run.groups.device));
  for (int64_t micro = 0; micro < plan.accum_steps; ++micro) {
    const DeviceBatch b =
        to_device(pm, run.loader.micro_batch(plan.global_batch, dp_rank, dp_degree, micro, plan.accum_steps));
    if (plan.pipeline.stages) {  // this rank's stages, every microbatch, in the schedule's order
      loss_sum += pp::pipeline_step(pm, *plan.pipeline.stages, plan.pipeline.options, b.inputs, b.targets, b.positions,
                                    1.0 / static_cast<double>(plan.accum_steps));
      continue;
    }
    // The logits [b, T, V] die with this expression: backward needs only the loss's
    // own saved tensors (at batch 4 on 1B the bf16 logits are 2.1 GB).
    auto loss = pm.loss(pm.model(b.inputs, b.positions), b.targets);
    (loss / plan.accum_steps).backward();
    loss_sum += loss.detach();
  }
  auto loss = loss_sum / plan.accum_steps;
  run.groups.dp_cp->all_reduce_mean(loss);  // each rank's mean over an equal share of the tokens

  StepFacts f;
  f.lr = lr;
  f.grad_norm = step_optimizer(run, lr);
  balance_experts(pm, plan.args.moe_bias_update_speed);
  if (run.is_logger())
    for (int64_t i = 0; i < plan.global_batch; ++i)
      f.windows.push_back(run.loader.window_of_sample(run.loader.samples_consumed() + i));
  run.loader.advance(plan.global_batch);
  f.loss = loss.item<double>();
  f.tokens = plan.global_batch * run.cfg.training.seq_len;
  compat::synchronize(run.groups.device);
  f.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

}  // namespace

int train(const TrainConfig& cfg) {
  inject_fault(cfg.job.inject_fault);
  Run run(cfg);
  const StartPoint start = run.state->restore();
  if (cfg.generate) return run_generate(cfg, run.plan, *run.state, start, *run.pm, run.is_logger());

  // ---- the components that keep their own cadence: trace, metrics (validation and
  // checkpoint are the run's own: run.validator, run.state)
  const JobConfig& job = cfg.job;
  StepTrace trace(cfg.profiling.step, job.dump_folder, run.env.rank,
                  [&run] { compat::synchronize(run.groups.device); });
  MetricsLogger metrics(run.is_logger(), job.quiet, job.dump_folder, run.groups.device);
  metrics.print_header(run_description(run));

  // ---- the training loop
  const int64_t steps = cfg.training.steps, stop_at = cfg.training.stop_at;
  const int64_t last_step = stop_at >= 0 ? std::min(stop_at, steps) : steps;
  const int64_t lr_offset = start.lr_step_offset;
  // A fresh run with nothing to train (--stop-at 0) still saves: its initial weights.
  if (last_step == 0 && !start.resume_step) run.state->save_if_due(0, last_step, lr_offset);
  for (int64_t step = start.step + 1; step <= last_step; ++step) {
    const double lr = lr_at(step - lr_offset, steps - lr_offset, cfg.optimizer.warmup_steps, cfg.optimizer.lr);
    trace.begin(step);
    StepFacts facts = train_step(run, lr);
    trace.end(step);
    facts.step = step;
    facts.validation =
        run.validator.validate_if_due(step, *run.pm, run.plan.pipeline, run.plan.global_batch, run.plan.accum_steps);
    metrics.log(facts);
    run.state->save_if_due(step, last_step, lr_offset);
  }
  metrics.print_median_throughput(start.step + 2, last_step);
  run.state->finish_saves();

  // ---- final facts: parameter digests and this rank's memory
  write_digests(job, *run.pm, run.shapes, last_step, run.is_logger());
  write_rank_report(job.dump_folder, rank_report(run.env, *run.pm, *run.optimizer, *run.state));
  run.groups.world->barrier();
  return 0;
}

}  // namespace meshtrain
