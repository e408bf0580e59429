// start_meshtrain as an exec of the meshtrain binary, the way a user or meshtest starts it.
#include "run_meshtrain.h"

namespace meshtrain_test {

pid_t start_meshtrain(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars,
                      const fs::path& out, const fs::path& err) {
  bp::child rank(bp::exe = MESHTRAIN_BIN, bp::args = args, bp::std_out > out.string(), bp::std_err > err.string(),
                 clean_env(vars));
  const pid_t pid = rank.id();
  rank.detach();  // reap() waits for it, as for a forked rank
  return pid;
}

}  // namespace meshtrain_test
