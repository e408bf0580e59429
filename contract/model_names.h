// The Llama model's module names (torchtitan's), spelled once. A parameter's name is the path of
// modules to it, joined by dots as LibTorch joins them: "layers.3.attention.wq.weight". The model
// registers its modules under these names; the TP plan, the bucketing, float8, the Hugging Face
// mapping and the checkpoint tools find parameters by them; they are a checkpoint's keys.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace contract::model_names {

// The model, in forward order.
inline constexpr char kEmbedding[] = "tok_embeddings";
inline constexpr char kLayers[] = "layers";  // the transformer blocks, keyed by layer id
inline constexpr char kNorm[] = "norm";
inline constexpr char kOutput[] = "output";
// A transformer block: attention, then a feed-forward (dense) or a MoE, each after its norm.
inline constexpr char kAttentionNorm[] = "attention_norm";
inline constexpr char kAttention[] = "attention";
inline constexpr char kFfnNorm[] = "ffn_norm";
inline constexpr char kFeedForward[] = "feed_forward";
inline constexpr char kMoe[] = "moe";
// Attention's projections.
inline constexpr char kWq[] = "wq", kWk[] = "wk", kWv[] = "wv", kWo[] = "wo";
// A feed-forward's and each expert's w2(silu(w1 x) * w3 x).
inline constexpr char kW1[] = "w1", kW2[] = "w2", kW3[] = "w3";
// A MoE's parts: the router, the routed experts (one [E, out, in] weight per w) and the shared ones.
inline constexpr char kRouter[] = "router", kExperts[] = "experts", kSharedExperts[] = "shared_experts";
// A MoE's routing bias: a buffer that is model state (checkpointed with the weights), never trained.
inline constexpr char kExpertBias[] = "expert_bias";
// LibTorch's name for a module's parameter.
inline constexpr char kWeight[] = "weight";

// The names joined by dots: path({kAttention, kWo}) is "attention.wo".
inline std::string path(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out += '.';
    out += name;
  }
  return out;
}
// "layers.<id>": layer ids stay global, so layer 7 has this name on every pipeline stage.
inline std::string layer(int64_t id) { return path({kLayers, std::to_string(id)}); }

// Whether the path `fqn` goes through the module path `modules`, matched at whole names:
// "layers.0.attention.wq.weight" goes through "attention.wq" and "wq", not through "attention.w".
inline bool goes_through(std::string_view fqn, std::string_view modules) {
  const std::string haystack = "." + std::string(fqn) + ".";
  return haystack.find("." + std::string(modules) + ".") != std::string::npos;
}

// Whether `fqn` is a weight of a MoE's routed experts ("layers.1.moe.experts.w1"): expert
// parallel splits them over ep, and tensor parallel on their own dimension.
inline bool is_routed_expert(std::string_view fqn) { return goes_through(fqn, path({kMoe, kExperts})); }

}  // namespace contract::model_names
