#include "core/check_kinds.h"

namespace meshtest {

namespace {
// Where to look: `phase` is the phase under test (default: the last one); `against`
// names another phase of the same case; `baseline` another case (same suite, or a
// full id), whose phase is `baseline_phase` (default: its last one).
const CheckParam kPhase{"phase", &CheckParams::phase};
const CheckParam kAgainst{"against", &CheckParams::against};
const CheckParam kBaseline{"baseline", &CheckParams::baseline};
const CheckParam kBaselinePhase{"baseline_phase", &CheckParams::baseline_phase};
// A file of reference values from a vouched-for run, relative to the matrix file's folder.
const CheckParam kGolden{"golden", &CheckParams::golden};
constexpr bool kStrictness = true;
const CheckParam kRtol{"rtol", &CheckParams::rtol, 1e-5, kStrictness};
const CheckParam kAtol{"atol", &CheckParams::atol, 0.0, kStrictness};
const CheckParam kExact{"exact", &CheckParams::exact, false, kStrictness};
// A tolerance by name (CurveRule): no default, and exclusive with rtol, atol and exact (the
// loader refuses them together).
const CheckParam kRule = [] {
  CheckParam rule{"rule", &CheckParams::rule};
  rule.strictness = true;
  return rule;
}();
const CheckParam kPrefix{"prefix", &CheckParams::prefix, ""};  // every key
const CheckParam kMetric{"metric", &CheckParams::metric, "loss"};
const CheckParam kText{"text", &CheckParams::text};

// What `kind` reads and its parameters, one row each. A switch with no default, built with
// -Werror=switch: a kind added to MESHTEST_CHECK_KINDS without its row here does not compile.
// Laid out by hand, as a table: clang-format would put a row's parameters one per line.
// clang-format off
CheckSignature signature_of(CheckKind kind) {
  const std::string name = check_kind_name(kind);
  switch (kind) {
    case CheckKind::kExit:
      return {kind, name, CheckInput::kRun, {}, {}};
    case CheckKind::kLossFinite:
      return {kind, name, CheckInput::kMetrics, {kPhase}, {}};
    case CheckKind::kLossDecreases:
      return {kind, name, CheckInput::kMetrics, {kPhase, {"factor", &CheckParams::factor, 0.9, kStrictness}}, {}};
    case CheckKind::kLossMatches:
      return {kind, name, CheckInput::kMetrics,
              {kPhase, kAgainst, kBaseline, kBaselinePhase, kGolden, kRtol, kAtol, kExact, kMetric, kRule},
              {"baseline", "against", "golden"}};
    case CheckKind::kKeysMatch:
      return {kind, name, CheckInput::kCheckpoint,
              {kPhase, kAgainst, kBaseline, kBaselinePhase, {"shapes", &CheckParams::shapes, true}, kPrefix},
              {"against", "baseline"}};
    case CheckKind::kTokensMatch:
      return {kind, name, CheckInput::kTokens, {kPhase, kAgainst, kBaseline, kBaselinePhase}, {"against", "baseline"}};
    case CheckKind::kResumeMatches:
      return {kind, name, CheckInput::kMetrics, {kPhase, kAgainst, kBaseline, kBaselinePhase, kRtol, kAtol, kExact, kMetric}, {"against", "baseline"}};
    case CheckKind::kReplicasEqual:
      return {kind, name, CheckInput::kContractFiles, {kPhase}, {}};
    case CheckKind::kParamsMatch:
      return {kind, name, CheckInput::kCheckpoint, {kPhase, kAgainst, kBaseline, kBaselinePhase, kGolden, kRtol, kAtol},
              {"against", "baseline", "golden"}};
    case CheckKind::kTensorsMatch:  // torch.allclose's defaults: rtol 1e-5, atol 1e-8
      return {kind, name, CheckInput::kCheckpoint,
              {kPhase, kAgainst, kBaseline, kBaselinePhase, kRtol, {"atol", &CheckParams::atol, 1e-8, kStrictness},
               kPrefix},
              {"against", "baseline"}};
    case CheckKind::kSavedOnce:  // rank<R>.json where the phase left them, else outputs.checkpoint's chunks
      return {kind, name, CheckInput::kCheckpoint, {kPhase}, {}};
    case CheckKind::kLogContains:
      return {kind, name, CheckInput::kRun, {kPhase, kText, {"rank", &CheckParams::rank}}, {"text"}};
    case CheckKind::kErrorMatches:
      return {kind, name, CheckInput::kRun, {kPhase, kText}, {"text"}};
    case CheckKind::kDrift:
      return {kind, name, CheckInput::kHistory,
              {{"window", &CheckParams::window, 8LL}, {"min_runs", &CheckParams::min_runs, 3LL},
               {"k", &CheckParams::k, 4.0, kStrictness}, {"rel_floor", &CheckParams::rel_floor, 1e-6, kStrictness}},
              {}};
  }
  return {kind, name, CheckInput::kRun, {}, {}};  // not reached: every kind has a case above
}
// clang-format on

// Every kind's signature, in the list's order.
const std::vector<CheckSignature>& signatures() {
  static const std::vector<CheckSignature> all = [] {
    std::vector<CheckSignature> out;
    for (CheckKind kind : kAllCheckKinds) out.push_back(signature_of(kind));
    return out;
  }();
  return all;
}
}  // namespace

const char* check_kind_name(CheckKind kind) {
  static const char* const kNames[] = {
#define MESHTEST_CHECK_KIND_NAME(kind, name) name,
      MESHTEST_CHECK_KINDS(MESHTEST_CHECK_KIND_NAME)
#undef MESHTEST_CHECK_KIND_NAME
  };
  return kNames[static_cast<int>(kind)];
}

std::optional<CheckKind> check_kind_named(const std::string& name) {
  for (CheckKind kind : kAllCheckKinds)
    if (name == check_kind_name(kind)) return kind;
  return std::nullopt;
}

std::vector<std::string> check_kind_names() {
  std::vector<std::string> names;
  for (CheckKind kind : kAllCheckKinds) names.push_back(check_kind_name(kind));
  return names;
}

const char* curve_rule_name(CurveRule rule) {
  switch (rule) {
    case CurveRule::kMegatronDeterministic: return "megatron-deterministic";
    case CurveRule::kMegatronApproximate: return "megatron-approximate";
  }
  return "";  // not reached
}

std::optional<CurveRule> curve_rule_named(const std::string& name) {
  for (CurveRule rule : {CurveRule::kMegatronDeterministic, CurveRule::kMegatronApproximate})
    if (name == curve_rule_name(rule)) return rule;
  return std::nullopt;
}

std::vector<std::string> curve_rule_names() {
  return {curve_rule_name(CurveRule::kMegatronDeterministic), curve_rule_name(CurveRule::kMegatronApproximate)};
}

bool is_message_check(CheckKind kind) { return kind == CheckKind::kLogContains || kind == CheckKind::kErrorMatches; }

std::optional<ParamValue> CheckParam::value_in(const CheckParams& params) const {
  return std::visit(
      [&](auto member) -> std::optional<ParamValue> {
        const auto& value = params.*member;
        if (!value) return std::nullopt;
        return ParamValue(*value);
      },
      field);
}

void CheckParam::set(CheckParams& params, const ParamValue& value) const {
  std::visit(
      [&](auto member) {
        using T = typename std::decay_t<decltype(params.*member)>::value_type;
        params.*member = std::get<T>(value);
      },
      field);
}

const CheckParam* CheckSignature::param(const std::string& wanted) const {
  for (const auto& p : params)
    if (p.name == wanted) return &p;
  return nullptr;
}

CheckParams CheckSignature::defaults() const {
  CheckParams out;
  for (const auto& p : params)
    if (p.by_default) p.set(out, *p.by_default);
  return out;
}

const CheckSignature& check_signature(CheckKind kind) { return signatures()[static_cast<size_t>(kind)]; }

}  // namespace meshtest
