// The machine a run's numbers come from, as golden files are keyed by it: `{hardware}` in a
// loss_matches golden path (docs/matrix.md#golden-bands-meshtest-golden-regen). The first GPU's
// name as nvidia-smi gives it, else the CPU's model from /proc/cpuinfo; $MESHTEST_HARDWARE, when
// set, names it instead (a runner pool whose GPUs report differing names, tests).
#pragma once

#include <string>

namespace meshtest {

struct Hardware {
  std::string name;  // "NVIDIA H100 80GB HBM3", "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
  std::string slug;  // what {hardware} becomes: "nvidia-h100-80gb-hbm3"
};

// This machine's, probed once per process ($MESHTEST_HARDWARE read on every call).
Hardware this_hardware();

// `name` for a file name: lower case, every run of other characters than letters and digits
// one '-', none at either end; "unknown" when nothing is left.
std::string hardware_slug(const std::string& name);

// A golden path as written in a matrix, as a check reads it: {hardware} filled with this
// machine's slug, and a relative path made relative to `matrix_file`'s folder.
std::string golden_file(const std::string& written, const std::string& matrix_file);

}  // namespace meshtest
