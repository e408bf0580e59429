#include "components/metrics.h"

#include <algorithm>
#include <cstdio>

#include "base/compat.h"
#include "components/outputs.h"
#include "distributed/collective.h"

namespace meshtrain {

MetricsLogger::MetricsLogger(bool is_logger, bool quiet, const std::string& dump_folder, torch::Device device)
    : quiet_(quiet), device_(device) {
  if (is_logger) writer_ = std::make_unique<MetricsWriter>(dump_folder + "/" + contract::dump_files::kMetricsFile);
}

MetricsLogger::~MetricsLogger() = default;

void MetricsLogger::print_header(const std::string& run_description) const {
  if (!console()) return;
  std::printf("meshtrain: %s\n", run_description.c_str());
  std::printf("%6s %12s %12s %10s %12s\n", "step", "loss", "grad_norm", "lr", "tokens/s");
}

void MetricsLogger::log(const StepFacts& f) {
  if (!writer_) return;
  namespace m = contract::dump_files::metrics;
  const CommVolume& v = comm_volume();
  nlohmann::json row = {{m::kStep, f.step},
                        {m::kLoss, f.loss},
                        {m::kGradNorm, f.grad_norm},
                        {m::kLr, f.lr},
                        {m::kTokens, f.tokens},
                        {m::kSampleWindows, f.windows},
                        {m::kStepTimeS, f.step_time_s},
                        {m::kTokensPerS, f.tokens / f.step_time_s},
                        {m::kHostPeakRssBytes, host_peak_rss_bytes()},
                        {m::kCommBytes,
                         {{"all_gather", v.all_gather_bytes},
                          {"reduce_scatter", v.reduce_scatter_bytes},
                          {"all_reduce", v.all_reduce_bytes}}},
                        {m::kCommCalls,
                         {{"all_gather", v.all_gather_calls},
                          {"reduce_scatter", v.reduce_scatter_calls},
                          {"all_reduce", v.all_reduce_calls}}}};
  if (device_.is_cuda()) row[m::kDevicePeakBytes] = compat::device_peak_bytes(device_);
  if (f.validation) row[m::kValidationLoss] = *f.validation;
  writer_->write(row);
  tokens_per_s_.push_back(f.tokens / f.step_time_s);
  if (!quiet_)
    std::printf("%6lld %12.6f %12.6f %10.3g %12.0f%s\n", static_cast<long long>(f.step), f.loss, f.grad_norm, f.lr,
                f.tokens / f.step_time_s,
                f.validation ? ("   validation loss " + std::to_string(*f.validation)).c_str() : "");
  std::fflush(stdout);
}

void MetricsLogger::print_median_throughput(int64_t first_step, int64_t last_step) const {
  if (!console() || tokens_per_s_.size() < 2) return;
  std::vector<double> steady(tokens_per_s_.begin() + 1, tokens_per_s_.end());
  std::nth_element(steady.begin(), steady.begin() + steady.size() / 2, steady.end());
  std::printf("meshtrain: median tokens/s over steps %lld..%lld: %.0f\n", static_cast<long long>(first_step),
              static_cast<long long>(last_step), steady[steady.size() / 2]);
}

}  // namespace meshtrain
