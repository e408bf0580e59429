#include "core/plan.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

namespace fs = std::filesystem;

namespace meshtest {

namespace {

// A folder name for a case: its name with anything unusual replaced.
std::string folder_name(const std::string& name) {
  std::string out;
  for (char ch : name) out += (std::isalnum(static_cast<unsigned char>(ch)) || std::string("_.,=+-[]").find(ch) != std::string::npos) ? ch : '_';
  return out;
}

// The case with its folder, commands and expected time; nothing run yet.
CaseOutcome prepared(const Case& c, const RunOptions& opt, double expected_s) {
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
    po.argv = resolve_argv(p.argv, {opt.backend, o.dir, po.dir, trainer_adapters().placeholders()});
    o.phases.push_back(po);
  }
  return o;
}

}  // namespace

Plan plan_run(const std::vector<const Case*>& cases, const RunOptions& opt,
              const std::map<std::string, double>& history) {
  Plan plan;
  plan.unit = opt.backend == "nccl" ? "GPUs" : "CPU slots";
  plan.skip = pool_skips(cases, opt.devices, plan.unit);
  std::set<std::string> baselines;
  for (const Case* c : cases)
    for (const auto& b : c->baselines()) baselines.insert(b);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = *cases[i];
    if (c.expect.kind == Expectation::kSkip) plan.skip[i] = c.expect.reason.empty() ? "skip declared" : c.expect.reason;
    auto h = history.find(c.id);
    plan.cases.push_back(prepared(c, opt, h != history.end() ? h->second : estimate_seconds(c)));
    // Skipped cases hold no devices; the scheduler still reaches them, in order.
    const bool runs = plan.runs(i);
    plan.tasks.push_back({runs ? c.ngpu : 0, runs ? plan.cases[i].expected_s : 0.0, c.id, baselines.count(c.id) > 0});
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
    const TrainerAdapter* adapter = trainer_adapters().find(c.adapter);
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

}  // namespace meshtest
