// What a run saves, resumes and starts from (docs/checkpoint.md). Promises:
//  - the state-dict keys are the contract's (contract/state_keys.h: "model.<fqn>",
//    "optimizer.state.<fqn>.exp_avg", "lr_scheduler", "train_state", "dataloader.dp_rank_<i>");
//    the checkpoint room only styles them (--checkpoint.key-style);
//  - state_dict_keys.json lists exactly the keys a save of this run writes, whatever the
//    pipeline stage, and is written before any load, so a failed load still shows them;
//  - a resumed run continues the step, the optimizer's step count, the learning-rate
//    schedule and the data position of the saved one, each unless excluded from loading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "components/checkpointer.h"
#include "components/data.h"
#include "model/flavors.h"
#include "components/optim.h"
#include "contract/state_keys.h"

namespace meshtrain {

class ParallelModel;

namespace state_keys = contract::state_keys;  // the keys a save writes (contract/state_keys.h)

// The whole model's names and global shapes, whatever this rank's pipeline stage holds.
struct ModelShapes {
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;
  std::vector<std::pair<std::string, std::vector<int64_t>>> buffers;  // state buffers (MoE routing bias)
};

// What the rest of the run needs to know about how it started.
struct StartPoint {
  int64_t step = 0;            // the last step already taken
  int64_t lr_step_offset = 0;  // > 0: the schedule restarts there (lr_scheduler excluded)
  // The newest (or --checkpoint.load-step) step folder, whether or not it was loaded:
  // it is resumed only with checkpointing on.
  std::optional<int64_t> resume_step;
};

// The facts a save records besides the tensors.
struct RunFacts {
  int64_t steps = 0;  // the schedule's length: the save after it may be an export
  int64_t warmup_steps = 0;
  double lr = 0;
  std::string model;         // flavor name, for a Hugging Face export's config.json
  ModelArgs args;            // for a Hugging Face initial load
  int64_t global_batch = 0;  // samples per step: the data position when the dataloader is excluded
  bool log = false;          // print what was loaded
};

// This rank's state: the model's and the optimizer's chunks, the schedule and the data
// position, through one Checkpointer. Collective where the Checkpointer is.
class TrainState {
 public:
  TrainState(CheckpointConfig config, MeshGroups& groups, int rank, ParallelModel& pm, AdamW& optimizer,
             DataLoader& loader, RunFacts facts);

  void write_keys(const std::string& path, const ModelShapes& shapes) const;  // state_dict_keys.json
  // Resumes the newest (or --checkpoint.load-step) step folder when checkpointing is on and
  // one exists; otherwise loads --checkpoint.initial-load-path's weights if given.
  StartPoint restore();
  // Saves `step` (after the last step with --checkpoint.last-save-model-only: weights only).
  void save(int64_t step, int64_t lr_step_offset);
  // The checkpoint's cadence: saves `step` when checkpointing is on and the step is a
  // multiple of --checkpoint.interval or the run's last.
  void save_if_due(int64_t step, int64_t last_step, int64_t lr_step_offset);
  // Collective: the last asynchronous save written and published (Checkpointer::finish).
  void finish_saves() { checkpointer_.finish(); }

  const Checkpointer& checkpointer() const { return checkpointer_; }
  const CheckpointConfig& config() const { return checkpointer_.config(); }
  double load_s() const { return load_s_; }  // this rank's wall time in the resume
  double save_s() const { return save_s_; }  // and in all saves: the pauses, when asynchronous
  int64_t initial_load_bytes() const { return initial_load_bytes_; }

 private:
  StartPoint resume(int64_t step);
  void restore_data_position(const nlohmann::json& objects, int64_t step, int64_t resumed_step);
  void export_model(int64_t step);

  Checkpointer checkpointer_;
  MeshGroups& groups_;
  int rank_;
  AdamW& optimizer_;
  DataLoader& loader_;
  RunFacts facts_;
  std::vector<CheckpointTensor> model_state_, optimizer_state_;
  double load_s_ = 0, save_s_ = 0;
  int64_t initial_load_bytes_ = 0;
};

// The checkpoint options checked to go together for this model (throws std::invalid_argument
// naming the options), with the folder defaulting to <dump_folder>/checkpoint.
CheckpointConfig checked(CheckpointConfig config, const std::string& dump_folder, const ModelArgs& args);

}  // namespace meshtrain
