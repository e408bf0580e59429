// `requires:` (harness/run/requirements.h): the schema and its errors with file:line:col, probes
// run as real processes (sh, true, false, python3) once per distinct probe, unmet ones
// skipping their case and the cases judged against it, and the run's reports carrying the
// reason. Also --skip-tag, which shares the skipping.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/matrix.h"
#include "core/plan.h"
#include "judge/check_sources.h"
#include "harness/shell.h"
#include "report/report.h"
#include "run/requirements.h"
#include "run/runner.h"
#include "report/summary.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace meshtest;

// The matrix loader asks meshtrain (the adapter) which models and meshes it takes.
[[maybe_unused]] const int kMeshtrainForRequirements = ::setenv("MESHTEST_MESHTRAIN", MESHTRAIN_BIN, 0);

namespace {

class Requires : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-requires-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A matrix of suite `s` kept in the test's folder (probes run from there).
  void load(const std::string& yaml) { suites_ = {load_suite_text(yaml, dir_ + "/m.yaml")}; }
  std::string errors_of(const std::string& yaml) {
    try {
      load(yaml);
    } catch (const MatrixError& e) {
      return e.what();
    }
    return "";
  }
  std::vector<const Case*> all() const {
    std::vector<const Case*> out;
    for (const auto& c : suites_.front().cases) out.push_back(&c);
    return out;
  }
  const Case& at(const std::string& name) const {
    for (const auto& c : suites_.front().cases)
      if (c.name == name) return c;
    throw std::runtime_error("no case " + name);
  }
  ProbeReport probe(ProbeHost host = {}) { return apply_requirements(suites_, all(), host, nullptr); }
  int lines_of(const std::string& file) const {
    std::ifstream in(dir_ + "/" + file);
    int n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  }
  // The whole run as `meshtest run` does it, up to summary.json and junit.xml.
  nlohmann::json run() {
    RunOptions opt;
    opt.out_dir = dir_ + "/out";
    opt.devices = 4;
    opt.grace_s = 5;
    const auto selected = all();
    apply_requirements(suites_, selected, {opt.backend, opt.devices}, nullptr);
    const RunResult result = run_cases(plan_run(selected, opt, {}), opt, {});
    nlohmann::json summary = summary_json(result, opt);
    write_junit(summary_view(summary), dir_ + "/junit.xml");
    return summary;
  }
  static nlohmann::json case_of(const nlohmann::json& summary, const std::string& id) {
    for (const auto& c : summary["cases"])
      if (c["id"] == id) return c;
    ADD_FAILURE() << "no case " << id;
    return nlohmann::json();
  }

  std::string dir_;
  std::vector<Suite> suites_;
};

TEST_F(Requires, SchemaErrorsCarryFileLineCol) {
  const std::string e = errors_of(R"(suite: s
defaults: {command: [fake]}
cases:
  - name: a
    requires:
      - {python: "import torch", command: ["true"]}
      - {}
      - {gpus: 0}
      - {command: [sh], interpreter: python3}
      - {python_version: "torch=>2.4"}
      - {command: ["{case_dir}/probe.sh"]}
      - {python: "import x", reson: typo}
      - {python: "import x", timeout: -1}
      - {gpus: 2, timeout: 5}
      - {command: []}
  - name: b
    requires: {python: "import torch"}
  - name: c
    phases:
      - {name: train, requires: [{gpus: 1}]}
)");
  const std::string f = dir_ + "/m.yaml";
  for (const std::string& want : {
           f + ":6:9: a requirement names exactly one probe (python, command, python_version or gpus); this one "
               "names python, command",
           f + ":7:9: a requirement names exactly one probe (python, command, python_version or gpus)",
           f + ":8:16: requires.gpus must be at least 1, got 0",
           f + ":9:38: requires.interpreter goes with python or python_version, not command",
           f + ":10:26: requires.python_version 'torch=>2.4' must be <module><op><version>",
           f + ":11:19: unknown placeholder {case_dir} in requires.command; a probe takes only {matrix_dir}",
           f + ":12:30: unknown key 'reson' in requires entry; did you mean 'reason'?",
           f + ":13:39: requires.timeout must be positive seconds",
           f + ":14:28: requires.timeout goes with a probe that runs, not gpus",
           f + ":15:19: requires.command must name a program",
           f + ":17:15: requires must be a list of probes",
           f + ":20:23: unknown key 'requires' in phase",
       })
    EXPECT_NE(e.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << e;
}

TEST_F(Requires, DefaultsAndCaseListsAddUpWithMatrixDirFilled) {
  load(R"(suite: s
defaults:
  command: [fake]
  requires: [{gpus: 1}]
cases:
  - name: a
    requires:
      - {command: ["{matrix_dir}/probe.sh", x], reason: "needs the probe"}
      - {python: "import json", interpreter: "{matrix_dir}/py", timeout: 5}
      - {python_version: "json >= 2.0, <99"}
  - name: b
)");
  const Case& a = at("a");
  ASSERT_EQ(a.requirements.size(), 4u);
  EXPECT_EQ(a.requirements[0].describe(), "gpus 1");
  EXPECT_EQ(a.requirements[1].argv, (std::vector<std::string>{dir_ + "/probe.sh", "x"}));
  EXPECT_EQ(a.requirements[1].describe(), "command '{matrix_dir}/probe.sh x'");
  EXPECT_EQ(a.requirements[1].reason, "needs the probe");
  EXPECT_EQ(a.requirements[1].dir, dir_);
  EXPECT_EQ(a.requirements[2].interpreter, dir_ + "/py");
  EXPECT_EQ(a.requirements[2].timeout_s, 5);
  EXPECT_EQ(a.requirements[3].module, "json");
  ASSERT_EQ(a.requirements[3].constraints.size(), 2u);
  EXPECT_EQ(a.requirements[3].constraints[1], (std::pair<std::string, std::string>{"<", "99"}));
  EXPECT_EQ(at("b").requirements.size(), 1u);
  EXPECT_EQ(a.to_json()["requires"][1]["argv"][0], dir_ + "/probe.sh");
}

TEST_F(Requires, UnmetCommandSkipsItsCaseAndTheCasesJudgedAgainstIt) {
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - name: base
    requires: [{command: [sh, -c, "echo starting; echo 'no frobnicator here' >&2; exit 3"]}]
  - name: mid
    checks: [{loss_matches: {baseline: base}}]
  - name: top
    checks: [{loss_matches: {baseline: mid}}]
  - name: declared
    expect: {skip: "declared reason"}
    checks: [{loss_matches: {baseline: base}}]
  - name: other
)");
  const ProbeReport r = probe();
  EXPECT_EQ(r.probes_run, 1);
  const std::string why =
      "requires command 'sh -c echo starting; echo 'no frobnicator here' >&2; exit 3': no frobnicator here";
  EXPECT_EQ(at("base").expect.str(), "skip: " + why);
  EXPECT_EQ(at("mid").expect.str(), "skip: baseline s/base skipped (" + why + ")");
  EXPECT_EQ(at("top").expect.str(), "skip: baseline s/mid skipped (baseline s/base skipped (" + why + "))");
  EXPECT_EQ(at("declared").expect.str(), "skip: declared reason");
  EXPECT_EQ(at("other").expect.kind, Expectation::kPass);
  ASSERT_EQ(r.unmet.size(), 1u);
  EXPECT_EQ(r.unmet[0], why);
}

TEST_F(Requires, TheReasonFallsBackToStdoutThenHowItEndedAndAGivenReasonLeads) {
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - {name: out, requires: [{command: [sh, -c, "echo said on stdout; exit 1"]}]}
  - {name: code, requires: [{command: ["false"], reason: "needs a true false"}]}
  - {name: signal, requires: [{command: [sh, -c, "kill -KILL $$"]}]}
  - {name: missing, requires: [{command: [no-such-program-anywhere]}]}
  - {name: relative, requires: [{command: [./absent.sh]}]}
)");
  probe();
  EXPECT_EQ(at("out").expect.reason, "requires command 'sh -c echo said on stdout; exit 1': said on stdout");
  EXPECT_EQ(at("code").expect.reason, "needs a true false (exit code 1)");
  EXPECT_EQ(at("signal").expect.reason, "requires command 'sh -c kill -KILL $$': signal 9 (SIGKILL)");
  EXPECT_EQ(at("missing").expect.reason,
            "requires command 'no-such-program-anywhere': cannot run 'no-such-program-anywhere': not found on PATH");
  EXPECT_EQ(at("relative").expect.reason,
            "requires command './absent.sh': cannot run " + dir_ + "/absent.sh: No such file or directory");
}

TEST_F(Requires, ProbesRunFromTheMatrixFolderWithRelativeProgramsResolvedThere) {
  std::ofstream(dir_ + "/probe.sh") << "#!/bin/sh\ntest -f m.yaml\n";
  fs::permissions(dir_ + "/probe.sh", fs::perms::owner_all);
  std::ofstream(dir_ + "/m.yaml") << "# probes look for this file in their working folder\n";
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - {name: relative, requires: [{command: [./probe.sh]}]}
  - {name: placeholder, requires: [{command: ["{matrix_dir}/probe.sh"]}]}
  - {name: cwd, requires: [{command: [sh, -c, "test -f m.yaml || { echo not in $(pwd) >&2; exit 1; }"]}]}
)");
  ASSERT_NE(fs::current_path(), fs::path(dir_));
  const ProbeReport r = probe();
  EXPECT_TRUE(r.skips.empty()) << r.skips.begin()->second;
  EXPECT_EQ(r.probes_run, 2);  // ./probe.sh and {matrix_dir}/probe.sh are one program: one probe
}

TEST_F(Requires, EachDistinctProbeRunsOnceHoweverManyCasesShareIt) {
  load(R"(suite: s
defaults:
  command: [fake]
  requires: [{command: [sh, -c, "echo probed >> count.txt"]}]
cases:
  - name: c
    matrix: {i: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]}
    requires: [{command: [sh, -c, "echo probed >> count.txt"]}, {command: [sh, -c, "echo other >> other.txt; exit 1"]}]
)");
  ASSERT_EQ(suites_.front().cases.size(), 20u);
  const ProbeReport r = probe();
  EXPECT_EQ(lines_of("count.txt"), 1);
  EXPECT_EQ(lines_of("other.txt"), 1);
  EXPECT_EQ(r.probes_run, 2);
  EXPECT_EQ(r.skips.size(), 20u);
  EXPECT_EQ(r.unmet.size(), 1u);
}

TEST_F(Requires, CasesAlreadySkippedAreNotProbed) {
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - {name: a, expect: {skip: "not here"}, requires: [{command: [sh, -c, "echo probed >> count.txt"]}]}
)");
  EXPECT_EQ(probe().probes_run, 0);
  EXPECT_EQ(lines_of("count.txt"), 0);
  EXPECT_EQ(at("a").expect.str(), "skip: not here");
}

// A process that is gone, or dead and not yet reaped by whoever inherited it.
bool gone(const std::string& pid) {
  const std::string stat = proc_file(pid, "stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || stat.substr(paren + 2, 1) == "Z";
}

TEST_F(Requires, AProbeThatRunsPastItsTimeoutIsUnmetAndStoppedWithItsChildren) {
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - name: slow
    requires: [{command: [sh, -c, "sleep 30 & echo $! > background.pid; sleep 30"], timeout: 0.5}]
  - name: judged
    checks: [{loss_matches: {baseline: slow}}]
)");
  probe();
  EXPECT_EQ(at("slow").expect.reason,
            "requires command 'sh -c sleep 30 & echo $! > background.pid; sleep 30': timed out after 0.5 s");
  EXPECT_EQ(at("judged").expect.kind, Expectation::kSkip);
  std::string pid;
  std::ifstream(dir_ + "/background.pid") >> pid;
  ASSERT_FALSE(pid.empty());
  bool stopped = gone(pid);
  for (int i = 0; i < 500 && !stopped; ++i) ::usleep(10000), stopped = gone(pid);  // SIGKILL lands asynchronously
  EXPECT_TRUE(stopped) << "the probe's background child " << pid << " outlived it";
}

TEST_F(Requires, PythonSnippetsAndVersions) {
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - {name: imports, requires: [{python: "import json, sys"}]}
  - {name: missing, requires: [{python: "import no_such_module_here"}]}
  - name: multi_line
    requires:
      - python: |
          import sys
          sys.exit("told why")
  - {name: new_enough, requires: [{python_version: "json>=1.0,<99"}]}
  - {name: too_old, requires: [{python_version: "json>=99"}]}
  - {name: no_module, requires: [{python_version: "no_such_module_here>=1"}]}
  - {name: interpreter, requires: [{python: "import json", interpreter: no-such-python}]}
)");
  probe();
  EXPECT_EQ(at("imports").expect.kind, Expectation::kPass);
  EXPECT_EQ(at("missing").expect.reason,
            "requires python 'import no_such_module_here': ModuleNotFoundError: No module named 'no_such_module_here'");
  EXPECT_EQ(at("multi_line").expect.reason, "requires python 'import sys sys.exit(\"told why\")': told why");
  EXPECT_EQ(at("new_enough").expect.kind, Expectation::kPass);
  EXPECT_EQ(at("too_old").expect.reason.rfind("requires python_version 'json>=99': json ", 0), 0u)
      << at("too_old").expect.reason;
  EXPECT_NE(at("too_old").expect.reason.find(" is not >=99"), std::string::npos) << at("too_old").expect.reason;
  EXPECT_EQ(
      at("no_module").expect.reason,
      "requires python_version 'no_such_module_here>=1': ModuleNotFoundError: No module named 'no_such_module_here'");
  EXPECT_EQ(at("interpreter").expect.reason,
            "requires python 'import json': cannot run 'no-such-python': not found on PATH");
}

TEST_F(Requires, GpusAreDevicesOfTheNcclBackendOnly) {
  const std::string yaml = R"(suite: s
defaults: {command: [fake]}
cases:
  - {name: two, requires: [{gpus: 2}]}
)";
  load(yaml);
  probe({"gloo", 8});
  EXPECT_EQ(at("two").expect.reason, "requires gpus 2: the gloo backend runs on CPU slots, not GPUs");
  load(yaml);
  probe({"nccl", 1});
  EXPECT_EQ(at("two").expect.reason, "requires gpus 2: this run has 1 GPU");
  load(yaml);
  EXPECT_EQ(probe({"nccl", 2}).skips.size(), 0u);
  EXPECT_EQ(at("two").expect.kind, Expectation::kPass);
}

// Met: the case runs and is judged as always, a failure included; unmet: skipped with the
// reason in summary.json and junit.xml, never failed.
TEST_F(Requires, MetCasesRunAndFailAsAlwaysUnmetOnesAreSkippedInTheReports) {
  load(R"(suite: s
defaults: {timeout: 60}
cases:
  - {name: met_passes, command: [sh, -c, "exit 0"], requires: [{command: ["true"]}]}
  - {name: met_fails, command: [sh, -c, "exit 4"], requires: [{command: ["true"]}]}
  - name: unmet
    command: [sh, -c, "exit 5"]
    requires: [{command: [sh, -c, "echo 'needs <more> & \"cores\"' >&2; exit 1"], reason: "needs a bigger box"}]
  - {name: judged, command: [sh, -c, "exit 0"], checks: [{loss_matches: {baseline: unmet}}]}
)");
  const nlohmann::json s = run();
  EXPECT_EQ(case_of(s, "s/met_passes")["status"], "passed");
  EXPECT_EQ(case_of(s, "s/met_fails")["status"], "failed");
  EXPECT_EQ(case_of(s, "s/met_fails")["met_expectation"], false);
  const std::string why = "needs a bigger box (needs <more> & \"cores\")";
  EXPECT_EQ(case_of(s, "s/unmet")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/unmet")["met_expectation"], true);
  EXPECT_EQ(case_of(s, "s/unmet")["reason"], why);
  EXPECT_EQ(case_of(s, "s/unmet")["phases"][0]["ran"], false);
  EXPECT_EQ(case_of(s, "s/judged")["status"], "skipped");
  EXPECT_EQ(case_of(s, "s/judged")["reason"], "baseline s/unmet skipped (" + why + ")");
  std::ifstream in(dir_ + "/junit.xml");
  const std::string junit((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(junit.find("<skipped>needs a bigger box (needs &lt;more&gt; &amp; \"cores\")</skipped>"), std::string::npos)
      << junit;
}

TEST_F(Requires, SkipTagsShareTheSkipping) {
  load(R"(suite: s
defaults: {command: [fake]}
cases:
  - {name: new_torch, tags: [needs-fsdp2]}
  - {name: judged, checks: [{loss_matches: {baseline: new_torch}}]}
  - {name: declared, tags: [needs-fsdp2], expect: {skip: "its own reason"}}
)");
  apply_skip_tags(suites_, {"needs-fsdp2=FSDP2 needs torch >= 2.4", "nothing-has-this"}, nullptr);
  EXPECT_EQ(at("new_torch").expect.str(), "skip: --skip-tag needs-fsdp2: FSDP2 needs torch >= 2.4");
  EXPECT_EQ(at("judged").expect.str(),
            "skip: baseline s/new_torch skipped (--skip-tag needs-fsdp2: FSDP2 needs torch >= 2.4)");
  EXPECT_EQ(at("declared").expect.str(), "skip: its own reason");
  EXPECT_THROW(apply_skip_tags(suites_, {"=why"}, nullptr), std::invalid_argument);
}

}  // namespace
