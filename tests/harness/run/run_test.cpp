// meshtest end to end: real processes from the fake trainer (tests/fixtures),
// real teardown, real reports.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/occurrences.h"
#include "harness/run/run_fixture.h"
#include "harness/shell.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using meshtest_test::kFake;
using meshtest_test::kMeshtest;
using meshtest_test::Run;
using nlohmann::json;

TEST_F(Run, EveryRankGetsTorchrunsEnvironmentAndItsOwnLog) {
  matrix(
      "suite: s\ncases:\n  - name: env\n    command: [FAKE, --print-env]\n    ngpu: 3\n"
      "    env: {PHASE_DIR_SEEN: \"{phase_dir}/x\"}\n");
  const Output o = meshtest("--ngpu 4");
  ASSERT_EQ(o.rc, 0) << o.text;
  for (int r = 0; r < 3; ++r) {
    std::ifstream log(dir_ + "/out/s/env/train/rank" + std::to_string(r) + ".log");
    std::stringstream text;
    text << log.rdbuf();
    const std::string t = text.str();
    EXPECT_NE(t.find("RANK=" + std::to_string(r) + "\n"), std::string::npos) << t;
    EXPECT_NE(t.find("LOCAL_RANK=" + std::to_string(r) + "\n"), std::string::npos) << t;
    EXPECT_NE(t.find("WORLD_SIZE=3\n"), std::string::npos) << t;
    EXPECT_NE(t.find("LOCAL_WORLD_SIZE=3\n"), std::string::npos) << t;
    EXPECT_NE(t.find("GROUP_RANK=0\n"), std::string::npos) << t;
    EXPECT_NE(t.find("MASTER_ADDR=127.0.0.1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("OMP_NUM_THREADS=1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("MESHTEST_CASE_ID=s/env\n"), std::string::npos) << t;
    EXPECT_NE(t.find("PHASE_DIR_SEEN=" + dir_ + "/out/s/env/train/x\n"), std::string::npos) << t;  // filled at launch
  }
}

TEST_F(Run, ACrashInOneRankStopsTheOthersWithSigterm) {
  matrix(
      "suite: s\ncases:\n  - name: crash\n    command: [FAKE, --crash-rank, '2', --crash-after, '0.3', --sleep, '60']\n"
      "    ngpu: 4\n");
  const Output o = meshtest("--ngpu 4");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json c = case_of(summary(), "s/crash");
  EXPECT_EQ(c["status"], "failed");
  const json& phase = c["phases"][0];
  EXPECT_EQ(phase["first_failure"]["rank"], 2);
  EXPECT_EQ(phase["first_failure"]["signal"], SIGSEGV);
  EXPECT_FALSE(phase["killed"].get<bool>()) << "the others needed SIGKILL";
  for (int r : {0, 1, 3}) EXPECT_EQ(phase["exits"][r]["signal"], SIGTERM) << phase.dump();
  EXPECT_NE(c["reason"].get<std::string>().find("exit: phase train: rank 2 failed first with signal 11 (SIGSEGV)"),
            std::string::npos)
      << c["reason"];
  EXPECT_EQ(c["verdict"], json({{"kind", "crashed"},
                                {"check", "exit"},
                                {"phase", "train"},
                                {"rank", 2},
                                {"signal", SIGSEGV},
                                {"message", c["reason"]}}));
  // The failure summary names the log to read and a command that reruns only this case.
  EXPECT_NE(o.text.find("FAILURE SUMMARY"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("log:   " + dir_ + "/out/s/crash/train/rank2.log"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("--id 's/crash'"), std::string::npos) << o.text;
}

TEST_F(Run, TheFailingRanksTorchelasticErrorFileIsQuoted) {
  matrix(
      "suite: s\ncases:\n  - name: py\n    command: [FAKE, --exit-rank, '1', --record, "
      "'RuntimeError: CUDA out of memory', --sleep, '30']\n    ngpu: 2\n");
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 1);
  EXPECT_EQ(case_of(summary(), "s/py")["reason"],
            "exit: phase train: rank 1 failed first with exit code 1: RuntimeError: CUDA out of memory");
}

TEST_F(Run, WithoutAnErrorFileTheFailingRanksLastErrorLineIsQuoted) {
  matrix(
      "suite: s\ncases:\n  - name: cpp\n    command: [FAKE, --exit-rank, '1', --say, "
      "'trainer: error: Connection reset by peer', --sleep, '30']\n    ngpu: 2\n");
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 1);
  EXPECT_EQ(case_of(summary(), "s/cpp")["reason"],
            "exit: phase train: rank 1 failed first with exit code 1: trainer: error: Connection reset by peer");
}

TEST_F(Run, RanksThatIgnoreSigtermGetSigkillAfterTheGracePeriod) {
  matrix(
      "suite: s\ncases:\n  - name: stubborn\n    command: [FAKE, --exit-rank, '0', --exit-code, '3', --crash-after, '0.3', --ignore-sigterm, "
      "--hang-rank, '1']\n    ngpu: 2\n");
  const Output o = sh("CI=1 " + kMeshtest + " run " + dir_ + "/m.yaml --out " + dir_ + "/out --grace 0.5 --ngpu 2");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json phase = case_of(summary(), "s/stubborn")["phases"][0];
  EXPECT_EQ(phase["first_failure"]["exit_code"], 3);
  EXPECT_TRUE(phase["killed"].get<bool>());
  EXPECT_EQ(phase["exits"][1]["signal"], SIGKILL);
}

TEST_F(Run, AHangHitsTheTimeout) {
  matrix("suite: s\ncases:\n  - name: hang\n    command: [FAKE, --hang-rank, '1']\n    ngpu: 2\n    timeout: 1\n");
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json c = case_of(summary(), "s/hang");
  EXPECT_EQ(c["status"], "failed");
  EXPECT_TRUE(c["phases"][0]["timed_out"].get<bool>());
  EXPECT_NE(c["reason"].get<std::string>().find("timed out after 1 s (ranks still running: 1)"), std::string::npos)
      << c["reason"];
  EXPECT_EQ(c["failing_log"], dir_ + "/out/s/hang/train/rank1.log");  // the rank that hung
  EXPECT_EQ(c["verdict"]["kind"], "timed_out");
  EXPECT_EQ(c["verdict"]["rank"], 1);
}

TEST_F(Run, ExpectationsXfailSkipCanaryAndOversizedCases) {
  matrix(R"(suite: s
cases:
  - name: ok
    command: [FAKE]
  - name: known_bug
    command: [FAKE, --exit-rank, '0']
    expect: {xfail: crashes on purpose}
  - name: fixed_bug
    command: [FAKE]
    expect: {xfail: was broken}
  - name: unsupported
    command: [FAKE]
    expect: {skip: pipeline parallel is not implemented}
  - name: wide
    command: [FAKE]
    ngpu: 8
  - name: judged_by_wide
    command: [FAKE]
    checks: [{loss_matches: {baseline: wide}}]
  - name: canary
    command: [FAKE, --exit-rank, '1']
    ngpu: 2
    expect: {fail: exit}
  - name: dud_canary
    command: [FAKE]
    expect: {fail: exit}
)");
  const Output o = meshtest("--ngpu 4");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json s = summary();
  EXPECT_EQ(case_of(s, "s/ok")["status"], "passed");
  EXPECT_EQ(case_of(s, "s/known_bug")["status"], "xfailed");
  EXPECT_EQ(case_of(s, "s/fixed_bug")["status"], "failed");
  EXPECT_EQ(case_of(s, "s/fixed_bug")["reason"], "XPASS: expected to fail (was broken) but every check passed");
  EXPECT_EQ(case_of(s, "s/fixed_bug")["verdict"]["kind"], "xpassed");
  EXPECT_EQ(case_of(s, "s/known_bug")["verdict"]["kind"], "xfailed");
  EXPECT_EQ(case_of(s, "s/wide")["verdict"]["kind"], "skipped");
  EXPECT_EQ(case_of(s, "s/canary")["verdict"]["kind"], "canary_caught");
  EXPECT_EQ(case_of(s, "s/dud_canary")["verdict"]["kind"], "canary_not_caught");
  EXPECT_EQ(case_of(s, "s/unsupported")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/unsupported")["reason"], "pipeline parallel is not implemented");
  EXPECT_EQ(case_of(s, "s/wide")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/wide")["reason"], "needs 8 CPU slots; --ngpu is 4");
  EXPECT_EQ(case_of(s, "s/judged_by_wide")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/judged_by_wide")["reason"],
            "baseline s/wide cannot run here (needs 8 CPU slots; --ngpu is 4)");
  EXPECT_EQ(case_of(s, "s/canary")["status"], "passed");
  EXPECT_NE(case_of(s, "s/canary")["reason"].get<std::string>().find("canary caught by exit"), std::string::npos);
  EXPECT_EQ(case_of(s, "s/dud_canary")["status"], "failed");
  EXPECT_EQ(case_of(s, "s/dud_canary")["reason"], "canary not caught: check exit passed on a known-bad run");
}

TEST_F(Run, SkipTagReportsTaggedCasesAndTheirDependentsAsSkipped) {
  matrix(R"(suite: s
cases:
  - name: plain
    command: [FAKE]
  - name: new_torch
    command: [FAKE, --exit-rank, '0']
    tags: [needs-fsdp2]
  - name: judged_by_new_torch
    command: [FAKE]
    checks: [{loss_matches: {baseline: new_torch}}]
  - name: already_skipped
    command: [FAKE]
    tags: [needs-fsdp2]
    expect: {skip: not implemented}
)");
  const Output o = meshtest("--ngpu 4 --skip-tag 'needs-fsdp2=FSDP2 needs torch >= 2.4'");
  EXPECT_EQ(o.rc, 0) << o.text;
  const json s = summary();
  EXPECT_EQ(case_of(s, "s/plain")["status"], "passed");
  EXPECT_EQ(case_of(s, "s/new_torch")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/new_torch")["reason"], "--skip-tag needs-fsdp2: FSDP2 needs torch >= 2.4");
  EXPECT_EQ(case_of(s, "s/judged_by_new_torch")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/judged_by_new_torch")["reason"],
            "baseline s/new_torch skipped (--skip-tag needs-fsdp2: FSDP2 needs torch >= 2.4)");
  EXPECT_EQ(case_of(s, "s/already_skipped")["reason"], "not implemented");
  EXPECT_EQ(meshtest("--skip-tag '=why'").rc, 2);
}

TEST_F(Run, CasesRunInParallelWithoutOversubscribingThePool) {
  // Three 2-slot cases of 1 s on 4 slots: two run together, the third after one ends.
  matrix(
      "suite: s\ndefaults: {command: [FAKE, --sleep, '1'], ngpu: 2, duration: 1}\n"
      "cases: [{name: a}, {name: b}, {name: c}]\n");
  const Output o = meshtest("--ngpu 4");
  ASSERT_EQ(o.rc, 0) << o.text;
  const json s = summary();
  std::vector<std::pair<double, double>> spans;
  std::vector<std::vector<int>> devices;
  for (const auto& c : s["cases"]) {
    spans.emplace_back(c["start_s"].get<double>(), c["start_s"].get<double>() + c["duration_s"].get<double>());
    devices.push_back(c["devices"].get<std::vector<int>>());
  }
  int overlapping_pairs = 0;
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size(); ++j) {
      const bool overlap = spans[i].first < spans[j].second && spans[j].first < spans[i].second;
      if (!overlap) continue;
      ++overlapping_pairs;
      for (int d : devices[i])
        EXPECT_EQ(std::count(devices[j].begin(), devices[j].end(), d), 0) << "slot " << d << " shared";
    }
  EXPECT_GE(overlapping_pairs, 1) << "nothing ran in parallel: " << s.dump();
  EXPECT_LE(overlapping_pairs, 2);
}

TEST_F(Run, PhasesRunInOrderAndStopAtTheFirstFailure) {
  matrix(R"(suite: s
cases:
  - name: chain
    ngpu: 2
    phases:
      - {name: save, command: [FAKE, --write, "{case_dir}/saved", "step 1"]}
      - {name: load, command: [FAKE, --exit-rank, '1', --exit-code, '7']}
      - {name: generate, command: [FAKE]}
)");
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 1);
  const json c = case_of(summary(), "s/chain");
  EXPECT_TRUE(fs::exists(dir_ + "/out/s/chain/saved"));
  EXPECT_TRUE(c["phases"][0]["ok"].get<bool>());
  EXPECT_EQ(c["phases"][1]["first_failure"]["exit_code"], 7);
  EXPECT_FALSE(c["phases"][2]["ran"].get<bool>());
  EXPECT_EQ(c["reason"], "exit: phase load: rank 1 failed first with exit code 7");
}

// A PyTorch trainer's simulated world (`simulate: true`, docs/simulation.md): every rank gets
// MESHTEST_SIM=1 and meshtest_sim's Python folder first on PYTHONPATH, before the case's own
// entries; the report says the world was simulated.
TEST_F(Run, ASimulatedPytorchWorldPutsMeshtestSimFirstOnEveryRanksPythonPath) {
  matrix(R"(suite: s
cases:
  - name: sim
    ngpu: 3
    simulate: true
    env: {PYTHONPATH: /case/own}
    command: [sh, -c, 'echo "$MESHTEST_SIM $PYTHONPATH" > {phase_dir}/env-$RANK.txt']
)");
  const Output o = meshtest("--ngpu 3");
  EXPECT_EQ(o.rc, 0) << o.text;
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir_ + "/out/s/sim/train/env-" + std::to_string(rank) + ".txt");
    std::string sim, path;
    in >> sim >> path;
    EXPECT_EQ(sim, "1") << "rank " << rank;
    EXPECT_EQ(path, std::string(MESHTEST_SOURCE_DIR) + "/sim/python:/case/own") << "rank " << rank;
  }
  EXPECT_TRUE(case_of(summary(), "s/sim")["simulated"].get<bool>());
}

// torchtitan's resume (issue 36): both launches share --dump_folder, and its TensorBoard run
// folder is named by the minute (tb/20261202-1506/), so a resume within the minute writes its
// event file next to the first launch's. Each phase's metrics are the events written during its
// own launch: train reads steps 1-5, load 6-10, and resume_matches sees a resume.
TEST_F(Run, PhasesSharingATensorBoardFolderEachReadTheEventsTheyWrote) {
  matrix(R"(suite: s
defaults:
  outputs: {metrics: {from: tensorboard, path: "{case_dir}/tb"}}
cases:
  - name: full
    command: [FAKE, --write-tb, "{case_dir}/tb/20261202-1506", '1', '10']
  - name: resume
    phases:
      - {name: train, command: [FAKE, --write-tb, "{case_dir}/tb/20261202-1506", '1', '5']}
      - {name: load, command: [FAKE, --write-tb, "{case_dir}/tb/20261202-1506", '6', '10']}
    checks: [{resume_matches: {phase: load, baseline: full}}]
)");
  const Output o = meshtest("--ngpu 1");
  const json c = case_of(summary(), "s/resume");
  EXPECT_EQ(c["status"], "passed") << c["reason"] << "\n" << o.text;
  EXPECT_EQ(o.rc, 0) << o.text;
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(dir_ + "/out/s/resume/tb/20261202-1506")) files += !f.is_directory();
  EXPECT_EQ(files, 2u) << "both launches wrote into the one run folder";
  auto steps = [](const json& phase) {
    std::vector<long long> out;
    for (const auto& point : phase.value("curve", json::array())) out.push_back(point[0].get<long long>());
    return out;
  };
  EXPECT_EQ(steps(c["phases"][0]), (std::vector<long long>{1, 2, 3, 4, 5}));
  EXPECT_EQ(steps(c["phases"][1]), (std::vector<long long>{6, 7, 8, 9, 10}));
  // Read again later from summary.json (its `metrics_window`), a phase still gets only its own events.
  EXPECT_TRUE(c["phases"][0].contains("metrics_window")) << c["phases"][0].dump();
  const std::string out = dir_ + "/out";
  EXPECT_EQ(sh(kMeshtest + " golden export s/resume --phase train --out " + out).text,
            "1 9.5\n2 9\n3 8.5\n4 8\n5 7.5\n");
  EXPECT_EQ(sh(kMeshtest + " golden export s/resume --out " + out).text, "6 7\n7 6.5\n8 6\n9 5.5\n10 5\n");
}

TEST_F(Run, ALostPortRaceIsRetriedWithANewPort) {
  matrix("suite: s\ncases:\n  - name: race\n    command: [FAKE, --lose-port-once, '{case_dir}/lost']\n    ngpu: 2\n");
  const Output o = meshtest("--ngpu 2");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_EQ(case_of(summary(), "s/race")["phases"][0]["attempts"], 2);
}

TEST_F(Run, SigintStopsEverythingLeavesNoProcessAndStillWritesTheSummary) {
  const std::string pids = dir_ + "/pids";
  matrix("suite: s\ncases:\n  - name: hang\n    command: [FAKE, --hang-rank, '-1', --spawn-orphan, --pid-dir, '" +
         pids + "']\n    ngpu: 3\n    duration: 100\n  - name: queued\n    command: [FAKE]\n    ngpu: 4\n");
  const pid_t child = ::fork();
  if (child == 0) {
    ::setenv("CI", "1", 1);
    const std::string m = dir_ + "/m.yaml", out = dir_ + "/out";
    ::execl(kMeshtest.c_str(), kMeshtest.c_str(), "run", m.c_str(), "--out", out.c_str(), "--ngpu", "4", "--grace", "2",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until every rank and its orphan have written their pid.
  for (int i = 0; i < 1000 && !fs::exists(pids + "/orphan2.pid"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(pids + "/orphan2.pid"));
  ::kill(child, SIGINT);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  for (const auto& entry : fs::directory_iterator(pids)) {
    std::ifstream in(entry.path());
    pid_t pid = 0;
    in >> pid;
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(pid))) << entry.path() << " (pid " << pid << ") is still alive";
  }
  const json s = summary();
  EXPECT_EQ(case_of(s, "s/hang")["status"], "cancelled");
  EXPECT_EQ(case_of(s, "s/queued")["status"], "cancelled");
  EXPECT_EQ(case_of(s, "s/queued")["verdict"]["kind"], "cancelled");
  EXPECT_EQ(s["interrupted_by_signal"], SIGINT);
}

TEST_F(Run, InvalidMatricesRunNothingAndSayWhere) {
  matrix("suite: s\ncases:\n  - name: a\n    command: [FAKE]\n    ngpu: 2\n    timout: 5\n");
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 2);
  EXPECT_NE(o.text.find(dir_ + "/m.yaml:6:5: unknown key 'timout' in case; did you mean 'timeout'?"), std::string::npos)
      << o.text;
  EXPECT_FALSE(fs::exists(dir_ + "/out/summary.json"));
}

TEST_F(Run, SelectionDryRunListAndShow) {
  matrix(R"(suite: s
defaults: {model: tiny, options: {steps: 5}}
cases:
  - name: fsdp
    mesh: {dp_shard: 2}
    tags: [fsdp]
  - name: tp
    mesh: {tp: 2}
    checks: [{loss_matches: {baseline: fsdp}}]
  - name: ddp
    mesh: {dp_replicate: 2}
)");
  // -k picks tp; its baseline comes along.
  const Output list = sh(kMeshtest + " list " + dir_ + "/m.yaml -k tp");
  ASSERT_EQ(list.rc, 0) << list.text;
  EXPECT_NE(list.text.find("s/fsdp"), std::string::npos);
  EXPECT_NE(list.text.find("s/tp"), std::string::npos);
  EXPECT_EQ(list.text.find("s/ddp"), std::string::npos);
  const Output tags = sh(kMeshtest + " list " + dir_ + "/m.yaml --tag fsdp --exclude tp");
  EXPECT_EQ(tags.text.find("s/tp"), std::string::npos);
  EXPECT_NE(tags.text.find("s/fsdp"), std::string::npos);
  // Shards partition the cases; tp and its baseline share one.
  std::string all;
  for (int i = 1; i <= 2; ++i)
    all += sh(kMeshtest + " list " + dir_ + "/m.yaml --shard " + std::to_string(i) + "/2").text;
  for (const std::string id : {"s/fsdp ", "s/tp ", "s/ddp "}) {
    const size_t first = all.find(id);
    EXPECT_NE(first, std::string::npos) << id << " in no shard";
    EXPECT_EQ(all.find(id, first + 1), std::string::npos) << id << " in two shards";
  }
  EXPECT_EQ(sh(kMeshtest + " list " + dir_ + "/m.yaml --shard 1/2").text.find("s/tp ") == std::string::npos,
            sh(kMeshtest + " list " + dir_ + "/m.yaml --shard 1/2").text.find("s/fsdp ") == std::string::npos);
  const Output dry = meshtest("--ngpu 4 --dry-run --id s/ddp");
  ASSERT_EQ(dry.rc, 0) << dry.text;
  EXPECT_NE(dry.text.find("--mesh dp_replicate=2"), std::string::npos) << dry.text;
  EXPECT_FALSE(fs::exists(dir_ + "/out/summary.json"));
  const Output show = sh(kMeshtest + " show s/tp " + dir_ + "/m.yaml");
  ASSERT_EQ(show.rc, 0) << show.text;
  EXPECT_NE(show.text.find("\"baseline\": \"s/fsdp\""), std::string::npos) << show.text;
  EXPECT_NE(show.text.find("\"rtol\": 1e-05"), std::string::npos) << show.text;  // a default, not declared
  EXPECT_NE(show.text.find("--mesh tp=2"), std::string::npos) << show.text;
}

TEST_F(Run, MeshtrainCasesRunOnGloo) {
  if (std::string(MESHTRAIN_TEST_BACKEND) != "gloo") GTEST_SKIP() << "the CUDA build runs meshtrain on NCCL";
  matrix(R"(suite: s
defaults: {model: tiny, options: {steps: 3, local-batch-size: 2}}
cases:
  - name: fsdp
    mesh: {dp_shard: 2}
  - name: tp
    mesh: {tp: 2}
)");
  const Output o = meshtest("--ngpu 4");
  ASSERT_EQ(o.rc, 0) << o.text;
  for (const char* c : {"fsdp", "tp"})
    EXPECT_TRUE(fs::exists(dir_ + "/out/s/" + std::string(c) + "/train/metrics.jsonl")) << c;
}

// Two meshtest runs of one matrix at once on one host (two CI jobs on one runner): their
// stores, Gloo sockets, CPU slots and files must not collide. Each case is 4 Gloo ranks
// with a process group per mesh dimension, so dozens of sockets open while the stores start.
TEST_F(Run, TwoRunsOfOneMatrixAtOnceBothPass) {
  if (std::string(MESHTRAIN_TEST_BACKEND) != "gloo") GTEST_SKIP() << "the CUDA build runs meshtrain on NCCL";
  matrix(R"(suite: s
defaults: {model: tiny, options: {steps: 2, local-batch-size: 1}}
cases:
  - {name: fsdp, mesh: {dp_shard: 4}}
  - {name: hsdp_tp, mesh: {dp_replicate: 2, tp: 2}}
  - {name: fsdp_tp, mesh: {dp_shard: 2, tp: 2}}
  - {name: ddp, mesh: {dp_replicate: 4}}
)");
  const std::string run = "CI=1 " + kMeshtest + " run " + dir_ + "/m.yaml --ngpu 8 --grace 5 --out " + dir_;
  const Output both = sh("(" + run + "/a > " + dir_ + "/a.log 2>&1; echo a=$?) & (" + run + "/b > " + dir_ +
                         "/b.log 2>&1; echo b=$?) & wait");
  EXPECT_NE(both.text.find("a=0"), std::string::npos) << both.text << sh("cat " + dir_ + "/a.log").text;
  EXPECT_NE(both.text.find("b=0"), std::string::npos) << both.text << sh("cat " + dir_ + "/b.log").text;
  for (const char* out : {"a", "b"})
    for (const char* c : {"fsdp", "hsdp_tp", "fsdp_tp", "ddp"})
      EXPECT_TRUE(fs::exists(dir_ + "/" + out + "/s/" + c + "/train/metrics.jsonl")) << out << " " << c;
}

TEST_F(Run, AnEditedSummaryCannotMakeReportWriteOutsideItsFolder) {
  matrix("suite: s\ncases:\n  - name: a\n    command: [FAKE]\n");
  ASSERT_EQ(meshtest("--ngpu 1").rc, 0);
  json s = summary();
  s["cases"][0]["suite"] = "../../evil";
  std::ofstream(dir_ + "/out/summary.json") << s.dump();
  fs::remove_all(dir_ + "/out/surefire");
  EXPECT_EQ(sh(kMeshtest + " report " + dir_ + "/out").rc, 0);
  EXPECT_TRUE(fs::exists(dir_ + "/out/surefire/TEST-.._.._evil.xml"));
  EXPECT_FALSE(fs::exists(dir_ + "/evil.xml"));
  EXPECT_FALSE(fs::exists(dir_ + "/out/surefire/TEST-..")) << "a folder made from the suite name";

  // A name longer than a file system allows (found by report_fuzz): still one file.
  s["cases"][0]["suite"] = std::string(300, 's');
  std::ofstream(dir_ + "/out/summary.json") << s.dump();
  fs::remove_all(dir_ + "/out/surefire");
  EXPECT_EQ(sh(kMeshtest + " report " + dir_ + "/out").rc, 0);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_ + "/out/surefire")) files.push_back(e.path().filename().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].rfind("TEST-" + std::string(180, 's') + "-", 0), 0u) << files[0];
  EXPECT_LE(files[0].size(), 255u);
}

TEST(Launch, ExitStatusFollowsTheFirstFailingRank) {
  EXPECT_EQ(sh(kMeshtest + " launch --nproc 3 -- " + kFake).rc, 0);
  const Output code =
      sh(kMeshtest + " launch --nproc 3 --grace 2 -- " + kFake + " --exit-rank 1 --exit-code 5 --sleep 30");
  EXPECT_EQ(code.rc, 5);
  EXPECT_NE(code.text.find("rank 1 failed first (exit code 5)"), std::string::npos) << code.text;
  EXPECT_EQ(sh(kMeshtest + " launch --nproc 2 --grace 2 -- " + kFake + " --crash-rank 0 --signal 6 --sleep 30").rc,
            128 + 6);
  EXPECT_EQ(sh(kMeshtest + " launch --nproc 2 --timeout 0.5 --grace 1 -- " + kFake + " --hang-rank -1").rc, 124);
  const Output missing = sh(kMeshtest + " launch --nproc 2 -- /nonexistent/trainer");
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.text.find("cannot run '/nonexistent/trainer'"), std::string::npos) << missing.text;
}

// ---- reports: real consumers read them ------------------------------------------

namespace {
const std::string kSchemas = std::string(MESHTEST_SOURCE_DIR) + "/../shared/reference/schemas";
const std::string kJunit2json = std::string(MESHTEST_SOURCE_DIR) + "/.deps/npm/node_modules/.bin/junit2json";

// Validates against an outside XSD; where ../shared is absent only this step is skipped.
void expect_valid(const std::string& xml, const std::string& xsd) {
  if (sh("xmllint --version").rc != 0) {
    std::printf("NOTICE: xmllint not installed (libxml2-utils); XML validation skipped\n");
    return;
  }
  EXPECT_EQ(sh("xmllint --noout " + xml).rc, 0) << sh("xmllint --noout " + xml).text.substr(0, 2000);
  if (!fs::exists(kSchemas + "/" + xsd)) {
    std::printf("NOTICE: %s/%s not found; schema validation skipped\n", kSchemas.c_str(), xsd.c_str());
    return;
  }
  const Output v = sh("xmllint --noout --schema " + kSchemas + "/" + xsd + " " + xml);
  EXPECT_EQ(v.rc, 0) << v.text.substr(0, 2000);
}

const char* kMetricsOk = R"('{"step":1,"loss":6.0,"grad_norm":1}\n{"step":2,"loss":5.0,"grad_norm":1}\n')";
const char* kMetricsDrift = R"('{"step":1,"loss":6.0,"grad_norm":1}\n{"step":2,"loss":5.5,"grad_norm":1}\n')";
}  // namespace

TEST_F(Run, JunitPassesTheSchemaJunitparserAndJunit2jsonEvenWithHostileLogs) {
  matrix(std::string(R"(suite: s
cases:
  - name: ok
    command: [FAKE, --write, "{phase_dir}/metrics.jsonl", )") +
         kMetricsOk + R"(]
  - name: drift
    command: [FAKE, --write, "{phase_dir}/metrics.jsonl", )" +
         kMetricsDrift + R"(]
    checks: [{loss_matches: {baseline: ok, rtol: 1.0e-5}}]
  - name: hostile
    command: [FAKE, --spew, '20000000', --exit-rank, '0']
  - name: hang
    command: [FAKE, --hang-rank, '0']
    timeout: 0.5
  - name: unsupported
    command: [FAKE]
    expect: {skip: no pipeline parallel}
  - name: known
    command: [FAKE, --exit-rank, '0']
    expect: {xfail: known bug}
)");
  const Output o = meshtest("--ngpu 2");
  ASSERT_EQ(o.rc, 1) << o.text;
  const std::string xml = dir_ + "/out/junit.xml";
  expect_valid(xml, "jenkins-junit.xsd");
  EXPECT_LT(fs::file_size(xml), 2u << 20) << "20 MB of log reached the report";

  // junitparser: the parser behind EnricoMi/publish-unit-test-result-action.
  if (sh("/usr/bin/python3 -c 'import junitparser'").rc != 0) {
    std::printf("NOTICE: python3-junitparser not installed (ci/setup-deps.sh installs it); its step skipped\n");
    return;
  }
  const Output py =
      sh("/usr/bin/python3 -c \"import junitparser, sys\n"
         "x = junitparser.JUnitXml.fromfile(sys.argv[1])\n"
         "for suite in x:\n"
         "  for c in suite:\n"
         "    r = c.result[0] if c.result else None\n"
         "    print(c.classname, c.name, type(r).__name__ if r else 'Passed', (r.type or '') if r else '',"
         " (r.message or r.text or '')[:60] if r else '')\n\" " +
         xml);
  ASSERT_EQ(py.rc, 0) << py.text;
  EXPECT_NE(py.text.find("s s/ok Passed"), std::string::npos) << py.text;
  EXPECT_NE(py.text.find("s s/drift Failure loss_matches loss_matches: step 2: loss 5.5 in phase train vs 5 in"),
            std::string::npos)
      << py.text;
  EXPECT_NE(py.text.find("s s/hostile Error NonZeroExit"), std::string::npos) << py.text;
  EXPECT_NE(py.text.find("s s/hang Error Timeout"), std::string::npos) << py.text;
  EXPECT_NE(py.text.find("s s/unsupported Skipped"), std::string::npos) << py.text;
  EXPECT_NE(py.text.find("s s/known Skipped  xfail: known bug (exit: phase train: rank 0 failed first"),
            std::string::npos)
      << py.text;

  // The hostile log: colours stripped, control bytes escaped, capped, last lines kept.
  std::ifstream in(xml);
  std::stringstream text;
  text << in.rdbuf();
  const std::string x = text.str();
  EXPECT_NE(x.find("red error ]]&gt; end of CDATA &lt;tag&gt; &amp;"), std::string::npos);
  EXPECT_NE(x.find("nul:\\x00:bell:\\x07:bad utf-8:\xEF\xBF\xBD\xEF\xBF\xBD:ok \xC3\xA9"), std::string::npos);
  EXPECT_NE(x.find("the last line"), std::string::npos);
  EXPECT_NE(x.find("...[truncated "), std::string::npos);
  EXPECT_NE(x.find("[[ATTACHMENT|" + dir_ + "/out/s/hostile/train/rank0.log]]"), std::string::npos);
  EXPECT_NE(x.find("--id 's/hostile'"), std::string::npos);

  if (!fs::exists(kJunit2json)) {
    std::printf("NOTICE: %s not installed (ci/setup-deps.sh installs it); junit2json step skipped\n",
                kJunit2json.c_str());
    return;
  }
  const Output js = sh(kJunit2json + " " + xml + " > " + dir_ + "/junit.json");
  ASSERT_EQ(js.rc, 0) << js.text;
  std::ifstream jin(dir_ + "/junit.json");
  const json j = json::parse(jin);
  const json& cases = j["testsuite"][0]["testcase"];
  ASSERT_EQ(cases.size(), 6u) << j.dump().substr(0, 2000);
  EXPECT_EQ(j["tests"], 6);
  EXPECT_EQ(j["failures"], 1);
  EXPECT_EQ(j["errors"], 2);
  EXPECT_EQ(cases[1]["name"], "s/drift");
  EXPECT_NE(cases[1]["failure"][0]["message"].get<std::string>().find("loss_matches: step 2"), std::string::npos);
}

TEST_F(Run, RetriesAreReportedTheSurefireWay) {
  const std::string marker = dir_ + "/failed-once";
  matrix("suite: s\ncases:\n  - name: flaky\n    command: [FAKE, --fail-once, '" + marker +
         "']\n  - name: broken\n    command: [FAKE, --exit-rank, '0']\n  - name: fine\n    command: [FAKE]\n");
  const Output o = meshtest("--ngpu 2 --retries 2");
  EXPECT_EQ(o.rc, 1) << o.text;
  EXPECT_NE(o.text.find("FLAKY: passed after 1 failed attempt"), std::string::npos) << o.text;
  const json s = summary();
  EXPECT_EQ(case_of(s, "s/flaky")["status"], "passed");
  EXPECT_EQ(case_of(s, "s/flaky")["earlier_attempts"].size(), 1u);
  EXPECT_EQ(case_of(s, "s/broken")["earlier_attempts"].size(), 2u);
  EXPECT_TRUE(fs::exists(dir_ + "/out/s/broken.attempt2/train/rank0.log"));
  const std::string surefire = dir_ + "/out/surefire/TEST-s.xml";
  expect_valid(surefire, "surefire-test-report-3.0.xsd");
  expect_valid(dir_ + "/out/junit.xml", "jenkins-junit.xsd");
  std::ifstream in(surefire);
  std::stringstream text;
  text << in.rdbuf();
  const std::string x = text.str();
  EXPECT_EQ(occurrences(x, "<flakyError"), 1u) << x.substr(0, 3000);
  EXPECT_EQ(occurrences(x, "<rerunError"), 2u) << x.substr(0, 3000);
  EXPECT_EQ(occurrences(x, "<error "), 1u);
}

TEST_F(Run, ReportRerunFailedDiffAndGoldenExport) {
  matrix(std::string(R"(suite: s
cases:
  - name: ok
    command: [FAKE, --write, "{phase_dir}/metrics.jsonl", )") +
         kMetricsOk + R"(]
  - name: drift
    command: [FAKE, --write, "{phase_dir}/metrics.jsonl", )" +
         kMetricsDrift + R"(]
    checks: [{loss_matches: {baseline: ok}}]
)");
  ASSERT_EQ(meshtest("--ngpu 2").rc, 1);
  const std::string out = dir_ + "/out";
  fs::remove(out + "/junit.xml");
  const Output report = sh(kMeshtest + " report " + out);
  EXPECT_EQ(report.rc, 1);
  EXPECT_TRUE(fs::exists(out + "/junit.xml"));
  EXPECT_NE(report.text.find("failed s/drift: loss_matches: step 2"), std::string::npos) << report.text;

  const Output golden = sh(kMeshtest + " golden export s/ok --out " + out);
  EXPECT_EQ(golden.text, "1 6\n2 5\n");

  const Output diff = sh(kMeshtest + " diff s/ok s/drift --out " + out);
  EXPECT_EQ(diff.rc, 1);
  EXPECT_NE(diff.text.find("     2          5.000000          5.500000    0.500000"), std::string::npos) << diff.text;

  // Only the failed case reruns (with its baseline), into <out>/rerun.
  const Output rerun = sh("CI=1 " + kMeshtest + " rerun-failed --from " + out);
  EXPECT_EQ(rerun.rc, 1) << rerun.text;
  std::ifstream in(out + "/rerun/summary.json");
  const json again = json::parse(in);
  ASSERT_EQ(again["cases"].size(), 2u);
  EXPECT_EQ(again["cases"][1]["id"], "s/drift");
}

// The drift check (docs/checks.md) end to end, on a real history: without one it cannot look
// and says so; with too few green runs at other commits it says how many; inside the band it
// passes; a moved loss fails the case that declares it and catches the canary that expects it.
TEST_F(Run, TheDriftCheckJudgesAgainstTheCasesOwnRecentGreenRuns) {
  auto cases = [](const char* metrics, const std::string& canary_expect) {
    return std::string(
               "suite: s\ncases:\n  - name: plain\n    command: [FAKE, --write, \"{phase_dir}/metrics.jsonl\", ") +
           metrics +
           "]\n    checks: [drift]\n  - name: canary\n    command: [FAKE, --write, \"{phase_dir}/metrics.jsonl\", " +
           metrics + "]\n    checks: [{drift: {min_runs: 2}}]\n" + canary_expect;
  };
  const std::string history = " --history " + dir_ + "/history.db";
  matrix(cases(kMetricsOk, ""));
  Output o = meshtest("--ngpu 2");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_EQ(case_of(summary(), "s/plain")["checks"][1]["message"],
            "not judged: this run has no history (--history or MESHTEST_HISTORY)");
  for (int commit = 1; commit <= 3; ++commit) {
    o = meshtest("--ngpu 2 --commit c" + std::to_string(commit) + history);
    ASSERT_EQ(o.rc, 0) << o.text;
  }
  EXPECT_EQ(case_of(summary(), "s/plain")["checks"][1]["message"],
            "not judged: 2 green runs of this case at other commits in the history, 3 needed");
  EXPECT_EQ(case_of(summary(), "s/canary")["checks"][1]["message"], "inside the band of its last 2 green runs");
  EXPECT_EQ(case_of(summary(), "s/canary")["checks"][1]["judged"], true);
  const Output show = sh(kMeshtest + " show s/plain " + dir_ + "/m.yaml");
  EXPECT_NE(show.text.find("\"min_runs\": 3"), std::string::npos) << show.text;  // the defaults, shown

  matrix(cases(kMetricsDrift, "    expect: {fail: drift}\n"));
  o = meshtest("--ngpu 2 --commit c4" + history);
  EXPECT_EQ(o.rc, 1) << o.text;
  const json s = summary();
  const json plain = case_of(s, "s/plain"), canary = case_of(s, "s/canary");
  EXPECT_EQ(plain["status"], "failed");
  EXPECT_EQ(plain["verdict"]["check"], "drift");
  EXPECT_EQ(plain["verdict"]["step"], 2);
  EXPECT_NE(plain["verdict"]["message"].get<std::string>().find(
                "drifted: loss of phase train at step 2: 5.5 outside 5 \xc2\xb1 5.00e-06 (3 green runs, c1..c3)"),
            std::string::npos)
      << plain.dump(1);
  EXPECT_EQ(canary["met_expectation"], true) << canary.dump(1);
  EXPECT_NE(canary["verdict"]["message"].get<std::string>().find("canary caught by drift"), std::string::npos)
      << canary.dump(1);
}

// adapter: hf-trainer end to end: the user's script gets the adapter's flags after its own (a
// shell script stands in for it here, recording them and writing a trainer_state.json as the
// Trainer does), and the case is judged from that file: its loss, rounded as the Trainer
// rounds it, and a NaN the Trainer wrote bare.
TEST_F(Run, TheHfTrainerAdapterPassesItsFlagsAndJudgesTrainerState) {
  matrix(R"(suite: s
defaults:
  adapter: hf-trainer
  command: [sh, -c, 'printf "%s\n" "$@" > {phase_dir}/args.txt; exec FAKE --write {phase_dir}/trainer_state.json "$STATE"', script]
  options: {max_steps: 2}
cases:
  - name: ok
    ngpu: 1
    env: {STATE: '{"global_step": 2, "log_history": [{"loss": 6.1234, "step": 1}, {"loss": 5.0012, "step": 2}]}'}
    checks: [loss_finite, {loss_decreases: {factor: 0.9}}]
  - name: nan
    ngpu: 1
    env: {STATE: '{"global_step": 2, "log_history": [{"loss": 6.1234, "step": 1}, {"loss": NaN, "step": 2}]}'}
    checks: [loss_finite]
)");
  const Output o = meshtest("--ngpu 2");
  EXPECT_EQ(o.rc, 1) << o.text;
  const json s = summary();
  EXPECT_EQ(case_of(s, "s/ok")["status"], "passed") << case_of(s, "s/ok").dump(1);
  EXPECT_EQ(case_of(s, "s/nan")["verdict"]["message"], "loss_finite: phase train: loss is nan at step 2")
      << case_of(s, "s/nan").dump(1);
  std::ifstream in(dir_ + "/out/s/ok/train/args.txt");
  std::stringstream args;
  args << in.rdbuf();
  EXPECT_EQ(args.str(), "--output_dir\n" + dir_ +
                            "/out/s/ok/train\n--logging_steps\n1\n--full_determinism\n"
                            "--report_to\nnone\n--seed\n42\n--max_steps\n2\n");
}
