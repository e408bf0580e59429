// pytorch_simulation() (core/adapters.h): where meshtest_sim's Python side is. The only file of
// the harness that names the source tree, so that ccache serves every other one to any checkout.
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/adapters.h"

// CMakeLists.txt defines it for meshtest's own build; other programs (the fuzz targets) find sim/
// through $MESHTEST_SIM_DIR only.
#ifndef MESHTEST_SOURCE_SIM_DIR
#define MESHTEST_SOURCE_SIM_DIR ""
#endif

namespace fs = std::filesystem;

namespace meshtest {

namespace {

// $MESHTEST_SIM_DIR, else the sim/ of an installed meshtest (<prefix>/share/meshtest/sim), else
// the source tree's that this meshtest was built from; "" when none holds the backend's files.
std::string sim_folder() {
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("MESHTEST_SIM_DIR"); dir && *dir) candidates.emplace_back(dir);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "meshtest" / "sim");
  if (*MESHTEST_SOURCE_SIM_DIR) candidates.emplace_back(MESHTEST_SOURCE_SIM_DIR);
  for (const auto& dir : candidates)
    if (fs::exists(dir / "python" / "sitecustomize.py", ec) && fs::exists(dir / "meshtest_sim.cpp", ec))
      return fs::absolute(dir, ec).lexically_normal().string();
  return "";
}

}  // namespace

std::optional<SimulatedWorld> pytorch_simulation() {
  static const std::string folder = sim_folder();
  if (folder.empty()) return std::nullopt;
  return SimulatedWorld{"", {{"MESHTEST_SIM", "1"}}, folder + "/python"};
}

}  // namespace meshtest
