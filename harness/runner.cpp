#include "runner.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "checks.h"
#include "report.h"
#include "schedule.h"

namespace fs = std::filesystem;

namespace meshtest {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {
void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", std::localtime(&t));
  return buf;
}


// A folder name for a case: its name with anything unusual replaced.
std::string folder_name(const std::string& name) {
  std::string out;
  for (char ch : name) out += (std::isalnum(static_cast<unsigned char>(ch)) || std::string("_.,=+-[]").find(ch) != std::string::npos) ? ch : '_';
  return out;
}

// Pool slot i is the i-th GPU meshtest itself may use: CUDA_VISIBLE_DEVICES when set.
std::vector<std::string> physical_gpus(const std::vector<int>& slots) {
  std::vector<std::string> ids;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::stringstream in(visible);
    for (std::string item; std::getline(in, item, ',');) ids.push_back(item);
  }
  std::vector<std::string> out;
  for (int s : slots) out.push_back(s < static_cast<int>(ids.size()) ? ids[s] : std::to_string(s));
  return out;
}

// A case in flight: which phase runs now, on which devices.
struct Active {
  size_t index = 0;  // into the outcomes
  size_t phase = 0;
  std::unique_ptr<RankGroup> group;
  std::chrono::steady_clock::time_point started;
};
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

std::string PhaseOutcome::log_path(int rank) const { return rank_log_path(dir, rank); }

std::string PhaseOutcome::error_file(int rank) const { return rank_error_file(dir, rank); }

std::string CaseOutcome::failing_log() const {
  for (const auto& p : phases) {
    if (!p.ran || p.ok()) continue;
    int rank = p.result.first_failure.rank >= 0 ? p.result.first_failure.rank : 0;
    if (p.result.timed_out)  // the first rank still running when time ran out: the one to read
      for (const auto& e : p.result.exits)
        if (e.signal == SIGTERM || e.signal == SIGKILL) {
          rank = e.rank;
          break;
        }
    return p.log_path(rank);
  }
  for (auto it = phases.rbegin(); it != phases.rend(); ++it)
    if (it->ran) return it->log_path(0);
  return "";
}

bool RunResult::all_met() const {
  if (interrupted_by != 0) return false;
  for (const auto& c : cases)
    if (!c.met_expectation()) return false;
  return true;
}

std::map<std::string, double> load_durations(const std::string& summary_path) {
  std::map<std::string, double> out;
  std::ifstream in(summary_path);
  if (!in) return out;
  try {
    const auto j = nlohmann::json::parse(in);
    for (const auto& c : j.at("cases"))
      if (c.value("status", "") != "skipped" && c.value("status", "") != "cancelled" && c.contains("duration_s"))
        out[c.at("id").get<std::string>()] = c.at("duration_s").get<double>();
  } catch (const std::exception&) {
    // A damaged history only costs the ordering; estimates take over.
  }
  return out;
}

std::string case_folder(const std::string& out_dir, const Case& c) {
  return (fs::path(out_dir) / c.suite / folder_name(c.name)).string();
}

double estimate_seconds(const Case& c) {
  if (c.duration_hint_s > 0) return c.duration_hint_s;
  double total = 0;
  for (const auto& p : c.phases) {
    double steps = 10;
    for (size_t i = 0; i + 1 < p.argv.size(); ++i)
      if (p.argv[i] == "--steps") steps = std::atof(p.argv[i + 1].c_str());
    total += 2.0 + 0.05 * steps * p.nproc;  // start-up, then steps slow down with ranks on shared cores
  }
  return total;
}

std::vector<std::string> pool_skips(const std::vector<const Case*>& cases, int devices, const std::string& unit) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < cases.size(); ++i) index_of[cases[i]->id] = i;
  std::vector<std::string> reason(cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i]->ngpu > devices && cases[i]->expect.kind != Expectation::kSkip)
      reason[i] = "needs " + std::to_string(cases[i]->ngpu) + " " + unit + "; --ngpu is " + std::to_string(devices);
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (!reason[i].empty() || cases[i]->expect.kind == Expectation::kSkip) continue;
      for (const auto& b : cases[i]->baselines()) {
        auto it = index_of.find(b);
        if (it == index_of.end() || reason[it->second].empty()) continue;
        reason[i] = "baseline " + b + " cannot run here (" + reason[it->second] + ")";
        grew = true;
        break;
      }
    }
  }
  return reason;
}

RunResult run_cases(const std::vector<const Case*>& cases, const RunOptions& opt) {
  RunResult run;
  const auto t0 = std::chrono::steady_clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const auto history = load_durations(opt.history);

  run.cases.resize(cases.size());
  std::vector<Task> tasks;
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseOutcome& o = run.cases[i];
    o.spec = cases[i];
    o.dir = case_folder(opt.out_dir, *o.spec);
    auto h = history.find(o.spec->id);
    o.expected_s = h != history.end() ? h->second : estimate_seconds(*o.spec);
    o.repro = opt.repro_prefix + " --id '" + o.spec->id + "'";
    for (const auto& p : o.spec->phases) {
      PhaseOutcome po;
      po.name = p.name;
      po.nproc = p.nproc;
      po.dir = (fs::path(o.dir) / p.name).string();
      po.argv = resolve_argv(p.argv, {opt.meshtrain, opt.backend, o.dir, po.dir});
      o.phases.push_back(po);
    }
    index_of[o.spec->id] = i;
  }
  const std::string unit = opt.backend == "nccl" ? "GPUs" : "CPU slots";
  const std::vector<std::string> skip_reason = pool_skips(cases, opt.devices, unit);
  std::set<std::string> baselines;
  for (const Case* c : cases)
    for (const auto& b : c->baselines()) baselines.insert(b);
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseOutcome& o = run.cases[i];
    // Skipped cases hold no devices; they are judged when the scheduler reaches them.
    const bool skip = o.spec->expect.kind == Expectation::kSkip || !skip_reason[i].empty();
    tasks.push_back({skip ? 0 : o.spec->ngpu, skip ? 0.0 : o.expected_s, o.spec->id, baselines.count(o.spec->id) > 0});
  }
  Scheduler scheduler(tasks, opt.devices, opt.jobs);

  DevicePool pool(opt.devices);
  std::vector<Active> active;
  std::vector<size_t> awaiting_baselines;
  size_t done = 0;
  for (const auto& o : run.cases) done += o.finished;
  auto find = [&](const std::string& id) -> const CaseOutcome* {
    auto it = index_of.find(id);
    return it == index_of.end() ? nullptr : &run.cases[it->second];
  };
  auto report_line = [&](const CaseOutcome& o) {
    if (opt.progress) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "[%zu/%zu] %-9s %s (%d %s, %s)%s%s\n", done, run.cases.size(), status_name(o.status()),
                 o.spec->id.c_str(), o.spec->ngpu, unit.c_str(), human_seconds(o.duration_s).c_str(),
                 o.reason().empty() ? "" : ": ", o.reason().c_str());
  };
  // Judges a case whose baselines have all finished; otherwise parks it.
  std::function<void(size_t)> conclude = [&](size_t i) {
    CaseOutcome& o = run.cases[i];
    for (const auto& b : o.spec->baselines()) {
      const CaseOutcome* base = find(b);
      if (base && !base->finished) {
        awaiting_baselines.push_back(i);
        return;
      }
    }
    o.checks = run_checks(o, find);
    judge(o);
    record_curves(o);
    const bool ran = !o.phases.empty() && o.phases.front().ran;
    if (!o.met_expectation() && ran && static_cast<int>(o.earlier_attempts.size()) < opt.retries &&
        run.interrupted_by == 0) {
      // Keep this attempt's folder and evidence, then queue the case again.
      const std::string kept = o.dir + ".attempt" + std::to_string(o.earlier_attempts.size() + 1);
      std::string log = o.failing_log();
      if (log.rfind(o.dir, 0) == 0) log = kept + log.substr(o.dir.size());
      std::error_code ec;
      fs::remove_all(kept, ec);
      fs::rename(o.dir, kept, ec);
      o.earlier_attempts.push_back({o.verdict, o.details, log, o.duration_s});
      std::fprintf(stderr, "%s[retry %zu/%d] %s: %s\n", opt.progress ? "\r\033[K" : "", o.earlier_attempts.size(),
                   opt.retries, o.spec->id.c_str(), o.reason().c_str());
      for (auto& p : o.phases) {
        p.ran = false;
        p.attempts = 0;
        p.launch_error.clear();
        p.result = RankGroup::Result{};
      }
      o.checks.clear();
      o.verdict = {};
      o.details.clear();
      scheduler.requeue(static_cast<int>(i));
      return;
    }
    o.finished = true;
    ++done;
    report_line(o);
    // Cases waiting on this one may be ready now.
    std::vector<size_t> waiting;
    waiting.swap(awaiting_baselines);
    for (size_t w : waiting) conclude(w);
  };
  auto start_phase = [&](Active& a) -> bool {
    CaseOutcome& o = run.cases[a.index];
    PhaseOutcome& po = o.phases[a.phase];
    const Phase& spec = o.spec->phases[a.phase];
    po.ran = true;
    ++po.attempts;
    LaunchSpec ls;
    ls.argv = po.argv;
    ls.nproc = spec.nproc;
    ls.env = spec.env;
    ls.env.emplace_back("MESHTEST_CASE_ID", o.spec->id);
    ls.env.emplace_back("MESHTEST_PHASE", spec.name);
    ls.env.emplace_back("MESHTEST_CASE_DIR", fs::absolute(o.dir).string());
    ls.log_dir = po.dir;
    if (opt.backend == "nccl") ls.gpus = physical_gpus(o.devices);
    ls.timeout_s = spec.timeout_s;
    ls.grace_s = opt.grace_s;
    try {
      a.group = std::make_unique<RankGroup>(ls);
      return true;
    } catch (const LaunchError& e) {
      po.launch_error = e.what();
      return false;
    }
  };
  auto finish_case = [&](Active& a) {
    CaseOutcome& o = run.cases[a.index];
    o.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a.started).count();
    pool.release(o.devices);
    conclude(a.index);
  };
  auto running_tasks = [&] {
    std::vector<Scheduler::Running> r;
    for (const auto& a : active) {
      const CaseOutcome& o = run.cases[a.index];
      r.push_back({static_cast<int>(a.index), o.start_s + o.expected_s});
    }
    return r;
  };

  while (true) {
    if (g_stop_signal != 0 && run.interrupted_by == 0) {
      run.interrupted_by = g_stop_signal;
      for (auto& a : active)
        if (a.group) a.group->stop("meshtest received signal " + std::to_string(run.interrupted_by));
    }
    if (run.interrupted_by == 0) {
      for (int t : scheduler.pick(now_s(), pool.free(), running_tasks())) {
        CaseOutcome& o = run.cases[t];
        if (o.spec->expect.kind == Expectation::kSkip || !skip_reason[t].empty()) {
          o.verdict = Verdict::skipped(skip_reason[t].empty() ? o.spec->expect.reason : skip_reason[t]);
          o.finished = true;
          ++done;
          report_line(o);
          continue;
        }
        o.devices = pool.acquire(o.spec->ngpu);
        o.start_s = now_s();
        o.timestamp = iso_now();
        std::error_code ec;
        fs::remove_all(o.dir, ec);  // a stale checkpoint would be resumed
        fs::create_directories(o.dir);
        Active a;
        a.index = static_cast<size_t>(t);
        a.started = std::chrono::steady_clock::now();
        if (start_phase(a)) {
          active.push_back(std::move(a));
        } else {
          finish_case(a);
        }
      }
    }
    // Advance every case in flight.
    for (size_t k = 0; k < active.size();) {
      Active& a = active[k];
      if (!a.group->poll()) {
        ++k;
        continue;
      }
      CaseOutcome& o = run.cases[a.index];
      PhaseOutcome& po = o.phases[a.phase];
      po.result = a.group->result();
      const bool retry_port = lost_port_race(*a.group) && po.attempts < 3 && run.interrupted_by == 0;
      a.group.reset();
      std::set<pid_t> tracked;
      for (const auto& other : active)
        if (other.group)
          for (pid_t p : other.group->pids()) tracked.insert(p);
      sweep_orphans(tracked);
      bool next = false;
      if (retry_port) {
        next = start_phase(a);
      } else if (po.ok() && a.phase + 1 < o.phases.size() && run.interrupted_by == 0) {
        ++a.phase;
        next = start_phase(a);
      }
      if (next) {
        ++k;
        continue;
      }
      finish_case(a);
      active.erase(active.begin() + static_cast<long>(k));
    }
    if (active.empty() && (scheduler.queue_empty() || run.interrupted_by != 0)) break;
    if (opt.progress) {
      double eta = 0;
      for (const auto& a : active) {
        const auto& o = run.cases[a.index];
        eta = std::max(eta, o.start_s + o.expected_s - now_s());
      }
      std::fprintf(stderr, "\r\033[K%zu/%zu done, %zu running, elapsed %s, ETA >= %s", done, run.cases.size(),
                   active.size(), human_seconds(now_s()).c_str(), human_seconds(std::max(0.0, eta)).c_str());
      std::fflush(stderr);
    }
    ::usleep(2000);
  }
  if (opt.progress) std::fprintf(stderr, "\r\033[K");
  // Whatever never started (interrupted) is reported, not dropped.
  // Interrupted before their baselines ran: they ran, but cannot be judged.
  for (size_t w : awaiting_baselines) {
    CaseOutcome& o = run.cases[w];
    o.checks = run_checks(o, find);
    judge(o);
    record_curves(o);
    o.verdict = Verdict::cancelled("not judged: its baseline did not run before meshtest received signal " +
                                   std::to_string(run.interrupted_by));
    o.finished = true;
  }
  for (auto& o : run.cases) {
    if (o.finished) continue;
    o.verdict = Verdict::cancelled("not run: meshtest received signal " + std::to_string(run.interrupted_by));
    o.finished = true;
  }
  if (run.interrupted_by != 0)
    for (auto& o : run.cases)
      if (o.status() == Status::kFailed && !o.phases.empty()) {
        for (const auto& p : o.phases)
          if (p.ran && p.result.stopped_because.find("meshtest received signal") == 0)
            o.verdict = Verdict::cancelled(p.result.stopped_because);
      }
  sweep_orphans({});
  run.wall_s = now_s();
  return run;
}

}  // namespace meshtest
