// The subcommands of a run and of what reads it back: run, list, show, launch, slurm-task,
// merge, report, rerun-failed (commands.h).
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "core/selection.h"
#include "meshtrain/adapter.h"
#include "report/finished_run.h"
#include "run/launch.h"
#include "run/requirements.h"
#include "run/runner.h"
#include "run/slurm.h"
#include "run_matrix.h"

namespace meshtest {

namespace {

void add_selection_options(CLI::App& cmd, Selection& s) {
  cmd.add_option("-k", s.keywords, "Only cases whose id contains this text (repeatable: any)");
  cmd.add_option("--id", s.ids, "Only the case with exactly this id (repeatable)");
  cmd.add_option("--tag", s.tags, "Only cases with this tag (repeatable: any)");
  cmd.add_option("--exclude", s.excludes, "Leave out cases whose id contains this text (repeatable)");
  cmd.add_option("--shard", s.shard, "I/N: run the I-th of N parts, balanced by expected duration (1-based)");
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
  run.add_option("--srun-arg", slurm.srun_args,
                 "slurm: an extra srun argument (repeatable), e.g. --srun-arg=--mpi=none");
}

}  // namespace

// --history and --commit (run, merge, rerun-failed).
void add_history_options(CLI::App& cmd, std::string& history, std::string& commit) {
  cmd.add_option("--history", history,
                 "SQLite run history to append this run to (default: $MESHTEST_HISTORY; docs/history.md)");
  cmd.add_option("--commit", commit,
                 "The commit recorded with the run (default: git rev-parse HEAD in the matrix's folder)");
}

void add_meshtrain_option(CLI::App& cmd, std::string& path) {
  cmd.add_option("--meshtrain", path, "The meshtrain binary (default: next to meshtest)");
  cmd.callback([&path] { use_meshtrain_binary(path); });
}

Subcommand add_run(CLI::App& app, const char* argv0) {
  auto r = std::make_shared<RunRequest>();
  auto* cmd = app.add_subcommand("run", "Run the selected cases and write <out>/summary.json");
  cmd->add_option("MATRIX", r->selection.matrices, "Matrix YAML files (default: the built-in test_matrix/cpu.yaml)")
      ->check(CLI::ExistingFile);
  add_selection_options(*cmd, r->selection);
  RunOptions& opt = r->options;
  cmd->add_option("--out", opt.out_dir, "Output folder")->capture_default_str();
  cmd->add_option("--ngpu", r->ngpu,
                  "Devices in the pool: GPUs (nccl) or CPU rank slots (gloo; default max(8, cores))");
  cmd->add_option("--backend", opt.backend, "gloo (CPU) | nccl (GPU)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--jobs", opt.jobs, "Cases at once (0: as many as the pool fits)")->capture_default_str();
  cmd->add_option("--grace", opt.grace_s, "Seconds between SIGTERM and SIGKILL when a case is stopped")
      ->capture_default_str();
  add_meshtrain_option(*cmd, r->meshtrain);
  cmd->add_option("--durations", opt.durations,
                  "summary.json whose durations order the cases (default: <out>/summary.json)");
  add_history_options(*cmd, opt.history, opt.commit);
  cmd->add_flag("--dry-run", r->dry_run, "Print the plan and the commands; run nothing");
  cmd->add_option("--skip-tag", r->skip_tags,
                  "TAG[=REASON]: report cases with this tag as skipped (repeatable), e.g. on a machine without "
                  "what they need");
  cmd->add_option("--retries", opt.retries, "Reruns of a case that misses its expectation (reported as flaky)")
      ->capture_default_str();
  cmd->add_option("--launcher", opt.launcher, "local (ranks on this host) | slurm (docs/slurm.md)")
      ->check(CLI::IsMember({"local", "slurm"}))
      ->capture_default_str();
  add_slurm_options(*cmd, opt.slurm);
  return {cmd, [r, argv0] { return run_matrix(*r, argv0); }};
}

Subcommand add_list(CLI::App& app) {
  auto sel = std::make_shared<Selection>();
  auto* cmd = app.add_subcommand("list", "List the cases a selection expands to");
  cmd->add_option("MATRIX", sel->matrices, "Matrix YAML files (default: the built-in cpu.yaml)")
      ->check(CLI::ExistingFile);
  add_selection_options(*cmd, *sel);
  return {cmd, [sel] {
            RunOptions opt;
            opt.devices = default_devices(opt.backend);
            const auto suites = load_matrices(sel->matrices);  // the cases the selection points into
            for (const Case* c : select_shard(suites, *sel, opt, {})) std::printf("%s\n", listing_line(*c).c_str());
            return 0;
          }};
}

Subcommand add_show(CLI::App& app) {
  auto id = std::make_shared<std::string>();
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("show", "A case fully resolved, with the exact commands of its phases");
  cmd->add_option("ID", *id, "Case id, e.g. resharding/save[dp_shard=4]-load[tp=4]")->required();
  cmd->add_option("MATRIX", *files, "Matrix YAML files (default: the built-in cpu.yaml)")->check(CLI::ExistingFile);
  return {cmd, [id, files] {
            for (const auto& suite : load_matrices(*files))
              for (const auto& c : suite.cases)
                if (c.id == *id) {
                  std::cout << shown_case(c).dump(2) << "\n";
                  return 0;
                }
            std::fprintf(stderr, "meshtest show: no case '%s' (meshtest list shows the ids)\n", id->c_str());
            return 2;
          }};
}

Subcommand add_launch(CLI::App& app) {
  auto spec = std::make_shared<LaunchSpec>();
  auto* cmd = app.add_subcommand("launch", "Run one command on N ranks with torchrun's environment and teardown");
  cmd->add_option("--nproc", spec->nproc, "Ranks")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--log-dir", spec->log_dir, "rank<R>.log per rank here (default: ranks share this terminal)");
  cmd->add_option("--timeout", spec->timeout_s, "Stop all ranks after this many seconds (0: never)");
  cmd->add_option("--grace", spec->grace_s, "Seconds between SIGTERM and SIGKILL")->capture_default_str();
  cmd->add_option("COMMAND", spec->argv, "Program and arguments (after --)")->required();
  return {cmd, [spec] { return launch_command(*spec); }};
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
  cmd->get_option("--history")
      ->description(
          "SQLite run history to record the merged run in; only when given (not "
          "$MESHTEST_HISTORY): the shards recorded their own runs");
  return {cmd, [out, in, history] { return merge_runs(*out, *in, history->first, history->second); }};
}

Subcommand add_report(CLI::App& app) {
  struct Args {
    std::string dir, html;
    bool markdown = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("report",
                                 "Render report.html, junit.xml, surefire/ and the table again from DIR/summary.json");
  cmd->add_option("DIR", a->dir, "A meshtest --out folder (or merge OUT)")->required();
  cmd->add_option("--html", a->html, "Only write the HTML report, to FILE");
  cmd->add_flag("--markdown", a->markdown,
                "Only print a Markdown summary (for $GITHUB_STEP_SUMMARY); exit 0 once printed");
  return {cmd, [a] {
            if (a->markdown) return print_markdown_summary(a->dir);
            return a->html.empty() ? render_reports(a->dir, true) : write_html_only(a->dir, a->html);
          }};
}

Subcommand add_rerun_failed(CLI::App& app, const char* argv0) {
  struct Args {
    std::string from, out;
    RunRequest request;
  };
  auto a = std::make_shared<Args>();
  RunOptions& opt = a->request.options;
  auto* cmd = app.add_subcommand("rerun-failed", "Run again the cases of an earlier run that missed their expectation");
  cmd->add_option("--from", a->from, "The earlier run's --out folder")->required();
  cmd->add_option("--out", a->out, "Output folder (default: <from>/rerun)");
  cmd->add_option("--grace", opt.grace_s, "Seconds between SIGTERM and SIGKILL")->capture_default_str();
  cmd->add_option("--retries", opt.retries, "Reruns of a case that misses its expectation")->capture_default_str();
  add_meshtrain_option(*cmd, a->request.meshtrain);
  add_history_options(*cmd, opt.history, opt.commit);
  return {cmd, [a, argv0] { return rerun_failed(a->from, a->out, a->request, argv0); }};
}

}  // namespace meshtest
