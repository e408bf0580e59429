// The model flavors and the rules a configuration must satisfy, without LibTorch,
// so meshtest can reject a matrix case whose mesh does not fit its model before
// anything is launched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "contract/mesh.h"

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

struct ModelArgs {
  std::string flavor;
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t vocab_size = 258;
  int64_t multiple_of = 32;
  double ffn_dim_multiplier = 0.0;  // 0: Llama's rule without a multiplier
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  // Mixture of experts (DeepSeek-V3 style): with moe_experts > 0 every layer from
  // moe_dense_layers on replaces its feed-forward with routed experts (top moe_top_k of
  // moe_experts, hidden moe_hidden_dim each) plus moe_shared_experts always-on experts.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 1;
  int64_t moe_hidden_dim = 0;
  int64_t moe_shared_experts = 1;
  int64_t moe_dense_layers = 0;
  // The auxiliary-loss-free balance: after each optimizer step every expert's routing
  // bias moves by this much toward an even load (docs/meshtrain.md, "Mixture of experts").
  double moe_bias_update_speed = 1e-3;

  int64_t head_dim() const { return dim / n_heads; }
  bool is_moe_layer(int64_t layer_id) const { return moe_experts > 0 && layer_id >= moe_dense_layers; }
  // Llama's rule: 2/3 of 4*dim, scaled, rounded up to a multiple of `multiple_of`.
  int64_t ffn_hidden_dim() const;
  int64_t num_parameters() const;
};

// The named flavors (model_flavor_names()). Throws std::invalid_argument for others.
ModelArgs model_flavor(const std::string& name);
std::vector<std::string> model_flavor_names();
// Throws std::invalid_argument naming the violated constraint.
void validate(const ModelArgs& args, int64_t seq_len);
// What `meshtrain describe --json` tells a harness: every flavor's dimensions and the values a
// tensor-parallel degree must divide, so meshtest rejects a mesh that cannot fit before launching
// without compiling this table in (a newer meshtrain is then never refused by an older meshtest).
std::string describe_json();
// Throws std::invalid_argument naming the constraint a tensor-parallel degree breaks.
void validate_tp(const ModelArgs& args, const MeshShape& shape, bool sequence_parallel, int64_t seq_len);
// Throws std::invalid_argument naming the constraint an expert-parallel degree breaks:
// ep splits dp_shard (and the experts) evenly, and needs a MoE flavor and cp = 1.
void validate_ep(const ModelArgs& args, const MeshShape& shape, int64_t ep);

}  // namespace meshtrain
