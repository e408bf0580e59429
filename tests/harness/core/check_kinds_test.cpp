// The one table of check kinds (core/check_kinds.h): every kind has its name, its
// parameters and a function that runs it. A kind missing from either switch does not
// compile (-Werror=switch); these tests say what each promises at run time.
#include <set>

#include "harness/judge/checks_fixture.h"
#include "core/check_kinds.h"

namespace fs = std::filesystem;
using namespace meshtest;

TEST(CheckKinds, EveryKindHasOneNameAndItsParameters) {
  std::set<std::string> names;
  for (CheckKind kind : kAllCheckKinds) {
    const std::string name = check_kind_name(kind);
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    const CheckSignature& sig = check_signature(kind);
    EXPECT_EQ(sig.kind, kind) << name;
    EXPECT_EQ(sig.name, name);
    EXPECT_EQ(check_kind_named(name), kind) << name;
    std::set<std::string> params;
    for (const auto& p : sig.params) {
      EXPECT_TRUE(params.insert(p.name).second) << name << "." << p.name << " twice";
      // A default has its parameter's type, and is what a check declared without it holds.
      if (p.by_default) EXPECT_EQ(static_cast<size_t>(p.type()), p.by_default->index()) << name << "." << p.name;
      EXPECT_EQ(p.value_in(sig.defaults()), p.by_default) << name << "." << p.name;
    }
    // Every check but `exit` and `drift` (every phase against the history) looks at one
    // phase, which the matrix may name.
    EXPECT_EQ(params.count("phase"), kind == CheckKind::kExit || kind == CheckKind::kDrift ? 0u : 1u) << name;
    for (const auto& one : sig.needs_one_of)
      EXPECT_TRUE(params.count(one)) << name << " needs " << one << ", not a parameter";
  }
  EXPECT_EQ(check_kind_names().size(), std::size(kAllCheckKinds));
  EXPECT_EQ(check_kind_named("loss_match"), std::nullopt);
  EXPECT_TRUE(is_message_check(CheckKind::kLogContains));
  EXPECT_TRUE(is_message_check(CheckKind::kErrorMatches));
  EXPECT_FALSE(is_message_check(CheckKind::kExit));
}

// The tolerances' defaults, as docs/checks.md lists them: the judge reads these, and repeats none.
TEST(CheckKinds, TheTolerancesDefaults) {
  auto defaults = [](CheckKind kind) { return check_signature(kind).defaults(); };
  for (CheckKind kind : {CheckKind::kLossMatches, CheckKind::kResumeMatches, CheckKind::kParamsMatch}) {
    EXPECT_EQ(defaults(kind).rtol, 1e-5) << check_kind_name(kind);
    EXPECT_EQ(defaults(kind).atol, 0.0) << check_kind_name(kind);
  }
  EXPECT_EQ(defaults(CheckKind::kTensorsMatch).rtol, 1e-5);
  EXPECT_EQ(defaults(CheckKind::kTensorsMatch).atol, 1e-8);
  EXPECT_EQ(defaults(CheckKind::kLossMatches).exact, false);
  EXPECT_EQ(defaults(CheckKind::kResumeMatches).exact, false);
  EXPECT_EQ(defaults(CheckKind::kLossMatches).metric, "loss");
  EXPECT_EQ(defaults(CheckKind::kLossDecreases).factor, 0.9);
  EXPECT_EQ(defaults(CheckKind::kKeysMatch).shapes, true);
  EXPECT_EQ(defaults(CheckKind::kKeysMatch).prefix, "");
  EXPECT_EQ(defaults(CheckKind::kTensorsMatch).prefix, "");
  EXPECT_EQ(defaults(CheckKind::kLogContains).rank, std::nullopt);   // any rank
  EXPECT_EQ(defaults(CheckKind::kLossMatches).phase, std::nullopt);  // the case's last phase
  EXPECT_EQ(defaults(CheckKind::kDrift).window, 8);
  EXPECT_EQ(defaults(CheckKind::kDrift).min_runs, 3);
  EXPECT_EQ(defaults(CheckKind::kDrift).k, 4.0);
  EXPECT_EQ(defaults(CheckKind::kDrift).rel_floor, 1e-6);
}

// Every kind declared on one case over a phase that left nothing: each runs its own function
// and says what it could not find; none is "malformed output" (an unknown kind's fate).
// `drift`, in a run without a history, says it could not look and passes.
TEST_F(Checks, EveryKindRunsItsOwnFunction) {
  std::string checks;
  for (CheckKind kind : kAllCheckKinds) {
    const CheckSignature& sig = check_signature(kind);
    std::string params;
    if (!sig.needs_one_of.empty()) params = sig.needs_one_of.front() == "text" ? "{text: x}" : "{baseline: a}";
    for (const auto& one : sig.needs_one_of)
      if (one == "baseline") params = "{baseline: a}";
    checks += (checks.empty() ? "" : ", ") + (params.empty() ? sig.name : "{" + sig.name + ": " + params + "}");
  }
  load("  - name: a\n  - name: b\n    checks: [" + checks + "]\n");
  run(1, "exit");
  const auto& results = outcomes_[1].checks;
  ASSERT_EQ(results.size(), std::size(kAllCheckKinds));  // `exit` once, first, declared or not
  EXPECT_EQ(results[0].kind, "exit");
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].kind, check_kind_name(kAllCheckKinds[i])) << i;
    if (kAllCheckKinds[i] == CheckKind::kDrift) {
      EXPECT_FALSE(results[i].judged);
      EXPECT_EQ(results[i].message, "not judged: this run has no history (--history or MESHTEST_HISTORY)");
    } else {
      EXPECT_FALSE(results[i].passed) << results[i].kind;
    }
    EXPECT_EQ(results[i].message.rfind("malformed output", 0), std::string::npos)
        << results[i].kind << ": " << results[i].message;
  }
}
