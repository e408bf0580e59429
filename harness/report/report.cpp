#include "report/report.h"

#include <pugixml.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>

#include "core/outcome.h"
#include "readers/rank_files.h"
#include "readers/utf8.h"
#include "core/verdict.h"

namespace fs = std::filesystem;

namespace meshtest {

namespace {

constexpr size_t kMessageCap = 500;        // attribute: one line
constexpr size_t kBodyCap = 64 * 1024;     // failure body
constexpr size_t kOutputCap = 256 * 1024;  // system-out per case

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", s);  // always '.', whatever the locale
  return buf;
}

bool xml_allowed(unsigned cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
         (cp >= 0x10000 && cp <= 0x10FFFF);
}

// Skips an ANSI escape sequence starting at s[i] == ESC; returns the index after it.
size_t skip_ansi(const std::string& s, size_t i) {
  if (i + 1 >= s.size()) return i + 1;
  const char kind = s[i + 1];
  if (kind == '[') {  // CSI: parameters, then one final byte in @..~
    size_t j = i + 2;
    while (j < s.size() && !(s[j] >= 0x40 && s[j] <= 0x7E)) ++j;
    return std::min(j + 1, s.size());
  }
  if (kind == ']') {  // OSC: until BEL or ESC backslash
    size_t j = i + 2;
    while (j < s.size() && s[j] != '\a' && !(s[j] == '\x1b' && j + 1 < s.size() && s[j + 1] == '\\')) ++j;
    return std::min(j + (j < s.size() && s[j] == '\a' ? 1 : 2), s.size());
  }
  return i + 2;
}

std::string one_line(const std::string& s) {
  std::string out = s.substr(0, s.find('\n'));
  return xml_safe(out, kMessageCap);
}

struct Counts {
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double time = 0;
};

// What JUnit and Surefire need of a verdict. summary.json format 1 had none; an unknown kind
// throws (verdict_kind_from_name): the element and type of a case must never be guessed.
Verdict verdict_of(const VerdictView& v, const std::string& case_id) {
  if (!v.present)
    throw std::runtime_error("case " + case_id +
                             " has no verdict: summary.json format 1 predates typed verdicts; rerun the cases");
  Verdict out{verdict_kind_from_name(v.kind), v.message};
  out.check = v.check;
  out.phase = v.phase;
  return out;
}

Verdict verdict_of(const CaseView& c) { return verdict_of(c.verdict, c.id.empty() ? "?" : c.id); }

JunitElement element_of(const CaseView& c) { return junit_element(verdict_of(c).kind); }

// What a simulated verdict stands for, in one line (docs/simulation.md).
std::string simulated_world(const CaseView& c) {
  return std::to_string(c.ngpu) +
         " ranks on one device (simulated world: real collectives' math in rank order, "
         "not the real transport)";
}

// system-out of a case: the facts, the repro, and the failing rank's last lines.
std::string case_output(const CaseView& c) {
  std::string out = "meshtest: " + c.id + "\n";
  out += "expect: " + c.expect + "\nstatus: " + c.status + "\n";
  if (!mesh_chain(c).empty()) out += "mesh: " + mesh_chain(c) + "\n";
  out += "ngpu: " + std::to_string(c.ngpu) + "\n";
  if (c.simulated) out += "simulated: " + simulated_world(c) + "\n";
  if (!c.seed.empty()) out += "seed: " + c.seed + "\n";
  out += "timestamp: " + c.timestamp + "\n";
  out += "repro: " + c.repro + "\n";
  for (const auto& a : c.earlier_attempts)
    out += "earlier attempt failed: " + a.reason + " (log " + a.failing_log + ")\n";
  const std::string& log = c.failing_log;
  if (element_of(c) == JunitElement::kFailure || element_of(c) == JunitElement::kError) {
    out += "\n---- last " + std::to_string(kLogTailLines) + " lines of " + log + " ----\n" +
           tail_of_file(log, kLogTailLines, 4 * kOutputCap);
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += "[[ATTACHMENT|" + (log.empty() ? std::string() : fs::absolute(log).string()) + "]]\n";
  }
  return xml_safe(out, kOutputCap);
}

std::string case_body(const CaseView& c) {
  std::string body = c.details;
  for (const auto& phase : c.phases)
    if (phase.ran && !phase.ok) body += "phase " + phase.name + ": " + phase.stopped_because + "\n";
  body += "repro: " + c.repro + "\n";
  return xml_safe(body, kBodyCap);
}

void add_properties(pugi::xml_node suite, const RunView& run, const std::vector<const CaseView*>& cases) {
  auto props = suite.append_child("properties");
  auto add = [&](const std::string& name, const std::string& value) {
    auto p = props.append_child("property");
    p.append_attribute("name") = xml_safe(name, kMessageCap).c_str();
    p.append_attribute("value") = xml_safe(value, 4096).c_str();
  };
  add("backend", run.backend);
  add("devices", std::to_string(run.devices));
  std::string matrices;
  for (const auto& m : run.matrices) matrices += (matrices.empty() ? "" : " ") + m;
  add("matrices", matrices);
  // Per-case facts live here because the junit-4 schema allows no properties on a testcase.
  for (const CaseView* c : cases) {
    add(c->id + ".mesh", mesh_chain(*c));
    add(c->id + ".ngpu", std::to_string(c->ngpu));
    add(c->id + ".backend", run.backend);
    add(c->id + ".seed", c->seed);
    add(c->id + ".repro", c->repro);
    if (!c->drift.empty()) add(c->id + ".drift", c->drift);
    if (c->simulated) add(c->id + ".simulated", simulated_world(*c));
  }
}

std::map<std::string, std::vector<const CaseView*>> by_suite(const RunView& run) {
  std::map<std::string, std::vector<const CaseView*>> suites;
  for (const auto& c : run.cases) suites[c.suite].push_back(&c);
  return suites;
}

std::string suite_timestamp(const std::vector<const CaseView*>& cases) {
  std::string first;
  for (const CaseView* c : cases)
    if (!c->timestamp.empty() && (first.empty() || c->timestamp < first)) first = c->timestamp;
  return first.empty() ? "1970-01-01T00:00:00" : first;
}

void add_declaration(pugi::xml_document& doc) {
  auto decl = doc.append_child(pugi::node_declaration);
  decl.append_attribute("version") = "1.0";
  decl.append_attribute("encoding") = "UTF-8";
}

// <testsuite name=suite> with its properties; the caller adds the testcases, then the counts.
pugi::xml_node append_suite(pugi::xml_node parent, const std::string& suite_name, const RunView& run,
                            const std::vector<const CaseView*>& cases) {
  auto suite = parent.append_child("testsuite");
  suite.append_attribute("name") = suite_name.c_str();
  add_properties(suite, run, cases);
  return suite;
}

enum class XmlFormat { kJunit, kSurefire };

// A suite's counts, in the attribute order each format has always been written in (so the
// files stay byte-stable): JUnit tests, failures, errors, skipped; Surefire tests, errors,
// skipped, failures; then time.
void add_counts(pugi::xml_node suite, const Counts& n, XmlFormat format) {
  suite.append_attribute("tests") = n.tests;
  if (format == XmlFormat::kJunit) suite.append_attribute("failures") = n.failures;
  suite.append_attribute("errors") = n.errors;
  suite.append_attribute("skipped") = n.skipped;
  if (format == XmlFormat::kSurefire) suite.append_attribute("failures") = n.failures;
  suite.append_attribute("time") = seconds(n.time).c_str();
}

// <testcase name=id classname=suite time=...>, counted into `n`; the caller adds the verdict.
pugi::xml_node append_testcase(pugi::xml_node suite, const CaseView& c, const std::string& suite_name, Counts& n) {
  ++n.tests;
  n.time += c.duration_s;
  auto tc = suite.append_child("testcase");
  tc.append_attribute("name") = c.id.c_str();
  tc.append_attribute("classname") = suite_name.c_str();
  tc.append_attribute("time") = seconds(c.duration_s).c_str();
  return tc;
}

void save(const pugi::xml_document& doc, const std::string& path) {
  if (!fs::path(path).parent_path().empty()) fs::create_directories(fs::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  if (!doc.save_file(tmp.c_str(), "  ", pugi::format_default, pugi::encoding_utf8))
    throw std::runtime_error("cannot write " + path);
  fs::rename(tmp, path);
}

// TEST-<suite>.xml. The suite comes from summary.json, which a person may edit: the name
// must be one file in the folder, and short enough for any file system (255 bytes).
std::string surefire_file_name(const std::string& suite) {
  std::string name = suite;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != '-') ch = '_';
  if (name.size() > 200) {
    char tail[24];
    std::snprintf(tail, sizeof tail, "-%016zx", std::hash<std::string>{}(suite));
    name = name.substr(0, 180) + tail;
  }
  return "TEST-" + name + ".xml";
}

}  // namespace

std::string xml_safe(const std::string& raw, size_t cap) {
  std::string text = raw;
  if (text.size() > cap) {
    const size_t head = cap / 8, tail = cap - head;
    text = text.substr(0, head) + "\n...[truncated " + std::to_string(raw.size() - cap) + " bytes]...\n" +
           text.substr(text.size() - tail);
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b == 0x1B) {
      i = skip_ansi(text, i);
      continue;
    }
    unsigned cp = 0;
    size_t len = 0;
    if (b < 0x80)
      cp = b, len = 1;
    else if ((b & 0xE0) == 0xC0)
      cp = b & 0x1F, len = 2;
    else if ((b & 0xF0) == 0xE0)
      cp = b & 0x0F, len = 3;
    else if ((b & 0xF8) == 0xF0)
      cp = b & 0x07, len = 4;
    bool valid = len > 0 && i + len <= text.size();
    for (size_t k = 1; valid && k < len; ++k) {
      const unsigned char cont = static_cast<unsigned char>(text[i + k]);
      if ((cont & 0xC0) != 0x80) valid = false;
      cp = (cp << 6) | (cont & 0x3F);
    }
    // Overlong forms and surrogates are invalid UTF-8 too.
    if (valid && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                  (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
      valid = false;
    if (!valid) {
      append_utf8(out, 0xFFFD);
      ++i;
      continue;
    }
    if (xml_allowed(cp)) {
      out.append(text, i, len);
    } else {
      char esc[16];
      std::snprintf(esc, sizeof(esc), cp < 0x100 ? "\\x%02x" : "\\u%04x", cp);
      out += esc;
    }
    i += len;
  }
  return out;
}

void write_junit(const RunView& run, const std::string& path) {
  pugi::xml_document doc;
  add_declaration(doc);
  auto root = doc.append_child("testsuites");
  root.append_attribute("name") = "meshtest";
  Counts total;
  for (const auto& [suite_name, cases] : by_suite(run)) {
    Counts n;
    auto suite = append_suite(root, suite_name, run, cases);
    for (const CaseView* c : cases) {
      auto tc = append_testcase(suite, *c, suite_name, n);
      const Verdict v = verdict_of(*c);
      switch (junit_element(v.kind)) {
        case JunitElement::kNone: break;
        case JunitElement::kSkipped:
          ++n.skipped;
          // junit-4 allows no attributes on <skipped>; Jenkins takes the text as the message.
          tc.append_child("skipped").text().set(
              one_line(v.kind == VerdictKind::kXfailed ? "xfail: " + v.message : v.message).c_str());
          break;
        case JunitElement::kFailure:
        case JunitElement::kError: {
          const bool error = junit_element(v.kind) == JunitElement::kError;
          ++(error ? n.errors : n.failures);
          auto e = tc.append_child(error ? "error" : "failure");
          e.append_attribute("message") = one_line(v.message).c_str();
          e.append_attribute("type") = junit_type(v).c_str();
          e.text().set(case_body(*c).c_str());
          break;
        }
      }
      tc.append_child("system-out").text().set(case_output(*c).c_str());
    }
    add_counts(suite, n, XmlFormat::kJunit);
    suite.append_attribute("timestamp") = suite_timestamp(cases).c_str();
    // junit-4 requires a non-empty hostname.
    suite.append_attribute("hostname") = (run.hostname.empty() ? "localhost" : run.hostname).c_str();
    total.tests += n.tests, total.failures += n.failures, total.errors += n.errors;
  }
  root.append_attribute("tests") = total.tests;
  root.append_attribute("failures") = total.failures;
  root.append_attribute("errors") = total.errors;
  root.append_attribute("time") = seconds(run.wall_s).c_str();
  save(doc, path);
}

void write_surefire(const RunView& run, const std::string& dir) {
  for (const auto& [suite_name, cases] : by_suite(run)) {
    pugi::xml_document doc;
    add_declaration(doc);
    auto suite = append_suite(doc, suite_name, run, cases);
    Counts n;
    for (const CaseView* c : cases) {
      auto tc = append_testcase(suite, *c, suite_name, n);
      const Verdict v = verdict_of(*c);
      const JunitElement element = junit_element(v.kind);
      // Surefire: the first failed attempt is <failure>/<error>, later ones rerun*; a pass
      // after failed attempts keeps one flaky* per failed attempt and counts as passed.
      auto add_attempt = [&](const char* element_name, const Verdict& attempt, const std::string& details,
                             const std::string& type) {
        auto e = tc.append_child(element_name);
        e.append_attribute("message") = one_line(attempt.message).c_str();
        e.append_attribute("type") = type.c_str();
        e.append_child("stackTrace").text().set(xml_safe(details, kBodyCap).c_str());
      };
      std::vector<std::pair<Verdict, std::string>> failed;  // verdict, details; oldest first
      for (const auto& a : c->earlier_attempts) failed.emplace_back(verdict_of(a.verdict, c->id), a.details);
      auto is_error = [](const Verdict& attempt) { return junit_element(attempt.kind) == JunitElement::kError; };
      if (element == JunitElement::kNone) {
        for (const auto& [attempt, details] : failed)
          if (!is_error(attempt)) add_attempt("flakyFailure", attempt, details, "Failure");
        for (const auto& [attempt, details] : failed)
          if (is_error(attempt)) add_attempt("flakyError", attempt, details, junit_type(attempt));
      } else if (element == JunitElement::kFailure || element == JunitElement::kError) {
        failed.emplace_back(v, c->details);
        const bool error = element == JunitElement::kError;
        auto first = tc.append_child(error ? "error" : "failure");
        first.append_attribute("message") = one_line(failed.front().first.message).c_str();
        // The first attempt's type where it failed the same way (error or failure) as the last.
        const Verdict& typed = is_error(failed.front().first) == error ? failed.front().first : v;
        first.append_attribute("type") = junit_type(typed).c_str();
        first.text().set(xml_safe(failed.front().second + "repro: " + c->repro + "\n", kBodyCap).c_str());
        for (size_t k = 1; k < failed.size(); ++k)
          add_attempt(error ? "rerunError" : "rerunFailure", failed[k].first, failed[k].second,
                      error ? junit_type(failed[k].first) : "Failure");
        (error ? n.errors : n.failures)++;
      } else {
        ++n.skipped;
        tc.append_child("skipped").append_attribute("message") = one_line(v.message).c_str();
      }
      tc.append_child("system-out").text().set(case_output(*c).c_str());
    }
    add_counts(suite, n, XmlFormat::kSurefire);
    save(doc, (fs::path(dir) / surefire_file_name(suite_name)).string());
  }
}

void print_report(const RunView& run, FILE* out) {
  size_t width = 20;
  for (const auto& c : run.cases) width = std::max(width, c.id.size());
  std::fprintf(out, "\n%-*s  %-9s  %5s  %9s  %s\n", static_cast<int>(width), "case", "status", "ngpu", "time", "note");
  std::map<std::string, int> counts;
  int flaky = 0;
  for (const auto& c : run.cases) {
    ++counts[c.status];
    std::string note = c.reason;
    const size_t retries = c.earlier_attempts.size();
    if (retries > 0 && c.status == "passed") {
      ++flaky;
      note = "FLAKY: passed after " + std::to_string(retries) + " failed attempt" + (retries > 1 ? "s" : "") +
             (note.empty() ? "" : "; " + note);
    }
    if (note.size() > 110) note = note.substr(0, 107) + "...";
    std::fprintf(out, "%-*s  %-9s  %5d  %9s  %s\n", static_cast<int>(width), c.id.c_str(), c.status.c_str(), c.ngpu,
                 human_seconds(c.duration_s).c_str(), note.c_str());
  }
  bool any_failed = false;
  for (const auto& c : run.cases) any_failed |= !c.met_expectation;
  if (any_failed) {
    std::fprintf(out, "\nFAILURE SUMMARY\n");
    for (const auto& c : run.cases) {
      if (c.met_expectation) continue;
      std::fprintf(out, "\n%s %s: %s\n", c.status.c_str(), c.id.c_str(), c.reason.c_str());
      if (!c.failing_log.empty()) std::fprintf(out, "  log:   %s\n", c.failing_log.c_str());
      std::fprintf(out, "  repro: %s\n", c.repro.c_str());
    }
  }
  size_t drifted = 0;
  for (const auto& c : run.cases)
    if (!c.drift.empty())
      std::fprintf(out, "%s%s: %s\n",
                   drifted++ ? "" : "\nDRIFT (passed, but left the band of its recent green runs; docs/history.md)\n",
                   c.id.c_str(), c.drift.c_str());
  std::string totals;
  for (const auto& [k, v] : counts) totals += (totals.empty() ? "" : ", ") + std::to_string(v) + " " + k;
  if (drifted) totals += " (" + std::to_string(drifted) + " drifted)";
  if (flaky) totals += " (" + std::to_string(flaky) + " flaky)";
  std::fprintf(out, "\n%s in %s%s\n", totals.c_str(), human_seconds(run.wall_s).c_str(),
               run.interrupted_by_signal ? " (interrupted)" : "");
}

}  // namespace meshtest
