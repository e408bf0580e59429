// Soak (issue 20): 1,000 cases of the fake trainer through one `meshtest run`, generated
// from a fixed seed: random widths, sleeps, exit codes, crashes by signal, hangs under
// short timeouts, orphans, ranks that ignore SIGTERM, declared skips. Every case's
// expectation is chosen so meshtest's verdict for it is known in advance; the test then
// asserts every verdict, that meshtest's open files and memory stay flat from case 100
// to the end, and that no rank process (nor a process a rank left behind) outlives the
// run. Wall time against the plan's bound is printed, never asserted (no timing
// asserts); the printed block is what docs/reliability.md quotes. ctest -L soak runs it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness/shell.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kMeshtest = MESHTEST_BIN;
const std::string kFake = FAKE_TRAINER_BIN;

constexpr int kCases = 1000;
constexpr unsigned kSeed = 20;   // the number; any fixed value keeps the matrix the same
constexpr int kPool = 8;         // --ngpu: CPU slots
constexpr double kGraceS = 0.2;  // --grace: SIGTERM to SIGKILL, for ranks that ignore SIGTERM
constexpr double kHangTimeoutS = 1;
// Samples are taken by cases that ran (a declared skip finishes at once, before any
// case has run): around the 100th, and around the 50th before the last, while the run loop
// still runs (on 16 cores the last 50 take about 2 s, the sample half a second); after
// the last case meshtest builds summary.json and the reports, whose memory belongs to
// them, not to the loop this test watches.
constexpr int kEarlySample = 100;
constexpr int kLateSampleBeforeEnd = 50;
// Each of the two samples is the quietest of three windows this many run cases apart: a
// descriptor held while ranks are being spawned can span one window on a loaded machine
// (CI saw /dev/null for a rank's stdin in all ten reads of one), a leaked one spans all three.
constexpr int kWindowSpacing = 25;
// ports.cpp keeps the reservation sockets of the last 256 store ports open on purpose
// (kHeldReservations), so the open-file count rises with the first 256 launches and
// then stays there; those sockets are counted apart from every other descriptor.
constexpr int kHeldReservations = 256;
constexpr double kRssBoundMiB = 8;

// ---- the matrix -----------------------------------------------------------------------

enum class Behaviour { kClean, kExit, kCrash, kHang, kSkip };

// What meshtest must say about a case: summary.json's verdict kind and status, and for
// a failed run the rank, signal and exit code the `exit` check found.
struct Verdict {
  std::string kind, status;
  int rank = -1, signal = 0, exit_code = 0;
  bool operator==(const Verdict& o) const {
    return kind == o.kind && status == o.status && rank == o.rank && signal == o.signal && exit_code == o.exit_code;
  }
};

std::string describe(const Verdict& v) {
  return v.kind + "/" + v.status + " rank " + std::to_string(v.rank) + " signal " + std::to_string(v.signal) +
         " exit " + std::to_string(v.exit_code);
}

struct SoakCase {
  std::string name;
  Behaviour behaviour = Behaviour::kClean;
  int ngpu = 1;
  std::vector<std::string> argv;  // after the fake trainer's path
  std::string expect = "pass";    // pass | xfail | fail (a canary for `exit`) | skip
  double timeout_s = 0;           // 0: the default
  double duration_s = 0;          // what the plan expects
  Verdict verdict;                // what meshtest must decide
};

std::string args_text(const SoakCase& c) {
  std::string text = "expect " + c.expect + ":";
  for (const auto& a : c.argv) text += " " + a;
  return text;
}

// Draws from the raw mt19937 stream (whose output the standard fixes) rather than
// std::uniform_*_distribution (whose output it does not), so the seed gives the same
// matrix with every standard library.
class Draw {
 public:
  explicit Draw(unsigned seed) : rng_(seed) {}
  int between(int lo, int hi) { return lo + static_cast<int>(rng_() % static_cast<unsigned>(hi - lo + 1)); }
  bool percent(int p) { return between(0, 99) < p; }
  double seconds(double max) { return between(0, static_cast<int>(max * 1000)) / 1000.0; }

 private:
  std::mt19937 rng_;
};

std::string fixed3(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", s);
  return buf;
}

// Signals that kill without a core (the test also sets RLIMIT_CORE to 0) and that
// meshtest does not treat as its own stop (SIGTERM, SIGKILL).
int crash_signal(Draw& d) {
  static const int kSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGUSR1, SIGALRM, SIGHUP};
  return kSignals[d.between(0, static_cast<int>(std::size(kSignals)) - 1)];
}

// The verdict `exit` gives a failed run, as the expectation turns it.
Verdict failed_run(const std::string& expect, const std::string& kind, int rank, int signal, int exit_code) {
  if (expect == "xfail") return {"xfailed", "xfailed", rank, signal, exit_code};
  if (expect == "fail") return {"canary_caught", "passed", rank, signal, exit_code};
  return {kind, "failed", rank, signal, exit_code};
}

Verdict clean_run(const std::string& expect) {
  if (expect == "xfail") return {"xpassed", "failed"};
  if (expect == "fail") return {"canary_not_caught", "failed"};
  return {"passed", "passed"};
}

// Every rank sleeps, then exits 0.
void make_clean(SoakCase& c, Draw& d) {
  const double sleep_s = d.seconds(0.3);
  c.argv = {"--sleep", fixed3(sleep_s)};
  c.duration_s = sleep_s;
  c.verdict = clean_run(c.expect);
}

// One rank exits non-zero or raises a signal; the others finish first or are stopped
// (SIGTERM, or SIGKILL after the grace period when they ignore SIGTERM).
void make_failure(SoakCase& c, Draw& d) {
  const int rank = d.between(0, c.ngpu - 1);
  const double after = d.seconds(0.2);
  const bool others_stopped = d.percent(50);
  const bool stubborn = others_stopped && d.percent(30);
  c.argv = {"--crash-after", fixed3(after), "--sleep", others_stopped ? "30" : fixed3(d.seconds(0.1))};
  if (stubborn) c.argv.push_back("--ignore-sigterm");
  c.duration_s = after + (stubborn ? kGraceS : 0);
  if (c.behaviour == Behaviour::kExit) {
    const int code = d.between(1, 120);
    c.argv.insert(c.argv.end(), {"--exit-rank", std::to_string(rank), "--exit-code", std::to_string(code)});
    c.verdict = failed_run(c.expect, "exit_code", rank, 0, code);
  } else {
    const int sig = crash_signal(d);
    c.argv.insert(c.argv.end(), {"--crash-rank", std::to_string(rank), "--signal", std::to_string(sig)});
    c.verdict = failed_run(c.expect, "crashed", rank, sig, 0);
  }
}

// One rank (or all) never exits; the others exit at once, so when the timeout comes
// the hung rank is the first one still running, the rank the verdict names.
void make_hang(SoakCase& c, Draw& d) {
  const bool all = d.percent(25);
  const int rank = all ? 0 : d.between(0, c.ngpu - 1);
  const bool stubborn = d.percent(30);
  c.argv = {"--hang-rank", all ? "-1" : std::to_string(rank)};
  if (stubborn) c.argv.push_back("--ignore-sigterm");
  c.timeout_s = kHangTimeoutS;
  c.duration_s = kHangTimeoutS + (stubborn ? kGraceS : 0);
  c.verdict = failed_run(c.expect, "timed_out", rank, 0, 0);
}

std::string pick_expectation(Behaviour b, Draw& d) {
  if (b == Behaviour::kSkip) return "skip";
  const int roll = d.between(0, 99);
  if (b == Behaviour::kClean) return roll < 80 ? "pass" : roll < 90 ? "xfail" : "fail";
  return roll < 40 ? "pass" : roll < 70 ? "xfail" : "fail";
}

Behaviour pick_behaviour(Draw& d) {
  const int roll = d.between(0, 99);
  if (roll < 58) return Behaviour::kClean;
  if (roll < 73) return Behaviour::kExit;
  if (roll < 88) return Behaviour::kCrash;
  if (roll < 93) return Behaviour::kHang;
  return Behaviour::kSkip;
}

SoakCase make_case(int index, Draw& d, const std::string& pid_root) {
  SoakCase c;
  char name[16];
  std::snprintf(name, sizeof(name), "c%04d", index);
  c.name = name;
  c.behaviour = pick_behaviour(d);
  c.ngpu = d.between(1, 4);
  c.expect = pick_expectation(c.behaviour, d);
  switch (c.behaviour) {
    case Behaviour::kClean: make_clean(c, d); break;
    case Behaviour::kExit:
    case Behaviour::kCrash: make_failure(c, d); break;
    case Behaviour::kHang: make_hang(c, d); break;
    case Behaviour::kSkip:
      c.argv = {"--exit-rank", "0"};  // would fail if it ran
      c.verdict = {"skipped", "skipped"};
      break;
  }
  if (c.behaviour != Behaviour::kSkip && d.percent(10)) c.argv.push_back("--spawn-orphan");
  c.argv.insert(c.argv.end(), {"--pid-dir", pid_root + "/" + c.name});
  return c;
}

std::vector<SoakCase> make_cases(const std::string& pid_root) {
  Draw d(kSeed);
  std::vector<SoakCase> cases;
  for (int i = 0; i < kCases; ++i) cases.push_back(make_case(i, d, pid_root));
  return cases;
}

std::string expect_yaml(const std::string& expect) {
  if (expect == "xfail") return "{xfail: soak}";
  if (expect == "fail") return "{fail: exit}";
  if (expect == "skip") return "{skip: soak}";
  return "pass";
}

std::string matrix_yaml(const std::vector<SoakCase>& cases) {
  std::ostringstream y;
  y << "suite: soak\ncases:\n";
  for (const auto& c : cases) {
    y << "  - name: " << c.name << "\n    ngpu: " << c.ngpu << "\n    command: ['" << kFake << "'";
    for (const auto& a : c.argv) y << ", '" << a << "'";
    y << "]\n    expect: " << expect_yaml(c.expect) << "\n";
    // duration 0 would mean "estimate it"; the plan should see what the case really takes.
    y << "    duration: " << fixed3(std::max(0.001, c.duration_s)) << "\n";
    if (c.timeout_s > 0) y << "    timeout: " << c.timeout_s << "\n";
  }
  return y.str();
}

// ---- watching meshtest from outside ------------------------------------------------------

// Inodes of this network namespace's unix sockets bound to meshtest's port reservations.
std::set<std::string> reservation_inodes() {
  std::ifstream in("/proc/net/unix");
  std::set<std::string> inodes;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string num, refs, proto, flags, type, state, inode, path;
    fields >> num >> refs >> proto >> flags >> type >> state >> inode >> path;
    if (path.rfind("@meshtest-store-port-", 0) == 0) inodes.insert(inode);
  }
  return inodes;
}

struct Sample {
  int ran = 0;                // cases that ran and were final when sampled
  int reservations = 0;       // port reservation sockets (bounded by kHeldReservations)
  int other_fds = INT_MAX;    // every other descriptor (INT_MAX: not read yet)
  std::string other_targets;  // what they are, for a failure message
  long rss_kib = 0;
  double cpu_s = 0;  // meshtest's own user + system time so far (not its ranks')
};

long vm_rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return 0;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15: utime, stime in ticks
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// A read of meshtest's /proc files; other_fds stays INT_MAX when meshtest has already exited.
Sample read_proc(pid_t pid) {
  const std::set<std::string> reserved = reservation_inodes();
  Sample s;
  std::error_code ec;
  fs::directory_iterator fds("/proc/" + std::to_string(pid) + "/fd", ec);
  if (ec) return s;
  s.other_fds = 0;
  for (const auto& entry : fds) {
    const std::string target = fs::read_symlink(entry.path(), ec).string();
    const bool reservation = target.rfind("socket:[", 0) == 0 && reserved.count(target.substr(8, target.size() - 9));
    ++(reservation ? s.reservations : s.other_fds);
    if (!reservation) s.other_targets += " " + entry.path().filename().string() + "->" + target;
  }
  s.rss_kib = vm_rss_kib(pid);
  s.cpu_s = cpu_seconds(pid);
  return s;
}

// Ten reads over half a second, keeping the one with the fewest descriptors: meshtest
// opens files for an instant (a rank's log as it starts it, /proc while it sweeps
// orphans, a log tail while it judges), and on a loaded machine it can be descheduled
// in that instant for tens of milliseconds; a leaked descriptor shows in every read.
Sample sample(pid_t pid, int ran) {
  Sample best;
  for (int i = 0; i < 10; ++i) {
    const Sample s = read_proc(pid);
    if (s.other_fds < best.other_fds && s.rss_kib > 0) best = s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  best.ran = ran;
  return best;
}

// The sample with the fewest descriptors (the first of equals).
Sample quietest(const std::vector<Sample>& windows) {
  Sample best = windows.front();
  for (const Sample& s : windows)
    if (s.other_fds < best.other_fds) best = s;
  return best;
}

// meshtest started with stderr into a pipe, stdout into a file, CI=1 (one "[k/N] ..."
// line per finished case, no live progress line) and no core files from the crashes.
pid_t start_meshtest(const std::vector<std::string>& args, int stderr_fd, const std::string& stdout_file) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::setenv("CI", "1", 1);
  const int out = ::open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(out, 1);
  ::close(out);
  ::dup2(stderr_fd, 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

// Reads meshtest's stderr to its end ("[k/N] <status> <id> ..." per final case);
// samples /proc when the count of final cases that ran reaches one of `at`.
struct Watch {
  std::vector<Sample> samples;
  std::string text;  // all of stderr, for failure messages
  int finished = 0, ran = 0;
};

void watch(int fd, pid_t pid, const std::vector<int>& at, Watch& w) {
  FILE* in = ::fdopen(fd, "r");
  char* line = nullptr;
  size_t cap = 0;
  while (::getline(&line, &cap, in) > 0) {
    w.text += line;
    int k = 0, n = 0;
    char status[32] = "";
    if (std::sscanf(line, "[%d/%d] %31s", &k, &n, status) != 3) continue;
    w.finished = k;
    if (std::string(status) == "skipped") continue;
    ++w.ran;
    if (std::find(at.begin(), at.end(), w.ran) != at.end()) w.samples.push_back(sample(pid, w.ran));
  }
  std::free(line);
  std::fclose(in);
}

// ---- afterwards ------------------------------------------------------------------------

Verdict verdict_of(const json& c) {
  const json& v = c["verdict"];
  return {v.value("kind", ""), c.value("status", ""), v.value("rank", -1), v.value("signal", 0),
          v.value("exit_code", 0)};
}

// True while `pid` is a live process of this run: its environment names a case folder
// under `out` (pid numbers are reused, so existing is not enough).
bool alive_in_run(pid_t pid, const std::string& out) {
  const std::string env = proc_file(std::to_string(pid), "environ");
  return env.find("MESHTEST_CASE_DIR=" + out + "/") != std::string::npos;
}

struct PidFiles {
  int ranks = 0, orphans = 0;
  std::vector<std::string> alive;  // "file (pid N)"
};

PidFiles check_pid_files(const std::string& pid_root, const std::string& out) {
  PidFiles p;
  for (const auto& entry : fs::recursive_directory_iterator(pid_root)) {
    if (!entry.is_regular_file()) continue;
    pid_t pid = 0;
    std::ifstream(entry.path()) >> pid;
    ++(entry.path().filename().string().rfind("orphan", 0) == 0 ? p.orphans : p.ranks);
    if (pid > 0 && alive_in_run(pid, out))
      p.alive.push_back(entry.path().string() + " (pid " + std::to_string(pid) + ")");
  }
  return p;
}

// Every process of this run still alive, pid file or not (a rank stopped before it wrote
// one may have forked its orphan already).
std::vector<pid_t> survivors(const std::string& out) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const pid_t pid = std::atoi(entry.path().filename().c_str());
    if (pid > 0 && pid != ::getpid() && alive_in_run(pid, out)) found.push_back(pid);
  }
  return found;
}

// "N cases; planned makespan X s; lower bound Y s", the last line of --dry-run.
std::pair<double, double> plan_bounds(const std::string& dry_run_text) {
  const size_t at = dry_run_text.rfind("cases; planned makespan");
  double makespan = -1, lower = -1;
  if (at != std::string::npos)
    std::sscanf(dry_run_text.c_str() + at, "cases; planned makespan %lf s; lower bound %lf s", &makespan, &lower);
  return {makespan, lower};
}

double mib(long kib) { return kib / 1024.0; }

// ---- the test, step by step ----------------------------------------------------------------

struct Scratch {
  std::string dir, out, pids, matrix;
};

Scratch make_scratch() {
  char tmpl[] = "/tmp/meshtest-soak-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  fs::create_directories(dir + "/pids");
  return {dir, dir + "/out", dir + "/pids", dir + "/m.yaml"};
}

int count_runs(const std::vector<SoakCase>& cases) {
  return static_cast<int>(
      std::count_if(cases.begin(), cases.end(), [](const SoakCase& c) { return c.behaviour != Behaviour::kSkip; }));
}

// Some cases are made to miss their expectation (an xpass, a crash expected to pass).
int expected_exit_code(const std::vector<SoakCase>& cases) {
  const bool any_missed = std::any_of(cases.begin(), cases.end(), [](const SoakCase& c) {
    return c.verdict.status == "failed" || c.verdict.status == "cancelled";
  });
  return any_missed ? 1 : 0;
}

struct WatchedRun {
  int status = 0;
  double process_s = 0;
  Watch watch;
};

// The real run: meshtest in the background, its stderr read (and /proc sampled) by a thread.
WatchedRun run_watched(const Scratch& t, const std::vector<int>& sample_at) {
  WatchedRun r;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = start_meshtest(
      {kMeshtest, "run", t.matrix, "--out", t.out, "--ngpu", std::to_string(kPool), "--grace", fixed3(kGraceS)},
      pipe_fds[1], t.dir + "/stdout.txt");
  ::close(pipe_fds[1]);
  std::thread watcher(watch, pipe_fds[0], pid, sample_at, std::ref(r.watch));
  ::waitpid(pid, &r.status, 0);
  r.process_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  watcher.join();
  return r;
}

// Nothing of the run may outlive meshtest: no rank, no orphan a rank forked.
PidFiles expect_no_survivors(const Scratch& t) {
  const PidFiles pid_files = check_pid_files(t.pids, t.out);
  const std::vector<pid_t> left = survivors(t.out);
  EXPECT_TRUE(pid_files.alive.empty()) << pid_files.alive.size() << " alive, e.g. " << pid_files.alive.front();
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the run still alive, e.g. pid " << left.front();
  for (pid_t p : left) ::kill(p, SIGKILL);  // a failed soak should not leave them on the CI machine
  EXPECT_GT(pid_files.orphans, 0) << "no case spawned an orphan: the sweep went untested";
  return pid_files;
}

// summary.json's verdict of every case against the prediction; the first 20 misses are reported.
int count_as_predicted(const json& summary, const std::vector<SoakCase>& cases) {
  if (summary["cases"].size() != cases.size()) {
    ADD_FAILURE() << "summary.json has " << summary["cases"].size() << " cases";
    return 0;
  }
  int as_predicted = 0, reported = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = summary["cases"][i];  // in the matrix's order
    const Verdict got = verdict_of(c);
    if (c["id"] == "soak/" + cases[i].name && got == cases[i].verdict)
      ++as_predicted;
    else if (++reported <= 20)
      ADD_FAILURE() << c["id"] << " (" << cases[i].ngpu << " ranks, " << args_text(cases[i]) << "): expected "
                    << describe(cases[i].verdict) << ", got " << describe(got) << ": " << c["reason"];
  }
  return as_predicted;
}

// Open files and memory: flat from the early sample to the late one.
void expect_flat(const Sample& early, const Sample& late) {
  ASSERT_NE(early.other_fds, INT_MAX) << "meshtest had exited before run case " << early.ran << " was sampled";
  ASSERT_NE(late.other_fds, INT_MAX) << "meshtest had exited before run case " << late.ran << " was sampled";
  EXPECT_EQ(late.other_fds, early.other_fds)
      << "descriptors other than port reservations changed: at run case " << early.ran << ":" << early.other_targets
      << "; at run case " << late.ran << ":" << late.other_targets;
  EXPECT_LE(early.reservations, kHeldReservations);
  EXPECT_LE(late.reservations, kHeldReservations);
  EXPECT_LE(mib(late.rss_kib - early.rss_kib), kRssBoundMiB) << "RSS grew by more than the bound";
}

struct Figures {
  int cases = 0, runs = 0, as_predicted = 0;
  double wall_s = 0, process_s = 0, makespan_s = 0, lower_bound_s = 0;
  Sample early, late;
  PidFiles pid_files;
};

// One block for docs/reliability.md. Printed, not asserted: timings are the machine's.
void print_figures(const Figures& f) {
  std::printf("soak: ---- %d cases (%d run, %d declared skips), seed %u, pool %d CPU slots, --grace %s ----\n", f.cases,
              f.runs, f.cases - f.runs, kSeed, kPool, fixed3(kGraceS).c_str());
  std::printf("soak: verdicts as predicted: %d/%d\n", f.as_predicted, f.cases);
  std::printf("soak: wall %.1f s, plan bound %.1f s, ratio %.2f\n", f.wall_s, f.lower_bound_s,
              f.wall_s / f.lower_bound_s);
  std::printf(
      "soak: (plan bound: --dry-run's lower bound; its planned makespan %.1f s, ratio %.2f; the meshtest "
      "process took %.1f s with its reports)\n",
      f.makespan_s, f.wall_s / f.makespan_s, f.process_s);
  for (const Sample& x : {f.early, f.late})
    std::printf("soak: at run case %d: fds %d (+ %d port reservations), RSS %.2f MiB\n", x.ran, x.other_fds,
                x.reservations, mib(x.rss_kib));
  std::printf("soak: RSS change %+ld KiB (bound +%.0f MiB)\n", f.late.rss_kib - f.early.rss_kib, kRssBoundMiB);
  const int between = f.late.ran - f.early.ran;
  std::printf("soak: meshtest's own CPU from run case %d to %d: %.1f s, %.1f ms a case\n", f.early.ran, f.late.ran,
              f.late.cpu_s - f.early.cpu_s, 1000 * (f.late.cpu_s - f.early.cpu_s) / std::max(1, between));
  std::printf("soak: pid files: %d ranks, %d orphans; alive after the run: %zu\n", f.pid_files.ranks,
              f.pid_files.orphans, f.pid_files.alive.size());
  std::fflush(stdout);
}

}  // namespace

TEST(Soak, ThousandCasesEveryVerdictAsPredictedFlatFilesAndMemoryNoOrphans) {
  const Scratch t = make_scratch();
  const std::vector<SoakCase> cases = make_cases(t.pids);
  std::ofstream(t.matrix) << matrix_yaml(cases);
  Figures f;
  f.cases = kCases;
  f.runs = count_runs(cases);

  const Output dry =
      sh(kMeshtest + " run " + t.matrix + " --out " + t.out + " --ngpu " + std::to_string(kPool) + " --dry-run");
  ASSERT_EQ(dry.rc, 0) << dry.text.substr(0, 4000);
  std::tie(f.makespan_s, f.lower_bound_s) = plan_bounds(dry.text);

  const int late = f.runs - kLateSampleBeforeEnd;
  const WatchedRun run = run_watched(t, {kEarlySample, kEarlySample + kWindowSpacing, kEarlySample + 2 * kWindowSpacing,
                                         late - 2 * kWindowSpacing, late - kWindowSpacing, late});
  f.process_s = run.process_s;
  f.pid_files = expect_no_survivors(t);
  const std::string tail = run.watch.text.substr(run.watch.text.size() > 4000 ? run.watch.text.size() - 4000 : 0);
  ASSERT_TRUE(WIFEXITED(run.status)) << tail;
  EXPECT_EQ(WEXITSTATUS(run.status), expected_exit_code(cases)) << tail;
  EXPECT_EQ(run.watch.finished, kCases);
  EXPECT_EQ(run.watch.ran, f.runs);

  std::ifstream in(t.out + "/summary.json");
  const json summary = json::parse(in);
  f.wall_s = summary.value("wall_s", 0.0);
  f.as_predicted = count_as_predicted(summary, cases);
  EXPECT_EQ(f.as_predicted, kCases);

  ASSERT_EQ(run.watch.samples.size(), 6u) << "meshtest printed " << run.watch.ran << " finished cases that ran";
  f.early = quietest({run.watch.samples.begin(), run.watch.samples.begin() + 3});
  f.late = quietest({run.watch.samples.begin() + 3, run.watch.samples.end()});
  expect_flat(f.early, f.late);
  print_figures(f);
  if (!HasFailure()) fs::remove_all(t.dir);
}
