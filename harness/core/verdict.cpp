#include "core/verdict.h"

#include <cmath>
#include <stdexcept>

namespace meshtest {

namespace {

struct KindInfo {
  VerdictKind kind;
  const char* name;
  Status status;
  JunitElement element;
  const char* junit_type;  // nullptr: the deciding check's kind
};

// One row per kind: its name in summary.json, its status and how JUnit shows it.
constexpr KindInfo kKinds[] = {
    {VerdictKind::kPassed, "passed", Status::kPassed, JunitElement::kNone, ""},
    {VerdictKind::kCanaryCaught, "canary_caught", Status::kPassed, JunitElement::kNone, ""},
    {VerdictKind::kXfailed, "xfailed", Status::kXfailed, JunitElement::kSkipped, ""},
    {VerdictKind::kSkipped, "skipped", Status::kSkipped, JunitElement::kSkipped, ""},
    {VerdictKind::kCheckFailed, "check_failed", Status::kFailed, JunitElement::kFailure, nullptr},
    {VerdictKind::kNotJudged, "not_judged", Status::kFailed, JunitElement::kFailure, nullptr},
    {VerdictKind::kCrashed, "crashed", Status::kFailed, JunitElement::kError, "Crash"},
    {VerdictKind::kExitCode, "exit_code", Status::kFailed, JunitElement::kError, "NonZeroExit"},
    {VerdictKind::kTimedOut, "timed_out", Status::kFailed, JunitElement::kError, "Timeout"},
    {VerdictKind::kLaunchError, "launch_error", Status::kFailed, JunitElement::kError, "LaunchError"},
    {VerdictKind::kXpassed, "xpassed", Status::kFailed, JunitElement::kFailure, "UnexpectedPass"},
    {VerdictKind::kXfailedDifferently, "xfailed_differently", Status::kFailed, JunitElement::kFailure,
     "XfailFailedDifferently"},
    {VerdictKind::kCanaryNotCaught, "canary_not_caught", Status::kFailed, JunitElement::kFailure, "CanaryNotCaught"},
    {VerdictKind::kCanaryCrashed, "canary_crashed", Status::kFailed, JunitElement::kFailure, "CanaryCrashed"},
    {VerdictKind::kCancelled, "cancelled", Status::kCancelled, JunitElement::kError, "Cancelled"},
};

const KindInfo& info(VerdictKind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k;
  throw std::logic_error("verdict kind without a row in kKinds");
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::kPassed: return "passed";
    case Status::kFailed: return "failed";
    case Status::kSkipped: return "skipped";
    case Status::kXfailed: return "xfailed";
    case Status::kCancelled: return "cancelled";
  }
  return "?";
}

Status Verdict::status() const { return info(kind).status; }

bool Verdict::met_expectation() const {
  const Status s = status();
  return s == Status::kPassed || s == Status::kSkipped || s == Status::kXfailed;
}

const char* verdict_kind_name(VerdictKind kind) { return info(kind).name; }

VerdictKind verdict_kind_from_name(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.name) return k.kind;
  throw std::invalid_argument("unknown verdict kind '" + name + "'");
}

JunitElement junit_element(VerdictKind kind) { return info(kind).element; }

std::string junit_type(const Verdict& v) {
  const char* type = info(v.kind).junit_type;
  if (type) return type;
  return v.check.empty() ? "Failure" : v.check;
}

nlohmann::json margin_json(double margin) {
  return std::isfinite(margin) ? nlohmann::json(margin) : nlohmann::json("inf");
}

nlohmann::json verdict_to_json(const Verdict& v) {
  nlohmann::json j = {{"kind", verdict_kind_name(v.kind)}, {"message", v.message}};
  if (!v.check.empty()) j["check"] = v.check;
  if (!v.phase.empty()) j["phase"] = v.phase;
  if (v.rank >= 0) j["rank"] = v.rank;
  if (v.signal != 0) j["signal"] = v.signal;
  if (v.exit_code != 0) j["exit_code"] = v.exit_code;
  if (v.step) j["step"] = *v.step;
  if (v.value) j["value"] = *v.value;
  if (v.reference) j["reference"] = *v.reference;
  if (v.tolerance) j["tolerance"] = *v.tolerance;
  if (v.margin) j["margin"] = margin_json(*v.margin);
  return j;
}

Verdict verdict_from_json(const nlohmann::json& j) {
  Verdict v;
  v.kind = verdict_kind_from_name(j.value("kind", ""));
  v.message = j.value("message", "");
  v.check = j.value("check", "");
  v.phase = j.value("phase", "");
  v.rank = j.value("rank", -1);
  v.signal = j.value("signal", 0);
  v.exit_code = j.value("exit_code", 0);
  // A non-finite number is written as null by nlohmann::json.
  auto number = [&](const char* key) -> std::optional<double> {
    if (j.contains(key) && j[key].is_number()) return j[key].get<double>();
    return std::nullopt;
  };
  if (j.contains("step") && j["step"].is_number_integer()) v.step = j["step"].get<long long>();
  v.value = number("value");
  v.reference = number("reference");
  v.tolerance = number("tolerance");
  v.margin = j.value("margin", nlohmann::json()) == "inf" ? std::optional<double>(INFINITY) : number("margin");
  return v;
}

}  // namespace meshtest
