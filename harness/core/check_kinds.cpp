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
}  // namespace

bool CheckKind::takes_baseline() const {
  for (const auto& p : params)
    if (p.name == "baseline") return true;
  return false;
}

const std::vector<CheckKind>& check_kinds() {
  static const std::vector<CheckKind> kinds = {
      {"exit", {}},
      {"loss_finite", {kPhase}},
      {"loss_decreases", {kPhase, {"factor", ParamType::kNumber}}},
      {"loss_matches",
       {kPhase, kAgainst, kBaseline, kBaselinePhase, kGolden, kRtol, kAtol, kExact,
        {"metric", ParamType::kString}},
       {"baseline", "against", "golden"}},
      {"keys_match",
       {kPhase, kAgainst, kBaseline, kBaselinePhase, {"shapes", ParamType::kBool}, {"prefix", ParamType::kString}},
       {"against", "baseline"}},
      {"tokens_match", {kPhase, kAgainst, kBaseline, kBaselinePhase}, {"against", "baseline"}},
      {"resume_matches", {kPhase, kAgainst, kBaseline, kBaselinePhase, kRtol, kAtol, kExact}, {"against", "baseline"}},
      {"replicas_equal", {kPhase}},
      {"params_match", {kPhase, kAgainst, kBaseline, kBaselinePhase, kGolden, kRtol, kAtol}, {"against", "baseline", "golden"}},
      {"tensors_match",
       {kPhase, kAgainst, kBaseline, kBaselinePhase, kRtol, kAtol, {"prefix", ParamType::kString}},
       {"against", "baseline"}},
      {"saved_once", {kPhase}},
      {"log_contains", {kPhase, {"text", ParamType::kString}, {"rank", ParamType::kInt}}, {"text"}},
      {"error_matches", {kPhase, {"text", ParamType::kString}}, {"text"}},
  };
  return kinds;
}

const CheckKind* find_check_kind(const std::string& name) {
  for (const auto& k : check_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> check_kind_names() {
  std::vector<std::string> names;
  for (const auto& k : check_kinds()) names.push_back(k.name);
  return names;
}

}  // namespace meshtest
