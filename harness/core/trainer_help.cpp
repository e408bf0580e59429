#include "core/trainer_help.h"

#include <boost/process.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>

namespace meshtest {

namespace bp = boost::process;
namespace fs = std::filesystem;

std::optional<std::string> program_output(const std::vector<std::string>& argv, int seconds, std::string* why) {
  char tmpl[] = "/tmp/meshtest-help-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return std::nullopt;
  ::close(fd);
  std::optional<std::string> out;
  const std::string exe = argv[0].find('/') == std::string::npos ? bp::search_path(argv[0]).string() : argv[0];
  if (exe.empty()) {
    if (why) *why = "no " + argv[0] + " in PATH";
    std::error_code ec;
    fs::remove(tmpl, ec);
    return out;
  }
  try {
    bp::child child(bp::exe = exe, bp::args = std::vector<std::string>(argv.begin() + 1, argv.end()),
                    (bp::std_out & bp::std_err) > std::string(tmpl), bp::std_in < bp::null);
    const bool done = child.wait_for(std::chrono::seconds(seconds));
    if (!done) child.terminate();
    std::ifstream in(tmpl);
    std::stringstream text;
    text << in.rdbuf();
    if (done && child.exit_code() == 0) {
      out = text.str();
    } else if (why) {
      std::string last = text.str();
      while (!last.empty() && last.back() == '\n') last.pop_back();
      last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
      *why = done ? "exit " + std::to_string(child.exit_code()) + (last.empty() ? "" : ": " + last)
                  : "no answer in " + std::to_string(seconds) + " s";
    }
  } catch (const std::exception& e) {
    if (why) *why = e.what();
  }
  std::error_code ec;
  fs::remove(tmpl, ec);
  return out;
}

std::optional<std::string> cached_program_output(const std::string& id, const std::vector<std::string>& argv,
                                                 int seconds, std::string* why) {
  std::error_code ec;
  const fs::path cache =
      fs::temp_directory_path(ec) / ("meshtest-help-" + std::to_string(std::hash<std::string>{}(id)) + ".txt");
  if (std::ifstream in(cache); in) {
    std::string first;
    std::getline(in, first);
    if (first == id) {
      std::stringstream rest;
      rest << in.rdbuf();
      return rest.str();
    }
  }
  auto output = program_output(argv, seconds, why);
  if (!output) return output;
  // Written aside and renamed, so two meshtests asking at once never read half a file.
  const fs::path tmp = cache.string() + "." + std::to_string(::getpid());
  if (std::ofstream out(tmp); out << id << "\n" << *output) fs::rename(tmp, cache, ec);
  fs::remove(tmp, ec);
  return output;
}

long long newest_python_source(const std::vector<fs::path>& dirs) {
  long long newest = 0;
  std::error_code ec;
  for (const fs::path& dir : dirs)
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (it->path().extension() == ".py")
        newest = std::max<long long>(newest, fs::last_write_time(it->path(), ec).time_since_epoch().count());
  return newest;
}

std::string normalized_flag(std::string flag) {
  if (flag.rfind("--", 0) == 0) flag.erase(0, 2);
  std::replace(flag.begin(), flag.end(), '-', '_');
  return flag;
}

std::set<std::string> flags_in_help(const std::string& help) {
  std::set<std::string> flags;
  for (size_t at = help.find("--"); at != std::string::npos; at = help.find("--", at + 2)) {
    if (at > 0 && !std::isspace(static_cast<unsigned char>(help[at - 1])) && help[at - 1] != '[' && help[at - 1] != ',')
      continue;
    size_t end = at + 2;
    while (end < help.size() && (std::isalnum(static_cast<unsigned char>(help[end])) || help[end] == '_' ||
                                 help[end] == '-' || help[end] == '.'))
      ++end;
    if (end == at + 2) continue;
    std::string flag = normalized_flag(help.substr(at, end - at));
    flags.insert(flag);
    const size_t dot = flag.rfind('.');
    const size_t last = dot == std::string::npos ? 0 : dot + 1;
    if (flag.compare(last, 3, "no_") == 0) flags.insert(flag.substr(0, last) + flag.substr(last + 3));
  }
  return flags;
}

}  // namespace meshtest
