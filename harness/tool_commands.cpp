// The tools around runs: history, diff, golden (export, import, regen), ckpt, bisect (commands.h).
#include <memory>
#include <stdexcept>

#include "bisect.h"
#include "ckpt_cli.h"
#include "commands.h"
#include "golden_regen.h"
#include "history/queries.h"
#include "report/finished_run.h"
#include "report/megatron_golden.h"
#include "run_matrix.h"

namespace meshtest {

namespace {

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

}  // namespace

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

}  // namespace meshtest
