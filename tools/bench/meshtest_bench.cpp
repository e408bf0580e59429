// meshtest_bench: how close meshtest's scheduler packs cases to the best possible
// makespan, what one case costs the launcher, and how long a 10,000-case matrix takes
// to expand. Every figure is printed next to a peer measured in the same run:
//   packing   - meshtest's Scheduler vs one case at a time, both over the lower bound
//   launch    - RankGroup vs plain posix_spawn + waitpid of the same processes
//   expansion - load_suite_text + validate_suites vs yaml-cpp's YAML::Load of the same text
// Usage: meshtest_bench PATH/TO/fake_trainer [--launches N]
// (tools/bench/meshtest_scheduler.sh builds it, runs it, then does a real `meshtest run`.)

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "run/launch.h"
#include "core/matrix.h"
#include "core/schedule.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kPackingTarget = 1.10;  // makespan / lower bound
constexpr double kLaunchTargetMs = 20;   // per case
constexpr double kExpansionTargetS = 1;  // 10,000 cases
constexpr int kGpus = 8;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Medians, not means: a single descheduled launch on a 2-core machine must not move the figure.
double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

const char* verdict(bool met) { return met ? "met" : "MISSED"; }

// ---- a) packing on simulated workloads ------------------------------------------------

// Fixed-seed draws that are the same with every standard library: std::mt19937's output is
// specified, the std::uniform_*_distribution adaptors are not.
class Draws {
 public:
  explicit Draws(unsigned seed) : gen_(seed) {}
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(gen_()) / 4294967296.0); }
  // An index into `weights`, each chosen with probability proportional to its weight.
  size_t weighted(const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    double x = uniform(0, total);
    for (size_t i = 0; i < weights.size(); ++i) {
      if (x < weights[i]) return i;
      x -= weights[i];
    }
    return weights.size() - 1;
  }

 private:
  std::mt19937 gen_;
};

// A synthetic suite: how many cases, how wide (GPUs, with relative frequencies), how long.
struct Workload {
  std::string name;
  unsigned seed;
  int cases;
  std::vector<int> widths;
  std::vector<double> width_weights;
  double min_s, max_s;
};

// The cases of a workload as the scheduler sees them: GPUs and exact expected seconds.
std::vector<meshtest::Task> make_tasks(const Workload& w) {
  Draws draws(w.seed);
  std::vector<meshtest::Task> tasks;
  for (int i = 0; i < w.cases; ++i) {
    meshtest::Task t;
    t.ngpu = w.widths[draws.weighted(w.width_weights)];
    t.expected_s = draws.uniform(w.min_s, w.max_s);
    t.id = "case" + std::to_string(i);
    tasks.push_back(t);
  }
  return tasks;
}

// The peer schedule: one case after another, so the makespan is the sum of the durations.
double one_at_a_time_makespan(const std::vector<meshtest::Task>& tasks) {
  double total = 0;
  for (const auto& t : tasks) total += t.expected_s;
  return total;
}

// Prints meshtest's simulated makespan and one-at-a-time's, each over the lower bound.
// Returns whether every workload met the packing target.
bool bench_packing() {
  const std::vector<Workload> workloads = {
      {"mixed 1/2/4/8", 1, 200, {1, 2, 4, 8}, {1, 1, 1, 1}, 5, 300},
      {"mixed 1/2/4/8", 2, 200, {1, 2, 4, 8}, {1, 1, 1, 1}, 5, 300},
      {"mixed 1/2/4/8", 3, 200, {1, 2, 4, 8}, {1, 1, 1, 1}, 5, 300},
      {"narrow 1/2", 4, 200, {1, 2}, {2, 1}, 5, 300},
      {"torchtitan-like", 5, 200, {1, 2, 4, 8}, {0.05, 0.10, 0.40, 0.45}, 30, 300},
      {"torchtitan-like", 6, 200, {1, 2, 4, 8}, {0.05, 0.10, 0.40, 0.45}, 30, 300},
      {"mixed 1/2/4/8, small", 7, 20, {1, 2, 4, 8}, {1, 1, 1, 1}, 5, 300},
  };
  std::printf(
      "a) Simulated packing on %d GPUs: makespan / lower bound, lower bound = max(GPU-s / %d, longest case)\n\n", kGpus,
      kGpus);
  std::printf(
      "| workload | seed | cases | GPU-s | lower bound s | meshtest s | meshtest / LB | one-at-a-time s | one-at-a-time / LB | target <= %.2f |\n",
      kPackingTarget);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  bool all_met = true;
  for (const auto& w : workloads) {
    const auto tasks = make_tasks(w);
    double gpu_seconds = 0;
    for (const auto& t : tasks) gpu_seconds += t.ngpu * t.expected_s;
    const double bound = meshtest::makespan_lower_bound(tasks, kGpus);
    const meshtest::Simulation sim = meshtest::simulate(tasks, kGpus);
    const double serial = one_at_a_time_makespan(tasks);
    const bool met = sim.makespan / bound <= kPackingTarget;
    all_met &= met;
    std::printf("| %s | %u | %d | %.0f | %.1f | %.1f | %.3f | %.1f | %.2f | %s |\n", w.name.c_str(), w.seed, w.cases,
                gpu_seconds, bound, sim.makespan, sim.makespan / bound, serial, serial / bound, verdict(met));
  }
  std::printf("\n");
  return all_met;
}

// ---- b) launch overhead ----------------------------------------------------------------

// One case's launch as `meshtest run` drives it: RankGroup spawns `nproc` ranks with
// torchrun's environment and a log file each, is polled every 0.2 ms until every rank is
// reaped, is destroyed, and the orphan sweep runs. Returns milliseconds.
double time_meshtest_case(const std::string& program, int nproc, const std::string& log_dir) {
  const auto t0 = Clock::now();
  {
    meshtest::LaunchSpec spec;
    spec.argv = {program};
    spec.nproc = nproc;
    spec.log_dir = log_dir;
    spec.grace_s = 5;
    meshtest::RankGroup group(spec);
    while (!group.poll()) ::usleep(200);
    if (!group.result().ok())
      throw std::runtime_error("a rank of " + program + " failed: " + group.result().stopped_because);
  }
  meshtest::sweep_orphans({});
  return seconds_since(t0) * 1e3;
}

// The peer: the same `nproc` processes started with posix_spawn and reaped with a blocking
// waitpid, with nothing else around them. Returns milliseconds.
double time_posix_spawn(const std::string& program, int nproc) {
  const auto t0 = Clock::now();
  std::vector<pid_t> pids;
  char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
  for (int i = 0; i < nproc; ++i) {
    pid_t pid = 0;
    if (const int err = ::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, environ); err != 0)
      throw std::runtime_error("posix_spawn " + program + " failed: error " + std::to_string(err));
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("a process of " + program + " did not exit 0");
  }
  return seconds_since(t0) * 1e3;
}

// Prints the median per-case launch cost for 1, 2, 4 and 8 ranks against the peer.
// The two are interleaved launch by launch so both see the same machine noise.
bool bench_launch(const std::string& program, int launches) {
  const fs::path logs = fs::temp_directory_path() / ("meshtest-bench-logs-" + std::to_string(::getpid()));
  std::printf(
      "b) Launch overhead per case: spawn N ranks of `%s` (exits at once), wait for all, tear down; "
      "median of %d launches\n\n",
      fs::path(program).filename().c_str(), launches);
  std::printf(
      "| ranks | peer: posix_spawn + waitpid ms | meshtest RankGroup + sweep ms | ratio | meshtest's own ms | target <= %.0f ms |\n",
      kLaunchTargetMs);
  std::printf("|---|---|---|---|---|---|\n");
  bool all_met = true;
  for (int nproc : {1, 2, 4, 8}) {
    for (int warm = 0; warm < 5; ++warm) {
      time_posix_spawn(program, nproc);
      time_meshtest_case(program, nproc, logs.string());
    }
    std::vector<double> peer, ours;
    for (int i = 0; i < launches; ++i) {
      peer.push_back(time_posix_spawn(program, nproc));
      ours.push_back(time_meshtest_case(program, nproc, logs.string()));
    }
    const double p = median(peer), m = median(ours);
    const bool met = m <= kLaunchTargetMs;
    all_met &= met;
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %s |\n", nproc, p, m, m / p, m - p, verdict(met));
  }
  std::printf("\n");
  std::error_code ec;
  fs::remove_all(logs, ec);
  return all_met;
}

// ---- c) matrix expansion ----------------------------------------------------------------

// A suite with one case whose `matrix:` has two axes of 100 values: 10,000 meshtrain cases.
std::string ten_thousand_case_yaml() {
  std::string a, b;
  for (int i = 0; i < 100; ++i) {
    a += (i ? ", " : "") + std::string("a") + std::to_string(i);
    b += (i ? ", " : "") + std::string("b") + std::to_string(i);
  }
  return "suite: big\n"
         "defaults: {model: tiny, options: {steps: 5}}\n"
         "cases:\n"
         "  - name: c\n"
         "    matrix: {a: [" +
         a + "], b: [" + b +
         "]}\n"
         "    mesh: {dp_shard: 2}\n";
}

// The median wall time of `repeats` calls of `work`, in seconds.
double median_seconds(int repeats, const std::function<void()>& work) {
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    work();
    samples.push_back(seconds_since(t0));
  }
  return median(samples);
}

// Prints how long meshtest takes to load, validate and expand the 10,000-case matrix
// against yaml-cpp parsing the same text, so the ratio is meshtest's own cost.
bool bench_expansion() {
  const std::string yaml = ten_thousand_case_yaml();
  size_t cases = 0;
  const int repeats = 5;
  const double ours = median_seconds(repeats, [&] {
    std::vector<meshtest::Suite> suites = {meshtest::load_suite_text(yaml, "bench-10k.yaml")};
    meshtest::validate_suites(suites);
    cases = suites.front().cases.size();
  });
  if (cases != 10000) throw std::runtime_error("the matrix expanded to " + std::to_string(cases) + " cases, not 10000");
  const double peer = median_seconds(repeats, [&] { YAML::Node root = YAML::Load(yaml); });
  const bool met = ours <= kExpansionTargetS;
  std::printf("c) Matrix expansion: 1 case x matrix {a: 100 values, b: 100 values} = %zu cases, median of %d\n\n",
              cases, repeats);
  std::printf(
      "| YAML bytes | peer: YAML::Load s | meshtest load_suite_text + validate_suites s | ratio | per case us | target <= %.0f s |\n",
      kExpansionTargetS);
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| %zu | %.6f | %.3f | %.0f | %.1f | %s |\n\n", yaml.size(), peer, ours, ours / peer,
              ours / static_cast<double>(cases) * 1e6, verdict(met));
  return met;
}

}  // namespace

int main(int argc, char** argv) {
  std::string program;
  int launches = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--launches" && i + 1 < argc)
      launches = std::atoi(argv[++i]);
    else if (program.empty() && arg[0] != '-')
      program = arg;
    else {
      std::fprintf(stderr, "usage: meshtest_bench PATH/TO/fake_trainer [--launches N]\n");
      return 2;
    }
  }
  if (program.empty() || ::access(program.c_str(), X_OK) != 0 || launches < 1) {
    std::fprintf(stderr,
                 "usage: meshtest_bench PATH/TO/fake_trainer [--launches N]  (a program that exits 0 at once)\n");
    return 2;
  }
  try {
    const bool packing = bench_packing();
    const bool launch = bench_launch(program, launches);
    const bool expansion = bench_expansion();
    std::printf("targets: packing <= %.2f %s; launch <= %.0f ms %s; expansion <= %.0f s %s\n", kPackingTarget,
                verdict(packing), kLaunchTargetMs, verdict(launch), kExpansionTargetS, verdict(expansion));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtest_bench: %s\n", e.what());
    return 1;
  }
}
