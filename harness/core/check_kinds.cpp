#include "core/check_kinds.h"

namespace meshtest {

namespace {
// Where to look: `phase` is the phase under test (default: the last one); `against`
// names another phase of the same case; `baseline` another case (same suite, or a
// full id), whose phase is `baseline_phase` (default: its last one).
const CheckParam kPhase{"phase", ParamType::kString};
const CheckParam kAgainst{"against", ParamType::kString};
const CheckParam kBaseline{"baseline", ParamType::kString};
const CheckParam kBaselinePhase{"baseline_phase", ParamType::kString};
const CheckParam kRtol{"rtol", ParamType::kNumber};
const CheckParam kAtol{"atol", ParamType::kNumber};
const CheckParam kExact{"exact", ParamType::kBool};
// A file of reference values from a vouched-for run, relative to the matrix file's folder.
const CheckParam kGolden{"golden", ParamType::kString};

// What `kind` reads and its parameters, one row each. A switch with no default, built with
// -Werror=switch: a kind added to MESHTEST_CHECK_KINDS without its row here does not compile.
CheckSignature signature_of(CheckKind kind) {
  const std::string name = check_kind_name(kind);
  switch (kind) {
    case CheckKind::kExit:
      return {kind, name, CheckInput::kRun, {}, {}};
    case CheckKind::kLossFinite:
      return {kind, name, CheckInput::kMetrics, {kPhase}, {}};
    case CheckKind::kLossDecreases:
      return {kind, name, CheckInput::kMetrics, {kPhase, {"factor", ParamType::kNumber}}, {}};
    case CheckKind::kLossMatches:
      return {kind, name, CheckInput::kMetrics,
              {kPhase, kAgainst, kBaseline, kBaselinePhase, kGolden, kRtol, kAtol, kExact, {"metric", ParamType::kString}},
              {"baseline", "against", "golden"}};
    case CheckKind::kKeysMatch:
      return {kind, name, CheckInput::kCheckpoint,
              {kPhase, kAgainst, kBaseline, kBaselinePhase, {"shapes", ParamType::kBool}, {"prefix", ParamType::kString}},
              {"against", "baseline"}};
    case CheckKind::kTokensMatch:
      return {kind, name, CheckInput::kTokens, {kPhase, kAgainst, kBaseline, kBaselinePhase}, {"against", "baseline"}};
    case CheckKind::kResumeMatches:
      return {kind, name, CheckInput::kMetrics, {kPhase, kAgainst, kBaseline, kBaselinePhase, kRtol, kAtol, kExact}, {"against", "baseline"}};
    case CheckKind::kReplicasEqual:
      return {kind, name, CheckInput::kContractFiles, {kPhase}, {}};
    case CheckKind::kParamsMatch:
      return {kind, name, CheckInput::kCheckpoint, {kPhase, kAgainst, kBaseline, kBaselinePhase, kGolden, kRtol, kAtol},
              {"against", "baseline", "golden"}};
    case CheckKind::kTensorsMatch:
      return {kind, name, CheckInput::kCheckpoint, {kPhase, kAgainst, kBaseline, kBaselinePhase, kRtol, kAtol, {"prefix", ParamType::kString}},
              {"against", "baseline"}};
    case CheckKind::kSavedOnce:  // rank<R>.json where the phase left them, else outputs.checkpoint's chunks
      return {kind, name, CheckInput::kCheckpoint, {kPhase}, {}};
    case CheckKind::kLogContains:
      return {kind, name, CheckInput::kRun, {kPhase, {"text", ParamType::kString}, {"rank", ParamType::kInt}}, {"text"}};
    case CheckKind::kErrorMatches:
      return {kind, name, CheckInput::kRun, {kPhase, {"text", ParamType::kString}}, {"text"}};
  }
  return {kind, name, CheckInput::kRun, {}, {}};  // not reached: every kind has a case above
}

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

bool is_message_check(CheckKind kind) { return kind == CheckKind::kLogContains || kind == CheckKind::kErrorMatches; }

bool is_message_check(const std::string& name) {
  const auto kind = check_kind_named(name);
  return kind && is_message_check(*kind);
}

bool CheckSignature::takes_baseline() const {
  for (const auto& p : params)
    if (p.name == "baseline") return true;
  return false;
}

const CheckSignature& check_signature(CheckKind kind) { return signatures()[static_cast<size_t>(kind)]; }

const CheckSignature* find_check_kind(const std::string& name) {
  const auto kind = check_kind_named(name);
  return kind ? &check_signature(*kind) : nullptr;
}

}  // namespace meshtest
