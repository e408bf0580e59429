// Tensor parallelism (torchtitan's apply_tp, Megatron's column- and row-parallel pairs): the TP
// plan, written once as a table of regions, and the hooks that move activations between the
// layouts it implies. The communication itself is mappings.h's.
//
// Promises: tp_split_dim is the only place that says how TP splits a weight (the layouts, and
// so the checkpoint, read it); apply_tp changes only hooks and the weight transforms it hands
// back, never a parameter, so data parallelism can wrap what TP leaves.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "contract/placement.h"
#include "distributed/comm.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain {

// --loss-parallel, --sequence-parallel.
struct TensorParallelConfig {
  bool loss_parallel = false;      // cross-entropy on vocabulary-sharded logits (loss.h); the output stays sharded
  bool sequence_parallel = false;  // norms and residuals sharded along the sequence
};
void add_options(CLI::App& cmd, TensorParallelConfig& config);

// The plan's split dimension of the weight `fqn` (-1: replicated).
int tp_split_dim(const std::string& fqn);

// Hooks every region's entry and exit, the embedding and the output layer for tp > 1, and
// fills `weight_tp` with what TP does to a full weight before use: the weights whose gradients
// are partial over tp (the MoE router; under sequence parallel every replicated weight) pass
// through copy_to_tp. `layout_of` holds every parameter's layout (parallelize.h).
void apply_tp(Transformer& model, MeshGroups& groups, const TensorParallelConfig& config, int64_t seq_len,
              const std::map<std::string, const ParamLayout*>& layout_of, std::map<std::string, Transform>& weight_tp);

}  // namespace meshtrain
