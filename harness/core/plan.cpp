#include "core/plan.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "core/shell_words.h"

namespace fs = std::filesystem;

namespace meshtest {

namespace {

// A folder name for a case: its name with anything unusual replaced.
std::string folder_name(const std::string& name) {
  std::string out;
  for (char ch : name)
    out += (std::isalnum(static_cast<unsigned char>(ch)) || std::string("_.,=+-[]").find(ch) != std::string::npos)
               ? ch
               : '_';
  return out;
}

// The case with its folder, commands and expected time; nothing run yet.
CaseOutcome prepared(const Case& c, const RunOptions& opt, double expected_s,
                     const std::vector<std::pair<std::string, std::string>>& programs) {
  CaseOutcome o;
  o.spec = &c;
  o.dir = case_folder(opt.out_dir, c);
  o.expected_s = expected_s;
  o.repro = opt.repro_prefix + " --id '" + c.id + "'";
  for (const auto& p : c.phases) {
    PhaseOutcome po;
    po.name = p.name;
    po.nproc = p.nproc;
    po.dir = (fs::path(o.dir) / p.name).string();
    po.argv = resolve_argv(p.argv, {backend_of(c, opt.backend), o.dir, po.dir, programs});
    o.phases.push_back(po);
  }
  return o;
}

// Why a simulated world cannot run on this run's GPUs ("" when it can, or nobody can tell):
// all of its ranks share one GPU, so their memory must fit that one.
std::string simulated_memory_problem(const Case& c, const RunOptions& opt) {
  const TrainerAdapter* adapter = c.trainer_adapter;
  if (!c.simulated || !on_gpus(opt) || opt.gpu_memory_bytes <= 0 || !adapter) return "";
  for (const auto& p : c.phases) {
    const auto need = adapter->simulated_world_bytes(c.model, p.nproc);
    if (!need || *need <= opt.gpu_memory_bytes) continue;
    char text[320];
    std::snprintf(text, sizeof text,
                  "a simulated world of %d ranks of %s needs about %.1f GiB on one GPU (phase %s), more than its "
                  "%.1f GiB: run it on %d GPUs without simulate, or simulate fewer ranks",
                  p.nproc, c.model.c_str(), *need / (1u << 30), p.name.c_str(), opt.gpu_memory_bytes / (1u << 30),
                  p.nproc);
    return text;
  }
  return "";
}

}  // namespace

std::string backend_of(const Case& c, const std::string& run_backend) {
  const TrainerAdapter* adapter = c.trainer_adapter;
  const auto simulation = c.simulated && adapter ? adapter->simulation() : std::nullopt;
  return simulation && !simulation->backend.empty() ? simulation->backend : run_backend;
}

Plan plan_run(const std::vector<const Case*>& cases, const RunOptions& opt,
              const std::map<std::string, double>& history) {
  Plan plan;
  plan.unit = on_gpus(opt) ? kGpuUnit : "CPU slots";
  plan.skip = pool_skips(cases, opt.devices, plan.unit);
  std::set<std::string> baselines;
  for (const Case* c : cases)
    for (const auto& b : c->baselines()) baselines.insert(b);
  const auto programs = trainer_adapters().placeholders();  // once: an adapter may search PATH
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = *cases[i];
    if (c.expect.kind == Expectation::kSkip) plan.skip[i] = c.expect.reason.empty() ? "skip declared" : c.expect.reason;
    if (plan.skip[i].empty()) plan.skip[i] = simulated_memory_problem(c, opt);
    auto h = history.find(c.id);
    plan.cases.push_back(prepared(c, opt, h != history.end() ? h->second : estimate_seconds(c), programs));
    // Skipped cases hold no devices; the scheduler still reaches them, in order.
    const bool runs = plan.runs(i);
    plan.tasks.push_back(
        {runs ? c.devices(on_gpus(opt)) : 0, runs ? plan.cases[i].expected_s : 0.0, c.id, baselines.count(c.id) > 0});
  }
  return plan;
}

std::vector<const Case*> shard_cases(const Plan& plan, int index, int count) {
  const auto& cases = plan.cases;
  // A case and its baselines share a shard: union them into groups.
  std::map<std::string, int> group;
  for (size_t i = 0; i < cases.size(); ++i) group[cases[i].spec->id] = static_cast<int>(i);
  std::function<int(int)> root = [&](int g) {
    while (group[cases[g].spec->id] != g) g = group[cases[g].spec->id];
    return g;
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (const auto& b : cases[i].spec->baselines())
      if (group.count(b)) group[cases[root(group[b])].spec->id] = root(static_cast<int>(i));
  std::vector<int> groups;
  for (size_t i = 0; i < cases.size(); ++i) groups.push_back(root(static_cast<int>(i)));
  const auto shard_of = assign_shards(plan.tasks, groups, count);
  std::vector<const Case*> mine;
  for (size_t i = 0; i < cases.size(); ++i)
    if (shard_of[i] == index - 1) mine.push_back(cases[i].spec);
  return mine;
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
    const TrainerAdapter* adapter = c.trainer_adapter;
    const double steps = (adapter ? adapter->steps(p.argv) : std::nullopt).value_or(10);
    total += 2.0 + 0.05 * steps * p.nproc;  // start-up, then steps slow down with ranks on shared cores
  }
  return total;
}

std::vector<std::string> pool_skips(const std::vector<const Case*>& cases, int devices, const std::string& unit) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < cases.size(); ++i) index_of[cases[i]->id] = i;
  std::vector<std::string> reason(cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i]->devices(unit == kGpuUnit) > devices && cases[i]->expect.kind != Expectation::kSkip)
      reason[i] = "needs " + std::to_string(cases[i]->devices(unit == kGpuUnit)) + " " + unit + "; --ngpu is " +
                  std::to_string(devices);
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

std::string plan_text(const Plan& plan, const RunOptions& opt) {
  const auto sim = simulate(plan.tasks, opt.devices, opt.jobs);
  std::string out;
  char line[1024];
  for (size_t i = 0; i < plan.cases.size(); ++i) {
    const CaseOutcome& o = plan.cases[i];
    const std::string simulated = o.spec->simulated ? ", " + std::to_string(o.spec->ngpu) + " ranks simulated" : "";
    std::snprintf(line, sizeof line, "%s  (%d %s%s, expected %.1f s, %s)\n", o.spec->id.c_str(),
                  o.spec->devices(on_gpus(opt)), plan.unit.c_str(), simulated.c_str(), plan.tasks[i].expected_s,
                  o.spec->expect.str().c_str());
    out += line;
    if (!plan.runs(i)) {
      out += "  skipped: " + plan.skip[i] + "\n";
      continue;
    }
    std::snprintf(line, sizeof line, "  planned start %.1f s on devices", sim.start[i]);
    out += line;
    for (int d : sim.devices[i]) out += " " + std::to_string(d);
    out += "\n";
    for (const auto& p : o.phases) out += "  [" + p.name + "] " + join_argv(p.argv) + "\n";
  }
  std::snprintf(line, sizeof line, "\n%zu cases; planned makespan %.1f s; lower bound %.1f s\n", plan.cases.size(),
                sim.makespan, makespan_lower_bound(plan.tasks, opt.devices));
  return out + line;
}

}  // namespace meshtest
