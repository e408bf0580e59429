// A shell command's exit status and its stdout and stderr together, for end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

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
