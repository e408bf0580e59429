// The run's metrics: one row of metrics.jsonl per step (contract/dump_files.h names the
// fields) and the console table, both from the logging rank only; on other ranks every call
// does nothing. Also the median throughput at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace meshtrain {

class MetricsWriter;

// What one step did, as metrics.jsonl records it.
struct StepFacts {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  int64_t tokens = 0;
  std::vector<int64_t> windows;  // the global batch's sample windows, for whoever checks the data or replays the step
  double step_time_s = 0;
  std::optional<double> validation;
};

class MetricsLogger {
 public:
  // Opens <dump_folder>/metrics.jsonl on the logging rank; `quiet` keeps the console silent.
  MetricsLogger(bool is_logger, bool quiet, const std::string& dump_folder, torch::Device device);
  ~MetricsLogger();
  bool console() const { return writer_ && !quiet_; }
  // The run's one-line description and the table's header.
  void print_header(const std::string& run_description) const;
  void log(const StepFacts& f);
  // The median tokens/s over the steps logged, the first left out (it pays for allocation and
  // kernel selection); nothing with fewer than two steps.
  void print_median_throughput(int64_t first_step, int64_t last_step) const;

 private:
  std::unique_ptr<MetricsWriter> writer_;
  bool quiet_;
  torch::Device device_;
  std::vector<double> tokens_per_s_;
};

}  // namespace meshtrain
