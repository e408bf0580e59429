// The Hugging Face Trainer as a built-in trainer (`adapter: hf-trainer`, docs/foreign-trainers.md):
// a case's `command:` is the user's training script (TrainingArguments from the command line,
// as HfArgumentParser reads them), and the adapter writes the flags that make its runs judgeable
// and its layout real. meshtest starts the ranks itself with torchrun's environment, so the
// Trainer (through Accelerate) runs distributed as under torchrun:
// - `mesh: {dp_shard: N}`: FSDP 2 over N ranks (`--fsdp "full_shard auto_wrap"`, fsdp_version 2);
//   `{dp_replicate: N}` (or a mesh of one rank): DDP, the Trainer's default for N ranks;
// - always: `--output_dir {phase_dir}`, `--logging_steps 1`, `--full_determinism`, `--seed`
//   (42 unless the options give one), `--report_to none`, and `--save_strategy steps` where
//   `save_steps` is given;
// - the curves from trainer_state.json (`outputs.metrics.from: hf-trainer-state`), the
//   checkpoint from the phase's newest complete checkpoint-<N> (its safetensors, else FSDP's DCP).
// TP, CP, PP and DeepSpeed through the Trainer are not supported yet: such a mesh is refused.
#pragma once

#include "core/adapters.h"

namespace meshtest {

void register_hf_trainer_adapter(AdapterRegistry& registry);

}  // namespace meshtest
