#include "run_matrix.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/plan.h"
#include "core/shell_words.h"
#include "history/record.h"
#include "history/run_history.h"
#include "judge/check_sources.h"
#include "report/finished_run.h"
#include "report/summary.h"
#include "run/launch.h"
#include "run/requirements.h"
#include "run/runner.h"
#include "version.h"

namespace meshtest {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// `path` made absolute against the working directory, `.` and `..` folded, symlinks kept.
std::string absolute_path(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

// Expected seconds per case: an earlier summary.json's, then the history's medians.
std::map<std::string, double> expected_durations(const std::string& summary_file, RunHistory& history,
                                                 const std::string& except_commit = "") {
  auto durations = load_durations(summary_file);
  for (const auto& [id, seconds] : history.durations(except_commit)) durations[id] = seconds;
  return durations;
}

// Every path a case is given or records is absolute: a trainer runs in another working
// directory than meshtest's (Slurm's --chdir, a command's own cd), and checks read the files
// back from wherever meshtest was started.
void make_paths_absolute(RunOptions& opt, const std::vector<std::string>& matrices) {
  opt.out_dir = absolute_path(opt.out_dir);
  if (!opt.durations.empty()) opt.durations = absolute_path(opt.durations);
  if (opt.history.empty()) opt.history = history_from_environment();
  if (!opt.history.empty()) opt.history = absolute_path(opt.history);
  for (const auto& m : matrices) opt.matrices.push_back(absolute_path(m));
}

// The summary, judged for drift once and recorded; the reports rendered from it.
int finish_run(RunResult& result, const RunOptions& opt, RunHistory& history) {
  // The drift notes of the cases that declare no drift check (theirs was judged with the case).
  const auto drift = history.enabled() ? history.drift(result.cases) : std::map<std::string, DriftFinding>{};
  json summary = summary_json(result, opt);
  history.record(summary, repo_dir_of(opt.matrices), meshtest_version());
  history.add_notes(summary, drift);
  write_summary(summary, (fs::path(opt.out_dir) / "summary.json").string());
  const int reports = render_reports(opt.out_dir, false);
  if (reports != 0) return reports;
  if (result.interrupted_by != 0) return 128 + result.interrupted_by;
  return result.all_met() ? 0 : 1;
}

}  // namespace

std::string history_from_environment() {
  const char* env = std::getenv("MESHTEST_HISTORY");
  return env ? env : "";
}

std::string repro_prefix(const std::string& program, const RunRequest& r) {
  const RunOptions& opt = r.options;
  std::vector<std::string> argv = {program, "run"};
  argv.insert(argv.end(), r.selection.matrices.begin(), r.selection.matrices.end());
  argv.insert(argv.end(), {"--backend", opt.backend, "--ngpu", std::to_string(opt.devices)});
  if (opt.jobs != 0) argv.insert(argv.end(), {"--jobs", std::to_string(opt.jobs)});
  if (opt.grace_s != RunOptions{}.grace_s) argv.insert(argv.end(), {"--grace", json(opt.grace_s).dump()});
  if (opt.retries != 0) argv.insert(argv.end(), {"--retries", std::to_string(opt.retries)});
  for (const auto& tag : r.skip_tags) argv.insert(argv.end(), {"--skip-tag", tag});
  if (!r.meshtrain.empty()) argv.insert(argv.end(), {"--meshtrain", r.meshtrain});
  if (opt.launcher == "slurm") {
    argv.insert(argv.end(), {"--launcher", "slurm"});
    const auto slurm = opt.slurm.to_args();
    argv.insert(argv.end(), slurm.begin(), slurm.end());
  }
  return join_argv(argv);
}

int run_matrix(RunRequest request, const std::string& program) {
  RunOptions& opt = request.options;
  const Selection& sel = request.selection;
  make_paths_absolute(opt, sel.matrices);
  auto suites = load_matrices(sel.matrices);
  apply_skip_tags(suites, request.skip_tags);
  // On a cluster the pool is what meshtest keeps in flight; Slurm packs it (and --max-pending bounds the queue).
  opt.devices = request.ngpu >= 0 ? request.ngpu : opt.launcher == "slurm" ? 1024 : default_devices(opt.backend);
  opt.slurm.gpus = on_gpus(opt);
  if (on_gpus(opt)) opt.gpu_memory_bytes = smallest_gpu_memory_bytes();
  RunHistory history(opt.history, commit_of_run(opt.commit, opt.matrices));
  // Every shard of a sharded run must split alike: from --durations only as given (not this
  // machine's last summary.json) and the history's runs of other commits (not the runs its
  // sibling shards are recording now). Without --shard nothing is split.
  const std::string given_durations = opt.durations;
  if (opt.durations.empty()) opt.durations = (fs::path(opt.out_dir) / "summary.json").string();
  const auto durations = expected_durations(opt.durations, history);
  const auto shard_durations =
      sel.shard.empty() ? durations : expected_durations(given_durations, history, history.commit());
  opt.repro_prefix = repro_prefix(program, request);
  opt.progress = ::isatty(2) && !std::getenv("CI");
  // The shard is chosen before probing, so every machine of a sharded run splits the same way.
  const std::vector<const Case*> selected = select_shard(suites, sel, opt, shard_durations);
  apply_program_problems(suites, selected);
  apply_requirements(suites, selected, {opt.backend, opt.devices});
  const Plan plan = plan_run(selected, opt, durations);
  if (request.dry_run) {
    std::fputs(plan_text(plan, opt).c_str(), stdout);
    return 0;
  }
  become_subreaper();
  install_stop_handlers();
  fs::create_directories(opt.out_dir);
  std::fprintf(stderr, "meshtest: %zu cases on %d %s (%s), output in %s\n", plan.cases.size(), opt.devices,
               on_gpus(opt) ? "GPUs" : "CPU slots", opt.backend.c_str(), opt.out_dir.c_str());
  HistorySource past;  // what drift checks read: opened once, with the rest the run asks of it
  if (history.enabled())
    past = {[&history](const std::string& id, int limit) { return history.runs_before(id, limit); }, history.commit()};
  RunResult result = run_cases(plan, opt, past);
  return finish_run(result, opt, history);
}

int rerun_failed(const std::string& from, const std::string& out, RunRequest request, const std::string& program) {
  const json prior = read_summary(from);
  Selection& again = request.selection;
  for (const auto& m : prior.at("matrices")) again.matrices.push_back(m.get<std::string>());
  for (const auto& c : prior.at("cases"))
    if (!c.value("met_expectation", false)) again.ids.push_back(c.at("id").get<std::string>());
  if (again.ids.empty()) {
    std::printf("meshtest: every case in %s met its expectation; nothing to rerun\n", from.c_str());
    return 0;
  }
  RunOptions& o = request.options;
  o.backend = prior.value("backend", "gloo");
  o.launcher = prior.value("launcher", "local");
  if (const auto slurm = prior.value("slurm", json::object()); !slurm.empty()) o.slurm = SlurmOptions::from_json(slurm);
  o.out_dir = out.empty() ? (fs::path(from) / "rerun").string() : out;
  o.durations = (fs::path(from) / "summary.json").string();
  request.ngpu = prior.value("devices", -1);
  return run_matrix(request, program);
}

int merge_runs(const std::string& out, const std::vector<std::string>& inputs, const std::string& history_path,
               const std::string& commit) {
  json merged = merged_summary(inputs);
  merged["run_id"] = new_run_id(merged.value("hostname", ""));
  const auto matrices = merged["matrices"].get<std::vector<std::string>>();
  // The shards recorded their runs already (through $MESHTEST_HISTORY, say): the merged run is
  // recorded only when --history asks for it, or it would count twice.
  const std::string db = history_path.empty() ? "" : absolute_path(history_path);
  RunHistory history(db, db.empty() ? commit : commit_of_run(commit, matrices));
  history.record(merged, repo_dir_of(matrices), meshtest_version());
  history.add_notes(merged, history.drift_of_recorded(merged));
  write_summary(merged, (fs::path(out) / "summary.json").string());
  return render_reports(out, true);
}

}  // namespace meshtest
