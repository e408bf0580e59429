// The data-parallel parameters of one stretch of the model run in sequence -- the
// embedding, one transformer block, or the final norm with the output layer -- gathered
// with one all-gather and reduced with one reduce-scatter (SimpleFSDP's bucketing,
// FSDP2's per-block groups): a 1B block is ~116 MiB of bf16 where one weight is 2-32 MiB,
// and NCCL reaches its bandwidth only on large messages. "Block" below means the stretch. Each rank's pieces travel back to back in one flat
// buffer, padded to the longest rank's.
//
// Per step a bucket promises:
//  - forward: the block's full weights exist from its entry to its exit, and the next
//    block's all-gather is already running while this block computes (prefetch);
//  - reshard after forward: at the block's exit the full weights' memory is released,
//    while autograd keeps the block's activations and its references to the weights.
//    Just before the block's backward a second all-gather refills the very same storage
//    (FSDP2 resizes the storage to zero and back), so nothing is recomputed;
//  - backward: the previous block's all-gather is issued before this block's backward
//    computes, and this block's reduce-scatter runs while the previous block's backward
//    computes; when backward returns, each piece's .grad holds its part of the mean
//    gradient (added to what was there, for gradient accumulation).
// Several forwards may await their backwards (pipeline microbatches): each keeps its own
// weights, and backwards come in the order of their forwards.
// The same code runs on Gloo, where "in flight" is a Gloo worker thread.
#pragma once

#include <torch/torch.h>

#include <deque>
#include <functional>
#include <vector>

#include "distributed/comm.h"
#include "contract/placement.h"

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

// How a bucket's pieces talk: the groups they are gathered and reduced over and the dtypes
// they travel in. Every weight of a bucket shares them (data_parallel.cpp gives expert-parallel
// experts buckets of their own).
struct DataParallelWiring {
  Comm* shard_group = nullptr;                       // all-gathers the pieces, reduce-scatters the gradients
  Comm* replicate_group = nullptr;                   // HSDP and DDP: gradients are summed over the replicas
  double grad_divisor = 1.0;                         // gradients are averaged over the dp degree
  torch::ScalarType param_dtype = torch::kFloat32;   // what the gathered weights compute in
  torch::ScalarType reduce_dtype = torch::kFloat32;  // what gradients are reduced in
};

// FSDP2's way to free a tensor autograd has saved without touching the graph: the memory
// goes, the storage object (which autograd's saved references share) stays, with zero
// bytes. reallocate_storage gives it fresh, uninitialised memory of its old size; write
// it through an alias (from_blob) so the saved references' version check still passes.
void release_storage(const torch::Tensor& t);
void reallocate_storage(const torch::Tensor& t);

class BlockBucket {
 public:
  struct Options {
    bool reshard_after_forward = true;
    // Activation checkpointing runs this block again in backward: its forward then
    // keeps nothing, and the recompute gathers (the previous block's backward prefetches).
    bool recomputed = false;
    // Where the gathered weights, the gradients and the collectives live. The pieces may
    // live elsewhere: with CPU offload they stay in host memory between steps, and their
    // gradients land there.
    torch::Device device = torch::kCPU;
    DataParallelWiring wiring;
  };
  explicit BlockBucket(Options options) : options_(options) {}

  // `piece` is the registered parameter: this rank's piece of `layout`'s tensor.
  void add(const ParamLayout* layout, torch::Tensor piece);
  // The blocks run before and after this one in forward (nullptr at the ends).
  void link(BlockBucket* previous, BlockBucket* next) { previous_ = previous, next_ = next; }

  // The block's entry and exit (TransformerBlock's hooks); weight(i) is the full tensor
  // of the i-th added parameter between them.
  void enter();
  torch::Tensor exit(const torch::Tensor& output);
  const torch::Tensor& weight(size_t i) const;
  const std::vector<torch::Tensor>& pieces() const { return pieces_; }

  // Called when this bucket's pieces hold their final gradients in a step, during backward
  // (the optimizer in backward steps them there); unset: nothing is called.
  std::function<void(const std::vector<torch::Tensor>& pieces)> on_gradients_ready;

  // Autograd's side (GatherBucket, the hook on the block's output, the end of backward).
  std::vector<torch::Tensor> gather_new();
  void before_backward();
  void reduce(const std::vector<torch::Tensor>& grads);
  void finish_reduce();

 private:
  enum class Weights { kNone, kHeld, kFreed };
  int64_t row_numel(size_t i) const;
  int64_t offset(size_t i, size_t rank) const;  // where param i starts in rank's part
  int64_t rank_numel(size_t rank) const;
  int64_t width() const;  // the longest rank's part: every rank sends this many
  bool even() const;      // every rank holds as many rows of every param
  void start_gather();
  torch::Tensor take_gather();
  void unpack(const torch::Tensor& gathered, const std::vector<torch::Tensor>& into) const;
  bool will_gather_for_backward() const;

  Options options_;
  std::vector<const ParamLayout*> layouts_;
  std::vector<torch::Tensor> pieces_;
  BlockBucket* previous_ = nullptr;
  BlockBucket* next_ = nullptr;

  std::vector<torch::Tensor> full_;  // this forward's gathered weights (autograd outputs)
  Weights weights_ = Weights::kNone;
  // Forwards whose backward has not run yet, oldest first: their weights, and whether
  // reshard-after-forward released them.
  struct AwaitingBackward {
    std::vector<torch::Tensor> weights;
    bool released = false;
  };
  std::deque<AwaitingBackward> awaiting_;
  InFlight pending_gather_;
  std::vector<int64_t> gather_versions_;  // the pieces' versions it gathered
  InFlight pending_reduce_;
  bool reduced_over_replicas_ = false;  // DDP: the in-flight collective is the all-reduce itself
};

}  // namespace meshtrain
