// The Hugging Face Trainer's trainer_state.json: its `log_history` as per-step metrics. The
// Trainer before transformers 5 logged `loss` rounded to 4 decimals (kTrainerStateLossResolution;
// grad_norm and learning_rate unrounded); 5.17 writes full floats (measured).
#pragma once

#include <string>
#include <vector>

#include "readers/metric_series.h"

namespace meshtest {

inline constexpr double kTrainerStateLossResolution = 1e-4;

// `path`: a trainer_state.json, or a folder holding one (the Trainer's output_dir after
// save_state()), else the newest checkpoint-<N>/trainer_state.json under it. Each log entry
// with a `step` gives that step "loss", "grad_norm", "validation_loss" (eval_loss), "lr"
// (learning_rate) and "tokens_seen" (num_input_tokens_seen), where logged; the run's closing
// entry (train_runtime, train_loss: an average, not a step's loss) is left out. NaN and
// Infinity, which Python's json writes, are read as such. Throws MetricsError naming the file:
// missing, not JSON, no log_history, an entry without a step.
MetricSeries read_trainer_state(const std::string& path);

// The trainer_state.json `path` names (as above); throws MetricsError when there is none.
std::string trainer_state_file(const std::string& path);

// Its global_step: where a run that resumes from it starts counting (its log_history holds the
// steps up to there already). Throws MetricsError.
long long trainer_state_global_step(const std::string& path);

}  // namespace meshtest
