// Megatron-LM (Megatron-Core) as a built-in trainer (`adapter: megatron`,
// docs/foreign-trainers.md). A case's command is Megatron's own entry point (by default
// `{megatron_python} {megatron_lm}/pretrain_gpt.py`, the checkout in $MESHTEST_MEGATRON_LM), its
// model and data are `options:` (Megatron's flags, `num-layers: 2`), and the adapter writes what
// makes a run judgeable and its layout real:
// - `mesh:` -> `--tensor-model-parallel-size` (tp), `--pipeline-model-parallel-size` (pp),
//   `--context-parallel-size` (cp), `--expert-model-parallel-size` (ep: data-parallel ranks that
//   split the experts, so `{ep: 2}` is 2 ranks), data parallel implied by the rest; `dp_shard`
//   adds `--use-distributed-optimizer` (the optimizer state sharded over data parallel);
// - always: `--log-interval 1`, TensorBoard in `{phase_dir}/tensorboard` every iteration,
//   `--log-num-zeros-in-grad`, `--ckpt-format torch_dist`, `--save`/`--load` in
//   `{case_dir}/checkpoint`, `--deterministic-mode` and the environment Megatron's own CI sets
//   (CUDA_DEVICE_MAX_CONNECTIONS=1, NCCL_ALGO=Ring, CUBLAS_WORKSPACE_CONFIG=:4096:8,
//   NVTE_ALLOW_NONDETERMINISTIC_ALGO=0); `stop-at N` is `--exit-interval N` (a save, then exit);
// - curves from TensorBoard, else its iteration line; the checkpoint from the `iter_NNNNNNN/`
//   that latest_checkpointed_iteration.txt names (readers/megatron.h).
// Flag names are checked against the Megatron that will run (`pretrain_gpt.py --help`, cached),
// so a renamed flag is a clear error at load time.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/adapters.h"

namespace meshtest {

// $MESHTEST_MEGATRON_PYTHON, else python3: {megatron_python}.
std::string megatron_python();
// $MESHTEST_MEGATRON_LM, the Megatron-LM checkout whose pretrain_gpt.py runs: {megatron_lm}.
std::string megatron_lm_dir();

// What `<script> --help` printed for the Megatron that runs `script`, or nullopt when it could
// not be asked (no Megatron, no torch, a timeout).
using MegatronHelp = std::function<std::optional<std::string>(const std::string& script)>;

// Adds the Megatron adapter, asking the Megatron it will run for its flags (cached).
void register_megatron_adapter(AdapterRegistry& registry);
// The same with a given help source, so a test loads matrices without Python.
void register_megatron_adapter(AdapterRegistry& registry, MegatronHelp help);

}  // namespace meshtest
