// meshtrain's fork server (trainer/fork_server.h) through meshtest's client (run/fork_server.h),
// with the real binary: a rank forked from it gets what an exec would have given it, is this
// process's child, and one server serves every environment that differs only in the
// per-rank variables.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run/fork_server.h"
#include "run/launch.h"
#include "test_paths.h"

namespace fs = std::filesystem;

namespace {

const std::string kMeshtrain = MESHTRAIN_BIN;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ForkServer : public ::testing::Test {
 protected:
  void SetUp() override {
    meshtest::become_subreaper();  // as meshtest run is: the forked ranks come back to it
    char tmpl[] = "/tmp/fork_server_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    meshtest::stop_fork_servers();
    fs::remove_all(dir_);
  }

  // Forks `argv` with this environment plus `extra`, its output in log; waits for it.
  // Returns the raw wait status, or -1 when no server forked it.
  int run(const std::vector<std::string>& argv, const std::vector<std::string>& extra, pid_t* pid_out = nullptr,
          pid_t* group_out = nullptr) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra.begin(), extra.end());
    const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = ::open((dir_ / "rank.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int stdio[3] = {null_in, out, out};
    const auto pid = meshtest::fork_rank(kMeshtrain, "forkserver", argv, env, dir_.string(), 0, stdio);
    ::close(null_in);
    ::close(out);
    if (!pid) return -1;
    if (pid_out) *pid_out = *pid;
    if (group_out) *group_out = ::getpgid(*pid);
    int status = 0;
    EXPECT_EQ(::waitpid(*pid, &status, 0), *pid) << "the forked rank is not this process's child";
    return status;
  }

  fs::path dir_;
};

TEST_F(ForkServer, ARankGetsItsArgvEnvironmentFolderAndDescriptorsAndComesBackAsAChild) {
  // A bad model: meshtrain exits 1, says why on stderr and writes the error file its
  // environment names, relative to the folder it was asked to run in.
  pid_t pid = 0, group = 0;
  const int status = run({kMeshtrain, "train", "--model", "no_such_model"},
                         {"TORCHELASTIC_ERROR_FILE=error.json", "RANK=0"}, &pid, &group);
  ASSERT_NE(status, -1) << "no fork server for meshtrain: " << slurp(dir_ / "rank.log");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(slurp(dir_ / "rank.log").find("meshtrain: error:"), std::string::npos) << slurp(dir_ / "rank.log");
  EXPECT_NE(slurp(dir_ / "error.json").find("no_such_model"), std::string::npos);
  EXPECT_EQ(group, pid) << "process group 0 asks for a new group the rank leads";
  EXPECT_EQ(meshtest::fork_server_pids().size(), 1u);

  // describe's document on stdout, exit 0: the same server, since RANK is a per-rank variable.
  ASSERT_EQ(run({kMeshtrain, "describe", "--json"}, {"RANK=1"}), 0);
  EXPECT_NE(slurp(dir_ / "rank.log").find("\"fork_server\": \"forkserver\""), std::string::npos);
  EXPECT_EQ(meshtest::fork_server_pids().size(), 1u);

  // Any other variable may change what a library reads as it loads: another server.
  ASSERT_EQ(run({kMeshtrain, "describe", "--json"}, {"OMP_NUM_THREADS=3"}), 0);
  EXPECT_EQ(meshtest::fork_server_pids().size(), 2u);

  meshtest::stop_fork_servers();
  EXPECT_TRUE(meshtest::fork_server_pids().empty());
}

TEST_F(ForkServer, ARankKilledBySignalIsReportedAsThatSignal) {
  // A rank that waits on a store nobody hosts until it is killed.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const char* kv : {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=9"})
    env.emplace_back(kv);
  const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = ::open((dir_ / "rank.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int stdio[3] = {null_in, out, out};
  const auto pid = meshtest::fork_rank(
      kMeshtrain, "forkserver",
      {kMeshtrain, "train", "--model", "tiny", "--steps", "1", "--dump-folder", (dir_ / "dump").string()}, env,
      dir_.string(), 0, stdio);
  ::close(null_in);
  ::close(out);
  ASSERT_TRUE(pid.has_value());
  ASSERT_EQ(::kill(*pid, SIGSEGV), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
}

TEST_F(ForkServer, AProgramWithoutAServerIsExecdWithANote) {
  ::testing::internal::CaptureStderr();
  const int stdio[3] = {0, 1, 2};
  EXPECT_FALSE(
      meshtest::fork_rank("/bin/true", "forkserver", {"/bin/true"}, {"PATH=/usr/bin:/bin"}, dir_.string(), 0, stdio)
          .has_value());
  EXPECT_FALSE(
      meshtest::fork_rank("/bin/true", "forkserver", {"/bin/true"}, {"PATH=/usr/bin:/bin"}, dir_.string(), 0, stdio)
          .has_value());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("/bin/true starts each rank by exec: its fork server did not start"), std::string::npos) << err;
  EXPECT_EQ(err.find("did not start", err.find("did not start") + 1), std::string::npos) << "said once: " << err;
  EXPECT_TRUE(meshtest::fork_server_pids().empty());
}

// A server that never says it is ready (stuck as it loads) is killed after the bound, and its
// program's ranks are exec'd: the run goes on, and the case's own timeout judges a hung rank.
TEST_F(ForkServer, AServerThatNeverSaysItIsReadyIsKilledAndItsRanksExecd) {
  const fs::path stuck = dir_ / "stuck";
  std::ofstream(stuck) << "#!/bin/sh\nexec sleep 600\n";
  fs::permissions(stuck, fs::perms::owner_all);
  ::testing::internal::CaptureStderr();
  const int stdio[3] = {0, 1, 2};
  EXPECT_FALSE(
      meshtest::fork_rank(stuck.string(), "forkserver", {"x"}, {"PATH=/usr/bin:/bin"}, dir_.string(), 0, stdio, 1.0)
          .has_value());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(stuck.string() + " starts each rank by exec: its fork server did not start (it did not say it " +
                     "was ready within 1 s)"),
            std::string::npos)
      << err;
  EXPECT_TRUE(meshtest::fork_server_pids().empty());
}

}  // namespace
