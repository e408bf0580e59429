// The job's checkpointer (docs/checkpoint.md#save): every rank writes the chunks it owns, rank 0
// publishes the step with one rename, synchronously or in the background.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "components/async_save.h"
#include "components/checkpoint.h"
#include "distributed/comm.h"

namespace meshtrain {

// The job's checkpointer: a reader that also saves, collectively.
class Checkpointer : public CheckpointReader {
 public:
  Checkpointer(CheckpointConfig config, MeshGroups& groups, int rank);

  // Collective: every rank calls it with its tensors and the objects it owns
  // (rank 0: lr_scheduler and train_state; a tp-rank-0 per dp rank: dataloader.dp_rank_<i>).
  // Tensors are stored in `dtype` (float32, or bfloat16 for an export); a load converts back.
  // Writes step-<N>/ atomically: nothing under that name exists until all of it does.
  // With --checkpoint.async-mode async it returns once this rank's chunks are copied to host
  // memory; a background thread writes them, and rank 0 publishes the step when every rank's
  // plan has arrived (files, not collectives: the training thread owns the process groups).
  // A save first waits for the one before it, and throws what that one threw.
  void save(int64_t step, const std::vector<CheckpointTensor>& tensors, const nlohmann::json& objects,
            torch::ScalarType dtype = torch::kFloat32);
  // Collective: waits for this rank's asynchronous save, if any (rank 0: until the step is
  // published), rethrowing its error. io() and the folder are final after it.
  void finish();

  // Creates the folder and writes and removes a probe file in it; throws naming the folder
  // and the error when it cannot. Called before training, so a run that could never save
  // fails in a second instead of at its first save.
  void check_writable() const;

 private:
  // The steps of save, in order.
  std::string make_temporary_folder(int64_t step);
  bool writes(const CheckpointTensor& t) const;  // the chunk lands in this rank's data file
  void write_own_chunks(const std::string& tmp, const std::vector<CheckpointTensor>& tensors,
                        const nlohmann::json& objects, torch::ScalarType dtype, int64_t step);
  // Rank 0 of an asynchronous save: until every rank's plan is in `tmp`; throws the error of a
  // rank whose write failed, or when abandoned.
  void wait_for_plans(const std::string& tmp, const std::atomic<bool>& abandoned) const;
  void complete(const std::string& tmp, int64_t step);  // rank 0: metadata, publish, keep-latest-k
  std::map<std::string, contract::SavedKey> merge_plans(const std::string& tmp) const;  // rank 0
  contract::CheckpointMetadata metadata(int64_t step, std::map<std::string, contract::SavedKey> keys) const;
  void publish(const std::string& tmp, int64_t step) const;
  void remove_old_steps() const;  // --checkpoint.keep-latest-k

  MeshGroups& groups_;
  int rank_;
  HostStaging staging_;        // an asynchronous save's host copies, reused by the next
  BackgroundSave background_;  // last: it is destroyed (and waited for) first
};
}  // namespace meshtrain
