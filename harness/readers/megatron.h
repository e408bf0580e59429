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
#include <optional>
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
// `first_iteration_kept`: the log is of a Megatron that prints its first iteration's line and
// keeps that iteration in the sums of its next line (read_megatron_start), so with one
// iteration per line the second line's losses are the mean of two iterations; the second
// iteration's own is read (twice the printed mean less the first's). Per-iteration fields (grad
// norm, num zeros, learning rate) are read as printed.
MetricSeries parse_megatron_log(std::istream& in, const std::string& file, std::vector<std::string>* warnings,
                                bool first_iteration_kept = false);
// The same for a file; throws MetricsError("cannot read <path>") when it cannot be opened.
MetricSeries read_megatron_log(const std::string& path, std::vector<std::string>* warnings,
                               bool first_iteration_kept = false);

// Megatron-LM since 2026-01-16 (c40b6ea, Megatron-Core 0.16: "better time accounting of startup
// operations") logs its first iteration without resetting its loss sums. The same change made
// rank 0 print this line before training, by which such a Megatron is known.
constexpr const char* kMegatronFirstIterationMarker = "after in-process setup and before initialize_megatron";
// What rank 0's log of one launch says before training: whether it is of such a Megatron (the
// marker line), and `seq_length` from the arguments Megatron prints (`  seq_length ....... 64`).
// Nothing for a file that cannot be read.
struct MegatronStart {
  bool keeps_first_iteration = false;
  std::optional<long long> seq_length;
};
MegatronStart read_megatron_start(const std::string& rank0_log);

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
