#include "golden_regen.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>

#include "core/git.h"
#include "core/hardware.h"
#include "core/selection.h"
#include "readers/golden_curve.h"
#include "readers/metric_series.h"
#include "report/finished_run.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

namespace {

// A golden file the case judges by: which phase's which metric it holds, and where.
struct Target {
  std::string phase, metric;
  std::string written;  // as the matrix wrote it, {hardware} and all
  std::string path;     // where the check reads it on this machine
  std::map<long long, GoldenBand> band;
};

std::vector<Target> targets_of(const Case& c) {
  std::vector<Target> out;
  for (const auto& check : c.checks) {
    const CheckParams& p = check.params;
    if (check.kind != CheckKind::kLossMatches || !p.golden || p.baseline || p.against) continue;
    Target t{p.phase.value_or(c.phases.back().name),
             p.metric.value_or("loss"),
             *p.golden,
             golden_file(*p.golden, c.file),
             {}};
    bool seen = false;
    for (const auto& o : out)
      if (o.path == t.path) {
        if (o.phase != t.phase || o.metric != t.metric)
          throw std::runtime_error(c.id + " reads " + t.path + " as " + o.metric + " of phase " + o.phase + " and as " +
                                   t.metric + " of phase " + t.phase + ": one file cannot be both");
        seen = true;
      }
    if (!seen) out.push_back(t);
  }
  if (out.empty())
    throw std::runtime_error(c.id + " judges by no golden file: regen writes the files its loss_matches checks name " +
                             "(e.g. {loss_matches: {golden: golden/{hardware}/" + c.name + ".loss.txt}})");
  return out;
}

const Case& find_case(const std::vector<Suite>& suites, const std::string& id) {
  for (const auto& suite : suites)
    for (const auto& c : suite.cases)
      if (c.id == id) return c;
  throw std::runtime_error("no case '" + id + "' (meshtest list shows the ids)");
}

// f() with this process's stdout (a run's table of cases) in `path`; the trainers write their own logs.
int with_stdout_to(const std::string& path, const std::function<int()>& f) {
  std::fflush(stdout);
  const int saved = ::dup(1), fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (saved < 0 || fd < 0) {
    if (saved >= 0) ::close(saved);
    if (fd >= 0) ::close(fd);
    return f();
  }
  ::dup2(fd, 1), ::close(fd);
  auto restore = [&] { std::fflush(stdout), ::dup2(saved, 1), ::close(saved); };
  try {
    const int rc = f();
    restore();
    return rc;
  } catch (...) {
    restore();
    throw;
  }
}

// Run k's phase of the case, checked to have finished cleanly: its summary.json entry.
json finished_case(const std::string& dir, const std::string& id, int k) {
  const json summary = read_summary(dir);
  for (const auto& c : summary.at("cases"))
    if (c.value("id", "") == id) {
      for (const auto& p : c.value("phases", json::array()))
        if (!p.value("ok", false))
          throw std::runtime_error("run " + std::to_string(k) + " of " + id + ": phase " + p.value("name", "") +
                                   " did not finish cleanly (" + c.value("reason", c.value("status", "")) +
                                   "); a band is made of finished runs (" + dir + ")");
      return c;
    }
  throw std::runtime_error("run " + std::to_string(k) + " has no case " + id + " (" + dir + ")");
}

// Widens each target's band by run k's values; its steps must be the first run's.
void add_run(std::vector<Target>& targets, const std::string& dir, const std::string& id, int k) {
  for (Target& t : targets) {
    const FinishedCurves curves = finished_curves(dir, id, t.phase);
    const auto it = curves.metrics.find(t.metric);
    if (it == curves.metrics.end())
      throw std::runtime_error("run " + std::to_string(k) + " of " + id + ": phase " + t.phase + " reported no " +
                               t.metric);
    const std::map<long long, double>& values = it->second;
    for (const auto& [step, v] : values)
      if (!std::isfinite(v))
        throw std::runtime_error("run " + std::to_string(k) + " of " + id + " logged " + t.metric + " " +
                                 golden_number(v) + " at step " + std::to_string(step) + ": a band is made of numbers");
    if (k > 1 && (values.size() != t.band.size() ||
                  !std::equal(values.begin(), values.end(), t.band.begin(),
                              [](const auto& a, const auto& b) { return a.first == b.first; })))
      throw std::runtime_error("run " + std::to_string(k) + " of " + id + " logged " + t.metric + " at steps " +
                               std::to_string(values.begin()->first) + "-" + std::to_string(values.rbegin()->first) +
                               " (" + std::to_string(values.size()) + "), run 1 at " +
                               std::to_string(t.band.begin()->first) + "-" + std::to_string(t.band.rbegin()->first) +
                               " (" + std::to_string(t.band.size()) + "): a band needs the same steps in every run");
    for (const auto& [step, v] : values) {
      auto [b, fresh] = t.band.emplace(step, GoldenBand{v, v});
      if (!fresh) b->second.min = std::min(b->second.min, v), b->second.max = std::max(b->second.max, v);
    }
  }
}

// "[6.02834034, 6.02834034]": 9 significant digits, as `golden export` writes a golden.
std::string band_text(const GoldenBand& b) {
  char text[80];
  std::snprintf(text, sizeof(text), "[%.9g, %.9g]", b.min, b.max);
  return text;
}

// What a reviewer reads: per step whose band moved against the file it replaces (to 9 significant
// digits, the precision of `golden export`: a step equal to that is written at full precision,
// and counted, not listed), old -> new, then one summary line.
std::string band_diff(const Target& t, const std::string& written_to) {
  std::map<long long, GoldenBand> old;
  std::string out, previous = "no previous file";
  std::error_code ec;
  if (fs::exists(t.path, ec)) {
    try {
      old = read_golden_curve(t.path).steps;
      previous = "against " + t.path;
    } catch (const MetricsError& e) {
      previous = std::string("the previous file is unreadable (") + e.what() + ")";
    }
  }
  out += written_to + " (" + t.metric + " of phase " + t.phase + "), " + previous + ":\n";
  int changed = 0, added = 0, removed = 0, refined = 0;
  long long widest_step = t.band.begin()->first;
  for (const auto& [step, b] : t.band)
    if (b.max - b.min > t.band.at(widest_step).max - t.band.at(widest_step).min) widest_step = step;
  char row[400];
  for (const auto& [step, b] : t.band) {
    const auto o = old.find(step);
    if (o != old.end() && band_text(o->second) == band_text(b)) {
      refined += o->second.min != b.min || o->second.max != b.max;
      continue;
    }
    o == old.end() ? ++added : ++changed;
    std::snprintf(row, sizeof(row), "  step %6lld  %-28s -> %s\n", step,
                  o == old.end() ? "(none)" : band_text(o->second).c_str(), band_text(b).c_str());
    out += row;
  }
  for (const auto& [step, b] : old)
    if (!t.band.count(step)) {
      ++removed;
      std::snprintf(row, sizeof(row), "  step %6lld  %-28s -> (none)\n", step, band_text(b).c_str());
      out += row;
    }
  const GoldenBand& w = t.band.at(widest_step);
  char widest[160];
  std::snprintf(widest, sizeof(widest), "widest band %.3g at step %lld (%.3g of |max|)", w.max - w.min, widest_step,
                w.max != 0 ? (w.max - w.min) / std::fabs(w.max) : 0.0);
  out += "  " + std::to_string(t.band.size()) + " steps: " +
         (changed + added + removed == 0 ? std::string("unchanged")
                                         : std::to_string(changed) + " changed, " + std::to_string(added) + " added, " +
                                               std::to_string(removed) + " removed") +
         (refined ? " (" + std::to_string(refined) + " equal to 9 significant digits, now written in full)" : "") +
         "; " + widest + "\n";
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// Where a target's band is written: in place, or under `write_to` at the path the matrix wrote.
std::string destination(const Target& t, const std::string& write_to) {
  if (write_to.empty()) return t.path;
  const fs::path written = golden_file(t.written, "");  // {hardware} filled, still relative
  return (fs::path(write_to) / (written.is_relative() ? written : written.filename())).lexically_normal().string();
}

void write_band(const Target& t, const std::string& path, const RegenRequest& r, const std::string& commit) {
  GoldenCurve curve;
  curve.band = true, curve.steps = t.band;
  const Hardware hw = this_hardware();
  curve.comments = {"meshtest golden band: " + t.metric + " of " + r.case_id + " (phase " + t.phase +
                        "), min and max per step over " + std::to_string(r.runs) + " runs",
                    "hardware: " + hw.name + " ({hardware} = " + hw.slug + ")",
                    "written by `meshtest golden regen " + r.case_id + " --runs " + std::to_string(r.runs) + "` at " +
                        utc_now() + ", commit " + (commit.empty() ? "unknown" : commit),
                    "<step> <min> <max>"};
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  const std::string fresh = path + ".new";
  std::ofstream(fresh) << curve.text();
  fs::rename(fresh, path);
}

}  // namespace

int regen_golden(const RegenRequest& r, const std::string& program) {
  if (r.runs < 1) throw std::runtime_error("--runs must be at least 1");
  const std::vector<Suite> suites = load_matrices(r.matrices);
  const Case& c = find_case(suites, r.case_id);
  std::vector<Target> targets = targets_of(c);
  const auto started = std::chrono::steady_clock::now();
  for (int k = 1; k <= r.runs; ++k) {
    RunRequest run = r.run;
    run.selection = Selection{};
    run.selection.matrices = r.matrices, run.selection.ids = {r.case_id};
    run.options.out_dir = (fs::path(r.out) / ("run-" + std::to_string(k))).string();
    fs::create_directories(run.options.out_dir);
    const auto t0 = std::chrono::steady_clock::now();
    const int rc =
        with_stdout_to((fs::path(run.options.out_dir) / "run.log").string(), [&] { return run_matrix(run, program); });
    if (rc >= 128) return rc;  // stopped by a signal: no band from part of the runs
    const json done = finished_case(run.options.out_dir, r.case_id, k);
    add_run(targets, run.options.out_dir, r.case_id, k);
    std::fprintf(stderr, "meshtest golden regen: run %d of %d: %s %s in %.1f s (%s)\n", k, r.runs, r.case_id.c_str(),
                 done.value("status", "").c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 run.options.out_dir.c_str());
  }
  const std::string commit = git_line(fs::path(c.file).parent_path().string(), {"rev-parse", "--short", "HEAD"});
  for (const Target& t : targets) {
    const std::string path = destination(t, r.write_to);
    std::fputs(band_diff(t, path).c_str(), stdout);
    write_band(t, path, r, commit);
  }
  std::printf("%d runs of %s on %s in %.1f s\n", r.runs, r.case_id.c_str(), this_hardware().name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

}  // namespace meshtest
