// start_meshtrain as posix_spawn of the meshtrain binary, the way a user or meshtest starts it.
#include <fcntl.h>
#include <spawn.h>

#include <cstring>
#include <stdexcept>

#include "run_meshtrain.h"

extern char** environ;

namespace meshtrain_test {

pid_t start_meshtrain(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars,
                      const fs::path& out, const fs::path& err) {
  std::vector<std::string> argv_strings{MESHTRAIN_BIN};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e), name = entry.substr(0, entry.find('='));
    bool replaced = vars.count(name) > 0;
    for (const auto& v : launcher_variables()) replaced = replaced || name == v;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : argv_strings) argv.push_back(a.data());
  for (auto& e : env_strings) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv_strings[0] + ": " + std::strerror(rc));
  return pid;
}

}  // namespace meshtrain_test
