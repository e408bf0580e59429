// The parallelize step (torchtitan's parallelize_llama): takes a model whose parameters hold
// the full, identically initialised tensors and turns it into this rank's part of the layout
// that --mesh names, by applying each parallelism's room in turn:
//   tensor_parallel (TP), context_parallel (CP), expert_parallel (EP), activation_checkpoint
//   (AC), data_parallel (FSDP, DDP, HSDP; last, because it wraps what the others hooked);
// and the loss (loss.h). The model itself is not changed in kind: each parameter becomes this
// rank's piece, and the module computes with the full weight through a parametrization
// (SimpleFSDP's ReplicateComputation, done per bucket of weights: block_bucket.h). The gradient
// norm (grad_norm.h) and the parameter digests (digests.h) read the result.
//
// Promises: every parameter's layout is made here, once, before any room runs (TP splits first,
// then EP and FSDP split the TP-local piece: torchtitan's _StridedShard order), and every room
// reads that one layout; each room is applied at most once. A new parallelism is a room with
// its config section and apply step, one member of ParallelConfig and one line in parallelize().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "distributed/activation_checkpoint.h"
#include "distributed/comm.h"
#include "distributed/context_parallel.h"
#include "distributed/data_parallel.h"
#include "distributed/expert_parallel.h"
#include "distributed/parallel_model.h"
#include "distributed/tensor_parallel.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain {

// --mesh, and each parallelism's own options. The pipeline's are pp::PipelineConfig's (pipeline.h).
struct ParallelConfig {
  std::string mesh = "dp_shard=-1";  // torchtitan's default: FSDP over the whole world (contract/mesh.h)
  TensorParallelConfig tp;           // tensor_parallel.h
  cp::ContextParallelConfig cp;      // context_parallel.h
  ExpertParallelConfig ep;           // expert_parallel.h
  ActivationCheckpointConfig ac;     // activation_checkpoint.h
  DataParallelConfig dp;             // data_parallel.h
};

// The options above, as meshtrain's command line spells them, in the order parallelize applies them.
void add_options(CLI::App& cmd, ParallelConfig& config);

// Applies, in torchtitan's order, tensor parallelism (apply_tp), context parallelism (apply_cp),
// expert parallelism (apply_ep), activation checkpointing (apply_ac) and data parallelism
// (apply_fsdp) to a model initialised with full tensors on `groups.device`.
// `seq_len` is the training sequence's length, which sequence parallel splits.
std::unique_ptr<ParallelModel> parallelize(Transformer model, MeshGroups& groups, const ParallelConfig& config,
                                           int64_t seq_len);

}  // namespace meshtrain
