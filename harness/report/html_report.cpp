#include "report/html_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "core/outcome.h"        // human_seconds
#include "readers/rank_files.h"  // tail_of_file
#include "report/html_assets.h"
#include "report/html_text.h"
#include "report/svg_chart.h"
#include "report/report.h"  // xml_safe

namespace fs = std::filesystem;

namespace meshtest {

namespace {

// Caps keep a hostile or huge summary (or a 20 MB binary log) from bloating the page.
constexpr size_t kTextCap = 16 * 1024;  // messages and check details
constexpr size_t kReproCap = 4096;
constexpr size_t kLogReadBytes = 64 * 1024;  // read from the end of a log, at most
constexpr size_t kLogShownCap = 32 * 1024;   // shown of those, at most
constexpr int kMaxRankLinks = 256;           // per phase
constexpr size_t kMaxAttentionLinks = 200;

// A list as "a, b": tags, matrices, device numbers.
template <typename T>
std::string joined(const std::vector<T>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ", ";
    if constexpr (std::is_arithmetic_v<T>)
      out += std::to_string(item);
    else
      out += item;
  }
  return out;
}

// ---- verdict colours: from status and verdict.kind, never from message text ----

const std::vector<std::string> kStatuses = {"passed", "failed", "xfailed", "skipped", "cancelled"};

// verdict.kind → what it means, in legend order.
const std::vector<std::pair<std::string, std::string>> kKinds = {
    {"passed", "passed"},
    {"canary_caught", "canary caught (a planted bug failed its check, as it must)"},
    {"xfailed", "failed as expected (xfail)"},
    {"skipped", "skipped"},
    {"cancelled", "cancelled"},
    {"check_failed", "a check failed"},
    {"xpassed", "passed but expected to fail"},
    {"xfailed_differently", "failed, but not as the xfail said"},
    {"canary_not_caught", "canary not caught"},
    {"not_judged", "not judged (a check could not run)"},
    {"crashed", "crashed"},
    {"exit_code", "non-zero exit"},
    {"timed_out", "timed out"},
    {"launch_error", "could not launch"},
    {"canary_crashed", "canary crashed before its check"},
};

bool known_status(const std::string& s) { return std::count(kStatuses.begin(), kStatuses.end(), s) > 0; }

bool known_kind(const std::string& k) {
  return std::any_of(kKinds.begin(), kKinds.end(), [&](const auto& e) { return e.first == k; });
}

// A status safe to use as a token (data-status, filters): the status if known, else "other".
std::string status_token(const CaseView& c) { return known_status(c.status) ? c.status : "other"; }

// The CSS class that colours a case: its verdict kind if known, else its status.
std::string colour_class(const CaseView& c) {
  if (known_kind(c.verdict.kind)) return "k-" + c.verdict.kind;
  return "k-" + status_token(c);
}

// ---- per case sections ----

// Context shared by the sections of one page.
struct Page {
  fs::path base;                         // the report's folder, for relative links
  std::map<std::string, int> tag_index;  // tag → its number in the filter (t0, t1, ...)
};

std::string tag_tokens(const CaseView& c, const Page& page) {
  std::string out = " ";
  for (const auto& t : c.tags) out += "t" + std::to_string(page.tag_index.at(t)) + " ";
  return out;
}

// The attributes the filters read; every filterable element (section, chip) carries them.
std::string filter_attrs(const CaseView& c, const Page& page) {
  return " data-status=\"" + status_token(c) + "\" data-met=\"" + (c.met_expectation ? "1" : "0") + "\" data-tags=\"" +
         tag_tokens(c, page) + "\"";
}

std::string badge(const CaseView& c) {
  return "<span class=\"badge " + colour_class(c) + "\">" + esc(c.status, 64) + "</span>";
}

std::string dl_row(const std::string& term, const std::string& html) {
  return "<dt>" + term + "</dt><dd>" + html + "</dd>";
}

// Where a verdict was decided, in the order people read it: "check loss_matches, step 12".
std::string verdict_place(const VerdictView& v) {
  std::vector<std::pair<const char*, std::string>> parts;
  if (!v.check.empty()) parts.emplace_back("check", v.check);
  if (!v.phase.empty()) parts.emplace_back("phase", v.phase);
  const std::pair<const char*, const std::optional<long long>*> integers[] = {
      {"rank", &v.rank}, {"signal", &v.signal}, {"exit_code", &v.exit_code}, {"step", &v.step}};
  for (const auto& [key, value] : integers)
    if (*value) parts.emplace_back(key, std::to_string(**value));
  const std::pair<const char*, const std::optional<double>*> numbers[] = {
      {"value", &v.value}, {"reference", &v.reference}, {"tolerance", &v.tolerance}};
  for (const auto& [key, value] : numbers)
    if (*value) parts.emplace_back(key, float_text(**value));
  std::string where;
  for (const auto& [key, value] : parts) where += std::string(where.empty() ? "" : ", ") + key + " " + esc(value);
  return where;
}

// The case's recent runs from the run history, oldest first: one cell per run, coloured by its
// verdict, with its commit, final loss and duration on hover and below.
std::string history_strip(const CaseView& c) {
  std::string cells;
  for (const auto& h : c.history) {
    const std::string loss = h.final_loss ? float_text(*h.final_loss) : "-";
    const std::string tip =
        h.commit.substr(0, 12) + ": " + h.status + ", final loss " + loss + ", " + human_seconds(h.duration_s);
    cells += "<span class=\"hist k-" + esc(h.status, 32) + "\" title=\"" + esc(tip) + "\"></span>";
  }
  const auto& last = c.history.back();
  const auto& first = c.history.front();
  return "<span class=\"history\">" + cells + "</span> " + std::to_string(c.history.size()) + " runs, commits " +
         esc(first.commit.substr(0, 12)) + ".." + esc(last.commit.substr(0, 12)) + "; final loss " +
         (first.final_loss ? float_text(*first.final_loss) : "-") + " &rarr; " +
         (last.final_loss ? float_text(*last.final_loss) : "-") + ", duration " + human_seconds(first.duration_s) +
         " &rarr; " + human_seconds(last.duration_s);
}

// The facts a person checks first: verdict, expectation, layout, time, where it came from.
std::string facts(const CaseView& c) {
  std::string out = "<dl class=\"facts\">";
  out += dl_row("verdict", "<b>" + esc(c.verdict.kind, 64) + "</b><div class=\"msg\">" +
                               esc(c.verdict.message, kTextCap) + "</div>");
  const std::string where = verdict_place(c.verdict);
  if (!where.empty()) out += dl_row("where", where);
  out += dl_row("expect", esc(c.expect));
  out += dl_row("met expectation", c.met_expectation ? "yes" : "<b>no</b>");
  out += dl_row("mesh", esc(c.meshes.empty() ? c.mesh : mesh_chain(c)));
  std::string time = human_seconds(c.duration_s);
  if (c.expected_s > 0) time += " (expected about " + human_seconds(c.expected_s) + ")";
  out += dl_row("duration", time);
  out += dl_row("devices", "ngpu " + std::to_string(c.ngpu) + "; " + esc(joined(c.devices)));
  if (c.simulated)
    out += dl_row("world", "<b>simulated</b>: " + std::to_string(c.ngpu) +
                               " ranks on one device, collectives through shared memory in rank order (proves the "
                               "layout's numerics, not NCCL's streams, overlap or timeouts)");
  const std::pair<const char*, std::string> more[] = {{"model", c.model}, {"seed", c.seed}, {"tags", joined(c.tags)},
                                                      {"file", c.file},   {"dir", c.dir},   {"timestamp", c.timestamp}};
  for (const auto& [key, value] : more)
    if (!value.empty()) out += dl_row(key, esc(value, kTextCap));
  if (!c.drift.empty()) out += dl_row("drift", "<b class=\"drift\">" + esc(c.drift, kTextCap) + "</b>");
  if (!c.history.empty()) out += dl_row("history", history_strip(c));
  return out + "</dl>";
}

std::string repro(const CaseView& c, size_t index) {
  if (c.repro.empty()) return "";
  const std::string id = "repro-" + std::to_string(index);
  return "<div class=\"repro\"><span>repro</span> <code id=\"" + id + "\">" + esc(c.repro, kReproCap) +
         "</code> <button type=\"button\" class=\"copy\" data-for=\"" + id + "\" hidden>Copy</button></div>";
}

std::string checks_table(const CaseView& c) {
  if (c.checks.empty()) return "";
  std::string out =
      "<table class=\"checks\"><tr><th>check</th><th>result</th><th>phase</th><th>step</th><th>message</th></tr>";
  for (const auto& k : c.checks) {
    const std::string result = !k.judged ? "not judged" : k.passed ? "passed" : "failed";
    out += "<tr class=\"r-" + (k.judged ? result : std::string("not-judged")) + "\"><td>" + esc(k.kind, 64) +
           "</td><td>" + result + "</td><td>" + esc(k.phase) + "</td><td>" + (k.step ? std::to_string(*k.step) : "") +
           "</td><td><div class=\"msg\">" + esc(k.message, kTextCap) + "</div>";
    if (!k.details.empty()) out += "<pre>" + esc(k.details, kTextCap) + "</pre>";
    out += "</td></tr>";
  }
  return out + "</table>";
}

std::string rank_links(const PhaseView& phase, const Page& page) {
  if (phase.dir.empty()) return "";
  const int nproc = std::clamp(phase.nproc, 0, kMaxRankLinks);
  std::string out;
  for (int r = 0; r < nproc; ++r) {
    const std::string path = (fs::path(phase.dir) / ("rank" + std::to_string(r) + ".log")).string();
    out += "<a href=\"" + file_href(path, page.base) + "\">rank" + std::to_string(r) + "</a> ";
  }
  return out;
}

// Only the exits that tell something: non-zero codes and signals.
std::string bad_exits(const PhaseView& phase) {
  std::string out;
  for (const auto& e : phase.exits) {
    if (e.exit_code == 0 && e.signal == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(e.rank) +
           (e.signal != 0 ? " signal " + std::to_string(e.signal) : " exit " + std::to_string(e.exit_code));
  }
  return out;
}

std::string phases_table(const CaseView& c, const Page& page) {
  if (c.phases.empty()) return "";
  std::string out =
      "<table class=\"phases\"><tr><th>phase</th><th>ranks</th><th>result</th><th>time</th><th>why it stopped</th><th>logs</th></tr>";
  for (const auto& p : c.phases) {
    std::string result = !p.ran ? "did not run" : p.ok ? "ok" : "failed";
    if (p.timed_out) result += ", timed out";
    if (p.killed) result += ", killed";
    if (p.attempts > 1) result += ", " + std::to_string(p.attempts) + " attempts";
    std::string why = esc(p.stopped_because, kTextCap);
    const std::string exits = bad_exits(p);
    if (!exits.empty()) why += (why.empty() ? "" : "<br>") + exits;
    if (!p.launch_error.empty()) why += (why.empty() ? "" : "<br>") + esc(p.launch_error, kTextCap);
    if (!p.first_failure.empty()) why += "<br>first failure: " + esc(p.first_failure);
    out += "<tr><td>" + esc(p.name) + "</td><td>" + std::to_string(p.nproc) + "</td><td>" + result + "</td><td>" +
           human_seconds(p.duration_s) + "</td><td>" + why + "</td><td>" + rank_links(p, page) + "</td></tr>";
  }
  return out + "</table>";
}

std::string earlier_attempts(const CaseView& c) {
  if (c.earlier_attempts.empty()) return "";
  std::string out = "<h4>Earlier attempts</h4><ol class=\"attempts\">";
  for (const auto& a : c.earlier_attempts) {
    out += "<li><b>" + esc(a.verdict.kind, 64) + "</b> " + esc(a.reason) + " (" + human_seconds(a.duration_s) + ")";
    if (!a.failing_log.empty()) out += "<br>log: " + esc(a.failing_log);
    if (!a.details.empty()) out += "<pre>" + esc(a.details, kTextCap) + "</pre>";
    out += "</li>";
  }
  return out + "</ol>";
}

// The failing rank's last lines, read now: the run's folder may have been cleaned since.
std::string log_tail(const CaseView& c, const Page& page) {
  const std::string& path = c.failing_log;
  if (path.empty()) return "";
  const std::string title = "<h4>Last " + std::to_string(kLogTailLines) + " lines of <a href=\"" +
                            file_href(path, page.base) + "\">" + esc(path) + "</a></h4>";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return title + "<p class=\"gone\">The log is gone (its folder was removed or moved since the run).</p>";
  return title + "<pre class=\"log\">" + esc(tail_of_file(path, kLogTailLines, kLogReadBytes), kLogShownCap) + "</pre>";
}

std::string case_section(const CaseView& c, size_t index, const Page& page) {
  const bool missed = !c.met_expectation;
  std::string out = "<details class=\"case " + colour_class(c) + "\" id=\"" + anchor_of(c.id) + "\"" +
                    filter_attrs(c, page) + (missed ? " open" : "") + ">";
  out += "<summary>" + badge(c) + " <span class=\"case-id\">" + esc(c.id) + "</span> <span class=\"kind\">" +
         esc(c.verdict.kind, 64) + "</span>" + (missed ? " <span class=\"missed\">missed expectation</span>" : "") +
         (c.drift.empty() ? "" : " <span class=\"drift\">drifted</span>") + " <span class=\"reason\">" + esc(c.reason) +
         "</span></summary><div class=\"body\">";
  out += facts(c) + repro(c, index) + case_charts_html(c) + checks_table(c) + phases_table(c, page) +
         earlier_attempts(c) + log_tail(c, page);
  return out + "</div></details>\n";
}

// ---- the overview: header, filters, grid, reshard tables ----

std::map<std::string, int> status_counts(const std::vector<CaseView>& cases) {
  std::map<std::string, int> counts;
  for (const auto& c : cases) ++counts[status_token(c)];
  return counts;
}

std::string header(const RunView& run) {
  std::string out = "<header><h1>meshtest report</h1><p class=\"counts\">";
  for (const auto& [status, n] : status_counts(run.cases))
    out += "<span class=\"badge k-" + status + "\">" + std::to_string(n) + " " + status + "</span> ";
  out += "</p><p>";
  size_t missed = 0;
  for (const auto& c : run.cases) missed += !c.met_expectation;
  out += missed == 0 ? "<b class=\"ok\">Every case met its expectation.</b>"
                     : "<b class=\"bad\">" + std::to_string(missed) + " of " + std::to_string(run.cases.size()) +
                           " cases missed their expectation.</b>";
  if (run.interrupted_by_signal != 0)
    out += " <b class=\"bad\">Interrupted by signal " + std::to_string(run.interrupted_by_signal) + ".</b>";
  out += "</p><dl class=\"facts\">";
  out += dl_row("wall time", human_seconds(run.wall_s));
  out += dl_row("backend", esc(run.backend));
  out += dl_row("devices", std::to_string(run.devices));
  out += dl_row("retries", std::to_string(run.retries));
  out += dl_row("host", esc(run.hostname));
  out += dl_row("matrices", esc(joined(run.matrices), kTextCap));
  if (!run.history_from.empty())
    out += dl_row("history", "commits " + esc(run.history_from.substr(0, 12)) + ".." +
                                 esc(run.history_to.substr(0, 12)) + " (each case's strip below)");
  if (run.format_version != 2)
    out += dl_row("format", "summary format_version " + std::to_string(run.format_version) +
                                " (this page expects 2; some parts may be missing)");
  return out + "</dl></header>\n";
}

// The cases that missed their expectation, first thing on the page.
std::string attention(const std::vector<CaseView>& cases) {
  std::string items;
  size_t n = 0;
  for (const auto& c : cases) {
    if (c.met_expectation) continue;
    if (n++ < kMaxAttentionLinks)
      items +=
          "<li>" + badge(c) + " <a href=\"#" + anchor_of(c.id) + "\">" + esc(c.id) + "</a>: " + esc(c.reason) + "</li>";
  }
  if (n == 0) return "";
  if (n > kMaxAttentionLinks) items += "<li>and " + std::to_string(n - kMaxAttentionLinks) + " more</li>";
  return "<section id=\"attention\"><h2>Missed expectations</h2><ul>" + items + "</ul></section>\n";
}

// Hidden until the script runs: controls that do nothing without JavaScript would mislead.
std::string filters(const std::vector<CaseView>& cases, const Page& page) {
  std::string out = "<form id=\"filters\" hidden><fieldset><legend>Show</legend>";
  for (const auto& [status, n] : status_counts(cases))
    out += "<label><input type=\"checkbox\" name=\"status\" value=\"" + status + "\" checked> " + status + " (" +
           std::to_string(n) + ")</label> ";
  out += "<label><input type=\"checkbox\" id=\"only-missed\"> only missed expectations</label> ";
  out += "<label>tag <select id=\"tag\"><option value=\"\">any</option>";
  for (const auto& [tag, i] : page.tag_index)
    out += "<option value=\"t" + std::to_string(i) + "\">" + esc(tag, 200) + "</option>";
  out += "</select></label> <output id=\"shown\"></output></fieldset></form>\n";
  return out;
}

std::string legend(const std::vector<CaseView>& cases) {
  std::set<std::string> present;
  for (const auto& c : cases) present.insert(colour_class(c));
  std::string out = "<ul class=\"legend\" id=\"legend\">";
  for (const auto& [kind, meaning] : kKinds)
    if (present.count("k-" + kind))
      out += "<li><span class=\"sw k-" + kind + "\"></span>" + kind + ": " + meaning + "</li>";
  if (present.count("k-other"))
    out += "<li><span class=\"sw k-other\"></span>other: a status this page does not know</li>";
  return out + "</ul>";
}

std::string chip(const CaseView& c, const Page& page) {
  return "<a class=\"chip " + colour_class(c) + "\" href=\"#" + anchor_of(c.id) + "\"" + filter_attrs(c, page) +
         " title=\"" + esc(c.id + " — " + c.verdict.kind + ": " + c.reason) + "\">" +
         esc(c.name.empty() ? c.id : c.name) + "</a>";
}

std::string suite_grid(const std::string& suite, const std::vector<const CaseView*>& cases, const Page& page) {
  std::map<std::string, std::string> by_layout;  // mesh → chips
  for (const CaseView* c : cases) by_layout[c->mesh.empty() ? "(no mesh)" : c->mesh] += chip(*c, page);
  std::string out = "<h3>" + esc(suite) + "</h3><table class=\"grid\"><tr><th>layout</th><th>cases</th></tr>";
  for (const auto& [layout, chips] : by_layout) out += "<tr><th>" + esc(layout) + "</th><td>" + chips + "</td></tr>";
  return out + "</table>";
}

// Cases that save under one layout and load under another: one cell per (from, to) step of
// the chain, so a chain dp -> dp,tp -> tp shows in both of its cells.
std::string reshard_table(const std::vector<const CaseView*>& cases, const Page& page) {
  std::map<std::pair<std::string, std::string>, std::string> cells;
  std::set<std::string> from, to;
  for (const CaseView* c : cases) {
    const std::vector<std::string>& meshes = c->meshes;
    for (size_t i = 1; i < meshes.size(); ++i) {
      if (meshes[i] == meshes[i - 1]) continue;
      from.insert(meshes[i - 1]), to.insert(meshes[i]);
      cells[{meshes[i - 1], meshes[i]}] += chip(*c, page);
    }
  }
  if (cells.empty()) return "";
  std::string out = "<table class=\"grid reshard\"><tr><th>saved under ↓ / loaded under →</th>";
  for (const auto& t : to) out += "<th>" + esc(t) + "</th>";
  out += "</tr>";
  for (const auto& f : from) {
    out += "<tr><th>" + esc(f) + "</th>";
    for (const auto& t : to) {
      const auto it = cells.find({f, t});
      out += "<td>" + (it == cells.end() ? std::string() : it->second) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</table>";
}

std::string overview(const std::vector<CaseView>& cases, const Page& page) {
  std::map<std::string, std::vector<const CaseView*>> suites;
  for (const auto& c : cases) suites[c.suite].push_back(&c);
  std::string out = "<section id=\"grid\"><h2>Cases by suite and layout</h2>" + legend(cases);
  for (const auto& [suite, members] : suites) {
    out += suite_grid(suite, members, page);
    const std::string reshard = reshard_table(members, page);
    if (!reshard.empty()) out += "<h4>" + esc(suite) + ": resharding, saved layout × loaded layout</h4>" + reshard;
  }
  return out + "</section>\n";
}

std::map<std::string, int> index_tags(const std::vector<CaseView>& cases) {
  std::set<std::string> tags;
  for (const auto& c : cases) tags.insert(c.tags.begin(), c.tags.end());
  std::map<std::string, int> index;
  for (const auto& t : tags) index.emplace(t, static_cast<int>(index.size()));
  return index;
}

std::string render(const RunView& run, const fs::path& base) {
  const Page page{base, index_tags(run.cases)};
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
      "script-src 'unsafe-inline'; img-src data:\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>meshtest report</title><style>\n";
  out += kHtmlReportCss;
  out += "</style></head><body>\n";
  out += header(run);
  out +=
      "<noscript><p class=\"note\">JavaScript is off: every case and its verdict is listed below; "
      "only filtering and the Copy buttons need JavaScript.</p></noscript>\n<div id=\"js-errors\"></div>\n";
  out += filters(run.cases, page) + attention(run.cases) + overview(run.cases, page);
  out += "<section id=\"cases\"><h2>Cases</h2>\n";
  for (size_t i = 0; i < run.cases.size(); ++i) out += case_section(run.cases[i], i, page);
  out += "</section>\n<script>\n";
  out += kHtmlReportJs;
  out += "</script></body></html>\n";
  return out;
}

}  // namespace

std::string html_report(const RunView& run) { return render(run, fs::current_path()); }

void write_html_report(const RunView& run, const std::string& path) {
  const fs::path target = fs::absolute(path).lexically_normal();
  if (!target.parent_path().empty()) fs::create_directories(target.parent_path());
  const std::string page = render(run, target.parent_path());
  const std::string tmp = target.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, target);
}

}  // namespace meshtest
