#include "bisect.h"
#include "core/git.h"
#include "history/drift.h"

#include <boost/process.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "meshtrain/adapter.h"
#include "run/launch.h"
#include "run/runner.h"

namespace bp = boost::process;
namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

const char* const kDefaultBisectBuild = "bash ci/build.sh meshtrain";

namespace {

struct Interrupted {
  int signal;
};

// `git -C repo ARGS...`: exit code and stdout + stderr.
std::string git_ok(const std::string& repo, const std::vector<std::string>& args) {
  const GitOutput g = git(repo, args);
  if (g.code != 0 && g_stop_signal != 0) throw Interrupted{g_stop_signal};
  if (g.code != 0) {
    std::string cmd;
    for (const auto& a : args) cmd += " " + a;
    throw std::runtime_error("git" + cmd + " failed: " + g.text);
  }
  std::string text = g.text;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string commit_of(const std::string& repo, const std::string& ref, const std::string& flag) {
  const GitOutput g = git(repo, {"rev-parse", "--verify", "-q", ref + "^{commit}"});
  if (g.code != 0) throw std::invalid_argument(flag + " '" + ref + "' is not a commit of " + repo);
  return g.text.substr(0, g.text.find('\n'));
}

// One command, its output in `log_dir`/rank0.log, stopped (SIGTERM, then SIGKILL) when
// meshtest is asked to stop. Returns the exit code; throws Interrupted.
int run_logged(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log_dir,
               std::vector<std::pair<std::string, std::string>> env = {}) {
  LaunchSpec spec;
  spec.argv = argv;
  spec.work_dir = cwd;
  spec.log_dir = log_dir;
  spec.env = std::move(env);
  spec.grace_s = 10;
  RankGroup child(spec);
  while (!child.poll()) {
    if (g_stop_signal != 0) child.stop(stop_reason(g_stop_signal));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (g_stop_signal != 0) throw Interrupted{g_stop_signal};
  const RankExit& e = child.result().exits.front();
  return e.signal != 0 ? 128 + e.signal : e.exit_code;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

enum class Judgement { kGood, kBad, kSkip };
const char* judgement_name(Judgement j) {
  return j == Judgement::kGood ? "good" : j == Judgement::kBad ? "bad" : "skip";
}

// What one commit did.
struct Tested {
  std::string sha;
  std::string subject;
  Judgement judgement = Judgement::kSkip;
  std::string why;  // the case's reason, "did not build ...", "flaky: ..."
  bool flaky = false;
  double build_s = 0, run_s = 0;
  std::string dir;  // <out>/<short sha>
  json the_case;    // its summary.json entry (null when it did not run)
};

// The numbers of a check that compares a subject's series with a reference's: the
// largest |subject - reference| over their common steps, against its bound there.
std::string check_numbers(const json& check) {
  const json series = check.value("series", json::array());
  const json* subject = nullptr;
  const json* reference = nullptr;
  for (const auto& s : series) {
    if (s.value("role", "") == "subject" && !subject) subject = &s;
    if (s.value("role", "") == "reference" && !reference) reference = &s;
  }
  if (!subject || !reference) return "";
  // summary.json writes a non-finite value as null.
  auto value = [](const json& v) { return v.is_number() ? v.get<double>() : NAN; };
  std::map<double, double> ref;
  for (const auto& p : reference->at("points")) ref[p[0].get<double>()] = value(p[1]);
  const json band = check.value("band", json::object());
  const double atol = band.value("atol", 0.0), rtol = band.value("rtol", 0.0);
  double worst = -1, at = 0, bound = 0;
  for (const auto& p : subject->at("points")) {
    const double step = p[0].get<double>();
    if (!ref.count(step)) continue;
    double diff = std::fabs(value(p[1]) - ref[step]);
    if (std::isnan(diff)) diff = INFINITY;
    if (diff > worst) worst = diff, at = step, bound = atol + rtol * std::fabs(ref[step]);
  }
  if (worst < 0) return "";
  char text[320];
  std::snprintf(text, sizeof text, "%s: largest |%s - %s| %.3g at step %.0f (bound there %.3g)",
                subject->value("metric", "loss").c_str(), subject->value("label", "").c_str(),
                reference->value("label", "").c_str(), worst, at, bound);
  return text;
}

// The index of the first judged check that failed in a case, or -1.
int failed_check(const json& the_case) {
  if (!the_case.contains("checks")) return -1;
  const json& checks = the_case["checks"];
  for (size_t i = 0; i < checks.size(); ++i)
    if (checks[i].value("judged", false) && !checks[i].value("passed", true)) return static_cast<int>(i);
  return -1;
}

// The same check in another run of the case: the one at the same place if its kind
// matches, else the first of that kind.
const json* same_check(const json& the_case, const json& check, size_t index) {
  if (!the_case.contains("checks")) return nullptr;
  const json& checks = the_case["checks"];
  const std::string kind = check.value("kind", "");
  if (index < checks.size() && checks[index].value("kind", "") == kind) return &checks[index];
  for (const auto& k : checks)
    if (k.value("kind", "") == kind) return &k;
  return nullptr;
}

// `git bisect start`, and `git bisect reset` on every way out; says so plainly when git
// cannot put the repository back.
class BisectSession {
 public:
  BisectSession(std::string top, std::string original) : top_(std::move(top)), original_(std::move(original)) {
    git_ok(top_, {"bisect", "start"});
  }
  ~BisectSession() { end(); }
  BisectSession(const BisectSession&) = delete;
  BisectSession& operator=(const BisectSession&) = delete;

  // Resets once; true when the repository is back where it was.
  bool end() {
    if (ended_) return restored_;
    ended_ = true;
    const GitOutput g = git(top_, {"bisect", "reset"});
    restored_ = g.code == 0;
    where_ = restored_ ? "the repository is back on " + original_
                       : "the repository is NOT back on " + original_ + " (git bisect reset: " + g.text +
                             "); do what git asks (e.g. git stash), then run git bisect reset in " + top_;
    if (!restored_) std::fprintf(stderr, "bisect: %s\n", where_.c_str());
    return restored_;
  }
  const std::string& where() const { return where_; }

 private:
  std::string top_, original_, where_;
  bool ended_ = false, restored_ = false;
};

class Bisector {
 public:
  explicit Bisector(const BisectOptions& o) : o_(o) {}
  int run();

 private:
  struct Search {
    std::string outcome;
    std::string first_bad;                // "" unless found
    std::vector<std::string> candidates;  // when only skipped commits are left
  };
  void prepare();
  Search search();  // both ends, then git bisect until an answer
  Tested& test(const std::string& sha);
  Judgement judge(Tested& t, int run_code);
  Judgement judge_drift(Tested& t, bool met);
  std::string mark(const std::string& sha, Judgement j);  // git bisect good|bad|skip; its output
  json result_json(const std::string& outcome, const std::string& first_bad,
                   const std::vector<std::string>& candidates);
  void print(const json& r) const;

  BisectOptions o_;
  std::string top_;       // the work tree's root
  std::string judge_;     // the copy of meshtest that runs every case
  std::string original_;  // "branch main" or the detached commit, for the message at the end
  std::string good_, bad_;
  std::map<std::string, std::map<long long, double>> reference_;  // --drift: GOOD's loss, phase -> step -> value
  std::map<std::string, Tested> tested_;
  std::vector<std::string> order_;  // shas in the order tested
};

void Bisector::prepare() {
  top_ = git_ok(o_.repo, {"rev-parse", "--show-toplevel"});
  fs::path bisect_start = git_ok(top_, {"rev-parse", "--git-path", "BISECT_START"});
  if (bisect_start.is_relative()) bisect_start = fs::path(top_) / bisect_start;
  if (fs::exists(bisect_start))
    throw std::invalid_argument("a git bisect is already under way in " + top_ + " (git bisect reset ends it)");
  if (!git_ok(top_, {"status", "--porcelain", "--untracked-files=no"}).empty())
    throw std::invalid_argument(top_ +
                                " has uncommitted changes to tracked files; commit or stash them first "
                                "(bisecting checks out other commits)");
  good_ = commit_of(top_, o_.good, "--good");
  bad_ = commit_of(top_, o_.bad, "--bad");
  if (good_ == bad_) throw std::invalid_argument("--good and --bad are the same commit");
  if (git(top_, {"merge-base", "--is-ancestor", good_, bad_}).code != 0)
    throw std::invalid_argument("--good " + o_.good + " is not an ancestor of --bad " + o_.bad);
  const GitOutput branch = git(top_, {"symbolic-ref", "-q", "--short", "HEAD"});
  original_ = branch.code == 0 ? "branch " + branch.text.substr(0, branch.text.find('\n'))
                               : "commit " + git_ok(top_, {"rev-parse", "--short", "HEAD"});

  if (o_.out.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "meshtest-bisect-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("cannot make a folder under " + fs::temp_directory_path().string());
    o_.out = tmpl;
  }
  o_.out = fs::absolute(o_.out).string();
  fs::create_directories(o_.out);
  judge_ = (fs::path(o_.out) / "judge" / "meshtest").string();
  fs::create_directories(fs::path(judge_).parent_path());
  fs::copy_file(fs::read_symlink("/proc/self/exe"), judge_, fs::copy_options::overwrite_existing);
  if (o_.meshtrain.empty() && fs::exists(meshtrain_binary())) o_.meshtrain = meshtrain_binary();
  if (!o_.meshtrain.empty()) o_.meshtrain = fs::absolute(o_.meshtrain).string();
  for (auto& m : o_.matrices) m = fs::absolute(m).string();
}

// Builds and runs the case at `sha` (checked out by the caller); remembered by sha.
Tested& Bisector::test(const std::string& sha) {
  if (tested_.count(sha)) return tested_[sha];
  Tested t;
  t.sha = sha;
  t.subject = git_ok(top_, {"show", "-s", "--format=%s", sha});
  t.dir = (fs::path(o_.out) / sha.substr(0, 12)).string();
  fs::remove_all(t.dir);
  const std::string short_sha = sha.substr(0, 12);
  std::fprintf(stderr, "bisect: %s %s\n", short_sha.c_str(), t.subject.c_str());
  if (!o_.build.empty()) {
    const auto start = std::chrono::steady_clock::now();
    const int code = run_logged({"sh", "-c", o_.build}, top_, t.dir + "/build");
    t.build_s = seconds_since(start);
    if (code != 0) {
      t.why = "did not build (exit " + std::to_string(code) + "): " + t.dir + "/build/rank0.log";
      std::fprintf(stderr, "bisect: %s skip: %s\n", short_sha.c_str(), t.why.c_str());
      order_.push_back(sha);
      return tested_[sha] = t;
    }
  }
  std::vector<std::string> argv = {judge_, "run"};
  argv.insert(argv.end(), o_.matrices.begin(), o_.matrices.end());
  argv.insert(argv.end(), {"--id", o_.case_id, "--out", t.dir + "/run", "--retries", std::to_string(o_.retries),
                           "--backend", o_.backend});
  if (o_.ngpu >= 0) argv.insert(argv.end(), {"--ngpu", std::to_string(o_.ngpu)});
  if (!o_.meshtrain.empty()) argv.insert(argv.end(), {"--meshtrain", o_.meshtrain});
  const auto start = std::chrono::steady_clock::now();
  const int code = run_logged(argv, top_, t.dir + "/meshtest", {{"CI", "1"}});
  t.run_s = seconds_since(start);
  t.judgement = judge(t, code);
  std::fprintf(stderr, "bisect: %s %s%s%s\n", short_sha.c_str(), judgement_name(t.judgement), t.why.empty() ? "" : ": ",
               t.why.c_str());
  order_.push_back(sha);
  return tested_[sha] = t;
}

Judgement Bisector::judge(Tested& t, int run_code) {
  std::ifstream in(t.dir + "/run/summary.json");
  if (!in) {
    t.why = "meshtest run exited " + std::to_string(run_code) +
            " without a summary (the case or matrix at this "
            "commit?): " +
            t.dir + "/meshtest/rank0.log";
    return Judgement::kSkip;
  }
  const json summary = json::parse(in, nullptr, false);
  if (summary.is_discarded() || !summary.contains("cases") || !summary["cases"].is_array()) {
    t.why = "meshtest run exited " + std::to_string(run_code) + " with an unreadable " + t.dir + "/run/summary.json";
    return Judgement::kSkip;
  }
  for (const auto& c : summary["cases"])
    if (c.is_object() && c.value("id", "") == o_.case_id) t.the_case = c;
  if (t.the_case.is_null()) {
    t.why = "no case " + o_.case_id + " in this commit's run";
    return Judgement::kSkip;
  }
  const std::string status = t.the_case.value("status", "");
  const bool met = t.the_case.value("met_expectation", false);
  if (status == "skipped" || status == "cancelled") {
    t.why = status + ": " + t.the_case.value("reason", "");
    return Judgement::kSkip;
  }
  if (met && !t.the_case.value("earlier_attempts", json::array()).empty()) {
    t.flaky = true;
    t.why = "flaky: " + t.the_case["earlier_attempts"][0].value("reason", "") + "; then met its expectation on a retry";
    return Judgement::kSkip;
  }
  if (o_.drift) return judge_drift(t, met);
  if (met) return Judgement::kGood;
  t.why = t.the_case.value("reason", "");
  return Judgement::kBad;
}

// --drift: GOOD's curves are the reference; a commit whose loss left their band is bad.
Judgement Bisector::judge_drift(Tested& t, bool met) {
  auto curves = [](const json& the_case) {
    std::map<std::string, std::map<long long, double>> out;  // phase -> step -> loss
    for (const auto& p : the_case.value("phases", json::array()))
      for (const auto& point : p.value("curve", json::array()))
        if (point.is_array() && point.size() >= 2 && point[0].is_number() && point[1].is_number())
          out[p.value("name", "")][point[0].get<long long>()] = point[1].get<double>();
    return out;
  };
  if (t.sha == good_) {
    reference_ = curves(t.the_case);
    if (!met || reference_.empty())
      t.why = met ? "no loss curve at good to compare with" : t.the_case.value("reason", "");
    return met && !reference_.empty() ? Judgement::kGood : Judgement::kBad;
  }
  const double floor = drift_rule().rel_floor;
  for (const auto& [phase, steps] : curves(t.the_case))
    for (const auto& [step, value] : steps) {
      const auto ref = reference_.find(phase);
      if (ref == reference_.end() || !ref->second.count(step)) continue;
      const double want = ref->second.at(step);
      if (!(std::fabs(value - want) <= floor * std::fabs(want))) {
        char why[200];
        std::snprintf(why, sizeof why, "loss of phase %s at step %lld: %.9g, good's %.9g (band \xc2\xb1 %.2e)",
                      phase.c_str(), step, value, want, floor * std::fabs(want));
        t.why = std::string(why) + (met ? "; the case passed" : "; the case failed too");
        return Judgement::kBad;
      }
    }
  if (!met) {
    t.why = t.the_case.value("reason", "");
    return Judgement::kBad;
  }
  return Judgement::kGood;
}

std::string Bisector::mark(const std::string& sha, Judgement j) {
  const GitOutput g = git(top_, {"bisect", judgement_name(j), sha});
  // Exit 2 with "only 'skip'ped commits left" is an answer, not an error.
  if (g.code != 0 && g.text.find("skip") == std::string::npos)
    throw std::runtime_error("git bisect " + std::string(judgement_name(j)) + " failed: " + g.text);
  return g.text;
}

json Bisector::result_json(const std::string& outcome, const std::string& first_bad,
                           const std::vector<std::string>& candidates) {
  json r = {{"case", o_.case_id}, {"good", good_},      {"bad", bad_},      {"outcome", outcome},
            {"out", o_.out},      {"repository", top_}, {"build", o_.build}};
  r["tested"] = json::array();
  double first_build = -1, later_builds = 0;
  int later = 0;
  for (const auto& sha : order_) {
    const Tested& t = tested_.at(sha);
    r["tested"].push_back({{"commit", sha},
                           {"subject", t.subject},
                           {"judgement", judgement_name(t.judgement)},
                           {"flaky", t.flaky},
                           {"why", t.why},
                           {"build_s", t.build_s},
                           {"run_s", t.run_s},
                           {"report", t.the_case.is_null() ? "" : t.dir + "/run/report.html"}});
    if (o_.build.empty()) continue;
    if (first_build < 0)
      first_build = t.build_s;
    else
      later_builds += t.build_s, ++later;
  }
  r["builds"] = {
      {"first_s", std::max(first_build, 0.0)}, {"later_mean_s", later ? later_builds / later : 0.0}, {"later", later}};
  r["candidates"] = json::array();
  for (const auto& sha : candidates)
    r["candidates"].push_back({{"commit", sha}, {"subject", git_ok(top_, {"show", "-s", "--format=%s", sha})}});
  if (first_bad.empty()) return r;

  const std::string info = git_ok(top_, {"show", "-s", "--format=%s%n%an <%ae>%n%aI", first_bad});
  std::istringstream lines(info);
  std::string subject, author, date;
  std::getline(lines, subject), std::getline(lines, author), std::getline(lines, date);
  json fb = {{"commit", first_bad}, {"subject", subject}, {"author", author}, {"date", date}};
  const Tested& bad = tested_.at(first_bad);
  fb["report"] = bad.dir + "/run/report.html";
  fb["reason"] = bad.why;
  if (const int index = bad.the_case.is_null() ? -1 : failed_check(bad.the_case); index >= 0) {
    const json& k = bad.the_case["checks"][static_cast<size_t>(index)];
    fb["check"] = k.value("kind", "");
    fb["message"] = k.value("message", "");
    fb["numbers"] = check_numbers(k);
    const std::string parent = git_ok(top_, {"rev-parse", first_bad + "^"});
    if (tested_.count(parent) && !tested_.at(parent).the_case.is_null()) {
      const Tested& p = tested_.at(parent);
      json pj = {
          {"commit", parent}, {"judgement", judgement_name(p.judgement)}, {"report", p.dir + "/run/report.html"}};
      if (const json* same = same_check(p.the_case, k, static_cast<size_t>(index))) {
        pj["passed"] = same->value("passed", false);
        pj["message"] = same->value("message", "");
        pj["numbers"] = check_numbers(*same);
      }
      fb["parent"] = pj;
    }
  }
  r["first_bad"] = fb;
  return r;
}

void Bisector::print(const json& r) const {
  const std::string outcome = r["outcome"];
  std::printf("meshtest bisect %s: %s between good %.12s and bad %.12s, %zu commits tested\n", o_.case_id.c_str(),
              outcome.c_str(), good_.c_str(), bad_.c_str(), r["tested"].size());
  for (const auto& t : r["tested"])
    std::printf("  %.12s %-4s %s%s%s\n", t["commit"].get<std::string>().c_str(),
                t["judgement"].get<std::string>().c_str(), t["subject"].get<std::string>().c_str(),
                t["why"].get<std::string>().empty() ? "" : "\n               ", t["why"].get<std::string>().c_str());
  if (r.contains("first_bad")) {
    const json& fb = r["first_bad"];
    std::printf("\nfirst bad commit: %s\n  %s\n  %s, %s\n", fb["commit"].get<std::string>().c_str(),
                fb["subject"].get<std::string>().c_str(), fb["author"].get<std::string>().c_str(),
                fb["date"].get<std::string>().c_str());
    std::printf("  there:  %s\n", fb["reason"].get<std::string>().c_str());
    if (!fb.value("numbers", "").empty()) std::printf("          %s\n", fb["numbers"].get<std::string>().c_str());
    if (fb.contains("parent")) {
      const json& p = fb["parent"];
      std::printf("  parent %.12s: %s %s\n", p["commit"].get<std::string>().c_str(),
                  fb["check"].get<std::string>().c_str(),
                  p.value("passed", false) ? "passed" : ("failed: " + p.value("message", "")).c_str());
      if (!p.value("numbers", "").empty()) std::printf("          %s\n", p["numbers"].get<std::string>().c_str());
      std::printf("  reports: %s\n           %s\n", fb["report"].get<std::string>().c_str(),
                  p["report"].get<std::string>().c_str());
    } else {
      std::printf("  report: %s\n", fb["report"].get<std::string>().c_str());
    }
  }
  if (!r["candidates"].empty()) {
    std::printf(
        "\nthe first bad commit is one of these (skipped commits lie between the last good and the first bad):\n");
    for (const auto& c : r["candidates"])
      std::printf("  %s %s\n", c["commit"].get<std::string>().c_str(), c["subject"].get<std::string>().c_str());
  }
  if (r["builds"]["later"].get<int>() > 0)
    std::printf("\nbuilds: the first %.1f s, the %d later ones %.1f s each on average\n",
                r["builds"]["first_s"].get<double>(), r["builds"]["later"].get<int>(),
                r["builds"]["later_mean_s"].get<double>());
}

Bisector::Search Bisector::search() {
  Search found;
  // Both ends first: a bisect between two failing (or two passing) commits finds nothing.
  // Under --drift, GOOD is the reference the other commits are judged against: it runs first.
  if (o_.drift) {
    git_ok(top_, {"checkout", "-q", "--detach", good_});
    test(good_);
  }
  git_ok(top_, {"checkout", "-q", "--detach", bad_});
  const Tested& at_bad = test(bad_);
  git_ok(top_, {"checkout", "-q", "--detach", good_});
  const Tested& at_good = test(good_);
  if (at_bad.judgement != Judgement::kBad) {
    found.outcome = "not reproduced at bad";
    return found;
  }
  if (at_good.judgement != Judgement::kGood) {
    found.outcome = "good is not good";
    return found;
  }
  mark(bad_, Judgement::kBad);
  for (std::string said = mark(good_, Judgement::kGood);;) {
    if (said.find("is the first bad commit") != std::string::npos) {
      found.first_bad = said.substr(0, said.find(' '));
      break;
    }
    if (said.find("only 'skip'ped commits left") != std::string::npos) {
      std::istringstream lines(said);
      for (std::string line; std::getline(lines, line);)
        if (line.size() >= 40 && line.find_first_not_of("0123456789abcdef") >= 40) found.candidates.push_back(line);
      found.outcome = "only skipped commits left";
      return found;
    }
    const std::string sha = git_ok(top_, {"rev-parse", "HEAD"});
    if (tested_.count(sha)) throw std::runtime_error("git bisect did not move on from " + sha + ": " + said);
    said = mark(sha, test(sha).judgement);
  }
  // The numbers at the parent: git may have inferred it good without running it.
  const std::string parent = git_ok(top_, {"rev-parse", found.first_bad + "^"});
  if (!tested_.count(parent)) {
    git_ok(top_, {"checkout", "-q", "--detach", parent});
    test(parent);
  }
  found.outcome = "found";
  return found;
}

int Bisector::run() {
  prepare();
  install_stop_handlers();
  std::fprintf(stderr, "bisect: %s in %s, output in %s\n", o_.case_id.c_str(), top_.c_str(), o_.out.c_str());
  BisectSession session(top_, original_);
  Search found;
  json r;
  try {
    found = search();
    r = result_json(found.outcome, found.first_bad, found.candidates);
  } catch (const Interrupted& i) {
    session.end();
    std::fprintf(stderr, "bisect: interrupted by signal %d; %s\n", i.signal, session.where().c_str());
    return 128 + i.signal;
  }
  r["restored"] = session.end();
  std::ofstream(fs::path(o_.out) / "bisect.json") << r.dump(2) << "\n";
  if (o_.json)
    std::printf("%s\n", r.dump(2).c_str());
  else
    print(r);
  std::fflush(stdout);
  std::fprintf(o_.json ? stderr : stdout, "everything: %s; %s\n", o_.out.c_str(), session.where().c_str());
  if (g_stop_signal != 0) return 128 + g_stop_signal;
  return found.first_bad.empty() ? 1 : 0;
}

}  // namespace

int bisect(const BisectOptions& options) { return Bisector(options).run(); }

}  // namespace meshtest
