#include "train_config.h"

#include "base/options.h"
#include "model/flavors.h"

namespace meshtrain {

namespace {

#ifdef MESHTEST_CUDA
constexpr const char* kBuildBackend = "nccl";
#else
constexpr const char* kBuildBackend = "gloo";
#endif

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "|") + n;
  return out;
}

void add_options(CLI::App& cmd, TrainingConfig& c) {
  cmd.add_option("--model", c.model, "Model flavor: " + joined(model_flavor_names()))->capture_default_str();
  cmd.add_option("--steps", c.steps, "Optimizer steps (the learning-rate schedule spans them)")->capture_default_str();
  cmd.add_option("--stop-at", c.stop_at,
                 "End this run after step N (saving a checkpoint there if enabled), e.g. to resume it later")
      ->capture_default_str();
  cmd.add_option("--seed", c.seed, "Seed for weights and data order")->capture_default_str();
  cmd.add_option("--local-batch-size", c.local_batch_size, "Samples per rank per micro-batch")->capture_default_str();
  cmd.add_option("--global-batch-size", c.global_batch_size,
                 "Samples per optimizer step; more than local x dp accumulates gradients (-1: no accumulation)")
      ->capture_default_str();
  cmd.add_option("--seq-len", c.seq_len, "Tokens per sample")->capture_default_str();
}

void add_options(CLI::App& cmd, JobConfig& c) {
  add_parsed_option(cmd, "--backend", c.backend, parse_backend, kBuildBackend,
                    "Collective backend: gloo (CPU build) | nccl (CUDA build) | shm (a simulated world: any number of "
                    "ranks per device, collectives through host shared memory, reduced in rank order; on the GPU in "
                    "the CUDA build)");
  cmd.add_option("--dump-folder", c.dump_folder, "Where metrics.jsonl and the other outputs go")->capture_default_str();
  cmd.add_option("--threads", c.threads,
                 "CPU threads per rank (0: one, or with --fsdp.cpu-offload the host's cores shared among its ranks)")
      ->capture_default_str();
  cmd.add_option("--timeout", c.timeout_s, "Seconds a collective may wait for a peer")->capture_default_str();
  cmd.add_flag("--deterministic", c.deterministic,
               "Use deterministic CUDA kernels, so reruns give bitwise-identical losses (slower)");
  cmd.add_flag("--quiet", c.quiet, "Print no loss table");
  add_parsed_option(
      cmd, "--inject-fault", c.inject_fault, parse_fault, "none",
      "TEST ONLY: plant a known distributed-training bug for meshtest's canaries: " + joined(fault_names()));
}

}  // namespace

void add_options(CLI::App& cmd, TrainConfig& c) {
  // A later flag overrides an earlier one, so a phase can append to a base command line.
  cmd.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_options(cmd, c.training);
  add_options(cmd, c.optimizer);
  add_options(cmd, c.parallel);
  add_options(cmd, c.pipeline);
  add_options(cmd, c.float8);
  add_options(cmd, c.checkpoint);
  add_options(cmd, c.data);
  add_options(cmd, c.validation);
  add_options(cmd, c.profiling);
  add_options(cmd, c.job);
}

}  // namespace meshtrain
