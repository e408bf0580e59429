// The fault catalogue (docs/reliability.md): what a CI runner really meets, each run
// end to end through `meshtest run` with real processes. Disk full and an unwritable
// checkpoint folder are meshtrain's (tests/trainer/components/checkpoint_test.cpp).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/run/run_fixture.h"
#include "harness/shell.h"
#include "run/launch.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using meshtest_test::kFake;
using meshtest_test::kMeshtest;
using meshtest_test::Run;
using nlohmann::json;

namespace {

const std::string kMeshtrain = MESHTRAIN_BIN;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every pid written under `dir` (the fake trainer's --pid-dir files) that is still alive.
std::vector<std::string> alive_pids(const std::string& dir) {
  std::vector<std::string> alive;
  if (!fs::exists(dir)) return alive;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    pid_t pid = 0;
    in >> pid;
    if (pid > 0 && fs::exists("/proc/" + std::to_string(pid))) alive.push_back(e.path().string());
  }
  return alive;
}

bool wait_for(const std::function<bool()>& ready) {
  for (int i = 0; i < 3000; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

}  // namespace

TEST_F(Run, ARankHungBeforeACollectiveIsNamedAndTheOtherCasesFinish) {
  if (std::string(MESHTRAIN_TEST_BACKEND) != "gloo") GTEST_SKIP() << "the CUDA build runs meshtrain on NCCL";
  // Rank 1 stops just before an all-reduce the other three wait in (meshtrain's own
  // collective timeout, 300 s, is far behind the case's 30 s). The four ranks reach that
  // collective about 1 s after they start on an idle 2-core machine; 30 s leaves room for a
  // busy one, and the test waits that long in both the plain and the ASan tree.
  matrix(R"(suite: s
defaults: {model: tiny, options: {steps: 3, local-batch-size: 1}}
cases:
  - name: hang
    mesh: {dp_shard: 4}
    timeout: 30
    options: {inject-fault: hang-before-all-reduce}
    default_checks: false
    checks: []
    expect: {fail: exit}
  - {name: fsdp, mesh: {dp_shard: 2}}
  - {name: ddp, mesh: {dp_replicate: 2}}
)");
  const Output o = meshtest("--ngpu 4");
  EXPECT_EQ(o.rc, 0) << o.text;
  const json s = summary();
  const json hang = case_of(s, "s/hang");
  EXPECT_EQ(hang["status"], "passed") << "a canary of the hang, caught: " << hang.dump(1);
  EXPECT_EQ(hang["verdict"]["kind"], "canary_caught") << hang.dump(1);
  EXPECT_EQ(hang["verdict"]["rank"], 1) << hang.dump(1);
  const std::string reason = hang.dump();
  EXPECT_NE(reason.find("rank 1 did not arrive: ranks 0,2,3 wait in collective #"), std::string::npos) << reason;
  EXPECT_NE(reason.find("(all_reduce"), std::string::npos) << reason;
  EXPECT_EQ(case_of(s, "s/fsdp")["status"], "passed");
  EXPECT_EQ(case_of(s, "s/ddp")["status"], "passed");
  EXPECT_EQ(processes_mentioning(dir_), std::vector<std::string>{}) << "every rank of the run must be gone";
}

TEST_F(Run, ARankOutOfMemoryIsReportedWithItsMessageNotAsATimeout) {
  if (std::string(MESHTRAIN_TEST_BACKEND) != "gloo") GTEST_SKIP() << "the CUDA build runs meshtrain on NCCL";
  // The 1B flavor (4 GB of fp32 weights) under a 3 GB address-space limit: the allocation
  // fails the way it does on a runner without the memory.
  matrix(replaced(R"(suite: s
cases:
  - name: oom
    ngpu: 2
    mesh: {dp_shard: 2}
    timeout: 120
    default_checks: false
    checks: []
    command: [bash, -c, "ulimit -v 3000000 && exec MESHTRAIN train --model 1B --mesh {mesh} --backend gloo --steps 1 --local-batch-size 1 --dump-folder {phase_dir}"]
    expect: {fail: exit}
)",
                  "MESHTRAIN", kMeshtrain));
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 0) << o.text;
  const json c = case_of(summary(), "s/oom");
  EXPECT_EQ(c["verdict"]["kind"], "canary_caught") << c.dump(1);
  const std::string message = c["reason"];
  EXPECT_EQ(message.find("timed out"), std::string::npos) << message;
  EXPECT_NE(message.find("failed first with"), std::string::npos) << message;
  EXPECT_NE(message.find("alloc"), std::string::npos) << "the allocator's message is quoted: " << message;
  EXPECT_EQ(processes_mentioning(dir_), std::vector<std::string>{});
}

// What a GitHub Actions cancel sends (SIGTERM; SIGINT from a terminal), at three moments:
// while ranks start, while every case runs, and after a case's first phase finished.
TEST_F(Run, SigtermAtEveryMomentCancelsEveryCaseLeavesNoProcessAndWritesTheReports) {
  struct Moment {
    const char* name;
    const char* ready_file;  // under the pid folder
    int sleep_ms;
    int signal;
  };
  int moment = 0;
  for (const Moment& m : {Moment{"ranks starting", "running/rank0.pid", 0, SIGTERM},
                          Moment{"every case running", "running/orphan1.pid", 200, SIGTERM},
                          Moment{"between phases", "phased_second/rank1.pid", 0, SIGTERM},
                          Moment{"between phases, Ctrl-C", "phased_second/rank1.pid", 0, SIGINT}}) {
    SCOPED_TRACE(m.name);
    fs::remove_all(dir_ + "/out");
    const std::string pids = dir_ + "/pids-" + std::to_string(++moment);
    fs::create_directories(pids);
    matrix(replaced(R"(suite: s
cases:
  - name: phased
    ngpu: 2
    phases:
      - {name: first, command: [FAKE, --sleep, '0.3', --pid-dir, 'PIDS/phased_first']}
      - {name: second, command: [FAKE, --hang-rank, '-1', --pid-dir, 'PIDS/phased_second']}
  - name: running
    ngpu: 2
    command: [FAKE, --hang-rank, '-1', --spawn-orphan, --pid-dir, 'PIDS/running']
  - name: queued
    ngpu: 4
    command: [FAKE]
)",
                    "PIDS", pids));
    const pid_t child = ::fork();
    if (child == 0) {
      ::setenv("CI", "1", 1);
      const std::string matrix_path = dir_ + "/m.yaml", out = dir_ + "/out";
      ::execl(kMeshtest.c_str(), kMeshtest.c_str(), "run", matrix_path.c_str(), "--out", out.c_str(), "--ngpu", "4",
              "--grace", "2", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (!wait_for([&] { return fs::exists(pids + "/" + m.ready_file); })) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      FAIL() << pids << "/" << m.ready_file << " never appeared";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(m.sleep_ms));
    ::kill(child, m.signal);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status)) << "meshtest died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 128 + m.signal);
    EXPECT_EQ(alive_pids(pids), std::vector<std::string>{});
    EXPECT_EQ(processes_mentioning(dir_), std::vector<std::string>{});
    const json s = summary();
    EXPECT_EQ(s["interrupted_by_signal"], m.signal);
    for (const char* id : {"s/phased", "s/running", "s/queued"}) EXPECT_EQ(case_of(s, id)["status"], "cancelled") << id;
    EXPECT_NE(slurp(dir_ + "/out/junit.xml").find("s/running"), std::string::npos);
  }
}

TEST_F(Run, AGigabyteOfLogKeepsMeshtestSmallAndTheReportKeepsTheTail) {
  matrix("suite: s\ncases:\n  - name: chatty\n    command: [FAKE, --spew, '1073741824', --exit-rank, '0']\n");
  const pid_t child = ::fork();
  if (child == 0) {
    ::setenv("CI", "1", 1);
    const std::string matrix_path = dir_ + "/m.yaml", out = dir_ + "/out";
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execl(kMeshtest.c_str(), kMeshtest.c_str(), "run", matrix_path.c_str(), "--out", out.c_str(), "--ngpu", "1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(child, &status, 0, &usage);  // ru_maxrss: meshtest's peak (and its ranks'), in KiB
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string log = dir_ + "/out/s/chatty/train/rank0.log";
  EXPECT_GE(fs::file_size(log), 1u << 30);
  std::printf("meshtest peak RSS with a 1 GiB rank log: %ld MiB\n", usage.ru_maxrss / 1024);
  EXPECT_LT(usage.ru_maxrss, 256 * 1024) << "KiB: the log must never be held in memory";
  const std::string xml = slurp(dir_ + "/out/junit.xml");
  EXPECT_LT(xml.size(), 2u << 20);
  EXPECT_NE(xml.find("the last line"), std::string::npos) << "the report keeps the log's tail";
  EXPECT_NE(xml.find("...[truncated "), std::string::npos);
  fs::remove(log);  // a gigabyte is too much to leave in /tmp until TearDown
}

TEST_F(Run, HostileOptionValuesStayOneArgumentAndNoShellSeesThem) {
  // Each value reaches the trainer as one argv element, byte for byte: no shell splits,
  // expands or runs it. The fake trainer writes its argument to a file; a shell would have
  // run `touch` (and `rm`) or split at the newline.
  const std::string canary = dir_ + "/shell-ran";
  const std::string value = "; touch " + canary + " ; rm -rf " + dir_ + "/out $(touch " + canary + ") `touch " +
                            canary + "` | & > < * ? ~ $HOME \\n 'q' \\\"dq\\\"";
  matrix("suite: s\ncases:\n  - name: hostile\n    command: [FAKE, --write, '{phase_dir}/argv.txt', \"" + value +
         "\"]\n");
  const Output o = meshtest("--ngpu 1");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_FALSE(fs::exists(canary)) << "a shell ran the value";
  const std::string written = slurp(dir_ + "/out/s/hostile/train/argv.txt");
  EXPECT_NE(written.find("; touch " + canary + " ; rm -rf "), std::string::npos) << written;
  EXPECT_NE(written.find("$(touch "), std::string::npos) << written;
  EXPECT_NE(written.find("\n 'q' \"dq\""), std::string::npos)
      << "the newline stays inside the one argument: " << written;
}

// Every rank is in the ranks' process group when RankGroup's constructor returns, whatever the
// children have run by then: Boost may return before a child's own setpgid, and a rank 0 that
// ends at once can be reaped by the first poll, taking the group with it. A rank left outside
// it outlives every killpg (the soak hung so). Rank 0 here exits at once, ranks 1 and 2 hang.
TEST(RankGroupTest, EveryRankIsInTheGroupWhenTheConstructorReturnsAndAStopReapsThemAll) {
  char tmpl[] = "/tmp/rank_group_test_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  for (int attempt = 0; attempt < 20; ++attempt) {
    meshtest::LaunchSpec spec;
    spec.argv = {kFake, "--hang-rank", "-1", "--exit-rank", "0", "--exit-code", "0"};
    spec.nproc = 3;
    spec.log_dir = std::string(tmpl) + "/" + std::to_string(attempt);
    spec.grace_s = 0.1;
    meshtest::RankGroup group(spec);
    const auto pids = group.pids();
    ASSERT_EQ(pids.size(), 3u);
    for (pid_t pid : pids) EXPECT_EQ(::getpgid(pid), pids[0]) << "attempt " << attempt << ", pid " << pid;
    group.stop("the test is done");
    while (!group.poll()) ::usleep(1000);  // a rank outside the group would hang here
  }
  fs::remove_all(tmpl);
}
