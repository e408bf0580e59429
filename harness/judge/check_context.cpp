#include "judge/check_context.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/hardware.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

namespace {

const Phase* phase_spec(const CaseOutcome& o, const std::string& name) {
  for (const auto& p : o.spec->phases)
    if (p.name == name) return &p;
  return nullptr;
}

const PhaseOutcome& phase_named(const CaseOutcome& o, const std::string& name) {
  for (const auto& p : o.phases)
    if (p.name == name) return p;
  throw Failure{o.spec->id + " has no phase '" + name + "'", ""};
}

// The phase `name` names, else the case's last.
const PhaseOutcome& phase_or_last(const CaseOutcome& o, const std::optional<std::string>& name) {
  return name ? phase_named(o, *name) : o.phases.back();
}

}  // namespace

Target target_of(const CaseOutcome& o, const PhaseOutcome& p, std::string label) {
  return {p.dir, std::move(label),
          &p,    phase_spec(o, p.name),
          o.dir, launch_window(o.phases, static_cast<size_t>(&p - o.phases.data()))};
}

Target subject(const CaseOutcome& o, const CheckSpec& spec) {
  const PhaseOutcome& p = phase_or_last(o, spec.params.phase);
  if (!p.ran) throw Failure{"phase " + p.name + " did not run (an earlier phase failed)", ""};
  return target_of(o, p, "phase " + p.name);
}

std::optional<Target> reference(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from) {
  if (spec.params.against) {
    const PhaseOutcome& p = phase_named(o, *spec.params.against);
    if (!p.ran) throw Failure{"phase " + p.name + " (the reference) did not run", ""};
    return target_of(o, p, "phase " + p.name);
  }
  if (spec.params.baseline) {
    const std::string& id = *spec.params.baseline;
    const CaseOutcome* base = from.find_case(id);
    if (!base) throw Failure{"baseline " + id + " was not part of this run", ""};
    if (!base->finished) throw Failure{"baseline " + id + " did not run", ""};
    if (base->status() == Status::kSkipped || base->status() == Status::kCancelled)
      throw Failure{"baseline " + id + " did not run (" + status_name(base->status()) + ": " + base->reason() + ")",
                    ""};
    const PhaseOutcome& p = phase_or_last(*base, spec.params.baseline_phase);
    if (!p.ran) throw Failure{"baseline " + id + " did not reach phase " + p.name, ""};
    return target_of(*base, p, "baseline " + id + " (phase " + p.name + ")");
  }
  return std::nullopt;
}

std::string golden_path(const CaseOutcome& o, const CheckSpec& spec) {
  return golden_file(spec.params.golden.value(), o.spec->file);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Failure{"cannot read " + path, ""};
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw Failure{path + " is not valid JSON: " + e.what(), ""};
  }
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(7);
  s << v;
  return s.str();
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

std::string tolerance_text(double atol, double rtol, double ref) {
  return "atol " + num(atol) + " + rtol " + num(rtol) + " x |" + num(ref) + "| = " + sci(atol + rtol * std::fabs(ref));
}

void widen_margin(CheckResult& r, double diff, double tolerance) {
  double ratio = std::isnan(diff) ? INFINITY : tolerance > 0 ? diff / tolerance : diff > 0 ? INFINITY : 0;
  if (std::isnan(ratio)) ratio = INFINITY;  // an infinite difference over an infinite bound
  r.margin = std::max(r.margin.value_or(0), ratio);
}

}  // namespace meshtest
