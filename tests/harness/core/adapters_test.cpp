// The adapter door (core/adapters.h): the registry, the layout as data, and how the matrix
// loader picks a case's adapter. meshtrain is registered from its flavor table
// (meshtrain_adapter_fixture.cpp); a second adapter is registered here to show the slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "core/adapters.h"
#include "core/matrix.h"
#include "core/plan.h"

using namespace meshtest;

namespace {

std::string error_lines_of(const std::string& yaml) {
  try {
    load_suite_text(yaml, "m.yaml");
  } catch (const MatrixError& e) {
    std::string all;
    for (const auto& line : e.errors()) all += line + "\n";
    return all;
  }
  return "";
}

// A trainer that takes `--layout` as "rows=R,cols=C" and writes its loss to loss.jsonl.
class GridAdapter : public TrainerAdapter {
 public:
  std::string name() const override { return "grid"; }
  std::vector<std::string> default_command() const override { return {"{grid}", "--layout", "{mesh}"}; }
  std::vector<ReservedOption> reserved_options() const override { return {{"layout", "mesh"}}; }
  Outputs default_outputs(const Layout&) const override {
    Outputs o;
    o.metrics.path = "loss.jsonl";
    return o;
  }
  bool needs_model() const override { return false; }
  std::optional<std::vector<std::string>> models() const override { return std::nullopt; }
  std::vector<std::string> layout_axes() const override { return {"rows", "cols"}; }
  std::optional<Layout> default_layout(int nproc) const override { return Layout{{{"rows", nproc}}}; }
  std::string layout_problem(const std::string&, const Layout&,
                             const std::function<std::string(const std::string&)>&) const override {
    return "";
  }
  std::optional<double> steps(const std::vector<std::string>&) const override { return 100; }
  std::string how_to_report(const std::string&) const override { return ""; }
  std::vector<std::pair<std::string, std::string>> placeholders() const override { return {{"grid", "/opt/grid"}}; }
};

const bool grid_registered = [] {
  trainer_adapters().add(std::make_unique<GridAdapter>());
  return true;
}();

}  // namespace

TEST(Layout, ParsesNamesAndSizesInTheOrderWritten) {
  const Layout l = parse_layout("tp=2,dp_shard=3");
  ASSERT_EQ(l.axes.size(), 2u);
  EXPECT_EQ(l.axes[0].first, "tp");
  EXPECT_EQ(l.ranks(), 6);
  EXPECT_EQ(l.size("dp_shard"), 3);
  EXPECT_EQ(l.size("cp"), 1);
  EXPECT_EQ(l.to_compact_string(), "tp=2,dp_shard=3");
  EXPECT_EQ(parse_layout("a=1").to_compact_string(), "a=1");
}

TEST(Layout, RefusesWhatIsNotNameEqualsSize) {
  EXPECT_THROW(parse_layout("tp"), std::invalid_argument);
  EXPECT_THROW(parse_layout("tp=x"), std::invalid_argument);
  EXPECT_THROW(parse_layout("tp=0"), std::invalid_argument);
  EXPECT_THROW(parse_layout("tp=2,tp=2"), std::invalid_argument);
}

TEST(AdapterRegistry, HoldsCommandMeshtrainAndAnAddedOne) {
  const auto names = trainer_adapters().names();
  for (const char* want : {"command", "meshtrain", "grid"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(trainer_adapters().default_name(), "meshtrain");
  EXPECT_EQ(trainer_adapters().find("nope"), nullptr);
}

TEST(AdapterRegistry, ACaseWithoutCommandRunsTheDefaultOneWithCommandTheCommandAdapter) {
  const Suite s = load_suite_text(R"(
suite: s
cases:
  - {name: a, model: tiny, mesh: {tp: 2, dp_shard: 2}}
  - {name: b, command: [./train.sh, "{mesh}"], mesh: {x: 2, y: 3}}
)",
                                  "m.yaml");
  EXPECT_EQ(s.cases[0].adapter, "meshtrain");
  EXPECT_EQ(s.cases[0].phases[0].argv[5], "dp_shard=2,tp=2");  // the adapter's axis order
  EXPECT_EQ(s.cases[1].adapter, "command");
  EXPECT_EQ(s.cases[1].ngpu, 6);
  EXPECT_EQ(s.cases[1].phases[0].argv[1], "x=2,y=3");  // any axis names, as written
}

TEST(AdapterRegistry, ACaseNamesItsAdapterAndGetsItsCommandOutputsAndPlaceholders) {
  const Suite s = load_suite_text("suite: s\ncases:\n  - {name: g, adapter: grid, ngpu: 4}\n", "m.yaml");
  const Case& c = s.cases[0];
  EXPECT_EQ(c.adapter, "grid");
  EXPECT_EQ(c.phases[0].argv, (std::vector<std::string>{"{grid}", "--layout", "rows=4"}));
  EXPECT_EQ(c.phases[0].outputs.metrics.path, "loss.jsonl");
  const auto argv = resolve_argv(c.phases[0].argv, {"gloo", "/o/c", "/o/c/train", trainer_adapters().placeholders()});
  EXPECT_EQ(argv[0], "/opt/grid");
  EXPECT_GT(estimate_seconds(c), 2.0 + 0.05 * 10 * 4);  // the adapter's 100 steps, not the default 10
}

TEST(AdapterRegistry, TheAdaptersAxesAndReservedFlagsAreEnforcedWhereWritten) {
  const std::string axes = error_lines_of("suite: s\ncases:\n  - {name: g, adapter: grid, mesh: {rows: 2, tp: 2}}\n");
  EXPECT_NE(axes.find("m.yaml:3:46: unknown key 'tp' in mesh"), std::string::npos) << axes;
  const std::string text = error_lines_of("suite: s\ncases:\n  - {name: g, adapter: grid, mesh: \"rows=2,tp=2\"}\n");
  EXPECT_NE(text.find("unknown dimension 'tp' (known: rows, cols)"), std::string::npos) << text;
  const std::string reserved = error_lines_of("suite: s\ncases:\n  - {name: g, adapter: grid, options: {layout: x}}\n");
  EXPECT_NE(reserved.find("option 'layout' is set by meshtest for grid; use the case's 'mesh' key"), std::string::npos)
      << reserved;
  // The same flag is the user's own under another adapter.
  EXPECT_EQ(error_lines_of("suite: s\ncases:\n  - {name: c, command: [t], options: {layout: x}}\n"), "");
}

TEST(AdapterRegistry, MeshtrainSaysHowToAskForAValidationLoss) {
  const TrainerAdapter* meshtrain = trainer_adapters().find("meshtrain");
  ASSERT_NE(meshtrain, nullptr);
  EXPECT_EQ(meshtrain->how_to_report("validation_loss"), "--validation.freq");
  EXPECT_EQ(meshtrain->how_to_report("loss"), "");
  EXPECT_EQ(trainer_adapters().find("command")->how_to_report("validation_loss"), "");
}

// A meshtrain path the user named and got wrong is named as theirs to correct, not answered with
// advice to name one.
TEST(AdapterRegistry, AWrongMeshtrainPathIsNamedAsTheOneToCorrect) {
  const TrainerAdapter* meshtrain = trainer_adapters().find("meshtrain");
  ASSERT_NE(meshtrain, nullptr);
  const char* before = std::getenv("MESHTEST_MESHTRAIN");
  const std::string saved = before ? before : "";
  ::setenv("MESHTEST_MESHTRAIN", "/no/such/meshtrain", 1);
  const std::string problem = meshtrain->program_problem();
  if (before)
    ::setenv("MESHTEST_MESHTRAIN", saved.c_str(), 1);
  else
    ::unsetenv("MESHTEST_MESHTRAIN");
  EXPECT_NE(problem.find("not at /no/such/meshtrain (named by --meshtrain or $MESHTEST_MESHTRAIN): correct that path"),
            std::string::npos)
      << problem;
  EXPECT_EQ(problem.find("set $MESHTEST_MESHTRAIN"), std::string::npos) << problem;
}

TEST(AdapterRegistry, ABadAxisInDefaultsIsReportedOnceNotPerCase) {
  const std::string e =
      error_lines_of("suite: s\ndefaults: {adapter: grid, mesh: {tp: 2}}\ncases:\n  - {name: a}\n  - {name: b}\n");
  EXPECT_NE(e.find("m.yaml:2:34: unknown key 'tp' in mesh"), std::string::npos) << e;
  EXPECT_EQ(e.find("unknown key 'tp'"), e.rfind("unknown key 'tp'")) << e;
}

TEST(AdapterRegistry, AnUnknownAdapterIsAnErrorWithASuggestion) {
  const std::string e = error_lines_of("suite: s\ncases:\n  - {name: a, adapter: gird}\n");
  EXPECT_NE(e.find("m.yaml:3:24: unknown adapter 'gird'; did you mean 'grid'?"), std::string::npos) << e;
}

TEST(AdapterRegistry, TheCommandAdapterNeedsACommand) {
  const std::string e = error_lines_of("suite: s\ncases:\n  - {name: a, adapter: command}\n");
  EXPECT_NE(e.find("adapter 'command' has no default command; add command:"), std::string::npos) << e;
}
