// A Llama-3-style decoder with torchtitan's parameter names. The model knows
// nothing about parallelism: every shape below is read off the weights, so a
// tensor-parallel layout that hands it sharded weights needs no change here.
//
// Shapes: B batch, T sequence, D dim, H heads, K kv heads, Dh head dim, F ffn hidden, V vocab.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/flavors.h"

namespace meshtrain {

// ---- the building blocks, as plain functions (unit-tested against reference formulas)
// x: [..., D], weight: [D]. Normalised in float32 (or wider) whatever x's dtype.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// RoPE tables for `positions` [T] (int64): cos and sin, each [T, Dh/2].
std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t head_dim, const torch::Tensor& positions, double theta);
// ... for positions [0, T).
std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t head_dim, int64_t seq_len, double theta);
// x: [B, T, H, Dh]; rotates adjacent pairs (x[2i], x[2i+1]) like torchtitan's complex RoPE.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// q: [B, T, H, Dh], k, v: [B, T, K, Dh] with H % K == 0 -> [B, T, H, Dh], causal.
torch::Tensor gqa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
// x: [..., D]; w1, w3: [F, D]; w2: [D, F] -> [..., D].
torch::Tensor swiglu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2, const torch::Tensor& w3);
// Rows of x [R, ...] by index [R*c] -> [R*c, ...], when every row of x is picked exactly c
// times, by the rows inverse[r*c .. r*c + c); backward gathers by inverse (no scatter-add).
torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& index, const torch::Tensor& inverse);
// The permutation undoing `order` [n] (a permutation of 0..n-1): result[order[i]] = i.
torch::Tensor inverse_permutation(const torch::Tensor& order);

// ---- modules: they own parameters under torchtitan's names

// What a hook or a parametrization does to a tensor (an empty one: nothing).
using Transform = std::function<torch::Tensor(const torch::Tensor&)>;

// What a parallel style (torchtitan's ColwiseParallel, RowwiseParallel, SequenceParallel,
// PrepareModuleInput) attaches to a module: transforms of its input and of its output.
// Identity unless set; the module calls them and knows nothing else about them.
struct ModuleHooks {
  Transform input;
  Transform output;
  torch::Tensor in(const torch::Tensor& x) const { return input ? input(x) : x; }
  torch::Tensor out(const torch::Tensor& y) const { return output ? output(y) : y; }
};

// A module a parallel style may attach hooks to (found by name: tensor_parallel.cpp, data_parallel.cpp).
struct HookedModule : torch::nn::Module {
  ModuleHooks hooks;
};

// A module with one parameter, `weight`, that a parallelism may parametrize (as
// torch.nn.utils.parametrize does): the registered tensor stays what is stored and
// checkpointed (under FSDP, this rank's shard), and `parametrization`, if set, maps it
// to the tensor the forward computes with (under FSDP, the all-gathered weight).
struct WeightModule : HookedModule {
  torch::Tensor weight;
  Transform parametrization;
  torch::Tensor compute_weight() const { return parametrization ? parametrization(weight) : weight; }
};

struct RMSNormImpl : WeightModule {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  double eps;
};
TORCH_MODULE(RMSNorm);

// A bias-free linear layer: y = x W^T, W: [out, in]. A converter may replace the product
// (float8.h computes it in float8).
struct LinearImpl : WeightModule {
  LinearImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight)> product;
};
TORCH_MODULE(Linear);

// Token embedding table W: [V, D]; forward looks rows up. A parallel style may replace
// the lookup (a vocabulary-sharded table masks ids it does not hold).
struct EmbeddingImpl : WeightModule {
  EmbeddingImpl(int64_t vocab, int64_t dim);
  torch::Tensor forward(const torch::Tensor& tokens);
  std::function<torch::Tensor(const torch::Tensor& ids, const torch::Tensor& weight)> lookup;
};
TORCH_MODULE(Embedding);

struct AttentionImpl : HookedModule {
  explicit AttentionImpl(const ModelArgs& args);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  int64_t head_dim;
  // gqa_attention unless set: context parallelism replaces it with attention whose keys
  // and values include other ranks' tokens (same shapes in and out).
  std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)> core;
  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
};
TORCH_MODULE(Attention);

struct FeedForwardImpl : HookedModule {
  explicit FeedForwardImpl(const ModelArgs& args);
  FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

// The routed experts' weights, all experts in one tensor each: w1, w3 [E, Hm, D] and
// w2 [E, D, Hm] (E experts, Hm the expert hidden dim). Registered as "<name>.weight".
struct ExpertWeightImpl : WeightModule {
  ExpertWeightImpl(int64_t experts, int64_t rows, int64_t cols);
};
TORCH_MODULE(ExpertWeight);

// Experts applied to tokens already grouped by expert: x [M, D] holds counts[0] rows for
// the first expert held, then counts[1] for the next, ... -> [M, D]; counts [E] (int64) is
// a tensor on x's device. One SwiGLU per expert: on a GPU that has them (LibTorch 2.x,
// bf16, sm90) three grouped GEMMs whose groups come from counts on the device, with no
// host sync (torchtitan's grouped_mm path); elsewhere a loop of matmuls, which reads the
// counts on the host (torchtitan's for-loop path, and the reference the tests hold the
// grouped one to).
// Its hooks: where a data-parallel bucket of the expert weights enters and exits.
struct GroupedExpertsImpl : HookedModule {
  GroupedExpertsImpl(int64_t experts, int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& counts);
  ExpertWeight w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(GroupedExperts);

// DeepSeek-V3's mixture of experts in place of a feed-forward: a router picks each token's
// top-k experts from sigmoid scores, the experts' outputs are weighted by those scores and
// summed, and a shared expert (a FeedForward) sees every token. Balancing is auxiliary-loss
// free: top-k ranks scores + expert_bias while the weights use the scores alone, and
// update_expert_bias() moves the bias toward an even load after each optimizer step.
struct MoEImpl : HookedModule {
  explicit MoEImpl(const ModelArgs& args);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, D] -> [B, T, D]
  // Moves expert_bias by `speed` toward the mean load, from `tokens` [E] routed to each
  // expert since the last update (summed over the ranks that saw different tokens).
  void update_expert_bias(const torch::Tensor& tokens, double speed);
  int64_t top_k;
  // How tokens grouped by expert reach the experts and come back: the experts held here
  // unless set (expert parallel sends them to the ranks holding their experts).
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& counts)> route;
  Linear router{nullptr};  // the gate: [E, D]
  GroupedExperts experts{nullptr};
  FeedForward shared_experts{nullptr};
  torch::Tensor expert_bias;        // [E], checkpointed, not trained by the optimizer
  torch::Tensor tokens_per_expert;  // [E], tokens routed since the last bias update
};
TORCH_MODULE(MoE);

// Its hooks: around each run of the body (forward, and the recompute in backward).
struct TransformerBlockImpl : HookedModule {
  TransformerBlockImpl(const ModelArgs& args, int64_t layer_id);
  // With `recompute` set (activation checkpointing), forward keeps only its input for
  // backward and runs the block again there; anything the block gathered is freed.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  torch::Tensor body(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  bool recompute = false;
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};  // dense layers
  MoE moe{nullptr};                   // MoE layers (ModelArgs::is_moe_layer), instead
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

struct TransformerImpl : torch::nn::Module {
  explicit TransformerImpl(const ModelArgs& args);
  // tokens: [B, T] int64 -> logits [B, T, V]. `positions` [T] are the tokens' places in
  // the sequence (for RoPE), 0..T-1 when not given.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions = {});
  // Layers [first, last) (global ids, all held), after the embedding when first == 0 and
  // followed by the final norm and output when last == n_layers. A pipeline stage's part:
  // it takes hidden states [B, T, D] instead of tokens when first > 0 and returns hidden
  // states instead of logits when last < n_layers.
  torch::Tensor forward_layers(const torch::Tensor& input, const torch::Tensor& positions, int64_t first, int64_t last);
  // Drops every layer outside `kept` (global ids) and, unless asked to keep them, the
  // embedding and the head (norm + output). Names stay global: layer 7 is "layers.7" wherever it lives.
  void keep_only(const std::vector<int64_t>& kept, bool embedding, bool head);
  TransformerBlock block(int64_t id) const;  // layer `id` (global), which must be held
  std::vector<int64_t> layer_ids() const;    // the layers held, ascending
  ModelArgs args;
  Embedding tok_embeddings{nullptr};  // null on pipeline stages without it
  torch::nn::ModuleDict layers;       // keyed by global layer id, as torchtitan's ModuleDict
  RMSNorm norm{nullptr};
  Linear output{nullptr};
};
TORCH_MODULE(Transformer);

// torchtitan's initialisation, drawn on the CPU from (seed, parameter name) for the
// full tensor, so every layout and device starts from bitwise-identical weights.
void init_weights(Transformer& model, uint64_t seed);

}  // namespace meshtrain
