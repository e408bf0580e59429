#include "core/git.h"

#include <boost/process.hpp>

namespace meshtest {

namespace bp = boost::process;

GitOutput git(const std::string& repo, const std::vector<std::string>& args) {
  const auto program = bp::search_path("git");
  if (program.empty()) return {-1, "git is not on PATH\n"};
  std::vector<std::string> all = {"-C", repo};
  all.insert(all.end(), args.begin(), args.end());
  bp::environment env = boost::this_process::environment();
  env.set("LC_ALL", "C");  // set()/erase(), not operator[]/find(): see RankGroup's constructor
  env.erase("LANGUAGE");
  bp::ipstream pipe;
  bp::group own;
  bp::child c(program, bp::args = all, env, (bp::std_out & bp::std_err) > pipe, bp::std_in < bp::null, own);
  std::string text, line;
  while (std::getline(pipe, line)) text += line + "\n";
  c.wait();
  return {c.exit_code(), text};
}

std::string git_line(const std::string& repo, const std::vector<std::string>& args) {
  const GitOutput g = git(repo, args);
  if (g.code != 0) return "";
  return g.text.substr(0, g.text.find('\n'));
}

}  // namespace meshtest
