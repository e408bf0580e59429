// The names in the files meshtrain leaves in its dump folder for meshtest (docs/contracts.md):
// metrics.jsonl, state_dict_keys.json, param_digest.json, rank<R>.json and generate.json.
// meshtrain writes these fields (trainer/components/outputs.cpp, trainer/components/metrics.cpp) and meshtest reads them
// (harness/judge/checks.cpp, harness/meshtrain/adapter.cpp); a field renamed here is renamed for both.
//
// Only names live here: what each field means is in docs/contracts.md, and checkpoint
// contents are in checkpoint_format.h.
#pragma once

#include <string>

namespace contract::dump_files {

// Every JSON document carries "format_version": 1; a reader rejects versions it does not know.
inline constexpr int kFormatVersion = 1;
inline constexpr char kFormatVersionField[] = "format_version";

// ---- metrics.jsonl (rank 0): one object per optimizer step ----
inline constexpr char kMetricsFile[] = "metrics.jsonl";
namespace metrics {
inline constexpr char kStep[] = "step";
inline constexpr char kLoss[] = "loss";
inline constexpr char kGradNorm[] = "grad_norm";
inline constexpr char kValidationLoss[] = "validation_loss";
inline constexpr char kLr[] = "lr";
inline constexpr char kTokens[] = "tokens";
inline constexpr char kSampleWindows[] = "sample_windows";
inline constexpr char kStepTimeS[] = "step_time_s";
inline constexpr char kTokensPerS[] = "tokens_per_s";
inline constexpr char kHostPeakRssBytes[] = "host_peak_rss_bytes";
inline constexpr char kDevicePeakBytes[] = "device_peak_bytes";
inline constexpr char kCommBytes[] = "comm_bytes";
inline constexpr char kCommCalls[] = "comm_calls";
}  // namespace metrics

// ---- state_dict_keys.json (rank 0): the keys a checkpoint of this run holds ----
inline constexpr char kStateDictKeysFile[] = "state_dict_keys.json";
namespace state_dict_keys {
inline constexpr char kKeys[] = "keys";
inline constexpr char kKind[] = "kind";  // kTensor or kObject
inline constexpr char kTensor[] = "tensor";
inline constexpr char kObject[] = "object";
inline constexpr char kShape[] = "shape";
inline constexpr char kDtype[] = "dtype";
}  // namespace state_dict_keys

// ---- param_digest.json (rank 0): each global parameter after the last step ----
inline constexpr char kParamDigestFile[] = "param_digest.json";
namespace param_digest {
inline constexpr char kStep[] = "step";
inline constexpr char kParams[] = "params";
inline constexpr char kSum[] = "sum";
inline constexpr char kL2[] = "l2";
inline constexpr char kNumel[] = "numel";
}  // namespace param_digest

// ---- generate.json (`meshtrain generate`): the prompt and the tokens generated ----
inline constexpr char kGenerateFile[] = "generate.json";

// ---- rank<R>.json (every rank): this rank's facts at the end of the run ----
inline std::string rank_file_name(int rank) { return "rank" + std::to_string(rank) + ".json"; }
namespace rank_file {
inline constexpr char kCheckpointFolder[] = "checkpoint_folder";  // absolute
inline constexpr char kCheckpointStepsSaved[] = "checkpoint_steps_saved";
inline constexpr char kCheckpointTensorBytesWritten[] = "checkpoint_tensor_bytes_written";
inline constexpr char kCheckpointBytesWritten[] = "checkpoint_bytes_written";
inline constexpr char kCheckpointBytesRead[] = "checkpoint_bytes_read";
inline constexpr char kLocalStateBytes[] = "local_state_bytes";
// Per parameter key: this rank's piece (offsets, sizes in the global tensor) and its hash.
inline constexpr char kLocalParams[] = "local_params";
inline constexpr char kPieceOffsets[] = "offsets";
inline constexpr char kPieceSizes[] = "sizes";
inline constexpr char kPieceSum[] = "sum";
inline constexpr char kPieceL2[] = "l2";
inline constexpr char kPieceFnv1a64[] = "fnv1a64";
}  // namespace rank_file

}  // namespace contract::dump_files
