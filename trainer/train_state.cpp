#include "train_state.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "components/ckpt_tools.h"
#include "base/faults.h"
#include "components/hf_checkpoint.h"
#include "components/outputs.h"
#include "distributed/parallel_model.h"

namespace meshtrain {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The weights a run starts from when it resumes nothing: a step folder of meshtrain's format
// or a Hugging Face checkpoint, each rank reading only its chunks. Returns the bytes read.
int64_t load_initial_weights(const CheckpointConfig& config, const ModelArgs& args, const MeshShape& shape,
                             const std::vector<CheckpointTensor>& model_state) {
  if (config.initial_load_in_hf) return hf::load(config.initial_load_path, args, model_state);
  const std::filesystem::path dir = std::filesystem::absolute(config.initial_load_path).lexically_normal();
  const std::optional<int64_t> step = parse_step_folder_name(dir.filename().string());
  if (!step)
    throw std::invalid_argument("--checkpoint.initial-load-path '" + config.initial_load_path +
                                "' is not a step-<N> folder (for a Hugging Face checkpoint add "
                                "--checkpoint.initial-load-in-hf)");
  CheckpointConfig from;
  from.folder = dir.parent_path().string();
  CheckpointReader reader(from, shape);
  reader.load(*step, model_state);
  return reader.io().bytes_read;
}

}  // namespace

CheckpointConfig checked(CheckpointConfig c, const std::string& dump_folder, const ModelArgs& args) {
  if (c.folder.empty()) c.folder = dump_folder + "/checkpoint";
  if (c.last_save_in_hf && !c.last_save_model_only)
    throw std::invalid_argument(
        "--checkpoint.last-save-in-hf needs --checkpoint.last-save-model-only (a Hugging "
        "Face checkpoint holds model weights only)");
  if ((c.last_save_in_hf || c.initial_load_in_hf) && args.moe_experts > 0)
    throw std::invalid_argument(
        "Hugging Face checkpoints (--checkpoint.last-save-in-hf, --checkpoint.initial-load-in-hf) "
        "cover the dense Llama flavors only, not MoE model '" +
        args.flavor + "'");
  if (c.initial_load_in_hf && c.initial_load_path.empty())
    throw std::invalid_argument("--checkpoint.initial-load-in-hf needs --checkpoint.initial-load-path");
  return c;
}

TrainState::TrainState(CheckpointConfig config, MeshGroups& groups, int rank, ParallelModel& pm, AdamW& optimizer,
                       DataLoader& loader, RunFacts facts)
    : checkpointer_(std::move(config), groups, rank),
      groups_(groups),
      rank_(rank),
      optimizer_(optimizer),
      loader_(loader),
      facts_(std::move(facts)) {
  Transformer& model = pm.model;
  for (const auto& l : pm.buffer_layouts())
    model_state_.push_back({state_keys::model(l.name), &l, model->named_buffers()[l.name]});
  for (const auto& l : pm.layouts()) {
    model_state_.push_back({state_keys::model(l.name), &l, model->named_parameters()[l.name]});
    const auto& s = optimizer.state().at(l.name);
    optimizer_state_.push_back({state_keys::optimizer(l.name, "exp_avg"), &l, s.exp_avg});
    optimizer_state_.push_back({state_keys::optimizer(l.name, "exp_avg_sq"), &l, s.exp_avg_sq});
  }
}

void TrainState::write_keys(const std::string& path, const ModelShapes& shapes) const {
  std::vector<KeyInfo> keys;
  for (const auto& [name, dims] : shapes.buffers)
    keys.push_back({checkpointer_.saved_key(state_keys::model(name)), dims, "float32"});
  for (const auto& [name, dims] : shapes.params)
    keys.push_back({checkpointer_.saved_key(state_keys::model(name)), dims, "float32"});
  for (const auto& [name, dims] : shapes.params)
    for (const auto& moment : state_keys::kMoments)
      keys.push_back({checkpointer_.saved_key(state_keys::optimizer(name, moment)), dims, "float32"});
  write_state_dict_keys(path, keys, state_keys::objects(groups_.shape.dp()));
}

StartPoint TrainState::restore() {
  const CheckpointConfig& c = config();
  const auto resume_step = c.load_step >= 0 ? std::optional<int64_t>(c.load_step) : checkpointer_.latest_step();
  StartPoint start;
  if (c.enable && resume_step) {
    start = resume(*resume_step);
  } else if (!c.initial_load_path.empty()) {
    initial_load_bytes_ = load_initial_weights(c, facts_.args, groups_.shape, model_state_);
    if (facts_.log) std::printf("meshtrain: initial weights from %s\n", c.initial_load_path.c_str());
  }
  start.resume_step = resume_step;
  return start;
}

StartPoint TrainState::resume(int64_t step) {
  const auto& excluded = config().exclude_from_loading;
  auto wanted = model_state_;
  const bool load_optimizer = !excluded.count("optimizer") && !injected(Fault::kOptimizerNotRestored);
  if (load_optimizer) wanted.insert(wanted.end(), optimizer_state_.begin(), optimizer_state_.end());
  const auto t0 = std::chrono::steady_clock::now();
  const auto objects = checkpointer_.load(step, wanted);
  load_s_ = seconds_since(t0);
  const auto& train_state = objects.at(state_keys::kTrainState);
  StartPoint start;
  start.step = train_state.at("step").get<int64_t>();
  if (load_optimizer) optimizer_.set_steps_taken(train_state.at("optimizer_steps").get<int64_t>());
  if (excluded.count("lr_scheduler")) start.lr_step_offset = start.step;  // a fresh schedule
  restore_data_position(objects, start.step, step);
  if (facts_.log)
    std::printf("meshtrain: resumed from %s (written under %s)\n", checkpointer_.step_dir(step).c_str(),
                train_state.value("mesh", std::string("?")).c_str());
  return start;
}

void TrainState::restore_data_position(const nlohmann::json& objects, int64_t step, int64_t resumed_step) {
  if (config().exclude_from_loading.count("dataloader")) {
    // meshtrain's data order is a function of the step: the position follows from it.
    auto state = loader_.state();
    state["samples_consumed"] = step * facts_.global_batch;
    loader_.load_state(state);
    return;
  }
  const int64_t saved_dp = objects.at(state_keys::kTrainState).at("dp_degree").get<int64_t>();
  const int64_t dp_degree = groups_.shape.dp();
  if (saved_dp != dp_degree)
    throw std::runtime_error("checkpoint " + step_folder_name(resumed_step) +
                             ": dataloader state was saved for data-parallel degree " + std::to_string(saved_dp) +
                             ", this run has " + std::to_string(dp_degree) +
                             "; pass --checkpoint.exclude-from-loading dataloader (meshtrain's data order "
                             "follows from the step)");
  if (!injected(Fault::kDataloaderNotRestored))
    loader_.load_state(objects.at(state_keys::dataloader(dp_rank_of(groups_.coord, groups_.shape))));
}

void TrainState::save_if_due(int64_t step, int64_t last_step, int64_t lr_step_offset) {
  const CheckpointConfig& c = config();
  if (c.enable && ((c.interval > 0 && step % c.interval == 0) || step == last_step)) save(step, lr_step_offset);
}

void TrainState::save(int64_t step, int64_t lr_step_offset) {
  const auto t0 = std::chrono::steady_clock::now();
  if (step == facts_.steps && config().last_save_model_only) {
    export_model(step);
    save_s_ += seconds_since(t0);
    return;
  }
  nlohmann::json objects = nlohmann::json::object();
  const std::string mesh = groups_.shape.to_string();
  if (rank_ == 0) {
    objects[state_keys::kTrainState] = {{"step", step},
                                        {"optimizer_steps", optimizer_.steps_taken()},
                                        {"dp_degree", groups_.shape.dp()},
                                        {"mesh", mesh}};
    objects[state_keys::kLrScheduler] = {
        {"step", step - lr_step_offset}, {"warmup_steps", facts_.warmup_steps}, {"lr", facts_.lr}};
  }
  // One copy of each data-parallel rank's position.
  if (groups_.coord.tp == 0 && groups_.coord.cp == 0 && groups_.coord.pp == 0)
    objects[state_keys::dataloader(dp_rank_of(groups_.coord, groups_.shape))] = loader_.state();
  auto tensors = model_state_;
  tensors.insert(tensors.end(), optimizer_state_.begin(), optimizer_state_.end());
  checkpointer_.save(step, tensors, objects);
  save_s_ += seconds_since(t0);
}

// An export: weights only, nothing to resume a run from (train_state says so).
void TrainState::export_model(int64_t step) {
  nlohmann::json objects = nlohmann::json::object();
  if (rank_ == 0)
    objects[state_keys::kTrainState] = {
        {"step", step}, {"model_only", true}, {"dp_degree", groups_.shape.dp()}, {"mesh", groups_.shape.to_string()}};
  checkpointer_.save(step, model_state_, objects, config().export_dtype);
  checkpointer_.finish();  // the step folder is published before it is consolidated
  if (config().last_save_in_hf && rank_ == 0) {
    const std::string dir = checkpointer_.step_dir(step);
    ckpt_consolidate(dir, dir + "/model.safetensors", facts_.model);
  }
  groups_.world->barrier();
}

}  // namespace meshtrain
