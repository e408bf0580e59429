// Data parallelism, SimpleFSDP's way: every parameter keeps only its piece between steps, and
// its module computes with the weight gathered (and cast) through a parametrization, one bucket
// of weights at a time (block_bucket.h does the collectives). One code path covers SimpleFSDP's
// three modes: fully_shard (FSDP), replicate (DDP: a shard group of one rank, gradients
// all-reduced over dp_replicate) and hybrid_shard (HSDP: both).
//
// Promises: weights are cut only by their layouts (contract/placement.h), which parallelize
// makes; gradients are reduced in --reduce-dtype and divided by dp x cp, so each rank's mean
// loss becomes the global mean; apply_fsdp wraps the hooks and weight transforms TP left and
// replaces none of them.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "contract/mesh.h"
#include "contract/placement.h"
#include "distributed/activation_checkpoint.h"
#include "distributed/comm.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain {

class BlockBucket;

enum class DataParallelMode { kNone, kReplicate, kFullyShard, kHybridShard };
enum class ReshardAfterForward { kDefault, kAlways, kNever };
// How data-parallel weights are grouped into one all-gather / reduce-scatter each
// (SimpleFSDP's bucketing flavors, done eagerly): one per weight, per transformer block, or
// consecutive blocks up to a size (data_parallel.cpp, bucket_units).
enum class Bucketing { kNone, kBlock, kAuto };

ReshardAfterForward parse_reshard(const std::string& s);  // "default" | "always" | "never"
Bucketing parse_bucketing(const std::string& s);          // "none" | "block" | "auto"

// --reshard-after-forward, --fsdp.*, and mixed precision (--param-dtype, --reduce-dtype).
struct DataParallelConfig {
  ReshardAfterForward reshard_after_forward = ReshardAfterForward::kDefault;
  torch::ScalarType param_dtype = torch::kFloat32;   // what forward computes with
  torch::ScalarType reduce_dtype = torch::kFloat32;  // what gradients are reduced in
  Bucketing bucketing = Bucketing::kBlock;
  // FSDP2's CPUOffloadPolicy: each rank's pieces (and so their gradients and AdamW state)
  // stay in host memory; they are copied to the device to be gathered or computed with.
  bool cpu_offload = false;
  double bucket_mb = 64;  // auto bucketing: a bucket grows until it holds this many MiB
};
void add_options(CLI::App& cmd, DataParallelConfig& config);

// SimpleFSDP's mode rule, with torchtitan's dp_shard_cp (= dp_shard x cp) as the shard
// degree: dp_replicate and dp_shard_cp both > 1 -> hybrid_shard; only dp_replicate ->
// replicate; dp_shard_cp > 1 -> fully_shard; neither -> none.
DataParallelMode data_parallel_mode(const MeshShape& shape);
std::string to_string(DataParallelMode mode);

// Keeps only this rank's piece of every weight of `model` (its layout in `layout_of`) and sets
// each weight's parametrization: gathered from its bucket (or, alone, only cast), then the TP
// transform of `weight_tp` if any. Each bucket is entered and left at hooks around what TP
// hooked there; `ac` decides which blocks recompute. Returns the buckets, in forward order
// (expert-parallel experts last).
std::vector<std::shared_ptr<BlockBucket>> apply_fsdp(Transformer& model, MeshGroups& groups,
                                                     const DataParallelConfig& config, ActivationCheckpoint ac,
                                                     const std::map<std::string, const ParamLayout*>& layout_of,
                                                     const std::map<std::string, Transform>& weight_tp);

}  // namespace meshtrain
