// `git -C REPO ARGS...` with C-locale messages: its exit code and stdout+stderr. bisect drives
// git bisect with it; run history asks it which commit and branch a matrix was run at.
#pragma once

#include <string>
#include <vector>

namespace meshtest {

struct GitOutput {
  int code = -1;     // -1: git could not be started
  std::string text;  // stdout and stderr, as printed
};

GitOutput git(const std::string& repo, const std::vector<std::string>& args);

// The first line of a successful `git -C REPO ARGS`, or "" when git fails or is absent.
std::string git_line(const std::string& repo, const std::vector<std::string>& args);

}  // namespace meshtest
