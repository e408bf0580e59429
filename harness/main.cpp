// meshtest: runs a YAML matrix of distributed-training cases and judges them.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "meshtrain/adapter.h"
#include "torchtitan/adapter.h"
#include "version.h"
#include "history/history.h"
#include "history/queries.h"
#include "history/record.h"
#include "bisect.h"
#include "judge/checks.h"
#include "ckpt_cli.h"
#include "core/default_matrix.h"
#include "report/html_report.h"
#include "run/launch.h"
#include "report/markdown_report.h"
#include "core/matrix.h"
#include "core/git.h"
#include "core/plan.h"
#include "report/report.h"
#include "run/requirements.h"
#include "run/runner.h"
#include "run/slurm.h"
#include "core/schedule.h"
#include "report/finished_run.h"
#include "report/summary.h"

namespace fs = std::filesystem;
using namespace meshtest;
using nlohmann::json;

namespace {

struct Selection {
  std::vector<std::string> matrices;
  std::vector<std::string> ids;       // exact
  std::vector<std::string> keywords;  // -k: substring of the id
  std::vector<std::string> tags;
  std::vector<std::string> excludes;  // substring of the id
  std::string shard;                  // "I/N", 1-based
};

void add_selection_options(CLI::App& cmd, Selection& s) {
  cmd.add_option("-k", s.keywords, "Only cases whose id contains this text (repeatable: any)");
  cmd.add_option("--id", s.ids, "Only the case with exactly this id (repeatable)");
  cmd.add_option("--tag", s.tags, "Only cases with this tag (repeatable: any)");
  cmd.add_option("--exclude", s.excludes, "Leave out cases whose id contains this text (repeatable)");
  cmd.add_option("--shard", s.shard, "I/N: run the I-th of N parts, balanced by expected duration (1-based)");
}

// No matrix named: the CPU matrix built into the binary (test_matrix/cpu.yaml).
std::vector<Suite> load_all(const std::vector<std::string>& files) {
  std::vector<Suite> suites;
  std::vector<std::string> errors;
  if (files.empty()) {
    suites.push_back(load_suite_text(kDefaultMatrixYaml, default_matrix_name()));
    return suites;
  }
  for (const auto& f : files) {
    try {
      suites.push_back(load_suite_file(f));
    } catch (const MatrixError& e) {
      errors.insert(errors.end(), e.errors().begin(), e.errors().end());
    }
  }
  if (!errors.empty()) throw MatrixError(errors);
  validate_suites(suites);
  return suites;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Filters, then adds back the baselines the chosen cases compare against.
std::vector<const Case*> select(const std::vector<Suite>& suites, const Selection& s) {
  std::map<std::string, const Case*> by_id;
  std::vector<const Case*> all;
  for (const auto& suite : suites)
    for (const auto& c : suite.cases) all.push_back(&c), by_id[c.id] = &c;
  std::set<std::string> chosen;
  for (const Case* c : all) {
    bool keep = true;
    if (!s.ids.empty()) keep &= std::find(s.ids.begin(), s.ids.end(), c->id) != s.ids.end();
    if (!s.keywords.empty())
      keep &= std::any_of(s.keywords.begin(), s.keywords.end(), [&](const auto& k) { return contains(c->id, k); });
    if (!s.tags.empty())
      keep &= std::any_of(s.tags.begin(), s.tags.end(),
                          [&](const auto& t) { return std::find(c->tags.begin(), c->tags.end(), t) != c->tags.end(); });
    keep &= std::none_of(s.excludes.begin(), s.excludes.end(), [&](const auto& x) { return contains(c->id, x); });
    if (keep) chosen.insert(c->id);
  }
  for (const auto& id : s.ids)
    if (!by_id.count(id)) throw std::invalid_argument("--id '" + id + "' names no case (meshtest list shows them)");
  // Baselines, transitively.
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& id : std::vector<std::string>(chosen.begin(), chosen.end()))
      for (const auto& b : by_id[id]->baselines())
        if (chosen.insert(b).second) grew = true;
  }
  std::vector<const Case*> out;
  for (const Case* c : all)
    if (chosen.count(c->id)) out.push_back(c);
  return out;
}

// The selection, then the shard's part of it when --shard says so: planned first, so
// the shards balance the durations a run would expect.
std::vector<const Case*> select_shard(const std::vector<Suite>& suites, const Selection& s, const RunOptions& opt,
                                      const std::map<std::string, double>& history) {
  const std::vector<const Case*> selected = select(suites, s);
  if (s.shard.empty()) return selected;
  int index = 0, count = 0;
  char slash = 0;
  std::istringstream in(s.shard);
  if (!(in >> index >> slash >> count) || slash != '/' || count < 1 || index < 1 || index > count || !in.eof())
    throw std::invalid_argument("--shard '" + s.shard + "' must be I/N with 1 <= I <= N");
  return shard_cases(plan_run(selected, opt, history), index, count);
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string join_argv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

int default_devices(const std::string& backend) {
  if (backend == "nccl") {
    if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd && *cvd)
      return static_cast<int>(std::count(cvd, cvd + std::strlen(cvd), ',')) + 1;
    int n = 0;
    for (int i = 0; fs::exists("/dev/nvidia" + std::to_string(i)); ++i) ++n;
    return n;
  }
  // CPU slots: ranks mostly wait on each other, so a small machine still takes an 8-rank case.
  return std::max(8, static_cast<int>(std::thread::hardware_concurrency()));
}

int run_launch(int nproc, const std::string& log_dir, double timeout_s, double grace_s,
               const std::vector<std::string>& command) {
  LaunchSpec spec;
  spec.argv = command;
  spec.nproc = nproc;
  spec.log_dir = log_dir;
  spec.timeout_s = timeout_s;
  spec.grace_s = grace_s;
  become_subreaper();
  install_stop_handlers();
  RankGroup group(spec);
  while (!group.poll()) {
    if (g_stop_signal != 0) group.stop("meshtest received signal " + std::to_string(g_stop_signal));
    ::usleep(2000);
  }
  sweep_orphans({});
  const auto& r = group.result();
  if (r.ok()) return 0;
  std::fprintf(stderr, "meshtest launch: %s\n", r.stopped_because.c_str());
  for (const auto& e : r.exits) std::fprintf(stderr, "  rank %d: %s\n", e.rank, e.describe().c_str());
  if (g_stop_signal != 0) return 128 + g_stop_signal;
  if (r.timed_out) return 124;
  if (r.first_failure.signal != 0) return 128 + r.first_failure.signal;
  return r.first_failure.exit_code != 0 ? r.first_failure.exit_code : 1;
}


// --dry-run: each case's planned start, devices and exact commands, then the makespan.
void print_plan(const Plan& plan, const RunOptions& opt) {
  const auto sim = simulate(plan.tasks, opt.devices, opt.jobs);
  for (size_t i = 0; i < plan.cases.size(); ++i) {
    const CaseOutcome& o = plan.cases[i];
    std::printf("%s  (%d %s%s, expected %.1f s, %s)\n", o.spec->id.c_str(), o.spec->devices(on_gpus(opt)),
                plan.unit.c_str(), o.spec->simulated ? (", " + std::to_string(o.spec->ngpu) + " ranks simulated").c_str() : "",
                plan.tasks[i].expected_s, o.spec->expect.str().c_str());
    if (!plan.runs(i)) {
      std::printf("  skipped: %s\n", plan.skip[i].c_str());
      continue;
    }
    std::printf("  planned start %.1f s on devices", sim.start[i]);
    for (int d : sim.devices[i]) std::printf(" %d", d);
    std::printf("\n");
    for (const auto& p : o.phases) std::printf("  [%s] %s\n", p.name.c_str(), join_argv(p.argv).c_str());
  }
  std::printf("\n%zu cases; planned makespan %.1f s; lower bound %.1f s\n", plan.cases.size(), sim.makespan,
              makespan_lower_bound(plan.tasks, opt.devices));
}

// `path` made absolute against the working directory, `.` and `..` folded, symlinks kept.
std::string absolute_path(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

// ---- run history (docs/history.md) ----------------------------------------------------

std::string history_from_environment() {
  const char* env = std::getenv("MESHTEST_HISTORY");
  return env ? env : "";
}

// --history and --commit (run, merge, rerun-failed).
void add_history_options(CLI::App& cmd, std::string& history, std::string& commit) {
  cmd.add_option("--history", history, "SQLite run history to append this run to (default: $MESHTEST_HISTORY; docs/history.md)");
  cmd.add_option("--commit", commit, "The commit recorded with the run (default: git rev-parse HEAD in the matrix's folder)");
}

// `meshtest run`: select, plan, launch, check, report.
int run_matrix(Selection sel, RunOptions opt, bool dry_run, int ngpu, const char* argv0,
               const std::vector<std::string>& skip_tags = {}) {
  // Every path a case is given or records is absolute: a trainer runs in another working
  // directory than meshtest's (Slurm's --chdir, a command's own cd), and checks read the
  // files back from wherever meshtest was started. A bare program name is looked up in PATH.
  opt.out_dir = absolute_path(opt.out_dir);
  if (!opt.durations.empty()) opt.durations = absolute_path(opt.durations);
  if (opt.history.empty()) opt.history = history_from_environment();
  if (!opt.history.empty()) opt.history = absolute_path(opt.history);
  auto suites = load_all(sel.matrices);
  apply_skip_tags(suites, skip_tags);
  // On a cluster the pool is what meshtest keeps in flight; Slurm packs it (and --max-pending bounds the queue).
  if (ngpu < 0) ngpu = opt.launcher == "slurm" ? 1024 : default_devices(opt.backend);
  opt.devices = ngpu;
  opt.slurm.gpus = opt.backend == "nccl";
  if (on_gpus(opt)) opt.gpu_memory_bytes = smallest_gpu_memory_bytes();
  // Every shard of a sharded run must split alike: from --durations only as given (not this
  // machine's last summary.json) and the history's runs of other commits (not the runs its
  // sibling shards are recording now).
  // Without --shard nothing is split, and the history is read once.
  const std::string given_durations = opt.durations;
  if (opt.durations.empty()) opt.durations = (fs::path(opt.out_dir) / "summary.json").string();
  const auto history = expected_durations(opt, opt.durations);
  const auto shard_durations =
      sel.shard.empty() ? history : expected_durations(opt, given_durations, commit_of_run(opt, sel.matrices));
  std::string files;
  for (const auto& m : sel.matrices) files += " " + shell_quote(m);
  for (const auto& m : sel.matrices) opt.matrices.push_back(absolute_path(m));
  opt.repro_prefix = shell_quote(argv0) + " run" + files + " --backend " + opt.backend + " --ngpu " +
                     std::to_string(opt.devices);
  if (opt.launcher == "slurm") {
    opt.repro_prefix += " --launcher slurm --gpus-per-node " + std::to_string(opt.slurm.gpus_per_node);
    if (!opt.slurm.partition.empty()) opt.repro_prefix += " --partition " + shell_quote(opt.slurm.partition);
    if (!opt.slurm.account.empty()) opt.repro_prefix += " --account " + shell_quote(opt.slurm.account);
    if (opt.slurm.time_limit_min > 0) opt.repro_prefix += " --time-limit " + std::to_string(opt.slurm.time_limit_min);
    for (const auto& a : opt.slurm.srun_args) opt.repro_prefix += " --srun-arg=" + shell_quote(a);
  }
  opt.progress = ::isatty(2) && !std::getenv("CI");
  // The shard is chosen before probing, so every machine of a sharded run splits the same way.
  const std::vector<const Case*> selected = select_shard(suites, sel, opt, shard_durations);
  apply_program_problems(suites, selected);
  apply_requirements(suites, selected, {opt.backend, opt.devices});
  const Plan plan = plan_run(selected, opt, history);

  if (dry_run) {
    print_plan(plan, opt);
    return 0;
  }

  become_subreaper();
  install_stop_handlers();
  fs::create_directories(opt.out_dir);
  std::fprintf(stderr, "meshtest: %zu cases on %d %s (%s), output in %s\n", plan.cases.size(), opt.devices,
               opt.backend == "nccl" ? "GPUs" : "CPU slots", opt.backend.c_str(), opt.out_dir.c_str());
  RunResult result = run_cases(plan, opt);
  // Drift is judged before the summary, so a `drift: fail` case's failed check is in the one
  // summary the reports show and the history records.
  const auto drift = drift_before_recording(opt.history, result.cases, commit_of_run(opt, opt.matrices));
  fail_drifted_cases(result.cases, drift);
  json summary = summary_json(result, opt);
  record_in_history(summary, opt.history, opt.commit, opt.matrices, meshtest_version());
  add_history_notes(summary, drift, opt.history);
  write_summary(summary, (fs::path(opt.out_dir) / "summary.json").string());
  const int reports = render_reports(opt.out_dir, false);
  if (reports != 0) return reports;
  if (result.interrupted_by != 0) return 128 + result.interrupted_by;
  return result.all_met() ? 0 : 1;
}

// Shards of one matrix (or any runs) into one report (merged_summary); 1 when a case missed.
int merge_runs(const std::string& out, const std::vector<std::string>& inputs, const std::string& history,
               const std::string& commit) {
  json merged = merged_summary(inputs);
  merged["run_id"] = new_run_id(merged.value("hostname", ""));
  // The shards recorded their runs already (through $MESHTEST_HISTORY, say): the merged run is
  // recorded only when --history asks for it, or it would count twice.
  const std::string db = history.empty() ? "" : absolute_path(history);
  const auto drift = record_in_history(merged, db, commit, merged["matrices"].get<std::vector<std::string>>(), meshtest_version());
  say_drift(drift);
  add_history_notes(merged, drift, db);
  write_summary(merged, (fs::path(out) / "summary.json").string());
  return render_reports(out, true);
}

// `meshtest list`: one line per selected case.
int list_cases(const Selection& sel) {
  const auto suites = load_all(sel.matrices);
  RunOptions opt;
  opt.devices = default_devices(opt.backend);
  for (const Case* c : select_shard(suites, sel, opt, {})) {
    std::string tags, needs;
    for (const auto& x : c->tags) tags += (tags.empty() ? "  tags=" : ",") + x;
    for (const auto& r : c->requirements) needs += (needs.empty() ? "  requires: " : "; ") + r.describe();
    std::printf("%-50s ngpu=%d%s phases=%zu expect=%s%s%s\n", c->id.c_str(), c->ngpu, c->simulated ? " simulated" : "",
                c->phases.size(),
                c->expect.str().c_str(), tags.c_str(), needs.c_str());
  }
  return 0;
}

// `meshtest show ID`: the case as loaded, with each phase's command as it would run.
int show_case(const std::vector<std::string>& files, const std::string& id) {
  for (const auto& s : load_all(files))
    for (const auto& c : s.cases) {
      if (c.id != id) continue;
      auto j = c.to_json();
      const std::string case_dir = case_folder("meshtest-out", c);
      for (size_t i = 0; i < c.phases.size(); ++i)
        j["phases"][i]["command"] = join_argv(resolve_argv(
            c.phases[i].argv, {backend_of(c, "gloo"), case_dir, case_dir + "/" + c.phases[i].name, trainer_adapters().placeholders()}));
      std::cout << j.dump(2) << "\n";
      return 0;
    }
  std::fprintf(stderr, "meshtest show: no case '%s' (meshtest list shows the ids)\n", id.c_str());
  return 2;
}

// `meshtest rerun-failed`: the cases of an earlier run that missed their expectation, with its
// backend, launcher and Slurm options.
int rerun_failed(const std::string& from, const std::string& out, RunOptions o, const char* argv0) {
  const json prior = read_summary(from);
  Selection again;
  for (const auto& m : prior.at("matrices")) again.matrices.push_back(m.get<std::string>());
  for (const auto& c : prior.at("cases"))
    if (!c.value("met_expectation", false)) again.ids.push_back(c.at("id").get<std::string>());
  if (again.ids.empty()) {
    std::printf("meshtest: every case in %s met its expectation; nothing to rerun\n", from.c_str());
    return 0;
  }
  o.backend = prior.value("backend", "gloo");
  o.launcher = prior.value("launcher", "local");
  if (const auto sl = prior.value("slurm", json::object()); !sl.empty()) {
    const SlurmOptions defaults;
    o.slurm.partition = sl.value("partition", "");
    o.slurm.account = sl.value("account", "");
    o.slurm.gpus_per_node = sl.value("gpus_per_node", defaults.gpus_per_node);
    o.slurm.time_limit_min = sl.value("time_limit_min", defaults.time_limit_min);
    o.slurm.max_pending = sl.value("max_pending", defaults.max_pending);
    o.slurm.srun_args = sl.value("srun_args", std::vector<std::string>{});
  }
  o.out_dir = out.empty() ? (fs::path(from) / "rerun").string() : out;
  o.durations = (fs::path(from) / "summary.json").string();
  return run_matrix(again, o, false, prior.value("devices", -1), argv0);
}

// ---- the subcommands: each adds its options and says what it does when given ----------

// A subcommand's action, run when the command line named it. Its options live in the closure.
struct Subcommand {
  CLI::App* cmd;
  std::function<int()> action;
};

// `--meshtrain PATH` (run, rerun-failed): the binary the meshtrain adapter uses.
void add_meshtrain_option(CLI::App& cmd, std::shared_ptr<std::string> path) {
  cmd.add_option("--meshtrain", *path, "The meshtrain binary (default: next to meshtest)");
  cmd.callback([path] { use_meshtrain_binary(*path); });
}

void add_slurm_options(CLI::App& run, SlurmOptions& slurm) {
  run.add_option("--partition", slurm.partition, "slurm: the partition (default: the cluster's)");
  run.add_option("--account", slurm.account, "slurm: the account to charge");
  run.add_option("--gpus-per-node", slurm.gpus_per_node, "slurm: ranks (GPUs) per node; wider cases span nodes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run.add_option("--time-limit", slurm.time_limit_min,
                 "slurm: minutes per case allocation (0: its phase timeouts plus a minute each)")
      ->capture_default_str();
  run.add_option("--max-pending", slurm.max_pending, "slurm: case allocations waiting in the queue at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run.add_option("--srun-arg", slurm.srun_args, "slurm: an extra srun argument (repeatable), e.g. --srun-arg=--mpi=none");
}

Subcommand add_run(CLI::App& app, const char* argv0) {
  struct Args {
    Selection sel;
    RunOptions opt;
    bool dry_run = false;
    int ngpu = -1;
    std::vector<std::string> skip_tags;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run", "Run the selected cases and write <out>/summary.json");
  cmd->add_option("MATRIX", a->sel.matrices, "Matrix YAML files (default: the built-in test_matrix/cpu.yaml)")
      ->check(CLI::ExistingFile);
  add_selection_options(*cmd, a->sel);
  RunOptions& opt = a->opt;
  cmd->add_option("--out", opt.out_dir, "Output folder")->capture_default_str();
  cmd->add_option("--ngpu", a->ngpu, "Devices in the pool: GPUs (nccl) or CPU rank slots (gloo; default max(8, cores))");
  cmd->add_option("--backend", opt.backend, "gloo (CPU) | nccl (GPU)")->check(CLI::IsMember({"gloo", "nccl"}))->capture_default_str();
  cmd->add_option("--jobs", opt.jobs, "Cases at once (0: as many as the pool fits)")->capture_default_str();
  cmd->add_option("--grace", opt.grace_s, "Seconds between SIGTERM and SIGKILL when a case is stopped")->capture_default_str();
  add_meshtrain_option(*cmd, std::make_shared<std::string>());
  cmd->add_option("--durations", opt.durations, "summary.json whose durations order the cases (default: <out>/summary.json)");
  add_history_options(*cmd, opt.history, opt.commit);
  cmd->add_flag("--dry-run", a->dry_run, "Print the plan and the commands; run nothing");
  cmd->add_option("--skip-tag", a->skip_tags,
                  "TAG[=REASON]: report cases with this tag as skipped (repeatable), e.g. on a machine without "
                  "what they need");
  cmd->add_option("--retries", opt.retries, "Reruns of a case that misses its expectation (reported as flaky)")
      ->capture_default_str();
  cmd->add_option("--launcher", opt.launcher, "local (ranks on this host) | slurm (docs/slurm.md)")
      ->check(CLI::IsMember({"local", "slurm"}))
      ->capture_default_str();
  add_slurm_options(*cmd, opt.slurm);
  return {cmd, [a, argv0] { return run_matrix(a->sel, a->opt, a->dry_run, a->ngpu, argv0, a->skip_tags); }};
}

Subcommand add_list(CLI::App& app) {
  auto sel = std::make_shared<Selection>();
  auto* cmd = app.add_subcommand("list", "List the cases a selection expands to");
  cmd->add_option("MATRIX", sel->matrices, "Matrix YAML files (default: the built-in cpu.yaml)")->check(CLI::ExistingFile);
  add_selection_options(*cmd, *sel);
  return {cmd, [sel] { return list_cases(*sel); }};
}

Subcommand add_show(CLI::App& app) {
  auto id = std::make_shared<std::string>();
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("show", "A case fully resolved, with the exact commands of its phases");
  cmd->add_option("ID", *id, "Case id, e.g. resharding/save[dp_shard=4]-load[tp=4]")->required();
  cmd->add_option("MATRIX", *files, "Matrix YAML files (default: the built-in cpu.yaml)")->check(CLI::ExistingFile);
  return {cmd, [id, files] { return show_case(*files, *id); }};
}

Subcommand add_launch(CLI::App& app) {
  struct Args {
    int nproc = 1;
    std::string log_dir;
    double timeout_s = 0, grace_s = 30;
    std::vector<std::string> command;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("launch", "Run one command on N ranks with torchrun's environment and teardown");
  cmd->add_option("--nproc", a->nproc, "Ranks")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--log-dir", a->log_dir, "rank<R>.log per rank here (default: ranks share this terminal)");
  cmd->add_option("--timeout", a->timeout_s, "Stop all ranks after this many seconds (0: never)");
  cmd->add_option("--grace", a->grace_s, "Seconds between SIGTERM and SIGKILL")->capture_default_str();
  cmd->add_option("COMMAND", a->command, "Program and arguments (after --)")->required();
  return {cmd, [a] { return run_launch(a->nproc, a->log_dir, a->timeout_s, a->grace_s, a->command); }};
}

Subcommand add_slurm_task(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto command = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("slurm-task", "(run by srun) One rank of a Slurm step with torchrun's environment");
  cmd->add_option("--dir", *dir, "The phase's folder: rank<R>.log and exit_rank<R>.json")->required();
  cmd->add_option("COMMAND", *command, "Program and arguments (after --)")->required();
  return {cmd, [dir, command] { return run_slurm_task(*dir, *command); }};
}

Subcommand add_merge(CLI::App& app) {
  auto out = std::make_shared<std::string>();
  auto in = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("merge", "One summary.json, junit.xml and surefire/ from several runs (CI shards)");
  cmd->add_option("OUT", *out, "Folder for the merged reports")->required();
  cmd->add_option("IN", *in, "The shards' --out folders")->required();
  auto history = std::make_shared<std::pair<std::string, std::string>>();
  add_history_options(*cmd, history->first, history->second);
  cmd->get_option("--history")->description("SQLite run history to record the merged run in; only when given (not "
                                            "$MESHTEST_HISTORY): the shards recorded their own runs");
  return {cmd, [out, in, history] { return merge_runs(*out, *in, history->first, history->second); }};
}

Subcommand add_report(CLI::App& app) {
  struct Args {
    std::string dir, html;
    bool markdown = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("report", "Render report.html, junit.xml, surefire/ and the table again from DIR/summary.json");
  cmd->add_option("DIR", a->dir, "A meshtest --out folder (or merge OUT)")->required();
  cmd->add_option("--html", a->html, "Only write the HTML report, to FILE");
  cmd->add_flag("--markdown", a->markdown, "Only print a Markdown summary (for $GITHUB_STEP_SUMMARY); exit 0 once printed");
  return {cmd, [a] {
            if (a->markdown) {
              std::fputs(markdown_summary(summary_view(read_summary(a->dir))).c_str(), stdout);
              return 0;
            }
            if (a->html.empty()) return render_reports(a->dir, true);
            const RunView run = summary_view(read_summary(a->dir));
            write_html_report(run, a->html);
            std::printf("report: %s\n", a->html.c_str());
            return run.all_met ? 0 : 1;
          }};
}

Subcommand add_rerun_failed(CLI::App& app, const char* argv0) {
  struct Args {
    std::string from, out;
    RunOptions opt;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("rerun-failed", "Run again the cases of an earlier run that missed their expectation");
  cmd->add_option("--from", a->from, "The earlier run's --out folder")->required();
  cmd->add_option("--out", a->out, "Output folder (default: <from>/rerun)");
  cmd->add_option("--grace", a->opt.grace_s, "Seconds between SIGTERM and SIGKILL")->capture_default_str();
  cmd->add_option("--retries", a->opt.retries, "Reruns of a case that misses its expectation")->capture_default_str();
  add_meshtrain_option(*cmd, std::make_shared<std::string>());
  add_history_options(*cmd, a->opt.history, a->opt.commit);
  return {cmd, [a, argv0] { return rerun_failed(a->from, a->out, a->opt, argv0); }};
}

Subcommand add_history(CLI::App& app) {
  struct Args {
    std::string db, into;
    std::vector<std::string> from;
    HistoryQuery query;
  };
  auto a = std::make_shared<Args>();
  HistoryQuery& q = a->query;
  auto* cmd = app.add_subcommand("history", "What the run history says: a case's last runs, flaky, slow and drifting cases");
  cmd->add_option("CASE", q.case_id, "A case id: its last runs (commit, verdict, final loss, margin, duration)");
  cmd->add_option("--history", a->db, "The history database (default: $MESHTEST_HISTORY)");
  cmd->add_option("--last", q.last, "Runs per case to look at")->capture_default_str();
  cmd->add_flag("--flaky", q.flaky, "Cases whose verdict changed within a commit, or that passed only on a retry");
  cmd->add_flag("--slowest", q.slowest, "Cases by their median duration");
  cmd->add_flag("--drift", q.drift, "Cases that left the band of their green runs, and the first commit where they did");
  cmd->add_flag("--json", q.json, "One JSON document on stdout");
  auto* merge = cmd->add_subcommand("merge", "Add the runs of other histories (runners' copies) to INTO; a run counts once");
  merge->add_option("INTO", a->into, "The history to add to (created when missing)")->required();
  merge->add_option("FROM", a->from, "Histories to read")->required()->check(CLI::ExistingFile);
  return {cmd, [a, merge] {
            if (*merge) return merge_histories(a->into, a->from);
            return show_history(a->db.empty() ? history_from_environment() : a->db, a->query);
          }};
}

Subcommand add_diff(CLI::App& app) {
  auto dir = std::make_shared<std::string>("meshtest-out");
  auto ids = std::make_shared<std::pair<std::string, std::string>>();
  auto* cmd = app.add_subcommand("diff", "Loss curves of two cases side by side, and their key differences");
  cmd->add_option("ID_A", ids->first, "Case id")->required();
  cmd->add_option("ID_B", ids->second, "Case id")->required();
  cmd->add_option("--out", *dir, "The run's --out folder")->capture_default_str();
  return {cmd, [dir, ids] { return diff_cases(*dir, ids->first, ids->second); }};
}

Subcommand add_golden(CLI::App& app) {
  struct Args {
    std::string dir = "meshtest-out", id, phase, metric = "loss";
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("golden", "Golden loss files for loss_matches");
  cmd->require_subcommand(1);
  auto* export_cmd = cmd->add_subcommand("export", "Print a case's losses (or grad norms) as '<step> <value>' lines");
  export_cmd->add_option("ID", a->id, "Case id")->required();
  export_cmd->add_option("--phase", a->phase, "Phase (default: the last)");
  export_cmd->add_option("--out", a->dir, "The run's --out folder")->capture_default_str();
  export_cmd->add_option("--metric", a->metric, "loss, grad_norm or validation_loss")->capture_default_str();
  return {cmd, [a] { return export_golden(a->dir, a->id, a->phase, a->metric); }};
}

Subcommand add_ckpt(CLI::App& app) {
  struct Args {
    CkptOptions ckpt;
    std::string a, b;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("ckpt", "Look inside PyTorch DCP and meshtrain checkpoints");
  cmd->require_subcommand(1);
  auto* inspect = cmd->add_subcommand("inspect", "Keys, kinds, dtypes, global shapes, chunks, bytes");
  inspect->add_option("PATH", a->a, "A step folder, or a folder of step-<N> (the newest is read)")->required();
  inspect->add_option("--step", a->ckpt.step, "Which step-<N> of a folder of steps");
  inspect->add_flag("--json", a->ckpt.json, "One JSON document");
  auto* diff = cmd->add_subcommand("diff", "Keys, dtypes and shapes that differ (and values with --values); exit 1 if any");
  diff->add_option("A", a->a, "Checkpoint A")->required();
  diff->add_option("B", a->b, "Checkpoint B")->required();
  diff->add_option("--step", a->ckpt.step, "Which step-<N> of a folder of steps");
  diff->add_option("--model-prefix", a->ckpt.model_prefix,
                   "Add this to keys outside model./optimizer./... on both sides (e.g. model. for torchtitan)");
  diff->add_flag("--values", a->ckpt.values,
                 "Compare common tensors element by element, across dtypes (a dtype alone is then a note, not a difference)");
  diff->add_option("--rtol", a->ckpt.rtol, "With --values: |A-B| <= atol + rtol x |B|")->capture_default_str();
  diff->add_option("--atol", a->ckpt.atol, "With --values")->capture_default_str();
  return {cmd, [a, inspect] {
            return *inspect ? ckpt_inspect(a->a, a->ckpt, stdout) : ckpt_diff(a->a, a->b, a->ckpt, stdout);
          }};
}

Subcommand add_bisect(CLI::App& app) {
  auto o = std::make_shared<BisectOptions>();
  o->build = kDefaultBisectBuild;
  auto* cmd = app.add_subcommand(
      "bisect", "Find the commit where a case started failing: git bisect, with a build and the case at each commit");
  cmd->add_option("ID", o->case_id, "Case id")->required();
  cmd->add_option("MATRIX", o->matrices, "Matrix YAML files (default: the built-in cpu.yaml)")->check(CLI::ExistingFile);
  cmd->add_option("--good", o->good, "A commit where the case meets its expectation")->required();
  cmd->add_option("--bad", o->bad, "A later commit where it does not")->capture_default_str();
  cmd->add_option("--build", o->build,
                  "Shell command run in the repository root at every commit; a failure skips the commit "
                  "('' builds nothing)")
      ->capture_default_str();
  cmd->add_option("--repo", o->repo, "A folder inside the git work tree")->capture_default_str();
  cmd->add_option("--out", o->out, "Output folder (default: a new one under $TMPDIR)");
  cmd->add_option("--backend", o->backend, "gloo (CPU) | nccl (GPU)")->check(CLI::IsMember({"gloo", "nccl"}))->capture_default_str();
  cmd->add_option("--ngpu", o->ngpu, "Devices in the pool, as for run");
  cmd->add_option("--meshtrain", o->meshtrain, "The meshtrain binary (default: next to meshtest)");
  cmd->add_option("--retries", o->retries, "Reruns of a failing case; one that then passes is flaky and its commit skipped")
      ->capture_default_str();
cmd->add_flag("--drift", o->drift, "Bad means the loss curve moved from GOOD's (the history's drift band), though it passes");
    cmd->add_flag("--json", o->json, "The result as one JSON document");
  return {cmd, [o] { return bisect(*o); }};
}

}  // namespace

int main(int argc, char** argv) {
  register_meshtrain_adapter(trainer_adapters());
  register_torchtitan_adapter(trainer_adapters());
  CLI::App app{"meshtest: a matrix runner for distributed-training CI (docs/matrix.md)", "meshtest"};
  app.set_version_flag("--version", std::string("meshtest ") + meshtest_version());
  app.require_subcommand(1);
  const std::vector<Subcommand> subcommands = {
      add_run(app, argv[0]), add_list(app),  add_show(app),   add_launch(app), add_slurm_task(app),
      add_merge(app),        add_report(app), add_rerun_failed(app, argv[0]),  add_diff(app),
      add_golden(app),       add_ckpt(app),  add_bisect(app), add_history(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& [cmd, action] : subcommands)
      if (*cmd) return action();
    return 2;
  } catch (const MatrixError& e) {
    for (const auto& line : e.errors()) std::fprintf(stderr, "%s\n", line.c_str());
    std::fprintf(stderr, "meshtest: %zu error%s in the matrix; nothing was run\n", e.errors().size(),
                 e.errors().size() == 1 ? "" : "s");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtest: %s\n", e.what());
    return 2;
  }
}
