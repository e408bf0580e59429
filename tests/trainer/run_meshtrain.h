// Runs meshtrain as a user (or meshtest) would: real processes, one per rank, real files.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <gtest/gtest.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "contract/rank_environment.h"
#include "run/ports.h"
#include "test_paths.h"

namespace meshtrain_test {

namespace bp = boost::process;
namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("meshtrain_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The launcher variables a rank reads; a test's own process must not hand them down.
inline const std::vector<std::string>& launcher_variables() {
  static const std::vector<std::string> names(std::begin(contract::rank_environment::kAll),
                                              std::end(contract::rank_environment::kAll));
  return names;
}

inline bp::environment clean_env(const std::map<std::string, std::string>& vars) {
  auto env = boost::this_process::environment();
  for (const auto& v : launcher_variables())
    env.erase(v);  // erase()/set(), never count()/operator[]: Boost 1.74's read past shorter entries
  bp::environment e = env;
  for (const auto& [k, v] : vars) e.set(k, v);
  return e;
}

// Starts one meshtrain process: `meshtrain ARGS` with `vars` in its environment (and none of
// launcher_variables() but those), its stdout and stderr in the files; returns its pid, a child
// of this process. Each test program links one way of starting it:
// - start_by_exec.cpp: an exec of the binary, as a user (or meshtest) starts it. The CLI
//   tests, which are about the binary.
// - start_by_fork.cpp: a fork of this process, which links the trainer, running meshtrain_main
//   (what main() runs). LibTorch's start, 0.43 CPU-seconds a process, then happens once per test
//   instead of once per rank; the data-parallel and checkpoint tests start about 600 ranks.
pid_t start_meshtrain(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars,
                      const fs::path& out, const fs::path& err);

// A started rank's exit: its exit code, or 128 + the signal that ended it; -1 while it runs.
inline int reap(pid_t pid, bool wait) {
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid, &status, wait ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return -1;
  if (r < 0) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// One meshtrain process with no launcher variables (a single rank) unless given.
inline Result meshtrain(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars = {}) {
  auto dir = fresh_dir("io");
  const int code = reap(start_meshtrain(args, vars, dir / "out", dir / "err"), true);
  return {code, slurp(dir / "out"), slurp(dir / "err")};
}

// One meshtest process (e.g. `meshtest ckpt inspect`), to look at what meshtrain wrote.
inline Result run_meshtest(const std::vector<std::string>& args) {
  auto dir = fresh_dir("meshtest_io");
  bp::child c(bp::exe = ::test_paths::kMeshtest, bp::args = args, bp::std_out > (dir / "out").string(),
              bp::std_err > (dir / "err").string(), clean_env({}));
  c.wait();
  return {c.exit_code(), slurp(dir / "out"), slurp(dir / "err")};
}

// `n` ranks of one job, launched with torchrun's variables; stdout/stderr per rank in `logs`.
class Job {
 public:
  Job(int n, const std::vector<std::string>& args, const fs::path& logs) : logs_(logs) {
    const std::string port = std::to_string(meshtest::reserve_store_port());
    for (int r = 0; r < n; ++r)
      ranks_.push_back(start_meshtrain(args,
                                       {{"RANK", std::to_string(r)},
                                        {"LOCAL_RANK", std::to_string(r)},
                                        {"WORLD_SIZE", std::to_string(n)},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", port}},
                                       logs / ("rank" + std::to_string(r) + ".out"),
                                       logs / ("rank" + std::to_string(r) + ".err")));
  }
  // Kills and reaps a rank the test did not wait for (a failed ASSERT leaves the job behind).
  ~Job() {
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      if (codes_.size() <= r) {
        ::kill(ranks_[r], SIGKILL);
        reap(ranks_[r], true);
      }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  pid_t pid(int r) const { return ranks_[r]; }
  std::string err(int r) const { return slurp(logs_ / ("rank" + std::to_string(r) + ".err")); }
  // Waits for every rank; a rank still running after `limit` is killed and reported as -9.
  std::vector<int> wait(std::chrono::seconds limit = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (std::size_t r = codes_.size(); r < ranks_.size(); ++r) {
      int code = reap(ranks_[r], false);
      while (code == -1 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        code = reap(ranks_[r], false);
      }
      if (code == -1) {
        ::kill(ranks_[r], SIGKILL);
        reap(ranks_[r], true);
        code = -9;
      }
      codes_.push_back(code);
    }
    return codes_;
  }

 private:
  fs::path logs_;
  std::vector<pid_t> ranks_;
  std::vector<int> codes_;
};

inline std::vector<json> metrics(const fs::path& dump) {
  std::vector<json> rows;
  std::ifstream in(dump / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

// Two ranks training `args` (which write metrics.jsonl to `dump`) until two steps are logged,
// then rank 1 killed the way an OOM killer would. Returns rank 0's stderr after checking that
// it failed instead of hanging or exiting 0.
inline std::string rank0_error_after_rank1_killed(const std::vector<std::string>& args, const fs::path& dump) {
  Job job(2, args, dump);
  for (int i = 0; i < 600 && metrics(dump).size() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GE(metrics(dump).size(), 2u) << "training never started: " << job.err(0);
  ::kill(job.pid(1), SIGKILL);
  auto codes = job.wait(std::chrono::seconds(60));
  EXPECT_NE(codes[0], -9) << "rank 0 hung after its peer died";
  EXPECT_NE(codes[0], 0) << "rank 0 exited 0 after its peer died";
  return job.err(0);
}

}  // namespace meshtrain_test
