#include "run/requirements.h"

#include <boost/process.hpp>
#include <boost/process/extend.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/adapters.h"
#include "run/launch.h"

namespace meshtest {

namespace {

namespace bp = boost::process;
namespace fs = std::filesystem;

// python_version: argv is MODULE OP VERSION [OP VERSION ...]. Compares the release numbers of
// MODULE.__version__ (2.4.0a0+git12 is 2.4.0), missing ones as 0; says why on stderr.
const char* const kVersionProbe = R"py(import importlib, re, sys
name = sys.argv[1]
try:
    module = importlib.import_module(name)
except Exception as e:
    sys.exit("%s: %s" % (type(e).__name__, e))
version = getattr(module, "__version__", None)
if version is None:
    sys.exit("%s has no __version__" % name)
version = str(version)
def release(v):
    m = re.match(r"\d+(\.\d+)*", v)
    return [int(x) for x in m.group(0).split(".")] if m else []
for op, want in zip(sys.argv[2::2], sys.argv[3::2]):
    a, b = release(version), release(want)
    n = max(len(a), len(b))
    a, b = a + [0] * (n - len(a)), b + [0] * (n - len(b))
    ok = {">=": a >= b, ">": a > b, "<=": a <= b, "<": a < b, "==": a == b, "!=": a != b}[op]
    if not ok:
        sys.exit("%s %s is not %s%s" % (name, version, op, want))
)py";

// A program as a probe names it: a path with a '/' is relative to the matrix file's folder, a
// bare name is looked up on PATH. "" and `why` when there is no such program.
std::string resolve_program(const std::string& program, const std::string& dir, std::string* why) {
  if (program.find('/') != std::string::npos) {
    const fs::path path =
        (fs::path(program).is_absolute() ? fs::path(program) : fs::path(dir) / program).lexically_normal();
    if (::access(path.c_str(), X_OK) != 0) {
      *why = "cannot run " + path.string() + ": " + std::strerror(errno);
      return "";
    }
    return path.string();
  }
  const auto found = bp::search_path(program);
  if (found.empty()) {
    *why = "cannot run '" + program + "': not found on PATH";
    return "";
  }
  return found.string();
}

// What a probe runs, with its program resolved.
std::vector<std::string> probe_argv(const Requirement& r, std::string* why) {
  std::vector<std::string> argv;
  switch (r.kind) {
    case Requirement::kCommand: argv = r.argv; break;
    case Requirement::kPython: argv = {r.interpreter, "-c", r.text}; break;
    case Requirement::kPythonVersion:
      argv = {r.interpreter, "-c", kVersionProbe, r.module};
      for (const auto& [op, version] : r.constraints) argv.push_back(op), argv.push_back(version);
      break;
    case Requirement::kGpus: return {};
  }
  if (argv.empty()) return argv;
  const std::string program = resolve_program(argv.front(), r.dir, why);
  if (!program.empty()) argv.front() = program;
  return argv;
}

std::string probe_key(const std::vector<std::string>& argv, const std::string& dir, double timeout_s) {
  std::string key = dir + '\0' + std::to_string(timeout_s);
  for (const auto& a : argv) key += '\0' + a;
  return key;
}

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

// The last non-blank line of a file (its last 64 KB), trimmed, at most 300 characters.
std::string last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 65536);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string line;
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    while (!l.empty() && std::isspace(static_cast<unsigned char>(l.back()))) l.pop_back();
    size_t start = 0;
    while (start < l.size() && std::isspace(static_cast<unsigned char>(l[start]))) ++start;
    if (start < l.size()) line = l.substr(start);
  }
  return line.size() > 300 ? line.substr(0, 297) + "..." : line;
}

// One distinct probe, while it runs.
struct Running {
  std::vector<std::string> argv;
  std::string dir;
  double timeout_s = 60;
  bool met = false;
  std::string why;  // unmet: why
  bool done = false;
  bp::group group;
  bp::child child;
  std::string out_file, err_file;
  std::chrono::steady_clock::time_point deadline;
};

void start(Running& p, const std::string& scratch, int index) {
  p.out_file = scratch + "/probe" + std::to_string(index) + ".out";
  p.err_file = scratch + "/probe" + std::to_string(index) + ".err";
  const std::vector<std::string> args(p.argv.begin() + 1, p.argv.end());
  std::error_code ec;
  p.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                      std::chrono::duration<double>(p.timeout_s));
  p.child = bp::child(bp::exe = p.argv.front(), bp::args = args, bp::start_dir = p.dir,
                      bp::std_in<bp::null, bp::std_out> p.out_file, bp::std_err > p.err_file, p.group,
                      bp::extend::on_exec_setup = DieWithParent{}, ec);
  if (ec) p.done = true, p.why = "cannot run " + p.argv.front() + ": " + ec.message();
}

// True once the probe has ended (and its verdict is set).
bool poll(Running& p) {
  if (p.done) return true;
  std::error_code ec;
  if (p.child.running(ec) && !ec) {
    if (std::chrono::steady_clock::now() < p.deadline) return false;
    ::killpg(p.group.native_handle(), SIGKILL);
    p.child.wait(ec);
    p.done = true;
    p.why = "timed out after " + seconds_text(p.timeout_s) + " s";
    return true;
  }
  p.done = true;
  const int status = p.child.native_exit_code();
  RankExit e;
  if (WIFSIGNALED(status))
    e.signal = WTERMSIG(status);
  else if (WIFEXITED(status))
    e.exit_code = WEXITSTATUS(status);
  if (e.ok()) {
    p.met = true;
    return true;
  }
  p.why = last_line(p.err_file);
  if (p.why.empty()) p.why = last_line(p.out_file);
  if (p.why.empty()) p.why = e.describe();
  // What the probe left running in its group (a backgrounded child) goes with it.
  ::killpg(p.group.native_handle(), SIGKILL);
  return true;
}

std::string gpus_unmet(const Requirement& r, const ProbeHost& host) {
  if (host.backend != "nccl") return "the " + host.backend + " backend runs on CPU slots, not GPUs";
  if (host.devices >= r.gpus) return "";
  return "this run has " + std::to_string(host.devices) + " GPU" + (host.devices == 1 ? "" : "s");
}

std::string default_reason(const Requirement& r, const std::string& why) {
  return "requires " + r.describe() + ": " + why;
}

}  // namespace

std::string unmet_reason(const Requirement& r, const std::string& why) {
  return r.reason.empty() ? default_reason(r, why) : r.reason + " (" + why + ")";
}

ProbeReport probe_requirements(const std::vector<const Case*>& cases, const ProbeHost& host) {
  const auto began = std::chrono::steady_clock::now();
  ProbeReport report;
  // Each distinct probe once: keyed requirements point at their runs.
  std::vector<std::unique_ptr<Running>> runs;
  std::map<std::string, size_t> run_of;
  struct Need {
    const Case* c;
    const Requirement* r;
    long run;         // index into runs, -1 for gpus or a program that cannot be found
    std::string why;  // gpus / not found: unmet now
  };
  std::vector<Need> needs;
  for (const Case* c : cases) {
    if (c->expect.kind == Expectation::kSkip) continue;
    for (const auto& r : c->requirements) {
      Need n{c, &r, -1, ""};
      if (r.kind == Requirement::kGpus) {
        n.why = gpus_unmet(r, host);
      } else {
        std::string why;
        const auto argv = probe_argv(r, &why);
        const std::string key = probe_key(argv, r.dir, r.timeout_s);
        auto it = run_of.find(key);
        if (it == run_of.end()) {
          auto p = std::make_unique<Running>();
          p->argv = argv, p->dir = r.dir, p->timeout_s = r.timeout_s;
          if (!why.empty()) p->done = true, p->why = why;
          it = run_of.emplace(key, runs.size()).first;
          runs.push_back(std::move(p));
        }
        n.run = static_cast<long>(it->second);
      }
      needs.push_back(n);
    }
  }
  if (!runs.empty()) {
    char tmpl[] = "/tmp/meshtest-probes-XXXXXX";
    const char* scratch = ::mkdtemp(tmpl);
    if (!scratch)
      throw std::runtime_error(std::string("cannot make a folder for requirement probes: ") + std::strerror(errno));
    for (size_t i = 0; i < runs.size(); ++i)
      if (!runs[i]->done) start(*runs[i], scratch, static_cast<int>(i)), ++report.probes_run;
    for (bool all = false; !all;) {
      all = true;
      for (auto& p : runs) all &= poll(*p);
      if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::error_code ec;
    fs::remove_all(scratch, ec);
  }
  std::set<std::string> said;
  for (const auto& n : needs) {
    const std::string why = n.run >= 0 ? (runs[n.run]->met ? "" : runs[n.run]->why) : n.why;
    if (why.empty()) continue;
    if (!report.skips.count(n.c->id)) report.skips[n.c->id] = unmet_reason(*n.r, why);
    const std::string line = default_reason(*n.r, why);
    if (said.insert(line).second) report.unmet.push_back(line);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return report;
}

size_t skip_cases(std::vector<Suite>& suites, const std::map<std::string, std::string>& reasons) {
  std::map<std::string, std::string> skipped;  // id -> the reason it was skipped for here
  for (auto& suite : suites)
    for (auto& c : suite.cases) {
      auto it = reasons.find(c.id);
      if (it == reasons.end() || c.expect.kind == Expectation::kSkip) continue;
      c.expect = {Expectation::kSkip, it->second};
      skipped[c.id] = it->second;
    }
  // Nothing could judge a case against a baseline that does not run.
  for (bool grew = !skipped.empty(); grew;) {
    grew = false;
    for (auto& suite : suites)
      for (auto& c : suite.cases) {
        if (c.expect.kind == Expectation::kSkip) continue;
        for (const auto& b : c.baselines()) {
          auto it = skipped.find(b);
          if (it == skipped.end()) continue;
          c.expect = {Expectation::kSkip, "baseline " + b + " skipped (" + it->second + ")"};
          skipped[c.id] = c.expect.reason;
          grew = true;
          break;
        }
      }
  }
  return skipped.size();
}

void apply_skip_tags(std::vector<Suite>& suites, const std::vector<std::string>& specs, std::FILE* notes) {
  std::map<std::string, std::string> reasons;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    const std::string tag = spec.substr(0, eq);
    const std::string why = eq == std::string::npos ? "" : ": " + spec.substr(eq + 1);
    if (tag.empty()) throw std::invalid_argument("--skip-tag '" + spec + "' names no tag (TAG or TAG=REASON)");
    bool any = false;
    for (const auto& suite : suites)
      for (const auto& c : suite.cases) {
        if (std::find(c.tags.begin(), c.tags.end(), tag) == c.tags.end()) continue;
        any = true;
        reasons.emplace(c.id, "--skip-tag " + tag + why);  // the first tag that names a case gives its reason
      }
    if (!any && notes) std::fprintf(notes, "meshtest: note: --skip-tag %s matches no case (a typo?)\n", tag.c_str());
  }
  skip_cases(suites, reasons);
}

ProbeReport apply_requirements(std::vector<Suite>& suites, const std::vector<const Case*>& selected,
                               const ProbeHost& host, std::FILE* log) {
  ProbeReport report = probe_requirements(selected, host);
  const size_t skipped = skip_cases(suites, report.skips);
  if (log && (report.probes_run > 0 || !report.unmet.empty())) {
    std::fprintf(log, "meshtest: requires: %d probe%s run in %.1f s; %zu unmet, %zu case%s skipped\n",
                 report.probes_run, report.probes_run == 1 ? "" : "s", report.seconds, report.unmet.size(), skipped,
                 skipped == 1 ? "" : "s");
    for (const auto& line : report.unmet) std::fprintf(log, "  %s\n", line.c_str());
  }
  return report;
}

size_t apply_program_problems(std::vector<Suite>& suites, const std::vector<const Case*>& selected, std::FILE* log) {
  std::vector<std::pair<std::string, std::string>> problems;  // "{placeholder}" -> why its program cannot run
  for (const TrainerAdapter* adapter : trainer_adapters().all()) {
    const std::string problem = adapter->program_problem();
    if (problem.empty()) continue;
    for (const auto& [placeholder, value] : adapter->placeholders())
      problems.emplace_back("{" + placeholder + "}", problem);
  }
  if (problems.empty()) return 0;
  std::map<std::string, std::string> reasons;
  size_t runnable = 0;
  for (const Case* c : selected) {
    if (c->expect.kind == Expectation::kSkip) continue;
    std::string reason;
    for (const auto& phase : c->phases)
      for (const auto& arg : phase.argv)
        for (const auto& [placeholder, problem] : problems)
          if (arg.find(placeholder) != std::string::npos) reason = problem;
    if (reason.empty()) {
      ++runnable;
    } else {
      reasons[c->id] = reason;
    }
  }
  if (reasons.empty()) return 0;
  if (runnable == 0) throw std::runtime_error("every selected case " + reasons.begin()->second);
  const size_t skipped = skip_cases(suites, reasons);
  if (log)
    std::fprintf(log, "meshtest: %zu case%s skipped: %s\n", skipped, skipped == 1 ? "" : "s",
                 reasons.begin()->second.c_str());
  return skipped;
}

double smallest_gpu_memory_bytes() {
  if (const char* gb = std::getenv("MESHTEST_GPU_MEMORY_GB"); gb && *gb) return std::atof(gb) * (1u << 30);
  std::FILE* smi = ::popen("nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null", "r");
  if (!smi) return 0;
  double smallest = 0;
  for (double mib = 0; std::fscanf(smi, "%lf", &mib) == 1;)
    if (mib > 0 && (smallest == 0 || mib * (1u << 20) < smallest)) smallest = mib * (1u << 20);
  ::pclose(smi);
  return smallest;
}

int default_devices(const std::string& backend) {
  if (backend == "nccl") {
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible)
      return static_cast<int>(std::count(visible, visible + std::strlen(visible), ',')) + 1;
    int n = 0;
    for (int i = 0; std::filesystem::exists("/dev/nvidia" + std::to_string(i)); ++i) ++n;
    return n;
  }
  return std::max(8, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace meshtest
