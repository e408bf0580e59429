// Tensor-parallel communication patterns, one named autograd function each, forward
// and backward side by side (after Megatron-LM's tensor_parallel/mappings.py).
// `tp` is the tensor-parallel group; a group of one rank makes each the identity.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "distributed/comm.h"

namespace meshtrain::tp {

// f: forward identity; backward all-reduce (sum) the gradient over tp.
// Used where a replicated activation enters column-parallel layers.
torch::Tensor copy_to_tp(const torch::Tensor& x, Comm& tp);

// g: forward all-reduce (sum) over tp; backward identity.
// Used after row-parallel layers, whose outputs are partial sums.
torch::Tensor reduce_from_tp(const torch::Tensor& x, Comm& tp);

// Sequence parallel entry: forward all-gather along `dim` (pieces of `sizes`);
// backward reduce-scatter (sum) along `dim` back to this rank's piece.
torch::Tensor gather_from_tp(const torch::Tensor& x, Comm& tp, int64_t dim, const std::vector<int64_t>& sizes);

// Sequence parallel exit: forward reduce-scatter (sum) along `dim`;
// backward all-gather along `dim`.
torch::Tensor reduce_scatter_to_tp(const torch::Tensor& x, Comm& tp, int64_t dim, const std::vector<int64_t>& sizes);

// Gathering replicated pieces: forward all-gather along `dim`; backward keeps this
// rank's piece of the (replicated) gradient. For vocabulary-sharded logits.
torch::Tensor gather_replicated_from_tp(const torch::Tensor& x, Comm& tp, int64_t dim,
                                        const std::vector<int64_t>& sizes);

// Embedding lookup in a vocabulary-sharded table holding rows [vocab_start, vocab_start + rows):
// ids outside it give zero rows, so summing over tp ranks completes the lookup.
torch::Tensor masked_embedding(const torch::Tensor& ids, const torch::Tensor& weight, int64_t vocab_start);

// Loss parallel: mean cross-entropy of vocabulary-sharded logits [N, V_local] (this rank
// holds vocabulary columns [vocab_start, vocab_start + V_local)) against targets [N],
// without gathering the logits: all-reduce of the max, of the target logit and of the
// sum of exponentials. Backward is local: softmax minus one-hot, scaled.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, Comm& tp,
                                           int64_t vocab_start);

}  // namespace meshtrain::tp

namespace meshtrain::cp {

// Context parallel K/V all-gather: forward all-gather along `dim` (equal pieces, rank
// order); backward reduce-scatter (sum) back to this rank's piece. Sequence parallel's
// entry, over the cp group.
torch::Tensor all_gather_sequence(const torch::Tensor& x, Comm& cp, int64_t dim);

// One step of a ring: forward sends x to the next rank (rank + 1 mod n) and returns what
// the previous rank sent; backward sends the gradient back to the previous rank and
// returns what the next rank sent back.
torch::Tensor pass_to_next(const torch::Tensor& x, Comm& cp);

}  // namespace meshtrain::cp

namespace meshtrain::ep {

// Expert parallel token exchange: forward sends the first send_rows[0] rows of x to ep
// rank 0, the next send_rows[1] to rank 1, ... and returns recv_rows[i] rows from each rank
// i; backward sends each gradient row back where its token came from (the same all-to-all
// with the two lists swapped).
torch::Tensor exchange_tokens(const torch::Tensor& x, Comm& ep, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows);

}  // namespace meshtrain::ep
