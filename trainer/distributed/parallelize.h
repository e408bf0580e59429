// The parallelize step (torchtitan's parallelize_llama): takes a model whose
// parameters hold the full, identically initialised tensors and turns it into this
// rank's part of a data-parallel layout. The model itself is not changed in kind:
// each parameter becomes this rank's piece, and the module computes with the full
// weight through a parametrization (SimpleFSDP's ReplicateComputation, done per
// bucket of weights: block_bucket.h).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context_parallel.h"
#include "model/model.h"
#include "contract/placement.h"

namespace CLI {
class App;
}

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

class BlockBucket;

enum class DataParallelMode { kNone, kReplicate, kFullyShard, kHybridShard };
enum class ReshardAfterForward { kDefault, kAlways, kNever };
enum class ActivationCheckpoint { kNone, kFull, kSelective };
// How data-parallel weights are grouped into one all-gather / reduce-scatter each
// (SimpleFSDP's bucketing flavors, done eagerly): one per weight, per transformer block, or
// consecutive blocks up to a size (parallelize.cpp, bucket_units).
enum class Bucketing { kNone, kBlock, kAuto };

// --mesh, --ep and how each parallelism applies its plan (--reshard-after-forward, --ac,
// --param-dtype, --reduce-dtype, --loss-parallel, --sequence-parallel, --cp-rotate, --fsdp.*).
// The pipeline's own options are pp::PipelineConfig's (pipeline.h).
struct ParallelConfig {
  std::string mesh = "dp_shard=-1";  // torchtitan's default: FSDP over the whole world (contract/mesh.h)
  int64_t ep = 1;                    // MoE experts split over this many consecutive dp_shard ranks
  ReshardAfterForward reshard_after_forward = ReshardAfterForward::kDefault;
  ActivationCheckpoint ac = ActivationCheckpoint::kNone;
  torch::ScalarType param_dtype = torch::kFloat32;   // what forward computes with
  torch::ScalarType reduce_dtype = torch::kFloat32;  // what gradients are reduced in
  bool loss_parallel = false;      // TP: cross-entropy on vocabulary-sharded logits
  bool sequence_parallel = false;  // TP: norms and residuals sharded along the sequence
  cp::Rotate cp_rotate = cp::Rotate::kAllGather;  // how context-parallel attention meets other ranks' K/V
  Bucketing bucketing = Bucketing::kBlock;
  // FSDP2's CPUOffloadPolicy: each rank's pieces (and so their gradients and AdamW state)
  // stay in host memory; they are copied to the device to be gathered or computed with.
  bool cpu_offload = false;
  double bucket_mb = 64;  // auto bucketing: a bucket grows until it holds this many MiB
};

// The options above, as meshtrain's command line spells them.
void add_options(CLI::App& cmd, ParallelConfig& config);

ReshardAfterForward parse_reshard(const std::string& s);
ActivationCheckpoint parse_ac(const std::string& s);
Bucketing parse_bucketing(const std::string& s);

// SimpleFSDP's mode rule, with torchtitan's dp_shard_cp (= dp_shard x cp) as the shard
// degree: dp_replicate and dp_shard_cp both > 1 -> hybrid_shard; only dp_replicate ->
// replicate; dp_shard_cp > 1 -> fully_shard; neither -> none.
DataParallelMode data_parallel_mode(const MeshShape& shape);
std::string to_string(DataParallelMode mode);

// The result of parallelize: every parameter's layout (contract/placement.h), in model order.
class ParallelModel {
 public:
  ParallelModel(Transformer model, MeshGroups& groups, std::vector<ParamLayout> layouts, DataParallelMode mode,
                std::vector<ParamLayout> buffer_layouts = {})
      : model(std::move(model)), groups(groups), layouts_(std::move(layouts)),
        buffer_layouts_(std::move(buffer_layouts)), mode_(mode) {}
  Transformer model;
  MeshGroups& groups;
  // Mean cross-entropy of the model's output [B, T, V or V/tp] against targets [B, T].
  std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& targets)> loss;
  // What this rank feeds the model of a [B, T] batch (inputs or targets), and those
  // tokens' positions [T / cp] for the model's forward: under context parallel its
  // sequence chunks (context_parallel.h), otherwise the whole batch and 0..T-1.
  torch::Tensor local_tokens(const torch::Tensor& batch) const;
  torch::Tensor positions(int64_t seq_len) const;
  const std::vector<ParamLayout>& layouts() const { return layouts_; }
  // Calls `ready` with a group of parameters as soon as their gradients are final in a step,
  // during backward: each data-parallel bucket's pieces when its reduction lands. Returns
  // the parameters no bucket covers (their gradients are final when backward returns).
  std::vector<torch::Tensor> on_gradients_ready(std::function<void(const std::vector<torch::Tensor>&)> ready);
  std::vector<std::shared_ptr<BlockBucket>> buckets;  // set by parallelize
  // Buffers that are model state (each MoE layer's expert_bias): replicated on every rank
  // of a stage, saved and loaded with the weights, never trained.
  const std::vector<ParamLayout>& buffer_layouts() const { return buffer_layouts_; }
  DataParallelMode mode() const { return mode_; }

 private:
  std::vector<ParamLayout> layouts_;
  std::vector<ParamLayout> buffer_layouts_;
  DataParallelMode mode_;
};

// Applies, in torchtitan's order, tensor parallelism (apply_tp), context parallelism (apply_cp),
// expert parallelism (apply_ep), activation checkpointing (apply_ac) and data parallelism
// (apply_fsdp) to a model initialised with full tensors on `groups.device`.
// `seq_len` is the training sequence's length, which sequence parallel splits.
std::unique_ptr<ParallelModel> parallelize(Transformer model, MeshGroups& groups, const ParallelConfig& config,
                                           int64_t seq_len);

// Global L2 norm of all gradients: each piece's squared norm summed over the groups it
// is sharded across, so no shard and no replica is counted twice.
double global_grad_norm(const ParallelModel& pm);

// The same norm accumulated piece by piece, for gradients that do not all exist at once
// (the optimizer in backward frees each as soon as it has stepped): add() each parameter's
// gradient before it goes, then norm() once per step, on every rank.
class GradNormAccumulator {
 public:
  explicit GradNormAccumulator(const ParallelModel& pm);
  void add(const torch::Tensor& param);  // a registered parameter with its .grad()
  double norm();                         // collective; resets the sums
 private:
  const ParallelModel& pm_;
  std::map<const c10::TensorImpl*, const ParamLayout*> layout_of_;
  std::map<std::vector<MeshDim>, torch::Tensor> partial_;
};

// Per parameter of `names` (every parameter of the whole model, whichever pipeline stage
// holds it): (sum, sum of squares) of the global tensor, in float64.
std::map<std::string, std::pair<double, double>> global_sums(const ParallelModel& pm,
                                                          const std::vector<std::string>& names);

}  // namespace meshtrain
