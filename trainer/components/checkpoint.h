// A sharded, resharding checkpoint (docs/checkpoint.md): its options and its reader (the
// collective writer is checkpointer.h). Every rank writes only the chunks it owns (one copy of
// replicated chunks), and reads back only the byte blocks that overlap the chunks it needs under
// the current mesh, whatever mesh wrote them. Chunk offsets come from the placement algebra
// through each parameter's layout.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/comm.h"
#include "contract/checkpoint_format.h"
#include "contract/placement.h"

namespace CLI {
class App;
}

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

// The format's version, metadata schema and step-<N> names: contract/checkpoint_format.h.

// --checkpoint.async-mode: whether a save's writing overlaps the training that follows it
// (torchtitan's async_mode; device tensors are always staged in pinned memory).
enum class AsyncMode { kDisabled, kAsync };

// --checkpoint.*: what is saved, when, where, and what a run starts from.
struct CheckpointConfig {
  bool enable = false;
  std::string folder;                          // holds step-<N>/ folders; meshtrain's default: <dump-folder>/checkpoint
  int64_t interval = 0;                        // save every N steps (and at the last step); 0: only the last
  int64_t keep_latest_k = 0;                   // 0: keep all
  std::string key_style = "canonical";         // canonical | parametrize
  std::string key_map = "none";                // none | parametrize-to-canonical
  std::set<std::string> exclude_from_loading;  // optimizer, lr_scheduler, dataloader
  int64_t load_step = -1;                      // -1: the latest complete step, if any
  AsyncMode async_mode = AsyncMode::kDisabled;
  // The save after the last step: model weights only (no optimizer, schedule or data
  // position), in export_dtype, and with last_save_in_hf also as Hugging Face safetensors.
  bool last_save_model_only = false;
  torch::ScalarType export_dtype = torch::kFloat32;
  bool last_save_in_hf = false;
  // Weights to start from when the folder holds no checkpoint yet (torchtitan's
  // initial_load_path, always model-only): a step-<N> folder, or with initial_load_in_hf a
  // Hugging Face checkpoint (hf_checkpoint.h).
  std::string initial_load_path;
  bool initial_load_in_hf = false;
};

void add_options(CLI::App& cmd, CheckpointConfig& config);

// "disabled" | "async"; throws std::invalid_argument naming the flag and the known modes.
AsyncMode parse_async_mode(const std::string& name);

// Parses "a,b" into {"a","b"}, accepting optimizer, lr_scheduler, dataloader only.
std::set<std::string> parse_exclusions(const std::string& list);

// One tensor this rank saves and loads: its checkpoint key, its layout (global shape and
// this rank's chunk) and the local tensor holding the chunk.
struct CheckpointTensor {
  std::string key;  // canonical, e.g. "model.layers.0.attention.wq.weight"
  const ParamLayout* layout;
  torch::Tensor local;
};

struct CheckpointIo {
  int64_t bytes_written = 0;
  int64_t tensor_bytes_written = 0;  // tensor payload only (no checksums): each element once, summed over ranks
  std::vector<int64_t> steps_saved;  // in order; what tensor_bytes_written covers
  int64_t bytes_read = 0;
};

// Reads step-<N>/ folders. Needs no peers: each rank reads only the byte blocks its own
// chunks overlap, so `meshtrain ckpt` and a run's initial load use it alone.
class CheckpointReader {
 public:
  // `shape` is the mesh of the run reading: the parametrize key style depends on it.
  explicit CheckpointReader(CheckpointConfig config, MeshShape shape = {});

  // The newest complete step-<N>/ in the folder, if any.
  std::optional<int64_t> latest_step() const;
  // Fills each tensor's local chunk from step-<N>/ and returns the stored objects.
  // Throws std::runtime_error naming the file and key on anything missing or corrupt.
  nlohmann::json load(int64_t step, const std::vector<CheckpointTensor>& tensors);

  const CheckpointIo& io() const { return io_; }
  const CheckpointConfig& config() const { return config_; }
  std::string step_dir(int64_t step) const;
  // The key `canonical` is stored under with this run's key style.
  std::string saved_key(const std::string& canonical) const;

 protected:
  std::vector<int64_t> complete_steps() const;  // step-<N>/ folders with metadata, unordered
  CheckpointConfig config_;
  MeshShape shape_;
  CheckpointIo io_;

 private:
  std::string styled_key(const std::string& canonical) const;  // key-style applied
  contract::CheckpointMetadata read_metadata(const std::string& meta_path) const;
  std::map<std::string, contract::SavedKey> mapped_keys(
      std::map<std::string, contract::SavedKey> keys) const;  // key-map applied
  void load_tensor(const std::string& dir, const std::string& meta_path,
                   const std::map<std::string, contract::SavedKey>& keys, const CheckpointTensor& t);
};

}  // namespace meshtrain
