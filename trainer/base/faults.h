// Known distributed-training bugs, planted on purpose (`--inject-fault NAME`, a
// test-only option) so that meshtest's canary cases can prove each check catches
// the bug it exists for. With no fault injected every hook below is a no-op.
#pragma once

#include <string>
#include <vector>

namespace meshtrain {

enum class Fault {
  kNone,
  kGradSumNotMean,          // data parallel sums gradients instead of averaging them
  kTpMissingAllReduce,      // row-parallel outputs are not all-reduced over tp
  kGradNormLocalShard,      // the grad norm (and clipping) sees only this rank's shard
  kDataloaderNotRestored,   // a resumed run restarts the data from the beginning
  kOptimizerNotRestored,    // a resumed run starts AdamW's moments from zero
  kHsdpReplicasUnsynced,    // gradients are not all-reduced over dp_replicate
  kWrongShardOffset,        // a loaded shard is read one row off
  kKeysRenamed,             // the checkpoint names tok_embeddings "tok_embedding"
  kCpLocalPositions,        // context parallel: RoPE sees positions local to the rank's chunks
  kPpLossNotDivided,        // pipeline parallel: each microbatch's loss is not divided by their number
  kRopeTheta10k,            // RoPE frequencies from theta 10000, not the model's: the same under every layout
  kUnevenBucketOffsets,     // FSDP reads every rank's piece of a block at rank 0's offsets (right if shards are even)
  kReplicasWriteTheirCopy,  // a save writes replicated chunks from every replica (the metadata keeps one)
  kReduceInParamDtype,      // mixed precision: gradients are reduced in the parameter dtype, not reduce_dtype
  kHangBeforeAllReduce,     // global rank 1 stops for good just before an all-reduce its peers wait in
  kHfRowsNotReordered,      // a Hugging Face checkpoint's wq/wk rows load in transformers' order, not meshtrain's
  kValidationLossLocal,     // the validation loss is this rank's own mean, not averaged over the data-parallel ranks
  kFloat8ScaleNotInverted,  // float8 dequantises with the scale instead of its reciprocal
  kEpTokensNotRegrouped,    // expert parallel: received tokens reach the local experts in source-rank order
  kExpertBiasLocalCounts,   // the MoE routing bias moves by this rank's own token counts, not the global ones
  kOptInBwdStepsTwice,      // optimizer in backward: the regular step after backward runs as well
};

// Throws std::invalid_argument listing the names for an unknown one.
Fault parse_fault(const std::string& name);
std::vector<std::string> fault_names();

void inject_fault(Fault f);
bool injected(Fault f);

}  // namespace meshtrain
