// ParallelConfig's options and the parsers of their values (parallelize.h).
#include <stdexcept>
#include <string>

#include "base/dtype.h"
#include "base/options.h"
#include "distributed/parallelize.h"

namespace meshtrain {

ReshardAfterForward parse_reshard(const std::string& s) {
  if (s == "default") return ReshardAfterForward::kDefault;
  if (s == "always") return ReshardAfterForward::kAlways;
  if (s == "never") return ReshardAfterForward::kNever;
  throw std::invalid_argument("unknown --reshard-after-forward '" + s + "' (known: default, always, never)");
}

Bucketing parse_bucketing(const std::string& s) {
  if (s == "none") return Bucketing::kNone;
  if (s == "block") return Bucketing::kBlock;
  if (s == "auto") return Bucketing::kAuto;
  throw std::invalid_argument("unknown --fsdp.bucketing '" + s + "' (known: none, block, auto)");
}

ActivationCheckpoint parse_ac(const std::string& s) {
  if (s == "none") return ActivationCheckpoint::kNone;
  if (s == "full") return ActivationCheckpoint::kFull;
  if (s == "selective") return ActivationCheckpoint::kSelective;
  throw std::invalid_argument("unknown --ac '" + s + "' (known: none, full, selective)");
}

void add_options(CLI::App& cmd, ParallelConfig& c) {
  cmd.add_option("--mesh", c.mesh,
                 "Device mesh pp=P,dp_replicate=R,dp_shard=S,cp=C,tp=T (missing dims 1; dp_shard=-1 fills the "
                 "world). pp>1: pipeline parallel; dp_shard>1: FSDP; dp_replicate>1: DDP; both: HSDP; cp>1: context "
                 "parallel (FSDP over dp_shard x cp); tp>1: tensor parallel")
      ->capture_default_str();
  add_parsed_option(cmd, "--reshard-after-forward", c.reshard_after_forward, parse_reshard, "default",
                    "FSDP/HSDP: free a block's gathered weights after its forward and gather them again just "
                    "before its backward: default (every block but the last) | always | never");
  add_parsed_option(cmd, "--ac", c.ac, parse_ac, "none",
                    "Activation checkpointing: none | full (every block) | selective (every 2nd block)");
  cmd.add_flag("--loss-parallel", c.loss_parallel,
               "TP: compute the loss on vocabulary-sharded logits without gathering them");
  cmd.add_flag("--sequence-parallel", c.sequence_parallel,
               "TP: shard norms and residual activations along the sequence (seq_len divisible by tp)");
  add_parsed_option(cmd, "--cp-rotate", c.cp_rotate, cp::parse_rotate, "allgather",
                    "CP: how attention reaches other ranks' keys and values: allgather (all at once) | alltoall "
                    "(passed around the ring, one neighbour exchange per step)");
  add_parsed_option(cmd, "--fsdp.bucketing", c.bucketing, parse_bucketing, "block",
                    "How data-parallel weights share collectives: none (one all-gather and reduce-scatter per "
                    "weight) | block (per transformer block) | auto (consecutive blocks up to --fsdp.bucket-mb)");
  cmd.add_option("--fsdp.bucket-mb", c.bucket_mb, "auto bucketing: a bucket grows to at least this many MiB")
      ->capture_default_str();
  cmd.add_flag("--fsdp.cpu-offload", c.cpu_offload,
               "Keep each rank's parameter pieces, their gradients and AdamW state in host memory (FSDP2's "
               "CPUOffloadPolicy); they travel to the device to be gathered and computed with. The identity on the "
               "CPU build");
  cmd.add_option("--ep", c.ep,
                 "Expert parallel degree (MoE flavors): the routed experts are split over this many consecutive "
                 "dp_shard ranks, and tokens travel to their experts by all-to-all; it must divide dp_shard")
      ->capture_default_str();
  add_parsed_option(cmd, "--param-dtype", c.param_dtype, parse_dtype, "float32",
                    "Mixed precision: dtype the forward computes with (float32|bfloat16)");
  add_parsed_option(cmd, "--reduce-dtype", c.reduce_dtype, parse_dtype, "float32",
                    "Mixed precision: dtype gradients are reduced in (float32|bfloat16)");
}

}  // namespace meshtrain
