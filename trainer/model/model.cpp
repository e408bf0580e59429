#include "model/model.h"

#include "base/compat.h"
#include "contract/hash.h"
#include "contract/model_names.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest
using namespace contract::model_names;

// ---- building blocks --------------------------------------------------------

namespace {
// Norms and rotations run in float32 (or wider) even for bf16 activations, as in torchtitan.
torch::Tensor at_least_float32(const torch::Tensor& x) {
  return x.to(at::promote_types(x.scalar_type(), torch::kFloat32));
}
}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return compat::rms_norm(x, weight, eps);
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t head_dim, const torch::Tensor& positions, double theta) {
  auto opts = torch::dtype(torch::kFloat64);
  auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, head_dim, 2, opts.device(positions.device())) / head_dim);
  auto angles = torch::outer(positions.to(torch::kFloat64), inv_freq);  // [T, Dh/2], where positions are
  return {torch::cos(angles).to(torch::kFloat32), torch::sin(angles).to(torch::kFloat32)};
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t head_dim, int64_t seq_len, double theta) {
  return rope_tables(head_dim, torch::arange(seq_len, torch::kLong), theta);
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto T = x.size(1);
  // torchtitan's form: each pair is a complex number, rotated by one complex multiply
  // (three kernels each way, where the real-arithmetic form took ten).
  auto rotation = torch::complex(cos.slice(0, 0, T), sin.slice(0, 0, T)).unsqueeze(1);           // [T, 1, Dh/2]
  auto pairs = torch::view_as_complex(at_least_float32(x).unflatten(-1, {-1, 2}).contiguous());  // [B, T, H, Dh/2]
  return torch::view_as_real(pairs * rotation).flatten(-2).to(x.scalar_type());
}

torch::Tensor gqa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  auto out = compat::causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  return out.transpose(1, 2);  // [B, T, H, Dh]
}

torch::Tensor swiglu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2,
                     const torch::Tensor& w3) {
  return torch::linear(torch::silu(torch::linear(x, w1)) * torch::linear(x, w3), w2);
}

// ---- modules ----------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter(kWeight, torch::ones({dim}));
}
// The input hook runs before the weight is asked for: a data-parallel bucket gathers there.
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const auto input = hooks.in(x);
  return hooks.out(rms_norm(input, compute_weight(), eps));
}

LinearImpl::LinearImpl(int64_t in, int64_t out) { weight = register_parameter(kWeight, torch::empty({out, in})); }
torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  const auto input = hooks.in(x);
  return hooks.out(product ? product(input, compute_weight()) : torch::linear(input, compute_weight()));
}

EmbeddingImpl::EmbeddingImpl(int64_t vocab, int64_t dim) {
  weight = register_parameter(kWeight, torch::empty({vocab, dim}));
}
torch::Tensor EmbeddingImpl::forward(const torch::Tensor& tokens) {
  auto ids = hooks.in(tokens);
  return hooks.out(lookup ? lookup(ids, compute_weight()) : torch::embedding(compute_weight(), ids));
}

AttentionImpl::AttentionImpl(const ModelArgs& a) : head_dim(a.head_dim()) {
  const auto kv_dim = a.n_kv_heads * head_dim;
  wq = register_module(kWq, Linear(a.dim, a.n_heads * head_dim));
  wk = register_module(kWk, Linear(a.dim, kv_dim));
  wv = register_module(kWv, Linear(a.dim, kv_dim));
  wo = register_module(kWo, Linear(a.n_heads * head_dim, a.dim));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& input, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto x = hooks.in(input);
  const auto B = x.size(0), T = x.size(1);
  auto q = wq(x).view({B, T, -1, head_dim});  // [B, T, H, Dh]
  auto k = wk(x).view({B, T, -1, head_dim});  // [B, T, K, Dh]
  auto v = wv(x).view({B, T, -1, head_dim});  // [B, T, K, Dh]
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  auto y = (core ? core(q, k, v) : gqa_attention(q, k, v)).reshape({B, T, -1});  // [B, T, H*Dh]
  return hooks.out(wo(y));                                                       // [B, T, D]
}

FeedForwardImpl::FeedForwardImpl(const ModelArgs& a) : FeedForwardImpl(a.dim, a.ffn_hidden_dim()) {}
FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
  w1 = register_module(kW1, Linear(dim, hidden));
  w2 = register_module(kW2, Linear(hidden, dim));
  w3 = register_module(kW3, Linear(dim, hidden));
}
torch::Tensor FeedForwardImpl::forward(const torch::Tensor& input) {
  auto x = hooks.in(input);
  auto gate = torch::silu(w1(x));      // w1 before w3, always: per-weight buckets prefetch in this order
  return hooks.out(w2(gate * w3(x)));  // swiglu(), with each layer's hooks
}

ExpertWeightImpl::ExpertWeightImpl(int64_t experts, int64_t rows, int64_t cols) {
  weight = register_parameter(kWeight, torch::empty({experts, rows, cols}));
}

GroupedExpertsImpl::GroupedExpertsImpl(int64_t experts, int64_t dim, int64_t hidden) {
  w1 = register_module(kW1, ExpertWeight(experts, hidden, dim));
  w2 = register_module(kW2, ExpertWeight(experts, dim, hidden));
  w3 = register_module(kW3, ExpertWeight(experts, hidden, dim));
}
namespace {

// y = x.index_select(0, index) where every row r of x is picked exactly c = |index| / |x|
// times, by y's rows inverse[r*c .. r*c + c). The backward is then a gather by `inverse`
// (and a sum over the c copies) rather than index_select's scatter-add with atomics, which
// took 17 of a 178 ms 1B_moe step on an H200.
struct GatherRows : torch::autograd::Function<GatherRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& index, const torch::Tensor& inverse) {
    ctx->save_for_backward({inverse});
    ctx->saved_data["rows"] = x.size(0);
    return x.index_select(0, index);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t rows = ctx->saved_data["rows"].toInt();
    auto grad = grads[0].index_select(0, ctx->get_saved_variables()[0]);  // [rows * c, ...]
    if (grad.size(0) != rows) grad = grad.unflatten(0, {rows, -1}).sum(1);
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& index, const torch::Tensor& inverse) {
  return GatherRows::apply(x, index, inverse);
}

torch::Tensor inverse_permutation(const torch::Tensor& order) {
  return torch::empty_like(order).scatter_(0, order, torch::arange(order.size(0), order.options()));
}

namespace {

// The loop: one SwiGLU per expert on its rows; the counts are read on the host.
torch::Tensor experts_loop(const torch::Tensor& x, const torch::Tensor& counts, const torch::Tensor& w1,
                           const torch::Tensor& w2, const torch::Tensor& w3) {
  const auto host = counts.to(torch::kCPU, torch::kLong);
  std::vector<torch::Tensor> out;
  int64_t row = 0;
  for (int64_t e = 0; e < host.size(0); ++e) {
    const int64_t n = host[e].item<int64_t>();
    out.push_back(swiglu(x.narrow(0, row, n), w1[e], w2[e], w3[e]));  // [n, D]
    row += n;
  }
  return torch::cat(out);  // [M, D]
}

// The grouped GEMMs read each group's start off the device, and their TMA loads need it
// 16-byte aligned: every expert's rows are padded to a multiple of 8 (bf16) with zero rows,
// which compute to zero and add nothing to the weight gradients. M_pad is fixed by M and E
// alone, so nothing is read on the host; the last expert takes the slack. Padding and
// unpadding are one permutation of [x; zero rows] and its inverse (gather_rows both ways).
torch::Tensor experts_grouped(const torch::Tensor& x, const torch::Tensor& counts, const torch::Tensor& w1,
                              const torch::Tensor& w2, const torch::Tensor& w3) {
  constexpr int64_t kAlign = 8;
  const int64_t M = x.size(0), E = counts.size(0);
  const int64_t M_pad = (M + E * (kAlign - 1) + kAlign - 1) / kAlign * kAlign;
  const auto ends = counts.cumsum(0);                                         // [E]
  const auto padded = (counts + (kAlign - 1)).div(kAlign, "floor") * kAlign;  // [E]
  const auto padded_ends = padded.cumsum(0);                                  // [E]
  const auto starts = ends - counts, padded_starts = padded_ends - padded;    // [E]
  // Row p of the padded layout belongs to expert e (the last takes the slack) and holds x's
  // row starts[e] + (p - padded_starts[e]) if that is one of e's rows, else one of the zero
  // rows M, M + 1, ... (in order).
  const auto p = torch::arange(M_pad, counts.options());
  const auto expert = torch::searchsorted(padded_ends, p, /*out_int32=*/false, /*right=*/true).clamp_max(E - 1);
  const auto within = p - padded_starts.index_select(0, expert);
  const auto is_pad = within >= counts.index_select(0, expert);
  const auto source =
      torch::where(is_pad, M - 1 + is_pad.cumsum(0), starts.index_select(0, expert) + within);  // [M_pad]
  const auto place = inverse_permutation(source);  // [M_pad]: x's row r sits at padded row place[r]
  const auto x_pad = gather_rows(torch::cat({x, x.new_zeros({M_pad - M, x.size(1)})}), source, place);  // [M_pad, D]
  auto offsets = padded_ends.to(torch::kInt);
  offsets.index_fill_(0, torch::full({1}, E - 1, counts.options()), static_cast<int64_t>(M_pad));
  // [M_pad, D] x [E, D, Hm] per group -> [M_pad, Hm]; then [M_pad, Hm] x [E, Hm, D] -> [M_pad, D]
  const auto h = torch::silu(compat::grouped_mm(x_pad, w1.transpose(-2, -1), offsets)) *
                 compat::grouped_mm(x_pad, w3.transpose(-2, -1), offsets);
  const auto out_pad = compat::grouped_mm(h, w2.transpose(-2, -1), offsets);  // [M_pad, D]
  return gather_rows(out_pad, place, source).narrow(0, 0, M);                 // [M, D]
}

}  // namespace

torch::Tensor GroupedExpertsImpl::forward(const torch::Tensor& input, const torch::Tensor& counts) {
  const auto x = hooks.in(input);                                                                 // [M, D]
  const auto w1_ = w1->compute_weight(), w2_ = w2->compute_weight(), w3_ = w3->compute_weight();  // [E, ...]
  const bool grouped = compat::grouped_mm_runs(x, w1_) && x.size(0) > 0;
  return hooks.out(grouped ? experts_grouped(x, counts, w1_, w2_, w3_) : experts_loop(x, counts, w1_, w2_, w3_));
}

MoEImpl::MoEImpl(const ModelArgs& a) : top_k(a.moe_top_k) {
  router = register_module(kRouter, Linear(a.dim, a.moe_experts));
  experts = register_module(kExperts, GroupedExperts(a.moe_experts, a.dim, a.moe_hidden_dim));
  shared_experts = register_module(kSharedExperts, FeedForward(a.dim, a.moe_hidden_dim * a.moe_shared_experts));
  expert_bias = register_buffer(kExpertBias, torch::zeros({a.moe_experts}));
  tokens_per_expert = register_buffer("tokens_per_expert", torch::zeros({a.moe_experts}));
}

torch::Tensor MoEImpl::forward(const torch::Tensor& input) {
  const auto x = hooks.in(input);
  const auto tokens = x.reshape({-1, x.size(-1)});  // [N, D]
  const int64_t n_experts = expert_bias.size(0);
  const auto scores = torch::sigmoid(router(tokens).to(torch::kFloat32));                  // [N, E]
  const auto chosen = std::get<1>(torch::topk(scores.detach() + expert_bias, top_k, -1));  // [N, k]
  auto gates = scores.gather(1, chosen);                                                   // [N, k]
  gates = gates / (gates.sum(-1, true) + 1e-20);  // each token's weights sum to 1
  // Each token appears k times (copy n*k + j is token n's j-th choice), its copies sorted by
  // expert (stable: token order within one); position is where each copy went.
  const auto expert_of_copy = chosen.flatten();                                                 // [N*k]
  const auto [sorted_experts, order] = torch::sort(expert_of_copy, /*stable=*/true, 0, false);  // [N*k] each
  const auto position = inverse_permutation(order);                                             // [N*k]
  // Copies per expert, counted on the device (bincount would read its maximum on the host).
  const auto experts_upto =
      torch::searchsorted(sorted_experts, torch::arange(1, n_experts + 1, sorted_experts.options()));
  const auto per_expert = torch::diff(experts_upto, 1, 0, torch::zeros({1}, experts_upto.options()));  // [E]
  // Counted once per step's forward with gradients (an activation-checkpointed block's
  // first forward runs without them), never in validation or generation.
  if (torch::GradMode::is_enabled()) {
    torch::NoGradGuard no_grad;
    tokens_per_expert.add_(per_expert.to(tokens_per_expert.dtype()));
  }
  const auto sorted = gather_rows(tokens, order.div(top_k, "floor"), position);                  // [N*k, D]
  const auto routed = route ? route(sorted, per_expert) : experts(sorted, per_expert);           // [N*k, D]
  const auto per_copy = gather_rows(routed, position, order).view({-1, top_k, routed.size(1)});  // [N, k, D]
  const auto out = (per_copy * gates.unsqueeze(-1).to(routed.scalar_type())).sum(1) + shared_experts(tokens);  // [N, D]
  return hooks.out(out.view(x.sizes()));
}

void MoEImpl::update_expert_bias(const torch::Tensor& tokens, double speed) {
  torch::NoGradGuard no_grad;
  const auto load = tokens.to(torch::kFloat32);
  auto delta = speed * torch::sign(load.mean() - load);  // under-loaded experts up, over-loaded down
  expert_bias.add_(delta - delta.mean());
  tokens_per_expert.zero_();
}

TransformerBlockImpl::TransformerBlockImpl(const ModelArgs& a, int64_t layer_id) {
  attention = register_module(kAttention, Attention(a));
  if (a.is_moe_layer(layer_id))
    moe = register_module(kMoe, MoE(a));
  else
    feed_forward = register_module(kFeedForward, FeedForward(a));
  attention_norm = register_module(kAttentionNorm, RMSNorm(a.dim, a.norm_eps));
  ffn_norm = register_module(kFfnNorm, RMSNorm(a.dim, a.norm_eps));
}
torch::Tensor TransformerBlockImpl::body(const torch::Tensor& input, const torch::Tensor& cos,
                                         const torch::Tensor& sin) {
  const auto x = hooks.in(input);
  auto h = x + attention(attention_norm(x), cos, sin);
  return hooks.out(h + (moe ? moe(ffn_norm(h)) : feed_forward(ffn_norm(h))));
}

namespace {

// Activation checkpointing: forward runs the block without recording a graph and
// keeps only its input; backward runs the block again with a graph and back-propagates
// through it (parameter gradients accumulate there, as in torch.utils.checkpoint's
// reentrant mode).
struct RecomputeBlock : torch::autograd::Function<RecomputeBlock> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, TransformerBlockImpl* block) {
    ctx->save_for_backward({x, cos, sin});
    // The block outlives the step; autograd contexts can only hold plain values.
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    return block->body(x, cos, sin);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto* block = reinterpret_cast<TransformerBlockImpl*>(ctx->saved_data["block"].toInt());
    auto x = saved[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = block->body(x, saved[1], saved[2]);
    }
    torch::autograd::backward({out}, {grad_out[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                            const torch::Tensor& sin) {
  if (recompute && torch::GradMode::is_enabled()) return RecomputeBlock::apply(x, cos, sin, this);
  return body(x, cos, sin);
}

TransformerImpl::TransformerImpl(const ModelArgs& a) : args(a) {
  tok_embeddings = register_module(kEmbedding, Embedding(a.vocab_size, a.dim));
  layers = register_module(kLayers, torch::nn::ModuleDict());
  for (int64_t i = 0; i < a.n_layers; ++i) layers->update({{std::to_string(i), TransformerBlock(a, i).ptr()}});
  norm = register_module(kNorm, RMSNorm(a.dim, a.norm_eps));
  output = register_module(kOutput, Linear(a.dim, a.vocab_size));
}

TransformerBlock TransformerImpl::block(int64_t id) const {
  return TransformerBlock(std::dynamic_pointer_cast<TransformerBlockImpl>(layers->operator[](std::to_string(id))));
}

std::vector<int64_t> TransformerImpl::layer_ids() const {
  std::vector<int64_t> ids;
  for (const auto& key : layers->keys()) ids.push_back(std::stoll(key));
  std::sort(ids.begin(), ids.end());
  return ids;
}

void TransformerImpl::keep_only(const std::vector<int64_t>& kept, bool embedding, bool head) {
  for (int64_t id : layer_ids()) {
    if (std::find(kept.begin(), kept.end(), id) != kept.end()) continue;
    layers->pop(std::to_string(id));
    layers->unregister_module(std::to_string(id));  // pop keeps the registration
  }
  if (!embedding) {
    unregister_module(kEmbedding);
    tok_embeddings = nullptr;
  }
  if (!head) {
    unregister_module(kNorm);
    unregister_module(kOutput);
    norm = nullptr;
    output = nullptr;
  }
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, const torch::Tensor& positions) {
  return forward_layers(tokens, positions, 0, args.n_layers);
}

torch::Tensor TransformerImpl::forward_layers(const torch::Tensor& input, const torch::Tensor& positions, int64_t first,
                                              int64_t last) {
  const auto T = input.size(1);
  auto [cos, sin] = positions.defined() ? rope_tables(args.head_dim(), positions, args.rope_theta)
                                        : rope_tables(args.head_dim(), T, args.rope_theta);
  cos = cos.to(input.device());
  sin = sin.to(input.device());
  auto h = first == 0 ? tok_embeddings(input) : input;  // [B, T, D]
  for (int64_t id = first; id < last; ++id) h = block(id)->forward(h, cos, sin);
  return last == args.n_layers ? output(norm(h)) : h;  // [B, T, V] or [B, T, D]
}

// ---- initialisation -----------------------------------------------------------

namespace {

// One generator per parameter, so a tensor's values depend on (seed, name) only.
torch::Generator generator_for(uint64_t seed, const std::string& name) {
  return at::detail::createCPUGenerator(splitmix64(seed ^ splitmix64(fnv1a64(name))));
}

// torch.nn.init.trunc_normal_: inverse-CDF sampling, then clamp to [a, b].
torch::Tensor trunc_normal(at::IntArrayRef shape, double std, double a, double b, torch::Generator gen) {
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  auto t = torch::empty(shape, torch::kFloat32);
  t.uniform_(2 * cdf(a / std) - 1, 2 * cdf(b / std) - 1, gen);
  t.erfinv_().mul_(std * std::sqrt(2.0));
  return t.clamp_(a, b);
}

}  // namespace

void init_weights(Transformer& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const auto& a = model->args;
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    auto gen = generator_for(seed, name);
    torch::Tensor value;
    if (goes_through(name, kAttentionNorm) || goes_through(name, kFfnNorm) || goes_through(name, kNorm)) {
      value = torch::ones(p.sizes());
    } else if (goes_through(name, kEmbedding)) {
      value = torch::empty(p.sizes()).normal_(0.0, 1.0, gen);
    } else if (goes_through(name, kOutput)) {
      const double std = 1.0 / std::sqrt(static_cast<double>(a.dim));
      value = trunc_normal(p.sizes(), std, -3 * std, 3 * std, gen);
    } else {
      // layers.<i>.*: wo, w2, w3 get torchtitan's depth-scaled std.
      const auto layer_id = std::stoll(name.substr(name.find('.') + 1));
      const bool depth_scaled = goes_through(name, kWo) || goes_through(name, kW2) || goes_through(name, kW3);
      const double std = depth_scaled ? 0.02 / std::sqrt(2.0 * (layer_id + 1)) : 0.02;
      value = trunc_normal(p.sizes(), std, -2.0, 2.0, gen);
    }
    p.copy_(value);
  }
}

}  // namespace meshtrain
