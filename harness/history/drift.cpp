#include "history/drift.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

namespace meshtest {

namespace {

std::optional<double> at_step(const Curve& c, long long step) {
  const auto it = std::lower_bound(c.begin(), c.end(), step, [](const auto& p, long long s) { return p.first < s; });
  return it != c.end() && it->first == step ? std::optional<double>(it->second) : std::nullopt;
}

}  // namespace

DriftRule drift_rule(const CheckParams& p) {
  return {static_cast<int>(p.window.value()), static_cast<int>(p.min_runs.value()), p.k.value(), p.rel_floor.value()};
}

bool declares_drift(const Case& c) {
  for (const auto& check : c.checks)
    if (check.kind == CheckKind::kDrift) return true;
  return false;
}

CaseRun case_run_of(const CaseOutcome& o, const std::string& commit) {
  CaseRun run;
  run.commit = commit;
  run.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  run.status = status_name(o.status());
  run.met = o.met_expectation();
  for (const auto& p : o.phases) {
    Curve loss;
    for (const auto& point : p.curve)
      if (std::isfinite(point.loss)) loss.emplace_back(point.step, point.loss);
    if (!loss.empty()) run.curves[p.name + "/loss"] = std::move(loss);
  }
  return run;
}

std::string DriftFinding::describe() const {
  const auto slash = curve.find('/');
  char text[400];
  std::snprintf(
      text, sizeof text, "%s of phase %s at step %lld: %.9g outside %.9g \xc2\xb1 %.2e (%d green runs, %s..%s)",
      curve.substr(slash + 1).c_str(), curve.substr(0, slash).c_str(), step, value, center, half_width, reference_runs,
      oldest_reference_commit.substr(0, 12).c_str(), newest_reference_commit.substr(0, 12).c_str());
  return text;
}

std::vector<const CaseRun*> drift_references(const CaseRun& run, const std::vector<CaseRun>& earlier,
                                             const DriftRule& rule) {
  std::vector<const CaseRun*> refs;
  for (const auto& r : earlier)
    if (r.met && r.status == "passed" && r.commit != run.commit && r.time <= run.time &&
        static_cast<int>(refs.size()) < rule.window)
      refs.push_back(&r);
  return refs;
}

std::optional<DriftFinding> find_drift(const CaseRun& run, const std::vector<CaseRun>& earlier, const DriftRule& rule) {
  if (!run.met || run.status != "passed") return std::nullopt;
  const std::vector<const CaseRun*> refs = drift_references(run, earlier, rule);
  if (static_cast<int>(refs.size()) < rule.min_runs) return std::nullopt;
  for (const auto& [name, curve] : run.curves) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, "/loss") != 0) continue;
    for (const auto& [step, value] : curve) {
      std::vector<double> values;
      for (const CaseRun* r : refs)
        if (auto it = r->curves.find(name); it != r->curves.end())
          if (auto v = at_step(it->second, step)) values.push_back(*v);
      if (static_cast<int>(values.size()) < rule.min_runs) continue;
      const double center = median(values);
      std::vector<double> deviations;
      for (double v : values) deviations.push_back(std::fabs(v - center));
      const double half = std::max(rule.k * 1.4826 * median(deviations), rule.rel_floor * std::fabs(center));
      if (!(std::fabs(value - center) <= half)) {
        DriftFinding f{
            name, step, value, center, half, static_cast<int>(refs.size()), refs.back()->commit, refs.front()->commit};
        return f;
      }
    }
  }
  return std::nullopt;
}

std::vector<CaseDrift> drifted_cases(const History& history, const DriftRule& rule, int depth) {
  std::vector<CaseDrift> out;
  for (const auto& id : history.case_ids()) {
    const auto runs = history.case_runs(id, depth, true);  // newest first
    std::optional<CaseDrift> found;
    std::vector<CaseRun> before_drift;        // the green runs whose band the first drifted run left
    for (size_t i = runs.size(); i-- > 0;) {  // oldest first
      std::vector<CaseRun> earlier(runs.begin() + static_cast<long>(i) + 1, runs.end());
      if (auto f = find_drift(runs[i], earlier, rule)) {
        found = CaseDrift{id, runs[i], *f, false, false};
        before_drift = std::move(earlier);
        break;
      }
    }
    if (!found) continue;
    // A fixed drift is back in the band it left, though its recent runs (the drifted ones) now
    // make a band it is outside of: that is not "still drifting".
    found->back_in_band = found->first.run_id != runs[0].run_id && !find_drift(runs[0], before_drift, rule).has_value();
    found->still = !found->back_in_band &&
                   find_drift(runs[0], std::vector<CaseRun>(runs.begin() + 1, runs.end()), rule).has_value();
    out.push_back(std::move(*found));
  }
  return out;
}

}  // namespace meshtest
