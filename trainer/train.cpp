#include "train.h"

#include "faults.h"
#include "float8.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "checkpoint.h"
#include "ckpt_tools.h"
#include "hf_checkpoint.h"
#include "pipeline.h"
#include "comm.h"
#include "compat.h"
#include "data.h"
#include "model.h"
#include "optim.h"
#include "parallelize.h"
#include "profile.h"
#include "outputs.h"

namespace meshtrain {

namespace {

torch::Tensor to_tensor(const std::vector<int64_t>& ids, int64_t rows, int64_t cols,
                        const torch::Device& device) {
  return torch::tensor(ids, torch::kInt64).view({rows, cols}).to(device);
}

// Which pipeline stages this rank runs and how, checked before any rendezvous; no
// stages without pp.
struct PipelinePlan {
  std::optional<pp::StageMap> stages;
  pp::PipelineOptions options;
};

PipelinePlan plan_pipeline(const TrainConfig& cfg, const ModelArgs& args, const MeshShape& shape,
                           const ParallelConfig& parallel, int rank) {
  PipelinePlan plan;
  if (shape.pp == 1) return plan;
  auto& o = plan.options;
  o.schedule = pp::parse_schedule(cfg.pp_schedule);
  const bool interleaved = o.schedule == pp::Schedule::kInterleaved1F1B;
  const int64_t chunks = cfg.pp_virtual_stages > 0 ? cfg.pp_virtual_stages : interleaved ? 2 : 1;
  if (chunks > 1 && !interleaved)
    throw std::invalid_argument("--pp.virtual-stages " + std::to_string(chunks) + " needs --pp.schedule interleaved_1f1b");
  o.microbatches = cfg.pp_microbatches > 0 ? cfg.pp_microbatches : shape.pp;
  if (cfg.local_batch_size % o.microbatches != 0)
    throw std::invalid_argument("--pp.microbatches " + std::to_string(o.microbatches) +
                                (cfg.pp_microbatches > 0 ? "" : " (the default: pp)") +
                                " does not divide --local-batch-size " + std::to_string(cfg.local_batch_size));
  if (interleaved && o.microbatches % shape.pp != 0)
    throw std::invalid_argument("interleaved_1f1b needs --pp.microbatches divisible by pp (" +
                                std::to_string(o.microbatches) + " over pp " + std::to_string(shape.pp) + ")");
  o.activation_dtype = parallel.param_dtype;
  o.activation_tokens = cfg.seq_len / shape.cp / (parallel.sequence_parallel ? shape.tp : 1);
  std::vector<int64_t> split;
  std::stringstream in(cfg.pp_split);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    try {
      split.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw std::invalid_argument("--pp.split '" + cfg.pp_split + "': '" + item + "' is not a layer count");
  }
  plan.stages = pp::stage_map(args.n_layers, shape.pp, coord_of(rank, shape).pp, chunks, split);
  return plan;
}

// torchtitan's validator: the mean loss over the first `steps` global batches of held-out
// text, under the run's mesh and without gradients (pipeline stages run forwards only).
// Every validation sees the same batches. Collective: every rank calls it.
double validation_loss(ParallelModel& pm, const PipelinePlan& pipeline, const DataLoader& held_out, int64_t steps,
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

// The weights a run starts from when it resumes nothing: a step folder of meshtrain's format
// or a Hugging Face checkpoint, each rank reading only its chunks. Returns the bytes read.
int64_t load_initial_weights(const CheckpointConfig& config, const ModelArgs& args, MeshGroups& groups, int rank,
                             const std::vector<CheckpointTensor>& model_state) {
  if (config.initial_load_in_hf) return hf::load(config.initial_load_path, args, model_state);
  const std::filesystem::path dir = std::filesystem::absolute(config.initial_load_path).lexically_normal();
  const std::string name = dir.filename().string();
  int64_t step = -1;
  try {
    if (name.rfind("step-", 0) == 0) step = std::stoll(name.substr(5));
  } catch (const std::exception&) {
  }
  if (step < 0)
    throw std::invalid_argument("--checkpoint.initial-load-path '" + config.initial_load_path +
                                "' is not a step-<N> folder (for a Hugging Face checkpoint add "
                                "--checkpoint.initial-load-in-hf)");
  CheckpointConfig from;
  from.folder = dir.parent_path().string();
  CheckpointReader reader(from, groups.shape);
  reader.load(step, model_state);
  return reader.io().bytes_read;
}

}  // namespace

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
}  // namespace

int train(const TrainConfig& cfg) {
  inject_fault(parse_fault(cfg.inject_fault));
  // ---- configuration, checked before anything expensive
  const LaunchEnv env = LaunchEnv::from_environment();
  const Backend backend = parse_backend(cfg.backend);
  ModelArgs args = model_flavor(cfg.model);
  if (injected(Fault::kRopeTheta10k)) args.rope_theta = 10000.0;
  validate(args, cfg.seq_len);
  if (cfg.steps < 0) throw std::invalid_argument("--steps must be >= 0");
  if (cfg.validation_freq < 0) throw std::invalid_argument("--validation.freq must be >= 0");
  if (cfg.validation_steps == 0 || cfg.validation_steps < -1)
    throw std::invalid_argument("--validation.steps must be >= 1, or -1 for the whole validation corpus");
  if (cfg.local_batch_size < 1) throw std::invalid_argument("--local-batch-size must be >= 1");
  if (cfg.profile_step >= 0 && !tracing_available())
    throw std::invalid_argument("--profile-step needs the CUDA build (Kineto)");
  const MeshShape shape = parse_mesh(cfg.mesh, env.world_size);
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
  validate_tp(args, shape, parallel.sequence_parallel, parallel.seq_len);
  validate_ep(args, shape, cfg.ep);
  const int64_t dp_degree = shape.dp();
  const int64_t global_batch =
      cfg.global_batch_size > 0 ? cfg.global_batch_size : cfg.local_batch_size * dp_degree;
  if (global_batch % (cfg.local_batch_size * dp_degree) != 0)
    throw std::invalid_argument("--global-batch-size " + std::to_string(global_batch) +
                                " is not a multiple of local batch x dp degree " +
                                std::to_string(cfg.local_batch_size * dp_degree));
  const int64_t accum_steps = global_batch / (cfg.local_batch_size * dp_degree);
  const PipelinePlan pipeline = plan_pipeline(cfg, args, shape, parallel, env.rank);
  const float8::Mode float8_mode = float8::parse_mode(cfg.float8);
  if (float8_mode == float8::Mode::kScaledMm && backend != Backend::kNccl)
    throw std::invalid_argument("--float8 scaled_mm needs the CUDA build and --backend nccl; --float8 emulate runs on CPU");
  prepare_dump_folder(cfg.dump_folder);
  torch::set_num_threads(cfg.threads);
  if (cfg.deterministic) compat::use_deterministic_algorithms();

  // ---- the job: peers, model, data, optimizer
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.timeout_s * 1000));
  MeshGroups groups = join_mesh(env, shape, backend, timeout, cfg.ep);
  const torch::Device device = groups.device;
  const int64_t dp_rank = dp_rank_of(groups.coord, shape);
  const bool is_logger = env.rank == 0;

  // Full tensors from the seed on every rank, then each keeps its part.
  Transformer full_model(args);
  init_weights(full_model, cfg.seed);
  std::vector<std::pair<std::string, std::vector<int64_t>>> all_params;  // the whole model's, whatever the stage
  std::vector<std::pair<std::string, std::vector<int64_t>>> all_buffers;  // state buffers (MoE routing bias)
  for (const auto& item : full_model->named_parameters()) all_params.emplace_back(item.key(), item.value().sizes().vec());
  for (const auto& item : full_model->named_buffers())
    if (item.key().find(".expert_bias") != std::string::npos) all_buffers.emplace_back(item.key(), item.value().sizes().vec());
  if (pipeline.stages) {
    const auto& st = *pipeline.stages;
    full_model->keep_only(st.layers_held(), /*embedding=*/st.rank == 0, /*head=*/st.rank == st.pp - 1);
  }
  full_model->to(device);
  float8::convert(full_model, float8_mode);
  auto pm = parallelize(full_model, groups, parallel);
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

  // Optimizer in backward (torchtitan's early_step_in_backward): each bucket's parameters
  // take their AdamW step as soon as their reduced gradients land, and the gradients go.
  std::unique_ptr<EarlyStep> early_step;
  if (cfg.early_step_in_backward) {
    if (cfg.max_norm > 0)
      throw std::invalid_argument("--optimizer.early-step-in-backward cannot clip gradients (the global norm is known "
                                  "only after every parameter has stepped); pass --max-norm 0");
    if (accum_steps > 1)
      throw std::invalid_argument("--optimizer.early-step-in-backward needs one micro-batch per step (global batch = "
                                  "local batch x data-parallel degree): accumulated gradients are not final in backward");
    if (pipeline.stages) throw std::invalid_argument("--optimizer.early-step-in-backward is not supported with pp > 1");
    early_step = std::make_unique<EarlyStep>(*pm, optimizer);
  }

  // ---- checkpoint: what this rank saves and loads, in canonical keys
  CheckpointConfig ckpt_config;
  ckpt_config.enable = cfg.checkpoint_enable;
  ckpt_config.folder = cfg.checkpoint_folder.empty() ? cfg.dump_folder + "/checkpoint" : cfg.checkpoint_folder;
  ckpt_config.interval = cfg.checkpoint_interval;
  ckpt_config.keep_latest_k = cfg.checkpoint_keep_latest_k;
  ckpt_config.load_step = cfg.checkpoint_load_step;
  ckpt_config.exclude_from_loading = parse_exclusions(cfg.checkpoint_exclude);
  ckpt_config.key_style = cfg.checkpoint_key_style;
  ckpt_config.key_map = cfg.checkpoint_key_map;
  ckpt_config.last_save_model_only = cfg.checkpoint_last_save_model_only;
  ckpt_config.export_dtype = parse_dtype(cfg.checkpoint_export_dtype);
  ckpt_config.last_save_in_hf = cfg.checkpoint_last_save_in_hf;
  ckpt_config.initial_load_path = cfg.checkpoint_initial_load_path;
  ckpt_config.initial_load_in_hf = cfg.checkpoint_initial_load_in_hf;
  if (ckpt_config.last_save_in_hf && !ckpt_config.last_save_model_only)
    throw std::invalid_argument("--checkpoint.last-save-in-hf needs --checkpoint.last-save-model-only (a Hugging "
                                "Face checkpoint holds model weights only)");
  if ((ckpt_config.last_save_in_hf || ckpt_config.initial_load_in_hf) && args.moe_experts > 0)
    throw std::invalid_argument("Hugging Face checkpoints (--checkpoint.last-save-in-hf, --checkpoint.initial-load-in-hf) "
                                "cover the dense Llama flavors only, not MoE model '" + args.flavor + "'");
  if (ckpt_config.initial_load_in_hf && ckpt_config.initial_load_path.empty())
    throw std::invalid_argument("--checkpoint.initial-load-in-hf needs --checkpoint.initial-load-path");
  Checkpointer checkpointer(ckpt_config, groups, env.rank);
  if (ckpt_config.enable && !cfg.generate) checkpointer.check_writable();
  std::vector<CheckpointTensor> model_state, optimizer_state;
  for (const auto& l : pm->buffer_layouts()) model_state.push_back({"model." + l.name, &l, model->named_buffers()[l.name]});
  for (const auto& l : pm->layouts()) {
    model_state.push_back({"model." + l.name, &l, model->named_parameters()[l.name]});
    const auto& s = optimizer.state().at(l.name);
    optimizer_state.push_back({"optimizer.state." + l.name + ".exp_avg", &l, s.exp_avg});
    optimizer_state.push_back({"optimizer.state." + l.name + ".exp_avg_sq", &l, s.exp_avg_sq});
  }

  // ---- the keys this run saves, written before any load so a failed load still shows them
  std::vector<KeyInfo> keys;
  for (const auto& [name, dims] : all_buffers) keys.push_back({checkpointer.saved_key("model." + name), dims, "float32"});
  for (const auto& [name, dims] : all_params) keys.push_back({checkpointer.saved_key("model." + name), dims, "float32"});
  for (const auto& [name, dims] : all_params)
    for (const char* moment : {".exp_avg", ".exp_avg_sq"})
      keys.push_back({checkpointer.saved_key("optimizer.state." + name + moment), dims, "float32"});
  std::vector<std::string> object_keys{"lr_scheduler", "train_state"};
  for (int64_t r = 0; r < dp_degree; ++r) object_keys.push_back("dataloader.dp_rank_" + std::to_string(r));
  if (is_logger) write_state_dict_keys(cfg.dump_folder + "/state_dict_keys.json", keys, object_keys);

  int64_t start_step = 0, lr_step_offset = 0;
  double checkpoint_load_s = 0, checkpoint_save_s = 0;  // this rank's wall time in load / all saves
  const auto resume_step = ckpt_config.load_step >= 0 ? std::optional<int64_t>(ckpt_config.load_step)
                                                      : checkpointer.latest_step();
  if (ckpt_config.enable && resume_step) {
    const auto& excluded = ckpt_config.exclude_from_loading;
    auto wanted = model_state;
    const bool load_optimizer = !excluded.count("optimizer") && !injected(Fault::kOptimizerNotRestored);
    if (load_optimizer) wanted.insert(wanted.end(), optimizer_state.begin(), optimizer_state.end());
    const auto load_t0 = std::chrono::steady_clock::now();
    const auto objects = checkpointer.load(*resume_step, wanted);
    checkpoint_load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_t0).count();
    const auto& train_state = objects.at("train_state");
    start_step = train_state.at("step").get<int64_t>();
    if (load_optimizer) optimizer.set_steps_taken(train_state.at("optimizer_steps").get<int64_t>());
    if (excluded.count("lr_scheduler")) lr_step_offset = start_step;  // a fresh schedule
    if (excluded.count("dataloader")) {
      // meshtrain's data order is a function of the step: the position follows from it.
      auto state = loader.state();
      state["samples_consumed"] = start_step * global_batch;
      loader.load_state(state);
    } else {
      const int64_t saved_dp = train_state.at("dp_degree").get<int64_t>();
      if (saved_dp != dp_degree)
        throw std::runtime_error("checkpoint step-" + std::to_string(*resume_step) +
                                 ": dataloader state was saved for data-parallel degree " + std::to_string(saved_dp) +
                                 ", this run has " + std::to_string(dp_degree) +
                                 "; pass --checkpoint.exclude-from-loading dataloader (meshtrain's data order "
                                 "follows from the step)");
      if (!injected(Fault::kDataloaderNotRestored))
        loader.load_state(objects.at("dataloader.dp_rank_" + std::to_string(dp_rank)));
    }
    if (is_logger && !cfg.quiet)
      std::printf("meshtrain: resumed from %s (written under %s)\n", checkpointer.step_dir(*resume_step).c_str(),
                  train_state.value("mesh", std::string("?")).c_str());
  }
  int64_t initial_load_bytes = 0;
  if (!(ckpt_config.enable && resume_step) && !ckpt_config.initial_load_path.empty()) {
    initial_load_bytes = load_initial_weights(ckpt_config, args, groups, env.rank, model_state);
    if (is_logger && !cfg.quiet)
      std::printf("meshtrain: initial weights from %s\n", ckpt_config.initial_load_path.c_str());
  }
  if (cfg.generate) {
    if (!resume_step && ckpt_config.initial_load_path.empty())
      throw std::runtime_error("generate: no complete checkpoint in '" + ckpt_config.folder +
                               "' (or weights from --checkpoint.initial-load-path)");
    if (parallel.sequence_parallel) throw std::invalid_argument("generate: --sequence-parallel needs a fixed seq_len");
    if (pipeline.stages)
      throw std::invalid_argument("generate: pp > 1 is not supported; generate under a mesh without pp (checkpoints "
                                  "load under any mesh)");
    // Every cp rank decodes the whole prefix itself (the weights stay sharded over dp_shard x cp).
    for (int64_t id : model->layer_ids()) model->block(id)->attention->core = nullptr;
    // Greedy decoding without a cache: every token re-runs the whole prefix. All ranks
    // see the same logits (gathered over tp, replicated over dp) and pick the same token.
    torch::NoGradGuard no_grad;
    const auto prompt_ids = ByteTokenizer::encode(cfg.prompt, /*bos=*/true, /*eos=*/false);
    std::vector<int64_t> ids(prompt_ids.begin(), prompt_ids.end());
    const size_t prompt_len = ids.size();
    // The mean next-token loss over the prompt: a number to compare with other
    // implementations of the same model (tests/hf/).
    double prompt_loss = 0;
    {
      auto tokens = torch::tensor(ids, torch::kInt64).view({1, -1}).to(device);
      auto logits = model(tokens).to(torch::kFloat32).squeeze(0);  // [T, V]
      const int64_t T = tokens.size(1);
      if (T > 1)
        prompt_loss = torch::nn::functional::cross_entropy(logits.narrow(0, 0, T - 1), tokens.squeeze(0).narrow(0, 1, T - 1))
                          .item<double>();
    }
    for (int64_t i = 0; i < cfg.max_new_tokens; ++i) {
      auto tokens = torch::tensor(ids, torch::kInt64).view({1, -1}).to(device);
      auto logits = model(tokens).select(1, tokens.size(1) - 1).to(torch::kFloat32);  // [1, V]
      const int64_t next = logits.argmax(-1).item<int64_t>();
      if (next >= ByteTokenizer::kVocabSize || next == ByteTokenizer::kEos) break;
      ids.push_back(next);
    }
    std::vector<int64_t> generated(ids.begin() + static_cast<int64_t>(prompt_len), ids.end());
    if (is_logger) {
      write_json(cfg.dump_folder + "/generate.json",
                 {{"format_version", kOutputsFormatVersion},
                  {"checkpoint", resume_step ? checkpointer.step_dir(*resume_step) : ckpt_config.initial_load_path},
                  {"mesh", shape.to_string()}, {"prompt", cfg.prompt},
                  {"prompt_ids", std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<int64_t>(prompt_len))},
                  {"generated_ids", generated}, {"text", ByteTokenizer::decode(generated)},
                  {"prompt_loss", prompt_loss}});
      if (!cfg.quiet) std::printf("%s%s\n", cfg.prompt.c_str(), ByteTokenizer::decode(generated).c_str());
    }
    groups.world->barrier();
    return 0;
  }

  auto save_checkpoint = [&](int64_t step) {
    nlohmann::json objects = nlohmann::json::object();
    const auto t0 = std::chrono::steady_clock::now();
    if (step == cfg.steps && ckpt_config.last_save_model_only) {
      // An export: weights only, nothing to resume a run from (train_state says so).
      if (env.rank == 0)
        objects["train_state"] = {{"step", step}, {"model_only", true}, {"dp_degree", dp_degree}, {"mesh", shape.to_string()}};
      checkpointer.save(step, model_state, objects, ckpt_config.export_dtype);
      if (ckpt_config.last_save_in_hf && env.rank == 0) {
        const std::string dir = checkpointer.step_dir(step);
        ckpt_consolidate(dir, dir + "/model.safetensors", cfg.model);
      }
      groups.world->barrier();
      checkpoint_save_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return;
    }
    if (env.rank == 0) {
      objects["train_state"] = {{"step", step}, {"optimizer_steps", optimizer.steps_taken()},
                                {"dp_degree", dp_degree}, {"mesh", shape.to_string()}};
      objects["lr_scheduler"] = {{"step", step - lr_step_offset}, {"warmup_steps", cfg.warmup_steps}, {"lr", cfg.lr}};
    }
    if (groups.coord.tp == 0 && groups.coord.cp == 0 && groups.coord.pp == 0) objects["dataloader.dp_rank_" + std::to_string(dp_rank)] = loader.state();
    auto tensors = model_state;
    tensors.insert(tensors.end(), optimizer_state.begin(), optimizer_state.end());
    checkpointer.save(step, tensors, objects);
    checkpoint_save_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  std::unique_ptr<MetricsWriter> metrics;
  if (is_logger) metrics = std::make_unique<MetricsWriter>(cfg.dump_folder + "/metrics.jsonl");

  if (is_logger && !cfg.quiet) {
    std::printf("meshtrain: model %s (%.2fM parameters), %s, mesh %s, data parallel %s, seq %lld, "
                "global batch %lld, %lld steps\n",
                args.flavor.c_str(), args.num_parameters() / 1e6, device.str().c_str(),
                shape.to_string().c_str(), to_string(pm->mode()).c_str(), static_cast<long long>(cfg.seq_len),
                static_cast<long long>(global_batch), static_cast<long long>(cfg.steps));
    std::printf("%6s %12s %12s %10s %12s\n", "step", "loss", "grad_norm", "lr", "tokens/s");
  }

  // ---- the training loop
  int64_t grad_bytes = 0;
  std::vector<double> tokens_per_s;
  const int64_t last_step = cfg.stop_at >= 0 ? std::min(cfg.stop_at, cfg.steps) : cfg.steps;
  // A fresh run with nothing to train (--stop-at 0) still saves: its initial weights.
  if (ckpt_config.enable && !resume_step && last_step == 0) save_checkpoint(0);
  for (int64_t step = start_step + 1; step <= last_step; ++step) {
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
    balance_experts(*pm, args.moe_bias_update_speed);
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
    if (is_logger) {
      nlohmann::json row = {{"step", step},
                            {"loss", loss_value},
                            {"grad_norm", norm},
                            {"lr", lr},
                            {"tokens", tokens},
                            {"sample_windows", windows},
                            {"step_time_s", step_time},
                            {"tokens_per_s", tokens / step_time},
                            {"host_peak_rss_bytes", host_peak_rss_bytes()},
                            {"comm_bytes", {{"all_gather", comm_volume().all_gather_bytes},
                                            {"reduce_scatter", comm_volume().reduce_scatter_bytes},
                                            {"all_reduce", comm_volume().all_reduce_bytes}}},
                            {"comm_calls", {{"all_gather", comm_volume().all_gather_calls},
                                            {"reduce_scatter", comm_volume().reduce_scatter_calls},
                                            {"all_reduce", comm_volume().all_reduce_calls}}}};
      if (device.is_cuda()) row["device_peak_bytes"] = compat::device_peak_bytes(device);
      if (validation) row["validation_loss"] = *validation;
      metrics->write(row);
      if (!cfg.quiet)
        std::printf("%6lld %12.6f %12.6f %10.3g %12.0f%s\n", static_cast<long long>(step), loss_value,
                    norm, lr, tokens / step_time,
                    validation ? ("   validation loss " + std::to_string(*validation)).c_str() : "");
      std::fflush(stdout);
    }
    if (ckpt_config.enable && ((ckpt_config.interval > 0 && step % ckpt_config.interval == 0) || step == last_step))
      save_checkpoint(step);
  }

  if (is_logger && !cfg.quiet && tokens_per_s.size() > 1) {
    // The first step pays for allocation and kernel selection: leave it out.
    std::vector<double> steady(tokens_per_s.begin() + 1, tokens_per_s.end());
    std::nth_element(steady.begin(), steady.begin() + steady.size() / 2, steady.end());
    std::printf("meshtrain: median tokens/s over steps %lld..%lld: %.0f\n", static_cast<long long>(start_step + 2),
                static_cast<long long>(last_step), steady[steady.size() / 2]);
  }

  // ---- final facts: parameter digests and this rank's memory
  std::vector<Digest> digests;
  std::vector<std::string> names;
  for (const auto& [name, dims] : all_params) names.push_back(name);
  const auto sums = global_sums(*pm, names);
  for (const auto& [name, dims] : all_params) {
    const auto& [sum, sum_sq] = sums.at(name);
    int64_t numel = 1;
    for (auto d : dims) numel *= d;
    digests.push_back(Digest{"model." + name, sum, std::sqrt(sum_sq), numel});
  }
  if (is_logger) write_param_digest(cfg.dump_folder + "/param_digest.json", last_step, digests);

  nlohmann::json local = nlohmann::json::object();
  for (const auto& l : pm->layouts())
    local["model." + l.name] = local_digest(model->named_parameters()[l.name], l.chunk.offsets, l.chunk.sizes);

  int64_t param_bytes = 0;
  for (const auto& p : params) param_bytes += p.nbytes();
  write_json(cfg.dump_folder + "/rank" + std::to_string(env.rank) + ".json",
             {{"format_version", kOutputsFormatVersion},
              {"rank", env.rank},
              {"world_size", env.world_size},
              {"mesh", shape.to_string()},
              {"coord", {{"pp", groups.coord.pp}, {"dp_replicate", groups.coord.dp_replicate}, {"dp_shard", groups.coord.dp_shard},
                         {"cp", groups.coord.cp}, {"tp", groups.coord.tp}}},
              {"device", device.str()},
              {"param_bytes", param_bytes},
              {"grad_bytes", grad_bytes},
              {"optimizer_bytes", optimizer.state_bytes()},
              {"host_peak_rss_bytes", host_peak_rss_bytes()},
              {"device_peak_bytes", compat::device_peak_bytes(device)},
              {"checkpoint_bytes_written", checkpointer.io().bytes_written},
              {"checkpoint_tensor_bytes_written", checkpointer.io().tensor_bytes_written},
              {"checkpoint_steps_saved", checkpointer.io().steps_saved},
              {"checkpoint_folder", std::filesystem::absolute(ckpt_config.folder).lexically_normal().string()},
              {"checkpoint_bytes_read", checkpointer.io().bytes_read},
              {"initial_load_bytes_read", initial_load_bytes},
              {"checkpoint_save_s", checkpoint_save_s},
              {"checkpoint_load_s", checkpoint_load_s},
              {"local_state_bytes", param_bytes + optimizer.state_bytes()},
              {"local_params", local}});
  groups.world->barrier();
  return 0;
}

}  // namespace meshtrain
