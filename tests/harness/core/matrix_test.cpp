// The matrix loader: expansion (Actions include/exclude, ids) and every
// validation error with its file:line:col.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/matrix.h"
#include "test_paths.h"

using namespace meshtest;

// The meshtrain adapter knows meshtrain's models from its flavor table (meshtrain_adapter_fixture.cpp).

namespace {

Suite load(const std::string& yaml) { return load_suite_text(yaml, "m.yaml"); }

// The errors a matrix produces, joined, or "" when it loads.
std::string errors_of(const std::string& yaml) {
  try {
    load(yaml);
  } catch (const MatrixError& e) {
    return e.what();
  }
  return "";
}

std::string str(const Combination& c) {
  std::string out;
  for (const auto& [k, v] : c) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

}  // namespace

TEST(MatrixExpand, ActionsIncludeWorkedExample) {
  // docs.github.com "Expanding or adding matrix configurations": six jobs.
  const auto combos = expand_axes({{"fruit", {"apple", "pear"}}, {"animal", {"cat", "dog"}}},
                                  {{{"color", "green"}},
                                   {{"color", "pink"}, {"animal", "cat"}},
                                   {{"fruit", "apple"}, {"shape", "circle"}},
                                   {{"fruit", "banana"}},
                                   {{"fruit", "banana"}, {"animal", "cat"}}},
                                  {});
  ASSERT_EQ(combos.size(), 6u);
  EXPECT_EQ(str(combos[0]), "fruit=apple animal=cat color=pink shape=circle");
  EXPECT_EQ(str(combos[1]), "fruit=apple animal=dog color=green shape=circle");
  EXPECT_EQ(str(combos[2]), "fruit=pear animal=cat color=pink");
  EXPECT_EQ(str(combos[3]), "fruit=pear animal=dog color=green");
  EXPECT_EQ(str(combos[4]), "fruit=banana");
  EXPECT_EQ(str(combos[5]), "fruit=banana animal=cat");
}

TEST(MatrixExpand, ExcludeMatchesPartiallyAndIncludeCanAddBack) {
  const auto combos = expand_axes({{"os", {"linux", "mac"}}, {"ver", {"1", "2", "3"}}},
                                  {{{"os", "mac"}, {"ver", "2"}}},  // re-added as a new combination
                                  {{{"os", "mac"}}, {{"ver", "3"}}});
  ASSERT_EQ(combos.size(), 3u);
  EXPECT_EQ(str(combos[0]), "os=linux ver=1");
  EXPECT_EQ(str(combos[1]), "os=linux ver=2");
  EXPECT_EQ(str(combos[2]), "os=mac ver=2");
}

TEST(MatrixLoad, DefaultsPhasesAndTheMeshtrainCommand) {
  const Suite s = load(R"(
suite: simplefsdp
defaults:
  model: tiny
  options: {steps: 10, seed: 3, checkpoint.enable: false}
  timeout: 120
cases:
  - name: 1d
    mesh: {dp_shard: 4}
    tags: [fsdp]
  - name: optional_checkpoint
    mesh: dp_shard=4
    options: {checkpoint.enable: true}
    phases:
      - {name: save}
      - {name: load, mesh: {dp_shard: 2, tp: 2}, options: {steps: 20}}
      - {name: generate, action: generate, mesh: {tp: 4}}
    checks:
      - keys_match: {phase: load, against: save}
      - loss_matches: {baseline: 1d, rtol: 1.0e-5}
)");
  EXPECT_EQ(s.name, "simplefsdp");
  ASSERT_EQ(s.cases.size(), 2u);
  const Case& a = s.cases[0];
  EXPECT_EQ(a.id, "simplefsdp/1d");
  EXPECT_EQ(a.ngpu, 4);
  ASSERT_EQ(a.phases.size(), 1u);
  EXPECT_EQ(a.phases[0].name, "train");
  EXPECT_EQ(a.phases[0].timeout_s, 120);
  const std::vector<std::string> want = {"{meshtrain}",
                                         "train",
                                         "--model",
                                         "tiny",
                                         "--mesh",
                                         "dp_shard=4",
                                         "--backend",
                                         "{backend}",
                                         "--dump-folder",
                                         "{phase_dir}",
                                         "--checkpoint.folder",
                                         "{case_dir}/checkpoint",
                                         "--steps",
                                         "10",
                                         "--seed",
                                         "3"};
  EXPECT_EQ(a.phases[0].argv, want);  // false flags are left out
  EXPECT_EQ(a.seed, "3");

  const Case& b = s.cases[1];
  ASSERT_EQ(b.phases.size(), 3u);
  EXPECT_EQ(b.ngpu, 4);
  EXPECT_EQ(b.phases[1].argv[5], "dp_shard=2,tp=2");
  EXPECT_EQ(b.phases[2].argv[1], "generate");
  EXPECT_EQ(b.phases[2].argv[5], "tp=4");
  const auto& load_argv = b.phases[1].argv;
  EXPECT_NE(std::find(load_argv.begin(), load_argv.end(), "--checkpoint.enable"), load_argv.end());
  EXPECT_EQ(load_argv[std::find(load_argv.begin(), load_argv.end(), "--steps") - load_argv.begin() + 1], "20");
  ASSERT_EQ(b.checks.size(), 2u);
  EXPECT_EQ(b.checks[1].params.baseline, "simplefsdp/1d");  // resolved to an id
  EXPECT_EQ(b.baselines(), std::vector<std::string>{"simplefsdp/1d"});
}

TEST(MatrixLoad, MatrixCasesGetTemplatedOrSuffixedIds) {
  const Suite s = load(R"(
suite: resharding
defaults: {model: tiny}
cases:
  - name: save[${{ matrix.save }}]-load[${{ matrix.load }}]
    matrix:
      save: [dp_shard=4, dp_replicate=4]
      load: [tp=4, "dp_shard=2,tp=2"]
      exclude: [{save: dp_replicate=4, load: tp=4}]
    phases:
      - {name: save, mesh: "${{ matrix.save }}"}
      - {name: load, mesh: "${{ matrix.load }}"}
  - name: ddp
    matrix: {ranks: ["2", "4"]}
    mesh: dp_replicate=${{ matrix.ranks }}
)");
  std::vector<std::string> ids;
  for (const auto& c : s.cases) ids.push_back(c.id);
  const std::vector<std::string> want = {
      "resharding/save[dp_shard=4]-load[tp=4]", "resharding/save[dp_shard=4]-load[dp_shard=2,tp=2]",
      "resharding/save[dp_replicate=4]-load[dp_shard=2,tp=2]", "resharding/ddp[2]", "resharding/ddp[4]"};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(s.cases[0].phases[1].argv[5], "tp=4");
  EXPECT_EQ(s.cases[4].ngpu, 4);
  EXPECT_EQ(s.cases[0].matrix_values.size(), 2u);
}

// A case's checks add to the defaults' (one differing from a default only in its tolerances
// takes that one's place), so a case cannot lose a default comparison without saying so.
TEST(MatrixLoad, CaseChecksAddToTheDefaultsUnlessTheCaseSaysOtherwise) {
  const Suite s = load(R"(
suite: s
defaults:
  model: tiny
  checks: [loss_finite, {loss_matches: {baseline: a}}, {loss_matches: {baseline: a, metric: grad_norm}}]
cases:
  - name: a
    default_checks: false
    checks: [loss_finite]
  - name: b
    checks: [replicas_equal, {loss_matches: {baseline: a, rtol: 1.0e-6}}]
  - name: c
  - name: d
    checks: [{loss_matches: {golden: d.txt}}]
)");
  auto kinds = [](const Case& c) {
    std::string out;
    for (const auto& k : c.checks)
      out += check_kind_name(k.kind) + (k.params.metric ? "/" + *k.params.metric : "") + " ";
    return out;
  };
  EXPECT_EQ(kinds(s.cases[0]), "loss_finite ");
  EXPECT_EQ(kinds(s.cases[1]), "loss_finite loss_matches/loss loss_matches/grad_norm replicas_equal ");
  EXPECT_EQ(s.cases[1].checks[1].params.rtol, 1.0e-6);  // the case's loss comparison replaced the default's
  EXPECT_EQ(kinds(s.cases[2]), "loss_finite loss_matches/loss loss_matches/grad_norm ");
  // Another reference is another judgement: it adds.
  EXPECT_EQ(kinds(s.cases[3]), "loss_finite loss_matches/loss loss_matches/grad_norm loss_matches/loss ");
  // A parameter holding bytes that are not UTF-8 reaches validation instead of crashing the
  // merge, which once serialized it (matrix_fuzz found it).
  EXPECT_NE(errors_of("suite: s\ndefaults: {model: tiny, checks: [{loss_matches: {baseline: a}}]}\n"
                      "cases:\n  - name: a\n    checks: [{loss_matches: {baseline: \"no\xff\xffne\"}}]\n")
                .find("unknown baseline"),
            std::string::npos);
  EXPECT_EQ(errors_of("suite: s\ncases:\n  - name: a\n    model: tiny\n    default_checks: maybe\n"),
            "m.yaml:5:21: default_checks must be true or false, got 'maybe'");
}

// {matrix_dir}: a script kept beside the matrix, wherever meshtest runs from.
// `meshtest show` prints Case::to_json(): every check with the parameters it will be judged
// by, the defaults of its kind's row included.
TEST(MatrixLoad, ShowPrintsEveryChecksDefaults) {
  const Suite s = load(R"(
suite: s
defaults: {model: tiny}
cases:
  - name: a
  - name: b
    checks: [{loss_matches: {baseline: a}}, {tensors_match: {baseline: a, rtol: 1.0e-4}}, {log_contains: {text: x}}]
)");
  const nlohmann::json checks = s.cases[1].to_json()["checks"];
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(checks[0]["kind"], "loss_matches");
  EXPECT_EQ(checks[0]["params"].dump(), R"({"atol":0.0,"baseline":"s/a","exact":false,"metric":"loss","rtol":1e-05})");
  EXPECT_EQ(checks[0]["where"], "m.yaml:7:14");
  // tensors_match's atol default is torch.allclose's; a declared rtol replaces the default.
  EXPECT_EQ(checks[1]["params"].dump(), R"({"atol":1e-08,"baseline":"s/a","prefix":"","rtol":0.0001})");
  // A parameter with no default (log_contains' rank: any rank) is shown only when declared.
  EXPECT_EQ(checks[2]["params"].dump(), R"({"text":"x"})");
}

TEST(MatrixLoad, MatrixDirIsTheMatrixFilesAbsoluteFolder) {
  const Suite s =
      load_suite_text("suite: s\ncases:\n  - name: a\n    command: [\"{matrix_dir}/run.sh\", \"{phase_dir}\"]\n",
                      "/opt/ci/matrices/m.yaml");
  EXPECT_EQ(s.cases[0].phases[0].argv[0], "/opt/ci/matrices/run.sh");
  EXPECT_EQ(s.cases[0].phases[0].argv[1], "{phase_dir}");  // a run-time placeholder, filled at launch
}

// An option's value is on the command line too: the same placeholders, the same errors.
TEST(MatrixLoad, OptionValuesTakeThePlaceholdersOfTheCommand) {
  const Suite s = load_suite_text(
      "suite: s\ncases:\n  - name: a\n    command: [t]\n"
      "    options: {assets: \"{matrix_dir}/assets\", out: \"{case_dir}/x\", n: \"{nproc}\"}\n",
      "/opt/ci/matrices/m.yaml");
  EXPECT_EQ(s.cases[0].phases[0].argv, (std::vector<std::string>{"t", "--assets", "/opt/ci/matrices/assets", "--out",
                                                                 "{case_dir}/x", "--n", "1"}));
  try {
    load_suite_text("suite: s\ncases:\n  - {name: a, command: [t], options: {x: \"{phase_dri}\"}}\n", "m.yaml");
    ADD_FAILURE() << "a misspelt placeholder in an option loaded";
  } catch (const MatrixError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "m.yaml:3:42: unknown placeholder {phase_dri} in command; did you mean {phase_dir}?"),
              std::string::npos)
        << e.what();
  }
}

TEST(MatrixLoad, ForeignCommandsTakeArgvAndNgpu) {
  const Suite s = load(R"(
suite: titan
cases:
  - name: llama3_debug
    command: [./run_train.sh, --nproc, "{nproc}", --out, "{phase_dir}"]
    ngpu: 8
    env: {NGPU: "8", CONFIG_FILE: "./llama3_debug.toml"}
    options: {training.steps: 10, compile: true}
    expect: {skip: no 8 GPUs here}
)");
  const Case& c = s.cases[0];
  EXPECT_EQ(c.ngpu, 8);
  const std::vector<std::string> want = {"./run_train.sh", "--nproc",          "8",  "--out",
                                         "{phase_dir}",    "--training.steps", "10", "--compile"};
  EXPECT_EQ(c.phases[0].argv, want);
  EXPECT_EQ(c.expect.kind, Expectation::kSkip);
  EXPECT_EQ(c.expect.reason, "no 8 GPUs here");
  ASSERT_EQ(c.phases[0].env.size(), 2u);
  EXPECT_EQ(c.phases[0].env[1].second, "./llama3_debug.toml");
  EXPECT_EQ(resolve_argv(c.phases[0].argv, {"gloo", "/o/c", "/o/c/train", {{"meshtrain", "/bin/mt"}}})[4],
            "/o/c/train");
}

TEST(MatrixValidate, UnknownKeyWithDidYouMeanAndPosition) {
  const std::string e = errors_of("suite: s\ncases:\n  - name: a\n    model: tiny\n    mesch: {tp: 2}\n");
  EXPECT_NE(e.find("m.yaml:5:5: unknown key 'mesch' in case; did you mean 'mesh'?"), std::string::npos) << e;
}

TEST(MatrixValidate, WrongTypes) {
  const std::string e = errors_of(R"(suite: s
cases:
  - name: a
    model: tiny
    ngpu: four
    tags: {x: 1}
    timeout: soon
)");
  EXPECT_NE(e.find("m.yaml:5:11: ngpu must be a decimal integer, got 'four'"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:6:11: tags must be a list of strings, got a mapping"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:7:14: timeout must be a number, got 'soon'"), std::string::npos) << e;
}

TEST(MatrixValidate, OctalLookingIntegersAndAmbiguousBooleansAreRefused) {
  const std::string e = errors_of(R"(suite: s
cases:
  - name: a
    model: tiny
    mesh: {dp_shard: 010}
    options: {loss-parallel: on}
)");
  EXPECT_NE(e.find("m.yaml:5:22: mesh size dp_shard must be a decimal integer, got '010'"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:6:30: option loss-parallel: 'on' is ambiguous in YAML"), std::string::npos) << e;
}

TEST(MatrixValidate, DuplicateKeysThatYamlCppAccepts) {
  const std::string e = errors_of("suite: s\ncases:\n  - name: a\n    model: tiny\n    model: debugmodel\n");
  EXPECT_NE(e.find("m.yaml:5:5: duplicate key 'model' in case (first at m.yaml:4:5)"), std::string::npos) << e;
}

TEST(MatrixValidate, DuplicateIds) {
  const std::string e = errors_of("suite: s\ndefaults: {model: tiny}\ncases:\n  - name: a\n  - name: b\n  - name: a\n");
  EXPECT_NE(e.find("m.yaml:6:5: duplicate case id 's/a' (first at m.yaml:4:5)"), std::string::npos) << e;
}

TEST(MatrixValidate, NamesCannotLeaveTheOutputFolder) {
  // <out>/<suite>/<case>: '/' in a case name becomes '_', so only '.' and '..' climb.
  for (const char* name : {".", ".."}) {
    const std::string e = errors_of(std::string("suite: s\ncases:\n  - name: '") + name + "'\n    command: [x]\n");
    EXPECT_NE(e.find("m.yaml:3:11: case name '" + std::string(name) + "' would name a folder above the case's"),
              std::string::npos)
        << name << ": " << e;
    const std::string suite = errors_of(std::string("suite: '") + name + "'\ncases:\n  - name: a\n    command: [x]\n");
    EXPECT_NE(suite.find("m.yaml:1:8: suite '" + std::string(name) + "' would name a folder above"), std::string::npos)
        << suite;
  }
  EXPECT_EQ(errors_of("suite: s.1\ncases:\n  - name: ../a/b.c/save[x=1]\n    command: [x]\n"), "");
}

TEST(MatrixValidate, MeshThatDoesNotFitTheModel) {
  const std::string e = errors_of("suite: s\ncases:\n  - name: a\n    model: tiny\n    mesh: {tp: 8}\n");
  EXPECT_NE(e.find("m.yaml:5:11: mesh tp=8 does not fit the model: tp=8: n_kv_heads 4 of model 'tiny' is not "
                   "divisible by tp 8"),
            std::string::npos)
      << e;
  const std::string unknown_dim = errors_of("suite: s\ncases:\n  - name: a\n    model: tiny\n    mesh: {ep: 2}\n");
  EXPECT_NE(unknown_dim.find("m.yaml:5:12: unknown key 'ep' in mesh"), std::string::npos) << unknown_dim;
}

// A mesh is fitted to the model in every phase that runs it, wherever it was written: in
// `defaults` too, and once where written however many phases inherit it.
TEST(MatrixValidate, MeshThatDoesNotFitTheModelWhereverItIsWritten) {
  // b inherits the defaults' mesh; a's own, read first, does not move it to a's place.
  const std::string from_defaults = errors_of(
      "suite: s\ndefaults: {model: tiny, mesh: {tp: 8}}\ncases:\n  - name: a\n    mesh: {tp: 2}\n  - name: b\n");
  EXPECT_EQ(from_defaults,
            "m.yaml:2:31: mesh tp=8 does not fit the model: tp=8: n_kv_heads 4 of model 'tiny' is not "
            "divisible by tp 8");
  const std::string inherited = errors_of(
      "suite: s\ncases:\n  - name: a\n    model: tiny\n    mesh: {tp: 8}\n"
      "    phases: [{name: save}, {name: load, mesh: {tp: 16}}, {name: gen}]\n");
  EXPECT_EQ(inherited,
            "m.yaml:5:11: mesh tp=8 does not fit the model: tp=8: n_kv_heads 4 of model 'tiny' is not "
            "divisible by tp 8\n"
            "m.yaml:6:47: mesh tp=16 does not fit the model: tp=16: n_heads 8 of model 'tiny' is not "
            "divisible by tp 16");
}

// The same for every key whose place an error names: a's own ngpu does not move the defaults' one
// that b inherits (a YAML::Node's = writes through to the copies b starts from).
TEST(MatrixValidate, AnInheritedValueIsBlamedWhereTheDefaultsWroteIt) {
  const std::string e = errors_of(
      "suite: s\ndefaults: {model: tiny, ngpu: 4}\ncases:\n  - name: a\n    ngpu: 2\n"
      "    mesh: {dp_shard: 2}\n  - name: b\n    mesh: {dp_shard: 2}\n");
  EXPECT_EQ(e.rfind("m.yaml:2:31: ngpu 4 disagrees with mesh", 0), 0u) << e;
}

TEST(MatrixValidate, UnknownBaselineCheckAndPhase) {
  const std::string e = errors_of(R"(suite: s
defaults: {model: tiny}
cases:
  - name: fsdp
  - name: tp
    checks:
      - loss_matches: {baseline: fsdp}
      - keys_mtach
      - tokens_match: {phase: lod, baseline: fsdp}
      - loss_matches: {rtol: big}
      - log_contains
      - tensors_match: {baseline: fsdp, atol: -1e-8}
      - log_contains: {text: ""}
)");
  const std::string b = errors_of(
      "suite: s\ndefaults: {model: tiny}\ncases:\n  - name: fsdp\n  - name: tp\n"
      "    checks: [{loss_matches: {baseline: fdsp}}]\n");
  EXPECT_NE(b.find("m.yaml:6:14: check loss_matches: unknown baseline 'fdsp' (no case of that name in suite s); "
                   "did you mean 'fsdp'?"),
            std::string::npos)
      << b;
  EXPECT_NE(e.find("m.yaml:8:9: unknown check 'keys_mtach'; did you mean 'keys_match'?"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:9:9: check tokens_match: phase 'lod' is not a phase of s/tp"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:10:30: loss_matches.rtol must be a number, got 'big'"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:11:9: check log_contains needs text"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:12:47: tensors_match.atol must be 0 or more, got '-1e-8'"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:13:30: log_contains.text is empty: say what the log must contain"), std::string::npos) << e;
}

// matrix_fuzz found it: std::stod threw out_of_range (an uncaught exception, not an error) on a
// tolerance beyond a double's range. Both ends are refused with the key and file:line:col.
TEST(MatrixValidate, ANumberBeyondADoublesRangeIsAnErrorNotACrash) {
  const std::string e = errors_of(
      "suite: s\ndefaults: {model: tiny}\ncases:\n  - name: a\n  - name: b\n"
      "    checks: [{loss_matches: {baseline: a, rtol: 5.0e-99999}}, {loss_matches: {baseline: a, atol: 1e999}}]\n");
  EXPECT_NE(e.find("m.yaml:6:49: loss_matches.rtol is out of the range of a double, got '5.0e-99999'"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("loss_matches.atol is out of the range of a double, got '1e999'"), std::string::npos) << e;
}

TEST(MatrixValidate, ExpectationsAndPlaceholders) {
  const std::string e = errors_of(R"(suite: s
defaults: {model: tiny}
cases:
  - name: a
    expect: {fial: oops}
  - name: b
    expect: {fail: loss_matches}
  - name: c
    command: [prog, "{phase_dri}"]
  - name: d
    mesh: "tp=${{ matrix.tp }}"
  - name: e
    model: tinny
)");
  EXPECT_NE(e.find("m.yaml:5:14: unknown key 'fial' in expect; did you mean 'fail'?"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:7:13: canary expects check 'loss_matches' to fail, but the case does not declare it"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("m.yaml:9:14: unknown placeholder {phase_dri} in command; did you mean {phase_dir}?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("m.yaml:11:11: '${{ matrix.tp }}' names no matrix axis (this case has no matrix)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("m.yaml:13:12: unknown model 'tinny'; did you mean 'tiny'?"), std::string::npos) << e;
}

TEST(MatrixValidate, SyntaxErrorsCarryTheirPosition) {
  try {
    load("suite: s\ncases:\n  - name: a\n   model: tiny\n");
    FAIL() << "loaded a malformed file";
  } catch (const MatrixError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("m.yaml:4:", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("YAML syntax"), std::string::npos) << e.what();
  }
}

TEST(MatrixValidate, DuplicateIdsAndBaselinesAcrossFiles) {
  std::vector<Suite> suites = {load_suite_text("suite: s\ndefaults: {model: tiny}\ncases: [{name: a}]\n", "a.yaml"),
                               load_suite_text("suite: s\ndefaults: {model: tiny}\ncases: [{name: a}]\n", "b.yaml"),
                               load_suite_text("suite: t\ndefaults: {model: tiny}\ncases:\n  - name: x\n    checks: "
                                               "[{loss_matches: {baseline: u/x}}]\n",
                                               "c.yaml")};
  try {
    validate_suites(suites);
    FAIL() << "accepted a duplicate id";
  } catch (const MatrixError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("b.yaml:3:9: duplicate case id 's/a' (first at a.yaml:3:9)"), std::string::npos) << what;
    EXPECT_NE(what.find("c.yaml:5:14: check loss_matches: unknown baseline 'u/x'"), std::string::npos) << what;
  }
}

// ---- the shipped matrices ---------------------------------------------------------

namespace {
std::vector<Suite> shipped() {
  std::vector<Suite> suites;
  for (const char* f : {"cpu", "simplefsdp", "integration", "resharding", "gpu2", "gpu1", "gpu_sim"})
    suites.push_back(load_suite_file(std::string(MESHTEST_SOURCE_DIR) + "/test_matrix/" + f + ".yaml"));
  validate_suites(suites);
  return suites;
}
bool has(const Suite& s, const std::string& name) {
  for (const auto& c : s.cases)
    if (c.name == name) return true;
  return false;
}
}  // namespace

// gpu_sim.yaml (docs/simulation.md): at least 30 multi-rank layouts simulated on one GPU, the
// seed's chain and its twins among them, each judged against a real (not simulated) one-rank run.
TEST(ShippedMatrices, GpuSimSimulatesEveryMultiRankLayoutOnOneGpu) {
  const auto suites = shipped();
  const Suite& sim = suites[6];
  int layouts = 0;
  for (const auto& c : sim.cases) {
    if (c.ngpu == 1) EXPECT_FALSE(c.simulated) << c.id << ": a one-rank baseline is a real run";
    if (c.ngpu > 1) EXPECT_TRUE(c.simulated) << c.id;
    layouts += c.simulated && c.ngpu > 1 && c.name.rfind("canary/", 0) != 0 && c.name.rfind("refused/", 0) != 0;
  }
  EXPECT_GE(layouts, 30);
  for (const char* f : {"reshard_chain", "seed/save[dp_shard=4]-load[dp_shard=2,tp=2]",
                        "seed/save[dp_shard=4]-load[tp=4]", "seed/save[dp_shard=4]-load[tp=4]-key_map",
                        "pp_interleaved_1f1b", "cp_ring", "moe_ep2_etp2", "float8_fsdp", "hsdp+tp"})
    EXPECT_TRUE(has(sim, f)) << "gpu_sim.yaml lacks " << f;
}

TEST(ShippedMatrices, LoadAndListEveryReferenceFlavor) {
  const auto suites = shipped();
  // SimpleFSDP's CI, first and last versions (reference/torchtitan-integration-tests.md §7).
  for (const char* f : {"1d",
                        "1d_autobucketing",
                        "1d_transformer_block_bucketing",
                        "1d_sac_op",
                        "1d_full_ac",
                        "2d",
                        "2d_asynctp",
                        "full_checkpoint",
                        "pp_dp_tp",
                        "ddp",
                        "hsdp",
                        "hsdp+tp",
                        "ddp+tp",
                        "hsdp+cp_with_dp_shard",
                        "fsdp+tp+cp",
                        "optional_checkpoint",
                        "fsdp+ep",
                        "fsdp+tp+ep",
                        "fsdp+tp+ep+etp",
                        "fsdp+cp",
                        "test_generate",
                        "fsdp_reshard_always",
                        "gradient_accumulation"})
    EXPECT_TRUE(has(suites[1], f)) << "simplefsdp.yaml lacks " << f;
  // torchtitan's classic list (§4.1), 39 active flavors and the two commented out.
  for (const char* f : {"default",
                        "1d_compile",
                        "1d_compile_sac_op",
                        "2d_eager",
                        "2d_compile",
                        "full_checkpoint",
                        "model_only_hf_checkpoint",
                        "last_save_model_only_fp32",
                        "last_save_model_only_bf16",
                        "pp_looped_zero_bubble",
                        "pp_zbv",
                        "pp_1f1b",
                        "pp_gpipe",
                        "pp_dp_1f1b",
                        "pp_dp_gpipe",
                        "pp_tp",
                        "pp_dp_tp",
                        "3d_compile",
                        "pp_looped_1f1b",
                        "pp_custom_csv",
                        "optimizer_foreach",
                        "ddp",
                        "hsdp",
                        "fsdp+flex_attn",
                        "fsdp+flex_attn+per_op_sac",
                        "cp_allgather",
                        "cp_alltoall",
                        "hsdp+tp",
                        "fsdp+cp",
                        "hsdp+cp_without_dp_shard",
                        "hsdp+cp_with_dp_shard",
                        "fsdp+tp+cp",
                        "cpu_offload+opt_in_bwd+TP+DP+CP",
                        "test_generate",
                        "fsdp_reshard_always",
                        "optional_checkpoint",
                        "float8_emulation",
                        "gradient_accumulation",
                        "validation_tp_cp_pp",
                        "2d_asynctp_compile",
                        "fsdp2_memory_estimation"})
    EXPECT_TRUE(has(suites[2], f)) << "integration.yaml lacks " << f;
  // Resharding: 6 layouts x (5 others + 2 and 8 ranks), the seed's cases, the fix.
  int reshards = 0;
  for (const auto& c : suites[3].cases) reshards += c.matrix_values.size() == 2;
  EXPECT_EQ(reshards, 6 * 7);
  for (const char* f : {"seed/save[dp_shard=4]-load[dp_shard=2,tp=2]", "seed/save[dp_shard=4]-load[tp=4]",
                        "seed/save[dp_shard=4]-load[tp=4]-key_map", "save[tp=4]-load[dp_shard=8]"})
    EXPECT_TRUE(has(suites[3], f)) << "resharding.yaml lacks " << f;
  // The CPU matrix stays within 4 ranks a case, but for four 3-D cases of 8 (hsdp+tp, fsdp+tp+cp,
  // validation_tp_cp_pp, opt_in_bwd+TP+DP+CP) and two uneven ones of 6 (uneven_hsdp, uneven_fsdp+tp).
  int wide = 0;
  for (const auto& c : suites[0].cases) {
    EXPECT_LE(c.ngpu, 8) << c.id;
    wide += c.ngpu > 4;
  }
  EXPECT_EQ(wide, 6);
  // The one-GPU matrix: every case fits one GPU, and each canary names the check it must fail.
  for (const auto& c : suites[5].cases) {
    EXPECT_EQ(c.ngpu, 1) << c.id;
    if (c.name.rfind("canary/", 0) == 0) EXPECT_EQ(c.expect.kind, Expectation::kFail) << c.id;
  }
}

TEST(Matrix, OutputsSayWhereAForeignTrainersNumbersAreAndMergeIntoPhases) {
  const Suite s = load(R"(suite: s
defaults:
  command: [python3, train.py]
  outputs: {metrics: {from: torchtitan-log, rank: 1}}
cases:
  - name: a
    ngpu: 2
    phases:
      - name: save
        outputs: {checkpoint: {path: "{case_dir}/checkpoint", step: 5, model_prefix: model., rename: {'\.original$': ''}}}
      - name: tb
        outputs: {metrics: {from: tensorboard, tags: {loss: my/loss}}}
)");
  const auto& save = s.cases[0].phases[0];
  EXPECT_EQ(save.outputs.metrics.kind, MetricsSource::kTorchtitanLog);
  EXPECT_EQ(save.outputs.metrics.rank, 1);
  ASSERT_TRUE(save.outputs.checkpoint);
  EXPECT_EQ(save.outputs.checkpoint->path, "{case_dir}/checkpoint");
  EXPECT_EQ(save.outputs.checkpoint->step, 5);
  EXPECT_EQ(save.outputs.checkpoint->model_prefix, "model.");
  ASSERT_EQ(save.outputs.checkpoint->rename.size(), 1u);
  const auto& tb = s.cases[0].phases[1];
  EXPECT_EQ(tb.outputs.metrics.kind, MetricsSource::kTensorboard);
  EXPECT_EQ(tb.outputs.metrics.path, "tb");
  EXPECT_EQ(tb.outputs.metrics.tags.at("loss"), "my/loss");
  EXPECT_FALSE(tb.outputs.checkpoint);
  EXPECT_EQ(resolve_path("tb", {"", "/o/s/a", "/o/s/a/tb", {}}), "/o/s/a/tb/tb");
  EXPECT_EQ(resolve_path("{case_dir}/checkpoint", {"", "/o/s/a", "/o/s/a/save", {}}), "/o/s/a/checkpoint");
  // meshtrain's cases keep its contract files.
  const Suite m = load("suite: s\ncases:\n  - {name: a, model: tiny}\n");
  EXPECT_EQ(m.cases[0].phases[0].outputs.metrics.kind, MetricsSource::kJsonl);
  EXPECT_FALSE(m.cases[0].phases[0].outputs.checkpoint);
}

TEST(Matrix, BadOutputsAreRefusedWithTheirPlace) {
  const std::string e = errors_of(R"(suite: s
defaults: {command: [x]}
cases:
  - name: a
    outputs: {metrics: {from: torchtitan_log}}
  - name: b
    outputs: {metrics: {from: log-pattern, pattern: 'loss=(?P<loss>\S+)'}}
  - name: c
    outputs: {metrics: {from: tensorboard, rank: 2}, checkpoint: {step: 3}}
  - name: d
    outputs: {checkpoint: {path: c, rename: {'([': x}}}
  - name: e
    outputs: {metric: {}}
  - name: f
    outputs: {metrics: {from: tensorboard, path: "{case_dri}/tb"}}
)");
  EXPECT_NE(e.find("m.yaml:5:31: outputs.metrics.from 'torchtitan_log' is not one of metrics-jsonl, torchtitan-log, "
                   "log-pattern, tensorboard, hf-trainer-state, megatron; did you mean 'torchtitan-log'?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("m.yaml:7:53: log pattern 'loss=(?P<loss>\\S+)' has no (?P<step>...) group"), std::string::npos)
      << e;
  EXPECT_NE(e.find("m.yaml:9:50: outputs.metrics.rank applies to log sources (torchtitan-log, log-pattern, megatron)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("outputs.checkpoint needs a path (a step folder or a folder of step-<N>)"), std::string::npos) << e;
  EXPECT_NE(e.find("outputs.checkpoint.rename: '([' is not a regular expression"), std::string::npos) << e;
  EXPECT_NE(e.find("m.yaml:13:15: unknown key 'metric' in outputs; did you mean 'metrics'?"), std::string::npos) << e;
  EXPECT_NE(
      e.find(
          "m.yaml:15:50: unknown placeholder {case_dri} in outputs.metrics.path; outputs paths take {case_dir} and {phase_dir}; "
          "did you mean {case_dir}?"),
      std::string::npos)
      << e;
}

// env values take the command's placeholders (issue 47): load-time ones filled at load, an
// unknown one an error with file:line:col, run-time ones left for the launch.
TEST(MatrixEnv, EnvValuesTakeTheCommandsPlaceholders) {
  const Suite s = load(
      "suite: s\ncases:\n  - {name: c, command: [x], env: {PYTHONPATH: \"{matrix_dir}/src\", "
      "OUT: \"{case_dir}/o\", N: \"{nproc}\"}}\n");
  const auto& env = s.cases.at(0).phases.at(0).env;
  const std::string dir = std::filesystem::absolute("m.yaml").parent_path().string();
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0].second, dir + "/src");
  EXPECT_EQ(env[1].second, "{case_dir}/o");
  EXPECT_EQ(env[2].second, "1");
  const std::string e =
      errors_of("suite: s\ncases:\n  - name: c\n    command: [x]\n    env: {A: \"{matrx_dir}/src\"}\n");
  EXPECT_NE(e.find("m.yaml:5:14: unknown placeholder {matrx_dir} in env A; did you mean {matrix_dir}?"),
            std::string::npos)
      << e;
}
