// What the check rooms share, inside judge/ only: how a check says it failed, the phase
// it looks at and the one it compares with, and how numbers and tolerances are written
// in messages. Every check function has the same shape (CheckFn), so checks.cpp can run
// any of them; each throws a Failure (could not look) or a Finding (looked, disagreed).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "core/outcome.h"
#include "judge/check_sources.h"

namespace meshtest {

// A check that could not judge (a file missing, a baseline that did not run)...
struct Failure {
  std::string message;
  std::string details;
  bool judged = false;
  // A number check's first disagreement: where, and what it compared.
  std::optional<long long> step;
  std::optional<double> value, reference, tolerance;
};
// ... and one that judged and disagreed: only this kind catches a canary.
struct Finding : Failure {
  Finding(std::string m, std::string d) : Failure{std::move(m), std::move(d), true} {}
};

// A declared check: it returns when it passed and throws a Failure when not. It may leave
// curves, a band and a margin in the result, which stay there either way.
using CheckFn = void (*)(const CaseOutcome&, const CheckSpec&, const CheckSources&, CheckResult&);

// The phase a check looks at, and another phase or case to compare with.
struct Target {
  std::string dir;
  std::string label;  // "phase load" or "baseline s/fsdp (phase train)"
  const PhaseOutcome* phase = nullptr;
  const Phase* spec = nullptr;  // where its outputs are (outputs: in the matrix)
  std::string case_dir;
  // When it ran: its metrics are what it wrote then, in a folder another phase also writes to.
  std::optional<TimeWindow> window;
  RunPaths paths() const { return {"", case_dir, dir, {}}; }
};

Target target_of(const CaseOutcome& o, const PhaseOutcome& p, std::string label);
// The phase under test: `phase`, else the case's last; a Failure when it did not run.
Target subject(const CaseOutcome& o, const CheckSpec& spec);
// The reference: `against` (a phase of this case) or `baseline` (another case); none when
// the check names neither.
std::optional<Target> reference(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from);
// `golden`, relative to the matrix file's folder, with {hardware} filled (core/hardware.h).
std::string golden_path(const CaseOutcome& o, const CheckSpec& spec);

nlohmann::json read_json(const std::string& path);  // a Failure when missing or not JSON

std::string num(double v);  // 7 significant digits
std::string sci(double v);  // "1.23e-05"
// "atol 0 + rtol 1e-05 x |2.5| = 2.50e-05"
std::string tolerance_text(double atol, double rtol, double ref);
// Widens `r.margin` to |diff| / tolerance: NaN, or any difference against a zero tolerance, is infinite.
void widen_margin(CheckResult& r, double diff, double tolerance);

}  // namespace meshtest
