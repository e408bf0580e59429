#include "model/flavors.h"

#include <stdexcept>

namespace meshtrain {

int64_t ModelArgs::ffn_hidden_dim() const {
  int64_t hidden = 4 * dim;
  hidden = 2 * hidden / 3;
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

int64_t ModelArgs::num_parameters() const {
  const int64_t kv_dim = n_kv_heads * head_dim();
  const int64_t per_layer = dim * dim * 2 + dim * kv_dim * 2  // wq, wo, wk, wv
                            + 2 * dim;                        // two norms
  const int64_t dense_ffn = 3 * dim * ffn_hidden_dim();       // w1, w2, w3
  const int64_t moe_ffn = moe_experts * dim                   // router gate
                          + (moe_experts + moe_shared_experts) * 3 * dim * moe_hidden_dim;
  int64_t total = vocab_size * dim * 2 + n_layers * per_layer + dim;
  for (int64_t id = 0; id < n_layers; ++id) total += is_moe_layer(id) ? moe_ffn : dense_ffn;
  return total;
}

std::vector<std::string> model_flavor_names() {
  return {"tiny", "tiny_uneven", "tiny_moe", "debugmodel", "debugmodel_moe", "1B", "1B_moe", "8B_short"};
}

ModelArgs model_flavor(const std::string& name) {
  ModelArgs a;
  a.flavor = name;
  if (name == "tiny") {  // CPU CI: seconds per hundred steps on one core
    a.dim = 64, a.n_layers = 2, a.n_heads = 8, a.n_kv_heads = 4, a.multiple_of = 32;
  } else if (name == "tiny_uneven") {  // vocab 259, ffn 137 and 5 layers divide by neither 2 nor 4
    a.dim = 40, a.n_layers = 5, a.n_heads = 4, a.n_kv_heads = 2, a.vocab_size = 259;
    a.multiple_of = 1, a.ffn_dim_multiplier = 1.3;
  } else if (name == "tiny_moe") {  // tiny with 8 experts (top 2) from layer 1 on: CPU CI's MoE
    a.dim = 64, a.n_layers = 3, a.n_heads = 8, a.n_kv_heads = 4, a.multiple_of = 32;
    a.moe_experts = 8, a.moe_top_k = 2, a.moe_hidden_dim = 32, a.moe_dense_layers = 1;
  } else if (name == "debugmodel_moe") {  // torchtitan's DeepSeek-V3 debugmodel proportions, byte vocabulary
    a.dim = 256, a.n_layers = 6, a.n_heads = 16, a.n_kv_heads = 16, a.multiple_of = 256;
    a.moe_experts = 8, a.moe_top_k = 3, a.moe_hidden_dim = 256, a.moe_dense_layers = 1;
  } else if (name == "debugmodel") {  // torchtitan's debugmodel (byte vocabulary)
    a.dim = 256, a.n_layers = 6, a.n_heads = 16, a.n_kv_heads = 16, a.multiple_of = 256;
  } else if (name == "1B") {  // Llama-3.2-1B dimensions, untied 128k vocabulary
    a.dim = 2048, a.n_layers = 16, a.n_heads = 32, a.n_kv_heads = 8, a.vocab_size = 128256;
    a.multiple_of = 256, a.ffn_dim_multiplier = 1.5;
  } else if (name == "1B_moe") {  // 1B's width and depth, layers 1.. on 8 experts (top 2) + 1 shared
    a.dim = 2048, a.n_layers = 16, a.n_heads = 32, a.n_kv_heads = 8, a.vocab_size = 128256;
    a.multiple_of = 256, a.ffn_dim_multiplier = 1.5;
    a.moe_experts = 8, a.moe_top_k = 2, a.moe_hidden_dim = 2048, a.moe_dense_layers = 1;
  } else if (name == "8B_short") {  // Llama-3-8B's width (ffn 14336), 8 of its 32 layers: fits one GPU
    a.dim = 4096, a.n_layers = 8, a.n_heads = 32, a.n_kv_heads = 8, a.vocab_size = 128256;
    a.multiple_of = 1024, a.ffn_dim_multiplier = 1.3;
  } else {
    std::string known;
    for (const auto& n : model_flavor_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model flavor '" + name + "' (known: " + known + ")");
  }
  return a;
}

std::string describe_json() {
  // Written by hand: this library has no JSON dependency, and the document is small and flat.
  std::string out =
      "{\"format_version\": 1, \"trainer\": \"meshtrain\", "
      "\"mesh_dims\": [\"dp_replicate\", \"dp_shard\", \"tp\"], "
      "\"sequence_parallel_needs_seq_len_divisible_by_tp\": true, \"fork_server\": \"forkserver\", "
      "\"flavors\": {";
  bool first = true;
  for (const auto& name : model_flavor_names()) {
    const ModelArgs a = model_flavor(name);
    out += std::string(first ? "" : ", ") + "\"" + name + "\": {\"dim\": " + std::to_string(a.dim) +
           ", \"n_layers\": " + std::to_string(a.n_layers) + ", \"n_heads\": " + std::to_string(a.n_heads) +
           ", \"n_kv_heads\": " + std::to_string(a.n_kv_heads) + ", \"vocab_size\": " + std::to_string(a.vocab_size) +
           ", \"ffn_hidden_dim\": " + std::to_string(a.ffn_hidden_dim()) +
           ", \"num_parameters\": " + std::to_string(a.num_parameters()) +
           ", \"moe_experts\": " + std::to_string(a.moe_experts) + ", \"tp_must_divide\": [[\"n_heads\", " +
           std::to_string(a.n_heads) + "], [\"n_kv_heads\", " + std::to_string(a.n_kv_heads) + "]]}";
    first = false;
  }
  return out + "}}";
}

void validate(const ModelArgs& a, int64_t seq_len) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument("model '" + a.flavor + "': " + what); };
  if (a.dim <= 0 || a.n_layers <= 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 || a.vocab_size <= 0)
    fail("dim, n_layers, n_heads, n_kv_heads and vocab_size must be positive");
  if (a.dim % a.n_heads != 0)
    fail("dim " + std::to_string(a.dim) + " is not divisible by n_heads " + std::to_string(a.n_heads));
  if (a.head_dim() % 2 != 0) fail("head_dim " + std::to_string(a.head_dim()) + " must be even for RoPE");
  if (a.n_heads % a.n_kv_heads != 0)
    fail("n_heads " + std::to_string(a.n_heads) + " is not divisible by n_kv_heads " + std::to_string(a.n_kv_heads));
  if (seq_len <= 0) fail("seq_len must be positive, got " + std::to_string(seq_len));
  if (a.moe_experts > 0 && (a.moe_top_k < 1 || a.moe_top_k > a.moe_experts || a.moe_hidden_dim <= 0))
    fail("moe_top_k must be in [1, moe_experts] and moe_hidden_dim positive");
}

void validate_tp(const ModelArgs& a, const MeshShape& shape, bool sequence_parallel, int64_t seq_len) {
  const int64_t t = shape.tp;
  auto fail = [&](const std::string& what) { throw std::invalid_argument("tp=" + std::to_string(t) + ": " + what); };
  if (a.n_heads % t != 0)
    fail("n_heads " + std::to_string(a.n_heads) + " of model '" + a.flavor + "' is not divisible by tp " +
         std::to_string(t));
  if (a.n_kv_heads % t != 0)
    fail("n_kv_heads " + std::to_string(a.n_kv_heads) + " of model '" + a.flavor + "' is not divisible by tp " +
         std::to_string(t));
  if (sequence_parallel && seq_len % t != 0)
    fail("--sequence-parallel needs seq_len divisible by tp, got seq_len " + std::to_string(seq_len));
  // Context parallel cuts each sequence into 2 x cp chunks, and sequence parallel cuts a
  // rank's share again over tp.
  const int64_t c = shape.cp;
  if (c > 1 && seq_len % (2 * c) != 0)
    throw std::invalid_argument("cp=" + std::to_string(c) + ": context parallel needs seq_len divisible by 2 x cp = " +
                                std::to_string(2 * c) + ", got seq_len " + std::to_string(seq_len));
  if (c > 1 && sequence_parallel && (seq_len / c) % t != 0)
    fail("--sequence-parallel under cp=" + std::to_string(c) + " needs seq_len / cp divisible by tp, got " +
         std::to_string(seq_len / c));
}

void validate_ep(const ModelArgs& a, const MeshShape& shape, int64_t ep) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument("ep=" + std::to_string(ep) + ": " + what); };
  if (ep < 1) fail("the expert-parallel degree must be at least 1");
  if (ep == 1) return;
  if (a.moe_experts == 0) fail("model '" + a.flavor + "' has no experts (use a MoE flavor: tiny_moe, debugmodel_moe)");
  if (shape.dp_shard % ep != 0)
    fail("expert parallel splits dp_shard, and dp_shard " + std::to_string(shape.dp_shard) + " is not divisible by it");
  if (a.moe_experts % ep != 0)
    fail("the " + std::to_string(a.moe_experts) + " experts of model '" + a.flavor + "' are not divisible by it");
  if (shape.cp > 1) fail("expert parallel under cp > 1 is not supported");
}

}  // namespace meshtrain
