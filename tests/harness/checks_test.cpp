// Every check, failing on a known-bad input with the message a person needs
// (what, where, expected vs got, tolerance), and passing on a good one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "readers/checkpoint_view.h"
#include "judge/checks.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {

class Checks : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-checks-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads a one-suite matrix whose cases run `fake` (never launched here).
  void load(const std::string& cases) {
    suite_ = load_suite_text("suite: s\ndefaults: {command: [fake], ngpu: 2}\ncases:\n" + cases, dir_ + "/m.yaml");
    outcomes_.clear();
    outcomes_.resize(suite_.cases.size());
    for (size_t i = 0; i < suite_.cases.size(); ++i) {
      CaseOutcome& o = outcomes_[i];
      o.spec = &suite_.cases[i];
      o.dir = dir_ + "/" + o.spec->name;
      for (const auto& p : o.spec->phases) {
        PhaseOutcome po;
        po.name = p.name;
        po.nproc = p.nproc;
        po.dir = o.dir + "/" + p.name;
        po.ran = true;
        po.result.exits.resize(static_cast<size_t>(p.nproc));
        fs::create_directories(po.dir);
        o.phases.push_back(po);
      }
      o.verdict = {VerdictKind::kPassed, ""};
      o.finished = true;
    }
  }
  void write(const std::string& path, const std::string& text) { std::ofstream(dir_ + "/" + path) << text; }
  static std::string curve(std::vector<double> losses, int first_step = 1) {
    std::string s;
    for (size_t i = 0; i < losses.size(); ++i)
      s += "{\"step\":" + std::to_string(first_step + static_cast<int>(i)) + ",\"loss\":" + std::to_string(losses[i]) +
           ",\"grad_norm\":1.0}\n";
    return s;
  }
  // Runs and judges case `i`; returns the result of its check `kind`.
  CheckResult run(size_t i, const std::string& kind) {
    auto find = [&](const std::string& id) -> const CaseOutcome* {
      for (const auto& o : outcomes_)
        if (o.spec->id == id) return &o;
      return nullptr;
    };
    outcomes_[i].checks = run_checks(outcomes_[i], find);
    judge(outcomes_[i]);
    for (const auto& c : outcomes_[i].checks)
      if (c.kind == kind) return c;
    ADD_FAILURE() << "no check " << kind;
    return {};
  }

  std::string dir_;
  Suite suite_;
  std::vector<CaseOutcome> outcomes_;
};

}  // namespace

TEST_F(Checks, LossFiniteNamesTheStep) {
  load("  - name: a\n    checks: [loss_finite]\n");
  write("a/train/metrics.jsonl", curve({5.0, 4.0}) + "{\"step\":3,\"loss\":null,\"grad_norm\":1}\n");
  const auto r = run(0, "loss_finite");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train: loss is nan at step 3");
  write("a/train/metrics.jsonl", curve({5.0, 4.0}));
  EXPECT_TRUE(run(0, "loss_finite").passed);
}

TEST_F(Checks, LossDecreasesGivesBothEndsAndTheBound) {
  load("  - name: a\n    checks: [{loss_decreases: {factor: 0.5}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  const auto r = run(0, "loss_decreases");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train: loss went 6 (step 1) -> 4 (step 3); expected <= 0.5 x 6 = 3");
  write("a/train/metrics.jsonl", curve({6.0, 2.9}));
  EXPECT_TRUE(run(0, "loss_decreases").passed);
}

TEST_F(Checks, LossMatchesABaselineWithinTolerance) {
  load("  - name: fsdp\n  - name: tp\n    checks: [{loss_matches: {baseline: fsdp, rtol: 1.0e-4}}]\n");
  write("fsdp/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  write("tp/train/metrics.jsonl", curve({6.0, 5.0001, 4.01}));
  const auto r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "step 3: loss 4.01 in phase train vs 4 in baseline s/fsdp (phase train): |diff| 1.00e-02 > atol 0 + "
            "rtol 0.0001 x |4| = 4.00e-04 (1 of 3 steps differ)");
  EXPECT_NE(r.details.find("<-"), std::string::npos) << r.details;
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  // The verdict carries what the message says, as data: the report draws from it.
  const Verdict& v = outcomes_[1].verdict;
  EXPECT_EQ(v.kind, VerdictKind::kCheckFailed);
  EXPECT_EQ(v.check, "loss_matches");
  EXPECT_EQ(v.phase, "train");
  EXPECT_EQ(v.step, 3);
  EXPECT_DOUBLE_EQ(v.value.value_or(0), 4.01);
  EXPECT_DOUBLE_EQ(v.reference.value_or(0), 4.0);
  EXPECT_DOUBLE_EQ(v.tolerance.value_or(0), 4e-4);
  ASSERT_EQ(r.series.size(), 2u);
  EXPECT_EQ(r.series[0].role, "subject");
  EXPECT_EQ(r.series[1].label, "baseline s/fsdp (phase train)");
  EXPECT_EQ(r.series[1].points.size(), 3u);
  EXPECT_EQ(r.band, std::make_pair(1e-4, 0.0));
  write("tp/train/metrics.jsonl", curve({6.0, 5.0001, 4.0002}));
  EXPECT_TRUE(run(1, "loss_matches").passed);
}

TEST_F(Checks, ValidationLossIsComparedOnTheStepsThatValidated) {
  load("  - name: fsdp\n  - name: pp\n    checks: [{loss_matches: {baseline: fsdp, metric: validation_loss, rtol: 1.0e-4}}]\n");
  const std::string both = "{\"step\":1,\"loss\":6,\"grad_norm\":1}\n{\"step\":2,\"loss\":5,\"grad_norm\":1,"
                           "\"validation_loss\":5.5}\n";
  write("fsdp/train/metrics.jsonl", both);
  write("pp/train/metrics.jsonl", both);
  auto r = run(1, "loss_matches");
  EXPECT_TRUE(r.passed) << r.message;
  ASSERT_EQ(r.series.size(), 2u);
  EXPECT_EQ(r.series[0].points.size(), 1u);  // step 2 only
  write("pp/train/metrics.jsonl", "{\"step\":1,\"loss\":6,\"grad_norm\":1}\n{\"step\":2,\"loss\":5,\"grad_norm\":1,"
                                  "\"validation_loss\":5.6}\n");
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "step 2: validation_loss 5.6 in phase train vs 5.5 in baseline s/fsdp (phase train): |diff| "
                       "1.00e-01 > atol 0 + rtol 0.0001 x |5.5| = 5.50e-04 (1 of 1 steps differ)");
  write("pp/train/metrics.jsonl", curve({6.0, 5.0}));
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train reports no validation_loss (meshtrain: --validation.freq)");
  write("pp/train/metrics.jsonl", both);
  write("fsdp/train/metrics.jsonl", curve({6.0, 5.0}));
  r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message, "phase train has validation_loss at step 2 but baseline s/fsdp (phase train) has none there");
}

TEST_F(Checks, LossMatchesAGoldenFileAndExactMatching) {
  load("  - name: a\n    checks: [{loss_matches: {golden: losses.txt, exact: true}}]\n");
  write("losses.txt", "1 6.0\n2 5.0\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.00001}));
  const auto r = run(0, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 2: loss 5.00001 in phase train vs 5 in golden " + dir_ + "/losses.txt: |diff| 1.00e-05 "
                           "(exact match required)"),
            std::string::npos)
      << r.message;
  write("a/train/metrics.jsonl", curve({6.0, 5.0, 4.0}));
  EXPECT_EQ(run(0, "loss_matches").message,
            "phase train has step 3 but golden " + dir_ + "/losses.txt has steps 1-2");
}

TEST_F(Checks, ResumeMatchesNeedsAResumeAndTheSameLosses) {
  load(R"(  - name: straight
  - name: resumed
    phases: [{name: save}, {name: load}]
    checks: [{resume_matches: {phase: load, baseline: straight}}]
)");
  write("straight/train/metrics.jsonl", curve({6.0, 5.0, 4.0, 3.0}));
  write("resumed/load/metrics.jsonl", curve({6.0, 5.0, 4.0, 3.0}));
  EXPECT_EQ(run(1, "resume_matches").message, "phase load started at step 1: it did not resume from a checkpoint");
  write("resumed/load/metrics.jsonl", curve({4.0, 3.5}, 3));  // the dataloader was not restored
  const auto r = run(1, "resume_matches");
  EXPECT_NE(r.message.find("step 4: loss 3.5 in phase load (resumed) vs 3 in baseline s/straight (phase train) "
                           "(uninterrupted)"),
            std::string::npos)
      << r.message;
  write("resumed/load/metrics.jsonl", curve({4.0, 3.0}, 3));
  EXPECT_TRUE(run(1, "resume_matches").passed);
}

TEST_F(Checks, KeysMatchListsMissingAndUnexpectedKeysLikeTheSeed) {
  load(R"(  - name: reshard
    phases: [{name: save}, {name: load}]
    checks: [{keys_match: {phase: load, against: save}}]
)");
  write("reshard/save/state_dict_keys.json",
        R"({"format_version":1,"keys":{"model.tok_embeddings.parametrizations.weight.original":{"kind":"tensor","shape":[258,64]},
            "model.norm.weight":{"kind":"tensor","shape":[64]},"dataloader.dp_rank_3":{"kind":"object"}}})");
  write("reshard/load/state_dict_keys.json",
        R"({"format_version":1,"keys":{"model.tok_embeddings.weight":{"kind":"tensor","shape":[258,64]},
            "model.norm.weight":{"kind":"tensor","shape":[64]},"dataloader.dp_rank_0":{"kind":"object"}}})");
  const auto r = run(0, "keys_match");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "state-dict keys of phase load differ from phase save: missing 1 "
            "(model.tok_embeddings.parametrizations.weight.original); unexpected 1 (model.tok_embeddings.weight)");
  write("reshard/load/state_dict_keys.json",
        R"({"format_version":1,"keys":{"model.tok_embeddings.parametrizations.weight.original":{"kind":"tensor","shape":[258,32]},
            "model.norm.weight":{"kind":"tensor","shape":[64]}}})");
  EXPECT_EQ(run(0, "keys_match").message,
            "state-dict keys of phase load differ from phase save: shape differs for 1 "
            "(model.tok_embeddings.parametrizations.weight.original [258,32] vs [258,64])");
}

TEST_F(Checks, TokensMatchNamesThePosition) {
  load("  - name: a\n    phases: [{name: dp}, {name: tp}]\n    checks: [{tokens_match: {phase: tp, against: dp}}]\n");
  write("a/dp/generate.json", R"({"prompt":"And God said","generated_ids":[44,76,101],"text":",Le"})");
  write("a/tp/generate.json", R"({"prompt":"And God said","generated_ids":[44,76,102],"text":",Lf"})");
  EXPECT_EQ(run(0, "tokens_match").message,
            "generated token 2 is 102 in phase tp vs 101 in phase dp (prompt 'And God said')");
  write("a/tp/generate.json", R"({"prompt":"And God said","generated_ids":[44,76,101],"text":",Le"})");
  EXPECT_TRUE(run(0, "tokens_match").passed);
}

TEST_F(Checks, TokensMatchReadsTheFileOutputsNames) {
  load("  - name: a\n    phases: [{name: dp}, {name: tp, outputs: {tokens: samples/greedy.json}}]\n"
       "    checks: [{tokens_match: {phase: tp, against: dp}}]\n");
  write("a/dp/generate.json", R"({"prompt":"p","generated_ids":[1,2]})");
  EXPECT_EQ(run(0, "tokens_match").message, "cannot read " + dir_ + "/a/tp/samples/greedy.json");
  fs::create_directories(dir_ + "/a/tp/samples");
  write("a/tp/samples/greedy.json", R"({"prompt":"p","generated_ids":[1,3]})");
  EXPECT_EQ(run(0, "tokens_match").message, "generated token 1 is 3 in phase tp vs 2 in phase dp (prompt 'p')");
}

TEST_F(Checks, ReplicasEqualNamesThePieceAndTheRanks) {
  load("  - name: hsdp\n    checks: [replicas_equal]\n");
  const std::string piece = R"("model.norm.weight":{"offsets":[0],"sizes":[32],"sum":1,"l2":1,"fnv1a64":)";
  write("hsdp/train/rank0.json", "{\"local_params\":{" + piece + "\"0x1\"}}}");
  write("hsdp/train/rank1.json", "{\"local_params\":{" + piece + "\"0x2\"}}}");
  EXPECT_EQ(run(0, "replicas_equal").message,
            "phase train: replicas of model.norm.weight offsets [0] sizes [32] differ: rank 0 has \"0x1\", rank 1 has "
            "\"0x2\"");
  write("hsdp/train/rank1.json", "{\"local_params\":{" + piece + "\"0x1\"}}}");
  EXPECT_TRUE(run(0, "replicas_equal").passed);
}

TEST_F(Checks, ParamsMatchJudgesSumAndNormAgainstTheNorm) {
  load("  - name: a\n  - name: b\n    checks: [{params_match: {baseline: a, rtol: 1.0e-6}}]\n");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  write("b/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5001,"l2":10.0}}})");
  EXPECT_EQ(run(1, "params_match").message,
            "model.w: sum 0.5001 in phase train vs 0.5 in baseline s/a (phase train): |diff| 1.00e-04 > atol 0 + "
            "rtol 1e-06 x |10| = 1.00e-05");
  write("b/train/param_digest.json", R"({"params":{"model.w":{"sum":0.500001,"l2":10.0}}})");
  EXPECT_TRUE(run(1, "params_match").passed);
}

// A golden digest, kept beside the matrix (relative paths are the matrix file's folder's).
TEST_F(Checks, ParamsMatchAgainstAGoldenDigestBesideTheMatrix) {
  load("  - name: a\n    checks: [{params_match: {golden: golden/a.json, rtol: 1.0e-6}}]\n");
  fs::create_directories(dir_ + "/golden");
  write("golden/a.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0},"model.v":{"sum":1.0,"l2":2.0}}})");
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0},"model.v":{"sum":1.0,"l2":2.0}}})");
  EXPECT_TRUE(run(0, "params_match").passed) << run(0, "params_match").message;
  // Both keys differ; the message names the first, the margin covers both (v: 1e-4 / 2e-6 = 50).
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.50002,"l2":10.0},"model.v":{"sum":1.0001,"l2":2.0}}})");
  const CheckResult r = run(0, "params_match");
  EXPECT_EQ(r.message.rfind("model.v: sum 1.0001 in phase train vs 1 in golden " + dir_ + "/golden/a.json: |diff| 1.00e-04", 0), 0u)
      << r.message;
  ASSERT_TRUE(r.margin);
  EXPECT_NEAR(*r.margin, 50, 1e-3);
  write("a/train/param_digest.json", R"({"params":{"model.w":{"sum":0.5,"l2":10.0}}})");
  EXPECT_EQ(run(0, "params_match").message, "model.v is in golden " + dir_ + "/golden/a.json but not in phase train");
  EXPECT_FALSE(run(0, "params_match").margin);  // a missing key is no matter of tolerance
}

TEST_F(Checks, LogContainsAndErrorMatchesForExpectedFailures) {
  load(R"(  - name: seed
    expect: {xfail: parametrize keys}
    checks: [{error_matches: {text: "Missing key in checkpoint state_dict"}}, {log_contains: {text: "resumed", rank: 0}}]
)");
  // The phase exited 0: error_matches fails, so the xfail is not what was declared.
  write("seed/train/rank0.log", "meshtrain: resumed\n");
  write("seed/train/rank1.log", "");
  EXPECT_EQ(run(0, "error_matches").message,
            "phase train exited 0 on every rank; expected it to fail with 'Missing key in checkpoint state_dict'");
  EXPECT_EQ(outcomes_[0].status(), Status::kFailed);
  // It failed, with another error.
  outcomes_[0].phases[0].result.first_failure = {1, 1, 0};
  outcomes_[0].phases[0].result.exits[1] = {1, 1, 0};
  write("seed/train/rank1.log", "meshtrain: error: out of memory\n");
  EXPECT_EQ(run(0, "error_matches").message,
            "phase train: rank 1 failed (exit code 1) but not with 'Missing key in checkpoint state_dict'; its last "
            "line: meshtrain: error: out of memory");
  EXPECT_EQ(outcomes_[0].status(), Status::kFailed);
  EXPECT_EQ(outcomes_[0].verdict.kind, VerdictKind::kXfailedDifferently);
  EXPECT_NE(outcomes_[0].reason().find("xfail (parametrize keys) failed differently"), std::string::npos);
  // It failed the declared way: xfailed.
  write("seed/train/rank1.log", "meshtrain: error: Missing key in checkpoint state_dict: model.tok_embeddings.weight.\n");
  EXPECT_TRUE(run(0, "error_matches").passed);
  EXPECT_EQ(outcomes_[0].status(), Status::kXfailed);
  write("seed/train/rank0.log", "");
  EXPECT_EQ(run(0, "log_contains").message, "no log of phase train rank 0 contains 'resumed'");
}

TEST_F(Checks, MissingOutputsAndMissingBaselinesAreFailuresThatSaySo) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a}}]\n");
  write("b/train/metrics.jsonl", curve({6.0}));
  outcomes_[0].verdict = Verdict::skipped("no GPU");
  EXPECT_EQ(run(1, "loss_matches").message, "baseline s/a did not run (skipped: no GPU)");
  outcomes_[0].verdict = {VerdictKind::kPassed, ""};
  EXPECT_EQ(run(1, "loss_matches").message, "cannot read " + dir_ + "/a/train/metrics.jsonl");
}

TEST_F(Checks, ACanaryIsCaughtOnlyByAJudgedFailureNotByAMissingBaseline) {
  load("  - name: a\n  - name: canary\n    checks: [{loss_matches: {baseline: a}}]\n    expect: {fail: loss_matches}\n");
  write("canary/train/metrics.jsonl", curve({6.0, 5.5}));
  outcomes_[0].verdict = Verdict::skipped("no GPU");
  EXPECT_FALSE(run(1, "loss_matches").judged);
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  EXPECT_EQ(outcomes_[1].reason(), "canary for loss_matches could not be judged: baseline s/a did not run (skipped: no GPU)");
  EXPECT_EQ(outcomes_[1].verdict.kind, VerdictKind::kCanaryCrashed);
  outcomes_[0].verdict = {VerdictKind::kPassed, ""};
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  EXPECT_TRUE(run(1, "loss_matches").judged);
  EXPECT_EQ(outcomes_[1].status(), Status::kPassed);
  EXPECT_EQ(outcomes_[1].verdict.kind, VerdictKind::kCanaryCaught);
  EXPECT_EQ(outcomes_[1].verdict.step, 2);
  EXPECT_EQ(outcomes_[1].reason().rfind("canary caught by loss_matches (margin 10000x): step 2: loss 5.5", 0), 0u)
      << outcomes_[1].reason();
}

// The margin: the largest |diff| / tolerance compared, for a pass (its headroom) and a catch.
TEST_F(Checks, NumberChecksRecordTheirMarginAndACanaryIsJudgedByItsClearestCatch) {
  load("  - name: a\n"
       "  - name: near\n    checks: [{loss_matches: {baseline: a, rtol: 1.0e-2}}]\n"
       "  - name: canary\n    expect: {fail: loss_matches}\n"
       "    checks: [{loss_matches: {baseline: a, rtol: 1.0e-2}}, {loss_matches: {baseline: a, metric: grad_norm, rtol: 1.0e-3}}]\n");
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  write("near/train/metrics.jsonl", curve({6.0, 5.025}));
  const CheckResult near = run(1, "loss_matches");
  EXPECT_TRUE(near.passed);
  ASSERT_TRUE(near.margin);
  EXPECT_NEAR(*near.margin, 0.5, 1e-6);  // 0.025 of a 0.05 tolerance
  // Loss off by 1.2 tolerances, grad norm by 100: the grad-norm comparison is the clearer catch.
  write("canary/train/metrics.jsonl",
        "{\"step\":1,\"loss\":6.0,\"grad_norm\":1.0}\n{\"step\":2,\"loss\":5.06,\"grad_norm\":1.1}\n");
  run(2, "loss_matches");
  EXPECT_EQ(outcomes_[2].verdict.kind, VerdictKind::kCanaryCaught);
  ASSERT_TRUE(outcomes_[2].verdict.margin);
  EXPECT_NEAR(*outcomes_[2].verdict.margin, 100, 1e-6);
  EXPECT_EQ(outcomes_[2].reason().rfind("canary caught by loss_matches (margin 100x): step 2: grad_norm 1.1", 0), 0u)
      << outcomes_[2].reason();
  EXPECT_NEAR(*outcomes_[2].checks[1].margin, 1.2, 1e-6);
}

TEST_F(Checks, AnXfailIsNotMetByACheckThatCouldNotLook) {
  load("  - name: a\n  - name: known\n    checks: [{loss_matches: {baseline: a}}]\n    expect: {xfail: drifts}\n");
  write("known/train/metrics.jsonl", curve({6.0, 5.5}));
  outcomes_[0].verdict = Verdict::skipped("no GPU");
  run(1, "loss_matches");
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  EXPECT_EQ(outcomes_[1].reason(),
            "xfail (drifts) could not be judged: loss_matches: baseline s/a did not run (skipped: no GPU)");
  outcomes_[0].verdict = {VerdictKind::kPassed, ""};
  write("a/train/metrics.jsonl", curve({6.0, 5.0}));
  run(1, "loss_matches");
  EXPECT_EQ(outcomes_[1].status(), Status::kXfailed);
}

// ---- outputs: a foreign trainer's numbers -----------------------------------------

namespace {
// torchtitan's line as it prints it: prefixes, colours, 8.5f loss.
std::string titan_line(int step, double loss) {
  char line[400];
  std::snprintf(line, sizeof(line),
                "[rank1]:[titan] 2026-05-18 16:04:46,338 - root - INFO - \033[31mstep: %2d  \033[32mloss: %8.5f  "
                "\033[38;2;180;60;0mgrad_norm:  0.8319  \033[38;2;54;234;195mmemory:  9.46GiB(64.99%%)  "
                "\033[34mtps: 7,282  \033[36mtflops: 0.52  \033[35mmfu: N/A\033[39m\n",
                step, loss);
  return line;
}
const std::string kDcpFixtures = std::string(MESHTEST_SOURCE_DIR) + "/../shared/fixtures/dcp-torch-2.11";
}  // namespace

TEST_F(Checks, LossMatchesReadsATorchtitanLogOrAUserPattern) {
  load(R"(  - name: base
  - name: titan
    outputs: {metrics: {from: torchtitan-log, rank: 1}}
    checks: [{loss_matches: {baseline: base, rtol: 1.0e-4}}]
  - name: mine
    outputs: {metrics: {from: log-pattern, pattern: 'it=(?P<step>\d+) l=(?P<loss>\S+)'}}
    checks: [{loss_matches: {baseline: base, rtol: 1.0e-4}}]
)");
  write("base/train/metrics.jsonl", curve({6.0, 5.0}));
  EXPECT_EQ(run(1, "loss_matches").message, "cannot read " + dir_ + "/titan/train/rank1.log");
  write("titan/train/rank1.log", "starting\n" + titan_line(1, 6.0) + titan_line(2, 5.01));
  EXPECT_EQ(run(1, "loss_matches").message,
            "step 2: loss 5.01 in phase train vs 5 in baseline s/base (phase train): |diff| 1.00e-02 > atol 0 + "
            "rtol 0.0001 x |5| = 5.00e-04 (1 of 2 steps differ)");
  write("titan/train/rank1.log", titan_line(1, 6.0) + titan_line(2, 5.0));
  EXPECT_TRUE(run(1, "loss_matches").passed);
  write("mine/train/rank0.log", "it=1 l=6.0\nnoise\nit=2 l=5.0\n");
  EXPECT_TRUE(run(2, "loss_matches").passed) << run(2, "loss_matches").message;
  write("mine/train/rank0.log", "it=1 x\n");
  EXPECT_EQ(run(2, "loss_matches").message,
            "no loss values in rank 0's log through pattern 'it=(?P<step>\\d+) l=(?P<loss>\\S+)' (" + dir_ +
                "/mine/train/rank0.log)");
}

TEST_F(Checks, KeysMatchReadsPyTorchDcpMetadataAndMapsTheSeedsKeys) {
  if (!fs::exists(kDcpFixtures)) GTEST_SKIP() << "no " << kDcpFixtures;
  load("  - name: canonical\n    outputs: {checkpoint: {path: '" + kDcpFixtures + "/canonical'}}\n"
       "  - name: parametrize\n    outputs: {checkpoint: {path: '" + kDcpFixtures + "/parametrize/step-5'}}\n"
       "    checks: [{keys_match: {baseline: canonical}}]\n"
       "  - name: mapped\n    outputs: {checkpoint: {path: '" + kDcpFixtures + "/parametrize', rename: "
       "{'\\.parametrizations\\.weight\\.original$': '.weight'}}}\n"
       "    checks: [{keys_match: {baseline: canonical}}, {tensors_match: {baseline: canonical, rtol: 0, atol: 0}}]\n");
  const auto r = run(1, "keys_match");
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.message,
            "state-dict keys of phase train differ from baseline s/canonical (phase train): missing 5 "
            "(model.layers.0.attention.wq.weight, model.layers.0.attention_norm.weight, model.norm.weight, ... (2 "
            "more)); unexpected 5 (model.layers.0.attention.wq.parametrizations.weight.original, "
            "model.layers.0.attention_norm.parametrizations.weight.original, "
            "model.norm.parametrizations.weight.original, ... (2 more))");
  EXPECT_NE(r.details.find("  model.tok_embeddings.weight\n"), std::string::npos) << r.details;
  EXPECT_TRUE(run(2, "keys_match").passed) << run(2, "keys_match").message;
  EXPECT_TRUE(run(2, "tensors_match").passed) << run(2, "tensors_match").message;
}

// saved_once: the ranks' tensor bytes against the saved step's state, both from rank<R>.json.
TEST_F(Checks, SavedOnceComparesTheBytesRanksWroteWithTheStateOnce) {
  load("  - name: ddp\n    checks: [saved_once]\n");
  const std::string step = dir_ + "/ck/step-5";
  fs::create_directories(step);
  std::ofstream(step + "/__0_0.distcp", std::ios::binary) << std::string(24, '\0');
  const nlohmann::json chunk = {{"offsets", {0, 0}}, {"sizes", {2, 3}}, {"file", "__0_0.distcp"}, {"byte_offset", 0}, {"byte_length", 24}};
  std::ofstream(step + "/.metadata") << nlohmann::json{
      {"format_version", 2},
      {"keys", {{"model.w", {{"kind", "tensor"}, {"dtype", "float32"}, {"shape", {2, 3}}, {"chunks", {chunk}}}}}}}.dump();
  auto rank_file = [&](int bytes) {
    return nlohmann::json{{"checkpoint_tensor_bytes_written", bytes}, {"checkpoint_steps_saved", {5}},
                          {"checkpoint_folder", dir_ + "/ck"}}.dump();
  };
  write("ddp/train/rank0.json", rank_file(24));
  write("ddp/train/rank1.json", rank_file(0));
  EXPECT_TRUE(run(0, "saved_once").passed) << run(0, "saved_once").message;
  write("ddp/train/rank1.json", rank_file(24));  // the replica wrote its copy too
  const CheckResult twice = run(0, "saved_once");
  EXPECT_EQ(twice.message, "phase train: its 2 ranks wrote 48 tensor bytes for step-5, whose tensors hold 24 (2x): "
                           "some chunk was written by more than one rank");
  EXPECT_EQ(twice.details, "rank 0: 24 tensor bytes written\nrank 1: 24 tensor bytes written\n");
  fs::remove_all(dir_ + "/ck");
  EXPECT_EQ(run(0, "saved_once").message, "phase train saved step-5 but " + step +
                                              " is gone (removed by --checkpoint.keep-latest-k or a later phase)");
  fs::remove(dir_ + "/ddp/train/rank1.json");
  EXPECT_EQ(run(0, "saved_once").message, "phase train has 2 ranks but left 1 rank<R>.json files in " + dir_ + "/ddp/train");
}

TEST_F(Checks, TensorsMatchComparesADcpCheckpointWithAMeshtrainOneElementByElement) {
  if (!fs::exists(kDcpFixtures)) GTEST_SKIP() << "no " << kDcpFixtures;
  // The DCP fixture's tensors rewritten in meshtrain's format, torchtitan-style (no `model.`
  // prefix), one element of model.norm.weight moved by 0.1.
  const CheckpointView dcp = CheckpointView::open(kDcpFixtures + "/canonical");
  fs::create_directories(dir_ + "/mt/step-5");
  nlohmann::json keys = nlohmann::json::object();
  std::ofstream data(dir_ + "/mt/step-5/__0_0.distcp", std::ios::binary);
  uint64_t offset = 0;
  for (const auto& e : dcp.entries()) {
    if (!e.is_tensor) continue;
    std::vector<double> values = dcp.read_tensor(e.key);
    if (e.key == "model.norm.weight") values[3] += 0.1;
    std::vector<float> f(values.begin(), values.end());
    data.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size() * 4));
    const std::string key = e.key.rfind("model.", 0) == 0 ? e.key.substr(6) : e.key;
    keys[key] = {{"kind", "tensor"}, {"dtype", "float32"}, {"shape", e.shape},
                 {"chunks", {{{"offsets", std::vector<int64_t>(e.shape.size(), 0)}, {"sizes", e.shape},
                              {"file", "__0_0.distcp"}, {"byte_offset", offset}, {"byte_length", f.size() * 4}}}}};
    offset += f.size() * 4;
  }
  data.close();
  std::ofstream(dir_ + "/mt/step-5/.metadata") << nlohmann::json{{"format_version", 2}, {"keys", keys}}.dump();
  load("  - name: ref\n    outputs: {checkpoint: {path: '" + kDcpFixtures + "/canonical'}}\n"
       "  - name: titan\n    outputs: {checkpoint: {path: '" + dir_ + "/mt', model_prefix: model.}}\n"
       "    checks: [{keys_match: {baseline: ref}}, {tensors_match: {baseline: ref}}]\n"
       "  - name: bare\n    checks: [{tensors_match: {baseline: ref}}]\n");
  EXPECT_TRUE(run(1, "keys_match").passed) << run(1, "keys_match").message;
  const auto r = run(1, "tensors_match");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("model.norm.weight[3]: "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find(" in phase train vs "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("(1 elements in 1 of 15 tensors differ)"), std::string::npos) << r.message;
  EXPECT_NE(r.details.find(dir_ + "/mt/step-5"), std::string::npos) << r.details;
  EXPECT_EQ(outcomes_[1].status(), Status::kFailed);
  EXPECT_EQ(run(2, "tensors_match").message, "tensors_match needs outputs.checkpoint on phase train (where its checkpoint is)");
}
