// One training step under PyTorch's Kineto profiler, saved as a Chrome trace (the
// format torch.profiler's export_chrome_trace writes), so tools/bench/ can split a
// step's time into kernels by kind and the gaps between them, for meshtrain and a
// Python peer alike. CUDA builds only; elsewhere starting a trace throws.
#pragma once

#include <string>

namespace meshtrain {

// Whether this build can trace (CUDA builds link Kineto); checked before a run starts.
bool tracing_available();
void start_trace();
// Stops the trace started by start_trace and writes it to `path`.
void stop_trace(const std::string& path);

}  // namespace meshtrain
