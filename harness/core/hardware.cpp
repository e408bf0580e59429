#include "core/hardware.h"

#include <sys/utsname.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/placeholders.h"

namespace meshtest {

namespace {

std::string trimmed(const std::string& s) {
  const size_t from = s.find_first_not_of(" \t\r\n");
  if (from == std::string::npos) return "";
  return s.substr(from, s.find_last_not_of(" \t\r\n") - from + 1);
}

// The first GPU's name, "" without nvidia-smi or a GPU.
std::string gpu_name() {
  std::FILE* smi = ::popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r");
  if (!smi) return "";
  char line[256] = {0};
  const bool got = std::fgets(line, sizeof(line), smi) != nullptr;
  const int status = ::pclose(smi);
  return got && status == 0 ? trimmed(line) : "";
}

// /proc/cpuinfo's first "model name" (x86) or "Model" (some ARM boards), else the architecture.
std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trimmed(line.substr(0, colon));
    if ((key == "model name" || key == "Model") && !trimmed(line.substr(colon + 1)).empty())
      return trimmed(line.substr(colon + 1));
  }
  struct utsname u {};
  return ::uname(&u) == 0 ? std::string("CPU ") + u.machine : "unknown CPU";
}

}  // namespace

std::string hardware_slug(const std::string& name) {
  std::string slug;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "unknown" : slug;
}

Hardware this_hardware() {
  if (const char* named = std::getenv("MESHTEST_HARDWARE"); named && *named) return {named, hardware_slug(named)};
  static const Hardware probed = [] {
    std::string name = gpu_name();
    if (name.empty()) name = cpu_name();
    return Hardware{name, hardware_slug(name)};
  }();
  return probed;
}

std::string golden_file(const std::string& written, const std::string& matrix_file) {
  std::filesystem::path golden = written.find("{hardware}") == std::string::npos
                                     ? written
                                     : fill_run_time(written, {{"hardware", this_hardware().slug}});
  if (golden.is_relative()) golden = std::filesystem::path(matrix_file).parent_path() / golden;
  return golden.string();
}

}  // namespace meshtest
