#include "history/queries.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "history/drift.h"
#include "history/history.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

namespace {

std::string when(double t) {
  char text[32];
  const std::time_t s = static_cast<std::time_t>(t);
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", std::gmtime(&s));
  return text;
}

std::string number(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, *v);
  return text;
}

json or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

void case_runs(const History& history, const std::string& db, const HistoryQuery& q, json& out) {
  const auto runs = history.case_runs(q.case_id, q.last);
  if (runs.empty()) throw std::runtime_error("history: no runs of " + q.case_id + " in " + db);
  out["case"] = q.case_id;
  out["runs"] = json::array();
  if (!q.json)
    std::printf("%-16s  %-12s  %-10s  %-9s  %8s  %11s  %9s  %8s\n", "time (UTC)", "commit", "branch", "verdict",
                "attempts", "final loss", "margin", "duration");
  for (const auto& r : runs) {
    out["runs"].push_back({{"run_id", r.run_id},
                           {"commit", r.commit},
                           {"branch", r.branch},
                           {"time", r.time},
                           {"status", r.status},
                           {"met", r.met},
                           {"attempts", r.attempts},
                           {"duration_s", r.duration_s},
                           {"final_loss", or_null(r.final_loss)},
                           {"margin", or_null(r.margin)}});
    if (!q.json)
      std::printf("%-16s  %-12s  %-10s  %-9s  %8d  %11s  %9s  %7.1fs\n", when(r.time).c_str(),
                  r.commit.substr(0, 12).c_str(), r.branch.substr(0, 10).c_str(), r.status.c_str(), r.attempts,
                  number(r.final_loss, "%.6g").c_str(), number(r.margin, "%.3g").c_str(), r.duration_s);
  }
}

void flaky_cases(const History& history, const HistoryQuery& q, json& out) {
  out["flaky"] = json::array();
  const auto cases = history.flaky(q.last);
  if (!q.json)
    std::printf("%zu flaky case%s in their last %d runs\n", cases.size(), cases.size() == 1 ? "" : "s", q.last);
  for (const auto& f : cases) {
    out["flaky"].push_back({{"case", f.case_id},
                            {"runs", f.runs},
                            {"failed", f.failed},
                            {"retried", f.retried},
                            {"rate", f.rate},
                            {"since_commit", f.since_commit},
                            {"since_time", f.since_time}});
    if (!q.json)
      std::printf("  %-40s %5.1f%%  (%d failed, %d passed on a retry, of %d runs) since %s, %s\n", f.case_id.c_str(),
                  100 * f.rate, f.failed, f.retried, f.runs, f.since_commit.substr(0, 12).c_str(),
                  when(f.since_time).c_str());
  }
}

void slowest_cases(const History& history, const HistoryQuery& q, json& out) {
  out["slowest"] = json::array();
  if (!q.json) std::printf("slowest cases, median of their last %d runs:\n", q.last);
  for (const auto& c : history.slowest(q.last, 20)) {
    out["slowest"].push_back({{"case", c.case_id},
                              {"runs", c.runs},
                              {"median_s", c.median_s},
                              {"last_s", c.last_s},
                              {"first_s", c.first_s}});
    if (!q.json)
      std::printf("  %-40s %8.1fs median  (last %.1fs, oldest %.1fs, %d runs)\n", c.case_id.c_str(), c.median_s,
                  c.last_s, c.first_s, c.runs);
  }
}

void drifting_cases(const History& history, const HistoryQuery& q, json& out) {
  out["drift"] = json::array();
  const auto cases = drifted_cases(history, drift_rule(), q.last);
  if (!q.json)
    std::printf("%zu case%s left the band of their green runs\n", cases.size(), cases.size() == 1 ? "" : "s");
  for (const auto& d : cases) {
    out["drift"].push_back({{"case", d.case_id},
                            {"first_commit", d.first.commit},
                            {"first_time", d.first.time},
                            {"message", d.finding.describe()},
                            {"still", d.still},
                            {"back_in_band", d.back_in_band}});
    const char* now = d.back_in_band ? "; the newest run is back in the band it left"
                      : d.still      ? "; the newest run still drifts"
                                     : "; the newest run stays at the moved numbers, now its recent runs' band";
    if (!q.json)
      std::printf("  %s: first at commit %s (%s): %s%s\n", d.case_id.c_str(), d.first.commit.substr(0, 12).c_str(),
                  when(d.first.time).c_str(), d.finding.describe().c_str(), now);
  }
}

}  // namespace

int show_history(const std::string& db, const HistoryQuery& q) {
  if (db.empty()) throw std::runtime_error("history: no database: pass --history PATH or set $MESHTEST_HISTORY");
  if (!fs::exists(db)) throw std::runtime_error("history: " + db + " does not exist");
  const History history(db);
  json out = json::object();
  if (!q.case_id.empty()) case_runs(history, db, q, out);
  if (q.flaky) flaky_cases(history, q, out);
  if (q.slowest) slowest_cases(history, q, out);
  if (q.drift) drifting_cases(history, q, out);
  if (q.case_id.empty() && !q.flaky && !q.slowest && !q.drift) {
    out["runs"] = history.run_count();
    out["cases"] = history.case_ids().size();
    if (!q.json) std::printf("%s: %d runs of %zu cases\n", db.c_str(), history.run_count(), history.case_ids().size());
  }
  if (q.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int merge_histories(const std::string& into_path, const std::vector<std::string>& from) {
  History into(into_path);
  int skipped = 0;
  for (const auto& f : from) {
    // `history merge ci.db *.db` names INTO among its inputs; a bad input costs itself only.
    std::error_code ec;
    if (fs::equivalent(f, into_path, ec)) {
      std::fprintf(stderr, "history merge: warning: skipping %s: it is INTO itself\n", f.c_str());
      continue;
    }
    try {
      const int added = into.merge_from(f);
      std::printf("history merge: %d run%s from %s\n", added, added == 1 ? "" : "s", f.c_str());
    } catch (const HistoryError& e) {
      std::fprintf(stderr, "history merge: warning: skipping %s: %s\n", f.c_str(), e.what());
      ++skipped;
    }
  }
  std::printf("history merge: %s holds %d runs\n", into_path.c_str(), into.run_count());
  return skipped == static_cast<int>(from.size()) ? 1 : 0;
}

}  // namespace meshtest
