// The files meshtrain leaves in its dump folder for the harness (docs/contracts.md):
// metrics.jsonl, state_dict_keys.json, param_digest.json, rank<R>.json, and under
// `meshtrain generate` generate.json. Each is written here and nowhere else (metrics.jsonl's rows
// are put together by components/metrics, through MetricsWriter); the field names
// meshtest's checks read too are contract/dump_files.h.
#pragma once

#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "contract/dump_files.h"
#include "contract/mesh.h"

namespace meshtrain {

constexpr int kOutputsFormatVersion = contract::dump_files::kFormatVersion;

// Creates `folder` (and parents) and proves it writable; throws std::runtime_error
// with the folder and the reason.
void prepare_dump_folder(const std::string& folder);

// Appends one JSON object per step, flushed at once, so a crashed run keeps its curve.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  void write(const nlohmann::json& row);

 private:
  std::string path_;
  std::ofstream out_;
};

// A named tensor as the checkpoint sees it: key, global shape, dtype.
struct KeyInfo {
  std::string key;
  std::vector<int64_t> shape;
  std::string dtype;
};
// Tensor keys, plus the checkpoint's non-tensor entries (lr_scheduler, dataloader.dp_rank_<i>,
// train_state).
void write_state_dict_keys(const std::string& path, const std::vector<KeyInfo>& tensors,
                           const std::vector<std::string>& objects);

// Per key: sum, L2 norm and element count of the global tensor, in float64.
struct Digest {
  std::string key;
  double sum = 0;
  double l2 = 0;
  int64_t numel = 0;
};
Digest digest_of(const std::string& key, const torch::Tensor& global);
void write_param_digest(const std::string& path, int64_t step, const std::vector<Digest>& digests);

// This rank's piece of one parameter: where it sits in the global tensor, its sum and
// L2 norm, and an FNV-1a hash of its bytes (replicas must agree bit for bit).
nlohmann::json local_digest(const torch::Tensor& piece, const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& sizes);

// rank<R>.json: one rank's facts at the end of a run (its coordinate, memory, checkpoint
// I/O and its pieces' digests), for the harness's saved_once, replicas_equal and
// params_match checks.
struct RankReport {
  int rank = 0;
  int world_size = 1;
  contract::MeshShape mesh;
  contract::MeshCoord coord;
  std::string device;
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t device_peak_bytes = 0;
  // What the checkpointer did on this rank.
  int64_t checkpoint_bytes_written = 0;
  int64_t checkpoint_tensor_bytes_written = 0;
  std::vector<int64_t> checkpoint_steps_saved;
  std::string checkpoint_folder;  // made absolute here
  int64_t checkpoint_bytes_read = 0;
  int64_t initial_load_bytes_read = 0;
  double checkpoint_save_s = 0;
  double checkpoint_load_s = 0;
  nlohmann::json local_params = nlohmann::json::object();  // key -> local_digest
};
void write_rank_report(const std::string& dump_folder, const RankReport& r);

// generate.json: the prompt, the greedy continuation and the prompt's loss.
struct GenerateReport {
  std::string checkpoint;  // the step folder or initial-load path the weights came from
  std::string mesh;
  std::string prompt;
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> generated_ids;
  std::string text;  // generated_ids decoded
  double prompt_loss = 0;
};
void write_generate_report(const std::string& dump_folder, const GenerateReport& g);

void write_json(const std::string& path, const nlohmann::json& value);

std::string dtype_name(torch::ScalarType t);
// Peak resident set of this process, bytes.
int64_t host_peak_rss_bytes();

}  // namespace meshtrain
