// One training step under PyTorch's Kineto profiler, saved as a Chrome trace (the
// format torch.profiler's export_chrome_trace writes), so tools/bench/ can split a
// step's time into kernels by kind and the gaps between them, for meshtrain and a
// Python peer alike. CUDA builds only; elsewhere starting a trace throws.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace meshtrain {

// --profile-step: the one step to trace (-1: none).
struct ProfilingConfig {
  int64_t step = -1;
};
void add_options(CLI::App& cmd, ProfilingConfig& config);

// Whether this build can trace (CUDA builds link Kineto); checked before a run starts.
bool tracing_available();
void start_trace();
// Stops the trace started by start_trace and writes it to `path`.
void stop_trace(const std::string& path);

// --profile-step: traces that one step, from a synchronized start to its end, into
// <folder>/trace_step<N>_rank<R>.json; every other step passes untouched. Decides its own cadence.
class StepTrace {
 public:
  // `step` < 0: no step is traced. `synchronize` waits for the device's queued work.
  StepTrace(int64_t step, std::string folder, int rank, std::function<void()> synchronize);
  void begin(int64_t step);
  void end(int64_t step);  // after the step's own synchronization

 private:
  int64_t step_;
  std::string folder_;
  int rank_;
  std::function<void()> synchronize_;
};

}  // namespace meshtrain
