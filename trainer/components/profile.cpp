#include "profile.h"

#include <stdexcept>

#ifdef MESHTEST_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace meshtrain {

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

}  // namespace meshtrain
