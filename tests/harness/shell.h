// A shell command's exit status and its stdout and stderr together, for end-to-end tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

struct Output {
  int rc = -1;
  std::string text;
};

inline Output sh(const std::string& command) {
  Output out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.text.append(buf, n);
  const int status = ::pclose(p);
  out.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// /proc/PID/NAME whole, or "" when the process is gone. Through `<<`, not istreambuf_iterator: a
// process reaped between the open and the read fails the read with ESRCH, which the iterator
// throws (a loaded ASan run failed so) and `<<` only marks on the stream.
inline std::string proc_file(const std::string& pid, const std::string& name) {
  std::ifstream in("/proc/" + pid + "/" + name, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Processes whose command line mentions `text` (a test's folder): what a run left behind.
inline std::vector<std::string> processes_mentioning(const std::string& text) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::string cmdline = proc_file(pid, "cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(text) != std::string::npos) found.push_back(pid + ": " + cmdline);
  }
  return found;
}
