// Runs the meshtrain binary as a user (or meshtest) would: real processes, real files.
#pragma once

#include <boost/process.hpp>
#include <csignal>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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

inline bp::environment clean_env(const std::map<std::string, std::string>& vars) {
  auto env = boost::this_process::environment();
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    env.erase(v);  // erase()/set(), never count()/operator[]: Boost 1.74's read past shorter entries
  bp::environment e = env;
  for (const auto& [k, v] : vars) e.set(k, v);
  return e;
}

// One meshtrain process with no launcher variables (a single rank) unless given.
inline Result meshtrain(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars = {}) {
  auto dir = fresh_dir("io");
  bp::child c(bp::exe = MESHTRAIN_BIN, bp::args = args, bp::std_out > (dir / "out").string(),
              bp::std_err > (dir / "err").string(), clean_env(vars));
  c.wait();
  return {c.exit_code(), slurp(dir / "out"), slurp(dir / "err")};
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
    for (int r = 0; r < n; ++r) {
      auto env = clean_env({{"RANK", std::to_string(r)},
                            {"LOCAL_RANK", std::to_string(r)},
                            {"WORLD_SIZE", std::to_string(n)},
                            {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", port}});
      ranks_.emplace_back(bp::exe = MESHTRAIN_BIN, bp::args = args,
                          bp::std_out > (logs / ("rank" + std::to_string(r) + ".out")).string(),
                          bp::std_err > (logs / ("rank" + std::to_string(r) + ".err")).string(), env);
    }
  }
  bp::child& rank(int r) { return ranks_[r]; }
  std::string err(int r) const { return slurp(logs_ / ("rank" + std::to_string(r) + ".err")); }
  // Waits for every rank; a rank still running after `limit` is killed and reported as -9.
  std::vector<int> wait(std::chrono::seconds limit = std::chrono::seconds(120)) {
    std::vector<int> codes;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (auto& c : ranks_) {
      // Poll: running() reaps the child (Boost 1.74's wait_until can miss the exit).
      while (c.running() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (c.running()) {
        c.terminate();
        codes.push_back(-9);
        continue;
      }
      codes.push_back(c.exit_code());
    }
    return codes;
  }

 private:
  fs::path logs_;
  std::vector<bp::child> ranks_;
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
  ::kill(job.rank(1).id(), SIGKILL);
  auto codes = job.wait(std::chrono::seconds(60));
  EXPECT_NE(codes[0], -9) << "rank 0 hung after its peer died";
  EXPECT_NE(codes[0], 0) << "rank 0 exited 0 after its peer died";
  return job.err(0);
}

}  // namespace meshtrain_test
