#include "components/profile.h"

#include "base/options.h"

#include <set>
#include <stdexcept>
#include <utility>

#ifdef MESHTEST_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace meshtrain {

void add_options(CLI::App& cmd, ProfilingConfig& c) {
  cmd.add_option("--profile-step", c.step,
                 "Trace this step's CPU ops and GPU kernels (CUDA builds) to <dump-folder>/trace_step<N>_rank<R>.json");
}

#ifdef MESHTEST_CUDA
namespace profiler = torch::autograd::profiler;

bool tracing_available() { return true; }

void start_trace() {
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO);
  const std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU, profiler::ActivityType::CUDA};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
}

void stop_trace(const std::string& path) { profiler::disableProfiler()->save(path); }
#else
bool tracing_available() { return false; }
void start_trace() { throw std::invalid_argument("--profile-step needs the CUDA build (Kineto)"); }
void stop_trace(const std::string&) {}
#endif

StepTrace::StepTrace(int64_t step, std::string folder, int rank, std::function<void()> synchronize)
    : step_(step), folder_(std::move(folder)), rank_(rank), synchronize_(std::move(synchronize)) {}

void StepTrace::begin(int64_t step) {
  if (step != step_) return;
  synchronize_();
  start_trace();
}

void StepTrace::end(int64_t step) {
  if (step == step_)
    stop_trace(folder_ + "/trace_step" + std::to_string(step) + "_rank" + std::to_string(rank_) + ".json");
}

}  // namespace meshtrain
