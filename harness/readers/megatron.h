// What Megatron-LM writes, read as it is (docs/foreign-trainers.md, `adapter: megatron`):
// - its per-iteration console line (megatron/training/training.py, training_log), printed by the
//   last rank:
//     [2026-08-22 15:22:22.123456] iteration        3/      50 | consumed samples:           24 |
//     elapsed time per iteration (ms): 61.3 | learning rate: 1.500000E-04 | global batch size:
//     8 | lm loss: 1.092704E+01 | loss scale: 1.0 | grad norm: 5.123 | num zeros: 1785 | ...
//   and its validation line (` validation loss at iteration 10 | lm loss value: 1.0E+01 | ...`);
// - the TensorBoard tags it writes (`lm loss`, `grad-norm`, `num-zeros`, `lm loss validation`);
// - its checkpoint folder: `latest_checkpointed_iteration.txt` naming the newest `iter_NNNNNNN/`,
//   which in the torch_dist format (Megatron's default) is PyTorch DCP plus a `metadata.json`.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <vector>

#include "readers/metric_series.h"

namespace meshtest {

// Megatron's console log as metrics, with log_metrics.h's promises (colours stripped, `[rankN]:`
// prefixes dropped, the later line of a step winning with a warning, garbage never a crash).
// Per iteration: "loss" (`lm loss`), "grad_norm" (`grad norm`), "num_zeros" (`num zeros`),
// "consumed_samples", "learning_rate", "loss_scale", "params_norm", "skipped_iterations",
// "nan_iterations", "iteration_time_ms", and any other `key: number` field under its key in
// snake case; a validation line's `lm loss value` goes under its iteration as "validation_loss"
// (another loss's `<name> value` as "validation_<name>"). Other lines are passed over.
MetricSeries parse_megatron_log(std::istream& in, const std::string& file, std::vector<std::string>* warnings);
// The same for a file; throws MetricsError("cannot read <path>") when it cannot be opened.
MetricSeries read_megatron_log(const std::string& path, std::vector<std::string>* warnings);

// Megatron's TensorBoard tags -> meshtest's metric names.
const std::map<std::string, std::string>& megatron_tensorboard_tags();

// The line Megatron prints when its Python has no TensorBoard: it then writes no events.
constexpr const char* kMegatronNoTensorboard = "TensorBoard writing requested but is not available";

// The step folder to read in a Megatron checkpoint folder: `path` itself when it holds no
// `latest_checkpointed_iteration.txt` and no `iter_NNNNNNN/` (not Megatron's), else the iteration
// the tracker file names (or `iter_<step>` when `step` >= 0; `step` is then set to -1: chosen
// here). A step folder of Megatron's (`iter_NNNNNNN` itself) is checked the same way.
// Throws CheckpointError, naming the folder, for a format meshtest does not read: `torch`
// (mp_rank_XX/model_optim_rng.pt), `torch_dcp` or `fsdp_dtensor` (DCP without Megatron's
// metadata.json), a metadata.json whose sharded_backend is not torch_dist, a tracker file that
// names a missing folder, and `release` checkpoints.
std::string megatron_step_dir(const std::string& path, long long& step);

}  // namespace meshtest
