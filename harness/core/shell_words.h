// Commands as a person pastes them into a shell: `show`, `--dry-run` and every repro line
// quote alike.
#pragma once

#include <string>
#include <vector>

namespace meshtest {

// `s` as one shell word: bare when it holds only safe characters, else in single quotes.
std::string shell_quote(const std::string& s);
// The words of `argv`, each quoted, joined by spaces.
std::string join_argv(const std::vector<std::string>& argv);

}  // namespace meshtest
