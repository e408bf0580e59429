// meshtrain: the LibTorch trainer that ships with meshtest.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <string>

#include "components/ckpt_tools.h"
#include "base/faults.h"
#include "model/model.h"
#include "train.h"

namespace {

// The model, the schedule, the batch and the optimizer.
void add_model_and_optimizer_options(CLI::App& cmd, meshtrain::TrainConfig& c) {
  std::string flavors;
  for (const auto& n : meshtrain::model_flavor_names()) flavors += (flavors.empty() ? "" : "|") + n;
  cmd.add_option("--model", c.model, "Model flavor: " + flavors)->capture_default_str();
  cmd.add_option("--steps", c.steps, "Optimizer steps (the learning-rate schedule spans them)")->capture_default_str();
  cmd.add_option("--stop-at", c.stop_at,
                 "End this run after step N (saving a checkpoint there if enabled), e.g. to resume it later")
      ->capture_default_str();
  cmd.add_option("--seed", c.seed, "Seed for weights and data order")->capture_default_str();
  cmd.add_option("--local-batch-size", c.local_batch_size, "Samples per rank per micro-batch")
      ->capture_default_str();
  cmd.add_option("--global-batch-size", c.global_batch_size,
                 "Samples per optimizer step; more than local x dp accumulates gradients (-1: no accumulation)")
      ->capture_default_str();
  cmd.add_option("--seq-len", c.seq_len, "Tokens per sample")->capture_default_str();
  cmd.add_option("--lr", c.lr, "Peak learning rate (AdamW)")->capture_default_str();
  cmd.add_option("--warmup-steps", c.warmup_steps, "Linear warmup steps, then linear decay")
      ->capture_default_str();
  cmd.add_option("--max-norm", c.max_norm, "Clip gradients to this global L2 norm (0: no clipping)")->capture_default_str();
  cmd.add_flag("--optimizer.early-step-in-backward", c.early_step_in_backward,
               "Optimizer in backward: each data-parallel bucket's parameters take their AdamW step as soon as their "
               "reduced gradients are ready, and the gradients are freed (needs --max-norm 0 and no accumulation)");
}

// How the model is spread over the mesh: the dimensions and each one's options.
void add_parallelism_options(CLI::App& cmd, meshtrain::TrainConfig& c) {
  cmd.add_option("--mesh", c.mesh,
                 "Device mesh pp=P,dp_replicate=R,dp_shard=S,cp=C,tp=T (missing dims 1; dp_shard=-1 fills the "
                 "world). pp>1: pipeline parallel; dp_shard>1: FSDP; dp_replicate>1: DDP; both: HSDP; cp>1: context "
                 "parallel (FSDP over dp_shard x cp); tp>1: tensor parallel")
      ->capture_default_str();
  cmd.add_option("--reshard-after-forward", c.reshard_after_forward,
                 "FSDP/HSDP: free a block's gathered weights after its forward and gather them again just "
                 "before its backward: default (every block but the last) | always | never")
      ->capture_default_str();
  cmd.add_option("--ac", c.ac, "Activation checkpointing: none | full (every block) | selective (every 2nd block)")
      ->capture_default_str();
  cmd.add_option("--float8", c.float8,
                 "The transformer blocks' linear layers in float8 with dynamic per-tensor scales: off | scaled_mm "
                 "(CUDA build: float8 GEMMs) | emulate (float8 rounding in float32, any build)")
      ->capture_default_str();
  cmd.add_flag("--loss-parallel", c.loss_parallel,
               "TP: compute the loss on vocabulary-sharded logits without gathering them");
  cmd.add_flag("--sequence-parallel", c.sequence_parallel,
               "TP: shard norms and residual activations along the sequence (seq_len divisible by tp)");
  cmd.add_option("--pp.schedule", c.pp.schedule, "PP: gpipe | 1f1b | interleaved_1f1b")->capture_default_str();
  cmd.add_option("--pp.microbatches", c.pp.microbatches,
                 "PP: microbatches per (micro-)batch; they must divide the local batch (-1: pp)")
      ->capture_default_str();
  cmd.add_option("--pp.virtual-stages", c.pp.virtual_stages,
                 "PP: stages per pp rank (-1: 2 for interleaved_1f1b, else 1)")
      ->capture_default_str();
  cmd.add_option("--pp.split", c.pp.split,
                 "PP: layers per stage, e.g. 3,2 (one entry per stage; default: as even as possible)");
  cmd.add_option("--cp-rotate", c.cp_rotate,
                 "CP: how attention reaches other ranks' keys and values: allgather (all at once) | alltoall "
                 "(passed around the ring, one neighbour exchange per step)")
      ->capture_default_str();
  cmd.add_option("--fsdp.bucketing", c.fsdp_bucketing,
                 "How data-parallel weights share collectives: none (one all-gather and reduce-scatter per weight) | "
                 "block (per transformer block) | auto (consecutive blocks up to --fsdp.bucket-mb)")
      ->capture_default_str();
  cmd.add_option("--fsdp.bucket-mb", c.fsdp_bucket_mb, "auto bucketing: a bucket grows to at least this many MiB")
      ->capture_default_str();
  cmd.add_flag("--fsdp.cpu-offload", c.cpu_offload,
               "Keep each rank's parameter pieces, their gradients and AdamW state in host memory (FSDP2's "
               "CPUOffloadPolicy); they travel to the device to be gathered and computed with. The identity on the "
               "CPU build");
  cmd.add_option("--ep", c.ep,
                 "Expert parallel degree (MoE flavors): the routed experts are split over this many consecutive "
                 "dp_shard ranks, and tokens travel to their experts by all-to-all; it must divide dp_shard")
      ->capture_default_str();
}

// --checkpoint.*: saving, resuming, exporting and initial weights.
void add_checkpoint_options(CLI::App& cmd, meshtrain::TrainConfig& c) {
  cmd.add_flag("--checkpoint.enable", c.checkpoint_enable,
               "Save checkpoints, and resume from the latest complete one in the folder at start");
  cmd.add_option("--checkpoint.folder", c.checkpoint_folder, "Checkpoint folder (default <dump-folder>/checkpoint)");
  cmd.add_option("--checkpoint.interval", c.checkpoint_interval, "Save every N steps (0: only after the last step)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.keep-latest-k", c.checkpoint_keep_latest_k, "Keep only the newest K steps (0: all)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.load-step", c.checkpoint_load_step, "Resume from this step (-1: the latest)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.exclude-from-loading", c.checkpoint_exclude,
                 "Comma-separated parts not to load: optimizer, lr_scheduler, dataloader");
  cmd.add_option("--checkpoint.key-style", c.checkpoint_key_style,
                 "canonical | parametrize (data-parallel-wrapped weights named <m>.parametrizations.weight.original)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.key-map", c.checkpoint_key_map,
                 "none | parametrize-to-canonical (load parametrize-style keys into any model)")
      ->capture_default_str();
  cmd.add_flag("--checkpoint.last-save-model-only", c.checkpoint_last_save_model_only,
               "The save after the last step (--steps) holds model weights only, in --checkpoint.export-dtype");
  cmd.add_option("--checkpoint.export-dtype", c.checkpoint_export_dtype,
                 "dtype of a model-only last save: float32 | bfloat16")
      ->capture_default_str();
  cmd.add_flag("--checkpoint.last-save-in-hf", c.checkpoint_last_save_in_hf,
               "The model-only last save also as Hugging Face safetensors (model.safetensors, config.json) in its "
               "step folder");
  cmd.add_option("--checkpoint.initial-load-path", c.checkpoint_initial_load_path,
                 "When the checkpoint folder holds no checkpoint (or checkpointing is off), start from the weights "
                 "of this step-<N> folder (model only; a fresh optimizer, schedule and data position)");
  cmd.add_flag("--checkpoint.initial-load-in-hf", c.checkpoint_initial_load_in_hf,
               "--checkpoint.initial-load-path is a Hugging Face checkpoint: a folder with model.safetensors (or "
               "an index and its shards), or a .safetensors file");
}

// Mixed precision, the collective backend, the data and where the outputs go.
void add_precision_and_data_options(CLI::App& cmd, meshtrain::TrainConfig& c) {
  cmd.add_option("--param-dtype", c.param_dtype, "Mixed precision: dtype the forward computes with (float32|bfloat16)")
      ->capture_default_str();
  cmd.add_option("--reduce-dtype", c.reduce_dtype, "Mixed precision: dtype gradients are reduced in (float32|bfloat16)")
      ->capture_default_str();
  cmd.add_option("--backend", c.backend, "Collective backend: gloo (CPU build) | nccl (CUDA build) | shm (a simulated world: any number of "
                 "ranks per device, collectives through host shared memory, reduced in rank order; on the GPU in "
                 "the CUDA build)")
      ->capture_default_str();
  cmd.add_option("--dump-folder", c.dump_folder, "Where metrics.jsonl and the other outputs go")
      ->capture_default_str();
  cmd.add_option("--corpus", c.corpus, "Training text; documents separated by blank lines")
      ->capture_default_str();
  cmd.add_option("--validation.freq", c.validation_freq,
                 "Every N steps, the mean loss on held-out text (metrics.jsonl's validation_loss; 0: never)")
      ->capture_default_str();
  cmd.add_option("--validation.steps", c.validation_steps,
                 "Global batches of held-out text per validation (-1: the whole validation corpus)")
      ->capture_default_str();
  cmd.add_option("--validation.corpus", c.validation_corpus, "Held-out text; documents separated by blank lines")
      ->capture_default_str();
}

// This process: threads, timeouts, console, tracing and planted faults.
void add_runtime_options(CLI::App& cmd, meshtrain::TrainConfig& c) {
  cmd.add_option("--threads", c.threads,
                 "CPU threads per rank (0: one, or with --fsdp.cpu-offload the host's cores shared among its ranks)")
      ->capture_default_str();
  cmd.add_option("--timeout", c.timeout_s, "Seconds a collective may wait for a peer")->capture_default_str();
  cmd.add_flag("--deterministic", c.deterministic,
               "Use deterministic CUDA kernels, so reruns give bitwise-identical losses (slower)");
  cmd.add_flag("--quiet", c.quiet, "Print no loss table");
  cmd.add_option("--profile-step", c.profile_step,
                 "Trace this step's CPU ops and GPU kernels (CUDA builds) to <dump-folder>/trace_step<N>_rank<R>.json");
  std::string faults;
  for (const auto& n : meshtrain::fault_names()) faults += (faults.empty() ? "" : "|") + n;
  cmd.add_option("--inject-fault", c.inject_fault,
                 "TEST ONLY: plant a known distributed-training bug for meshtest's canaries: " + faults)
      ->capture_default_str();
}

// The options of `train` and `generate`, in --help's order.
void add_train_options(CLI::App& cmd, meshtrain::TrainConfig& c) {
  // A later flag overrides an earlier one, so a phase can append to a base command line.
  cmd.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_and_optimizer_options(cmd, c);
  add_parallelism_options(cmd, c);
  add_checkpoint_options(cmd, c);
  add_precision_and_data_options(cmd, c);
  add_runtime_options(cmd, c);
}

// Prints the error, and like torchelastic's @record writes it where the launcher asked
// (TORCHELASTIC_ERROR_FILE), so the launcher can say why this rank failed. Returns 1.
int fail(const std::string& what) {
  const std::string message = "meshtrain: error: " + what;
  std::fprintf(stderr, "%s\n", message.c_str());
  if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE"); path && *path) {
    const nlohmann::json record = {
        {"message", {{"message", message}, {"extraInfo", {{"timestamp", std::to_string(std::time(nullptr))}}}}}};
    std::ofstream(path) << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshtrain: a Llama-3-style trainer for any device mesh (docs/meshtrain.md)", "meshtrain"};
  app.require_subcommand(1);
  meshtrain::TrainConfig train_config;
  auto* train_cmd = app.add_subcommand("train", "Train and write metrics.jsonl, state_dict_keys.json, "
                                                "param_digest.json and rank<R>.json to --dump-folder");
  add_train_options(*train_cmd, train_config);

  meshtrain::TrainConfig generate_config;
  auto* generate_cmd = app.add_subcommand(
      "generate", "Load a checkpoint under any mesh (--checkpoint.folder, --checkpoint.load-step) and "
                  "greedy-decode; writes generate.json to --dump-folder");
  add_train_options(*generate_cmd, generate_config);
  generate_cmd->add_option("--prompt", generate_config.prompt, "Text to continue")->capture_default_str();
  generate_cmd->add_option("--max-new-tokens", generate_config.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str();

  // Looking inside a checkpoint (inspect, diff) is meshtest's: `meshtest ckpt inspect|diff` reads
  // this format without LibTorch. What needs the trainer's reader and LibTorch stays here.
  auto* ckpt_cmd = app.add_subcommand(
      "ckpt", "Write a checkpoint out: consolidate (to look inside one: meshtest ckpt inspect|diff)");
  ckpt_cmd->require_subcommand(1);
  std::string ckpt_a, ckpt_out;
  auto* consolidate_cmd = ckpt_cmd->add_subcommand("consolidate", "Whole tensors into one .safetensors file");
  consolidate_cmd->add_option("STEP_DIR", ckpt_a, "step-<N> folder")->required();
  consolidate_cmd->add_option("OUT", ckpt_out, "Output .safetensors path")->required();
  std::string hf_model;
  consolidate_cmd->add_option("--hf", hf_model,
                              "Model flavor: write Hugging Face LlamaForCausalLM names and layout, and config.json");

  bool describe_as_json = false;
  auto* describe_cmd = app.add_subcommand("describe", "What a harness needs to know: flavors, their dimensions, "
                                                      "and what a tensor-parallel degree must divide");
  describe_cmd->add_flag("--json", describe_as_json, "As JSON (the only form)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "meshtrain: error: %s (see meshtrain --help)\n", e.what());
    return 2;
  }

  try {
    if (train_cmd->parsed()) return meshtrain::train(train_config);
    if (describe_cmd->parsed()) return std::printf("%s\n", meshtrain::describe_json().c_str()) < 0;
    if (consolidate_cmd->parsed()) return meshtrain::ckpt_consolidate(ckpt_a, ckpt_out, hf_model), 0;
    if (generate_cmd->parsed()) {
      generate_config.generate = true;
      generate_config.checkpoint_enable = true;
      generate_config.checkpoint_exclude = "optimizer,lr_scheduler,dataloader";  // weights only
      return meshtrain::train(generate_config);
    }
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
