// meshtest: runs a YAML matrix of distributed-training cases and judges them. This file only
// wires: each subcommand's options, and the function of a lower floor that does its work.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>

#include "bisect.h"
#include "ckpt_cli.h"
#include "golden_regen.h"
#include "core/selection.h"
#include "history/queries.h"
#include "meshtrain/adapter.h"
#include "report/finished_run.h"
#include "report/megatron_golden.h"
#include "run/launch.h"
#include "run/requirements.h"
#include "run/runner.h"
#include "run/slurm.h"
#include "run_matrix.h"
#include "hf_trainer/adapter.h"
#include "megatron/adapter.h"
#include "torchtitan/adapter.h"
#include "version.h"

using namespace meshtest;

namespace {

void add_selection_options(CLI::App& cmd, Selection& s) {
  cmd.add_option("-k", s.keywords, "Only cases whose id contains this text (repeatable: any)");
  cmd.add_option("--id", s.ids, "Only the case with exactly this id (repeatable)");
  cmd.add_option("--tag", s.tags, "Only cases with this tag (repeatable: any)");
  cmd.add_option("--exclude", s.excludes, "Leave out cases whose id contains this text (repeatable)");
  cmd.add_option("--shard", s.shard, "I/N: run the I-th of N parts, balanced by expected duration (1-based)");
}

// --history and --commit (run, merge, rerun-failed).
void add_history_options(CLI::App& cmd, std::string& history, std::string& commit) {
  cmd.add_option("--history", history,
                 "SQLite run history to append this run to (default: $MESHTEST_HISTORY; docs/history.md)");
  cmd.add_option("--commit", commit,
                 "The commit recorded with the run (default: git rev-parse HEAD in the matrix's folder)");
}

// ---- the subcommands: each adds its options and says what it does when given ----------

// A subcommand's action, run when the command line named it. Its options live in the closure.
struct Subcommand {
  CLI::App* cmd;
  std::function<int()> action;
};

// `--meshtrain PATH` (run, rerun-failed): the binary the meshtrain adapter uses.
void add_meshtrain_option(CLI::App& cmd, std::string& path) {
  cmd.add_option("--meshtrain", path, "The meshtrain binary (default: next to meshtest)");
  cmd.callback([&path] { use_meshtrain_binary(path); });
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

Subcommand add_history(CLI::App& app) {
  struct Args {
    std::string db, into;
    std::vector<std::string> from;
    HistoryQuery query;
  };
  auto a = std::make_shared<Args>();
  HistoryQuery& q = a->query;
  auto* cmd =
      app.add_subcommand("history", "What the run history says: a case's last runs, flaky, slow and drifting cases");
  cmd->add_option("CASE", q.case_id, "A case id: its last runs (commit, verdict, final loss, margin, duration)");
  cmd->add_option("--history", a->db, "The history database (default: $MESHTEST_HISTORY)");
  cmd->add_option("--last", q.last, "Runs per case to look at")->capture_default_str();
  cmd->add_flag("--flaky", q.flaky, "Cases whose verdict changed within a commit, or that passed only on a retry");
  cmd->add_flag("--slowest", q.slowest, "Cases by their median duration");
  cmd->add_flag("--drift", q.drift,
                "Cases that left the band of their green runs, and the first commit where they did");
  cmd->add_flag("--json", q.json, "One JSON document on stdout");
  auto* merge =
      cmd->add_subcommand("merge", "Add the runs of other histories (runners' copies) to INTO; a run counts once");
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

// `golden regen`'s options: the case, K, where the runs go, and how they run.
CLI::App* add_golden_regen(CLI::App& golden, RegenRequest& r) {
  auto* regen = golden.add_subcommand(
      "regen",
      "Run a case K times; write each golden file its loss_matches checks name as a band: min and max per step");
  regen->add_option("ID", r.case_id, "Case id")->required();
  regen->add_option("MATRIX", r.matrices, "Matrix YAML files (default: the built-in cpu.yaml)")
      ->check(CLI::ExistingFile);
  regen->add_option("--runs", r.runs, "Runs of the case (K)")->required()->check(CLI::PositiveNumber);
  regen->add_option("--out", r.out, "Folder for the runs: <out>/run-<k>")->capture_default_str();
  regen->add_option("--write-to", r.write_to,
                    "Write the band files under this folder (at the paths the matrix names) instead of in place");
  RunOptions& opt = r.run.options;
  regen->add_option("--backend", opt.backend, "gloo (CPU) | nccl (GPU)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  regen->add_option("--ngpu", r.run.ngpu, "Devices in the pool, as for run");
  regen->add_option("--grace", opt.grace_s, "Seconds between SIGTERM and SIGKILL")->capture_default_str();
  add_meshtrain_option(*regen, r.run.meshtrain);
  return regen;
}

Subcommand add_golden(CLI::App& app, const char* argv0) {
  struct Args {
    std::string dir = "meshtest-out", id, phase, metric = "loss", format = "text";
    std::vector<std::string> files;
    std::string import_out;
    RegenRequest regen;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("golden", "Golden files for loss_matches: export, import Megatron-LM's, regen bands");
  cmd->require_subcommand(1);
  auto* export_cmd = cmd->add_subcommand(
      "export",
      "Print a case's curve as '<step> <value>' lines, or as Megatron-LM's golden values (--format megatron)");
  export_cmd->add_option("ID", a->id, "Case id")->required();
  export_cmd->add_option("--phase", a->phase, "Phase (default: the last)");
  export_cmd->add_option("--out", a->dir, "The run's --out folder")->capture_default_str();
  auto* metric =
      export_cmd->add_option("--metric", a->metric, "loss, grad_norm, validation_loss, num_zeros or tokens_seen (text)")
          ->capture_default_str();
  export_cmd
      ->add_option("--format", a->format,
                   "text ('<step> <value>' lines) | megatron (Megatron-LM's golden_values JSON, every metric)")
      ->check(CLI::IsMember({"text", "megatron"}))
      ->capture_default_str();
  auto* import_cmd = cmd->add_subcommand("import", "Golden files from another trainer's");
  import_cmd->require_subcommand(1);
  auto* megatron = import_cmd->add_subcommand(
      "megatron", "Megatron-LM's golden_values_*.json: a golden file per metric meshtest judges, <stem>.<metric>.txt");
  megatron->add_option("FILE", a->files, "golden_values_*.json files")->required()->check(CLI::ExistingFile);
  megatron->add_option("--out", a->import_out, "Folder for the golden files (default: each file's own)");
  auto* regen = add_golden_regen(*cmd, a->regen);
  return {cmd, [a, megatron, regen, metric, argv0] {
            if (*megatron) return import_megatron_golden(a->files, a->import_out);
            if (*regen) return regen_golden(a->regen, argv0);
            if (a->format == "text") return export_golden(a->dir, a->id, a->phase, a->metric);
            if (metric->count() > 0)
              throw std::runtime_error(
                  "golden export: --metric is for --format text; --format megatron writes "
                  "every metric the phase reported");
            return export_megatron_golden(a->dir, a->id, a->phase);
          }};
}

Subcommand add_ckpt(CLI::App& app) {
  struct Args {
    CkptOptions ckpt;
    std::string a, b;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("ckpt", "Look inside PyTorch DCP, meshtrain and safetensors checkpoints");
  cmd->require_subcommand(1);
  auto* inspect = cmd->add_subcommand("inspect", "Keys, kinds, dtypes, global shapes, chunks, bytes");
  inspect
      ->add_option("PATH", a->a,
                   "A step folder, a folder of step-<N> or checkpoint-<N> (the newest is read), a .safetensors file "
                   "or a folder with model.safetensors[.index.json]")
      ->required();
  inspect->add_option("--step", a->ckpt.step, "Which step-<N> (checkpoint-<N>) of a folder of steps");
  inspect->add_flag("--json", a->ckpt.json, "One JSON document");
  auto* diff =
      cmd->add_subcommand("diff", "Keys, dtypes and shapes that differ (and values with --values); exit 1 if any");
  diff->add_option("A", a->a, "Checkpoint A")->required();
  diff->add_option("B", a->b, "Checkpoint B")->required();
  diff->add_option("--step", a->ckpt.step, "Which step-<N> (checkpoint-<N>) of a folder of steps");
  diff->add_option("--model-prefix", a->ckpt.model_prefix,
                   "Add this to keys outside model./optimizer./... on both sides (e.g. model. for torchtitan)");
  diff->add_flag(
      "--values", a->ckpt.values,
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
  cmd->add_option("MATRIX", o->matrices, "Matrix YAML files (default: the built-in cpu.yaml)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--good", o->good, "A commit where the case meets its expectation")->required();
  cmd->add_option("--bad", o->bad, "A later commit where it does not")->capture_default_str();
  cmd->add_option("--build", o->build,
                  "Shell command run in the repository root at every commit; a failure skips the commit "
                  "('' builds nothing)")
      ->capture_default_str();
  cmd->add_option("--repo", o->repo, "A folder inside the git work tree")->capture_default_str();
  cmd->add_option("--out", o->out, "Output folder (default: a new one under $TMPDIR)");
  cmd->add_option("--backend", o->backend, "gloo (CPU) | nccl (GPU)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--ngpu", o->ngpu, "Devices in the pool, as for run");
  cmd->add_option("--meshtrain", o->meshtrain, "The meshtrain binary (default: next to meshtest)");
  cmd->add_option("--retries", o->retries,
                  "Reruns of a failing case; one that then passes is flaky and its commit skipped")
      ->capture_default_str();
  cmd->add_flag("--drift", o->drift,
                "Bad means the loss curve moved from GOOD's (the history's drift band), though it passes");
  cmd->add_flag("--json", o->json, "The result as one JSON document");
  return {cmd, [o] { return bisect(*o); }};
}

}  // namespace

int main(int argc, char** argv) {
  register_meshtrain_adapter(trainer_adapters());
  register_torchtitan_adapter(trainer_adapters());
  register_hf_trainer_adapter(trainer_adapters());
  register_megatron_adapter(trainer_adapters());
  CLI::App app{"meshtest: a matrix runner for distributed-training CI (docs/matrix.md)", "meshtest"};
  app.set_version_flag("--version", std::string("meshtest ") + meshtest_version());
  app.require_subcommand(1);
  const std::vector<Subcommand> subcommands = {add_run(app, argv[0]), add_list(app),
                                               add_show(app),         add_launch(app),
                                               add_slurm_task(app),   add_merge(app),
                                               add_report(app),       add_rerun_failed(app, argv[0]),
                                               add_diff(app),         add_golden(app, argv[0]),
                                               add_ckpt(app),         add_bisect(app),
                                               add_history(app)};
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
