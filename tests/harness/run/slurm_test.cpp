// `meshtest run --launcher slurm` against a real Slurm cluster: slurmctld and two slurmd
// nodes on this host (ci/slurm-local.sh), started for each test and stopped after it.
// Each test ends by checking that nothing is left in the queue or on the nodes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/run/run_fixture.h"
#include "harness/shell.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using meshtest_test::kMeshtest;
using meshtest_test::Run;
using nlohmann::json;

namespace {

// One cluster per port (MESHTEST_SLURM_PORT, ci/slurm-local.sh), so two checkouts' tests can run at once.
const std::string kClusterDir =
    "/tmp/meshtest-slurm-test-" +
    std::string(std::getenv("MESHTEST_SLURM_PORT") ? std::getenv("MESHTEST_SLURM_PORT") : "6817");
const std::string kSlurmLocal = std::string(MESHTEST_SOURCE_DIR) + "/ci/slurm-local.sh";
const std::string kCpuMatrix = std::string(MESHTEST_SOURCE_DIR) + "/test_matrix/cpu.yaml";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Slurm : public Run {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "slurmd must run as root to start tasks";
      return;
    }
    if (sh("command -v slurmctld && command -v slurmd && command -v srun").rc != 0) {
      skip_ = "Slurm is not installed (ci/setup-deps.sh installs slurmctld, slurmd and slurm-client)";
      return;
    }
    const Output up = sh("bash " + kSlurmLocal + " start " + kClusterDir);
    if (up.rc != 0) skip_ = "no local Slurm cluster could be started: " + up.text;
    ::setenv("SLURM_CONF", (kClusterDir + "/etc/slurm.conf").c_str(), 1);
  }
  static void TearDownTestSuite() {
    if (skip_.empty()) sh("bash " + kSlurmLocal + " stop " + kClusterDir);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    Run::SetUp();
  }
  void TearDown() override {
    if (skip_.empty()) {
      std::string queue;
      for (int i = 0; i < 100; ++i) {  // a cancelled job is COMPLETING for a moment
        queue = sh("squeue --noheader --format='%i %j %T'").text;
        if (queue.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      EXPECT_EQ(queue, "") << "jobs left in the queue";
      EXPECT_EQ(processes_mentioning(dir_), std::vector<std::string>{}) << "tasks left on the nodes";
    }
    Run::TearDown();
  }
  Output slurm_run(const std::string& args) {
    return sh("CI=1 " + kMeshtest + " run --launcher slurm --out " + dir_ + "/out --grace 5 " + args);
  }
  // `meshtest run --launcher slurm ARGS` in the background, its output in run.log; wait_for gives its exit status.
  pid_t slurm_run_in_background(const std::string& args) {
    const std::string cmd = "exec env CI=1 " + kMeshtest + " run --launcher slurm --grace 5 --out " + dir_ + "/out " +
                            args + " > " + dir_ + "/run.log 2>&1";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      ::_exit(127);
    }
    return pid;
  }
  static int wait_for(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  static std::string skip_;
};
std::string Slurm::skip_;

// What a verdict is made of, without durations and paths.
json judged(const json& c) {
  json phases = json::array();
  for (const auto& p : c["phases"])
    phases.push_back({{"name", p["name"]}, {"curve", p.value("curve", json())}, {"exits", p.value("exits", json())}});
  return {{"status", c["status"]}, {"verdict_kind", c["verdict"].value("kind", "")}, {"phases", phases}};
}

}  // namespace

TEST_F(Slurm, ACpuSubsetReachesTheSameVerdictsAndLossesAsTheLocalLauncher) {
  // Layouts, a case wider than a node (8 ranks, 4 per node), a reshard chain and a canary.
  const std::string ids =
      " --id cpu/1d --id cpu/2d --id cpu/hsdp+tp --id 'cpu/save[dp_shard=4]-load[dp_shard=2,tp=2]'"
      " --id cpu/canary/grad_sum_not_mean";
  const Output local = sh("CI=1 " + kMeshtest + " run " + kCpuMatrix + ids + " --out " + dir_ + "/local");
  ASSERT_EQ(local.rc, 0) << local.text;
  const Output slurm = slurm_run(kCpuMatrix + ids + " --gpus-per-node 4");
  ASSERT_EQ(slurm.rc, 0) << slurm.text;

  const json a = json::parse(read_text(dir_ + "/local/summary.json"));
  const json b = summary();
  ASSERT_EQ(a["cases"].size(), 5u);
  ASSERT_EQ(b["cases"].size(), 5u);
  for (const auto& c : a["cases"]) {
    const json s = case_of(b, c["id"]);
    EXPECT_EQ(judged(s), judged(c)) << c["id"] << ": the same case under Slurm and locally";
    EXPECT_FALSE(c["phases"][0].value("curve", json()).empty()) << c["id"];
  }
  // The 8-rank case ran on both nodes: ranks 0-3 on n1, 4-7 on n2.
  for (int r = 0; r < 8; ++r) {
    const json exit = json::parse(read_text(dir_ + "/out/cpu/hsdp+tp/train/exit_rank" + std::to_string(r) + ".json"));
    EXPECT_EQ(exit["node"], r < 4 ? "n1" : "n2") << "rank " << r;
  }
}

TEST_F(Slurm, EveryRankGetsTheLocalLaunchersEnvironmentOnEveryNode) {
  matrix("suite: s\ncases:\n  - name: env\n    command: [FAKE, --print-env]\n    ngpu: 4\n");
  const Output o = slurm_run(dir_ + "/m.yaml --gpus-per-node 2");
  ASSERT_EQ(o.rc, 0) << o.text;
  std::string port;
  for (int r = 0; r < 4; ++r) {
    const std::string t = read_text(dir_ + "/out/s/env/train/rank" + std::to_string(r) + ".log");
    EXPECT_NE(t.find("RANK=" + std::to_string(r) + "\n"), std::string::npos) << t;
    EXPECT_NE(t.find("LOCAL_RANK=" + std::to_string(r % 2) + "\n"), std::string::npos) << t;
    EXPECT_NE(t.find("WORLD_SIZE=4\n"), std::string::npos) << t;
    EXPECT_NE(t.find("LOCAL_WORLD_SIZE=2\n"), std::string::npos) << t;
    EXPECT_NE(t.find("GROUP_RANK=" + std::to_string(r / 2) + "\n"), std::string::npos) << t;
    EXPECT_NE(t.find("GROUP_WORLD_SIZE=2\n"), std::string::npos) << t;
    EXPECT_NE(t.find("MASTER_ADDR=127.0.0.1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("OMP_NUM_THREADS=1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("MESHTEST_CASE_ID=s/env\n"), std::string::npos) << t;
    EXPECT_NE(t.find("TORCHELASTIC_ERROR_FILE=" + dir_ + "/out/s/env/train/error_rank" + std::to_string(r) + ".json\n"),
              std::string::npos)
        << t;
    const size_t at = t.find("MASTER_PORT=");
    ASSERT_NE(at, std::string::npos) << t;
    const std::string p = t.substr(at, t.find('\n', at) - at);
    if (r == 0) port = p;
    EXPECT_EQ(p, port) << "every rank meets at one store";
  }

  // With GPUs (the cluster's are fake): each node's ranks see that node's GPUs, as locally a case's.
  const Output gpus = sh("CI=1 " + kMeshtest + " run --launcher slurm --backend nccl --gpus-per-node 2 " + dir_ +
                         "/m.yaml --out " + dir_ + "/gpus");
  ASSERT_EQ(gpus.rc, 0) << gpus.text;
  for (int r = 0; r < 4; ++r) {
    const std::string t = read_text(dir_ + "/gpus/s/env/train/rank" + std::to_string(r) + ".log");
    EXPECT_NE(t.find("CUDA_VISIBLE_DEVICES=0,1\n"), std::string::npos) << t;
  }
}

TEST_F(Slurm, ACrashNamesTheRankAndSignalThatFailedFirstNotSrunsFoldedStatus) {
  matrix(
      "suite: s\ncases:\n  - name: crash\n    command: [FAKE, --crash-rank, '2', --crash-after, '0.5', --sleep, '60']\n"
      "    ngpu: 4\n");
  const Output o = slurm_run(dir_ + "/m.yaml --gpus-per-node 2");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json c = case_of(summary(), "s/crash");
  EXPECT_EQ(c["status"], "failed");
  const json& phase = c["phases"][0];
  EXPECT_EQ(phase["first_failure"]["rank"], 2) << phase.dump();
  EXPECT_EQ(phase["first_failure"]["signal"], SIGSEGV) << phase.dump();
  for (int r : {0, 1, 3}) EXPECT_EQ(phase["exits"][r]["signal"], SIGTERM) << phase.dump();
  EXPECT_EQ(c["verdict"]["kind"], "crashed");
  EXPECT_EQ(c["verdict"]["rank"], 2);
  EXPECT_NE(c["reason"].get<std::string>().find("rank 2 failed first with signal 11 (SIGSEGV)"), std::string::npos)
      << c["reason"];

  // rerun-failed goes back to the same cluster with the same options.
  EXPECT_EQ(summary()["slurm"]["gpus_per_node"], 2);
  const Output again = sh("CI=1 " + kMeshtest + " rerun-failed --from " + dir_ + "/out");
  EXPECT_EQ(again.rc, 1) << again.text;
  EXPECT_TRUE(fs::exists(dir_ + "/out/rerun/s/crash/salloc.log")) << again.text;
  const json rerun = json::parse(read_text(dir_ + "/out/rerun/summary.json"));
  EXPECT_EQ(rerun["launcher"], "slurm");
  EXPECT_EQ(case_of(rerun, "s/crash")["verdict"]["rank"], 2);
}

TEST_F(Slurm, AHangIsATimeoutWithTheRankThatStillRan) {
  matrix("suite: s\ncases:\n  - name: hang\n    command: [FAKE, --hang-rank, '1']\n    ngpu: 2\n    timeout: 3\n");
  const Output o = slurm_run(dir_ + "/m.yaml --gpus-per-node 1");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json c = case_of(summary(), "s/hang");
  EXPECT_EQ(c["verdict"]["kind"], "timed_out") << c.dump(1);
  EXPECT_EQ(c["verdict"]["rank"], 1) << c.dump(1);
  EXPECT_NE(c["reason"].get<std::string>().find("timed out after 3 s (ranks still running: 1)"), std::string::npos)
      << c["reason"];
}

TEST_F(Slurm, SlurmsOwnTimeLimitIsReportedAsATimeout) {
  // No meshtest timeout: Slurm's one-minute limit ends the job (it checks about every 30 s).
  matrix("suite: s\ncases:\n  - name: hang\n    command: [FAKE, --hang-rank, '0']\n    ngpu: 2\n");
  const Output o = slurm_run(dir_ + "/m.yaml --time-limit 1");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json c = case_of(summary(), "s/hang");
  EXPECT_EQ(c["verdict"]["kind"], "timed_out") << c.dump(1);
  EXPECT_NE(c["reason"].get<std::string>().find("Reason=TimeLimit"), std::string::npos) << c["reason"];
  EXPECT_EQ(c["verdict"]["rank"], 0) << "the rank still running when time ran out: " << c.dump(1);
}

TEST_F(Slurm, ARequestSlurmRefusesIsALaunchErrorWithSlurmsReason) {
  matrix("suite: s\ncases:\n  - {name: fine, command: [FAKE], ngpu: 2}\n  - {name: wide, command: [FAKE], ngpu: 12}\n");
  const Output o = slurm_run(dir_ + "/m.yaml --gpus-per-node 4");  // 12 ranks: 3 nodes of the 2
  EXPECT_EQ(o.rc, 1) << o.text;
  const json s = summary();
  EXPECT_EQ(case_of(s, "s/fine")["status"], "passed");
  const json wide = case_of(s, "s/wide");
  EXPECT_EQ(wide["verdict"]["kind"], "launch_error") << wide.dump(1);
  EXPECT_NE(wide["reason"].get<std::string>().find("Slurm refused the allocation"), std::string::npos)
      << wide["reason"];
  EXPECT_NE(wide["reason"].get<std::string>().find("Node count specification invalid"), std::string::npos)
      << wide["reason"];

  const Output bad = slurm_run(dir_ + "/m.yaml --id s/fine --partition nope");
  EXPECT_EQ(bad.rc, 1) << bad.text;
  EXPECT_NE(case_of(summary(), "s/fine")["reason"].get<std::string>().find("Invalid partition name specified"),
            std::string::npos)
      << bad.text;
}

TEST_F(Slurm, SigtermCancelsEveryJobAndStillWritesTheReports) {
  // Three 8-rank cases on 16 slots: two run, one waits in Slurm's queue when SIGTERM comes.
  const std::string sleeper =
      "command: [FAKE, --sleep, '120', --pid-dir, " + dir_ + "], ngpu: 8";  // names dir_: findable
  matrix("suite: s\ncases:\n  - {name: a, " + sleeper + "}\n  - {name: b, " + sleeper + "}\n  - {name: c, " + sleeper +
         "}\n");
  const pid_t pid = slurm_run_in_background(dir_ + "/m.yaml --gpus-per-node 8");
  // Until two cases' ranks run and the third waits.
  for (int i = 0; i < 300; ++i) {
    const bool running = fs::exists(dir_ + "/out/s/a/train/rank7.log") + fs::exists(dir_ + "/out/s/b/train/rank7.log") +
                             fs::exists(dir_ + "/out/s/c/train/rank7.log") ==
                         2;
    if (running && sh("squeue --noheader --states=PENDING | wc -l").text == "1\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(sh("squeue --noheader | wc -l").text, "3\n") << "two running and one pending before the stop";
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_for(pid), 128 + SIGTERM) << read_text(dir_ + "/run.log");
  const json s = summary();
  for (const char* id : {"s/a", "s/b", "s/c"})
    EXPECT_EQ(case_of(s, id)["status"], "cancelled") << case_of(s, id).dump(1);
  EXPECT_TRUE(fs::exists(dir_ + "/out/junit.xml"));
  EXPECT_EQ(processes_mentioning(dir_), std::vector<std::string>{}) << "every rank of the run must be gone";
}

TEST_F(Slurm, AJobCancelledFromOutsideIsReportedWithSlurmsStateNotAsARankFailure) {
  matrix("suite: s\ncases:\n  - {name: victim, command: [FAKE, --sleep, '120', --pid-dir, " + dir_ + "], ngpu: 2}\n");
  const pid_t pid = slurm_run_in_background(dir_ + "/m.yaml");
  for (int i = 0; i < 300 && !fs::exists(dir_ + "/out/s/victim/train/rank1.log"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sh("scancel --name=meshtest/s/victim").rc, 0);  // an operator, or a preemption
  EXPECT_EQ(wait_for(pid), 1) << read_text(dir_ + "/run.log");
  const json c = case_of(summary(), "s/victim");
  EXPECT_EQ(c["status"], "failed") << c.dump(1);
  EXPECT_EQ(c["verdict"]["kind"], "crashed") << c.dump(1);
  EXPECT_FALSE(c["verdict"].contains("rank")) << "no rank failed on its own: " << c.dump(1);
  EXPECT_NE(c["reason"].get<std::string>().find("JobState=CANCELLED"), std::string::npos) << c["reason"];
}
