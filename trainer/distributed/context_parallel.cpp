#include "distributed/context_parallel.h"

#include "base/options.h"
#include "distributed/mappings.h"
#include "contract/placement.h"

#include <cmath>
#include <stdexcept>

namespace meshtrain::cp {

Rotate parse_rotate(const std::string& s) {
  if (s == "allgather") return Rotate::kAllGather;
  if (s == "alltoall") return Rotate::kAllToAll;
  throw std::invalid_argument("unknown --cp-rotate '" + s + "' (known: allgather, alltoall)");
}

void add_options(CLI::App& cmd, ContextParallelConfig& c) {
  add_parsed_option(cmd, "--cp-rotate", c.rotate, parse_rotate, "allgather",
                    "CP: how attention reaches other ranks' keys and values: allgather (all at once) | alltoall "
                    "(passed around the ring, one neighbour exchange per step)");
}

torch::Tensor positions(int64_t seq_len, int64_t n, int64_t i, torch::Device device) {
  const auto options = torch::dtype(torch::kLong).device(device);
  if (n == 1) return torch::arange(seq_len, options);
  if (seq_len % (2 * n) != 0)
    throw std::invalid_argument("context parallel over " + std::to_string(n) + " ranks needs seq_len divisible by " +
                                std::to_string(2 * n) + ", got " + std::to_string(seq_len));
  // Chunks i and 2n-1-i of 2n, as the placement algebra cuts an extent.
  std::vector<torch::Tensor> held;
  for (int64_t c : {i, 2 * n - 1 - i}) {
    const Extent e = shard_extent(seq_len, 2 * n, c);
    held.push_back(torch::arange(e.offset, e.offset + e.size, options));
  }
  return torch::cat(held);
}

torch::Tensor shard_sequence(const torch::Tensor& x, int64_t n, int64_t i) {
  if (n == 1) return x;
  return x.index_select(1, positions(x.size(1), n, i, x.device()));
}

namespace {

// Attention of queries over one block of keys: the softmax-weighted values and the
// log-sum-exp of the scores, per query. q: [B, H, Tq, Dh]; k, v: [B, H, Tk, Dh],
// widened; a key is visible to a query at the same or a later position.
struct Partial {
  torch::Tensor out;  // [B, H, Tq, Dh]
  torch::Tensor lse;  // [B, H, Tq]
};

Partial attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& q_pos,
               const torch::Tensor& k_pos) {
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));  // [B, H, Tq, Tk]
  auto hidden = q_pos.unsqueeze(1) < k_pos.unsqueeze(0);                                             // [Tq, Tk]
  // A finite floor rather than -inf: a block in which a query sees nothing (a later chunk
  // in the ring) must still give finite numbers; its weight below is exp(-1e30) = 0.
  scores = scores.masked_fill(hidden, -1e30);
  auto lse = torch::logsumexp(scores, -1);
  return {torch::matmul(torch::exp(scores - lse.unsqueeze(-1)), v), lse};
}

// Softmax and its sums in float32 even for bf16 activations (float64 stays float64).
torch::Tensor widened(const torch::Tensor& x) { return x.to(at::promote_types(x.scalar_type(), torch::kFloat32)); }

// [B, T, K, Dh] -> [B, H, T, Dh], each kv head repeated for its H/K query heads.
torch::Tensor heads_first(const torch::Tensor& x, int64_t n_rep) {
  auto y = widened(x.transpose(1, 2));
  return n_rep == 1 ? y : y.repeat_interleave(n_rep, 1);
}

}  // namespace

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Comm& cp,
                        Rotate rotate) {
  const int64_t n = cp.size(), rank = cp.rank();
  const int64_t seq_len = q.size(1) * n;
  const int64_t n_rep = q.size(2) / k.size(2);
  const auto device = q.device();
  auto q_heads = widened(q.transpose(1, 2));  // [B, H, T/n, Dh]
  auto q_pos = positions(seq_len, n, rank, device);
  torch::Tensor out;
  if (rotate == Rotate::kAllGather) {
    auto k_all = all_gather_sequence(k, cp, 1);  // [B, T, K, Dh], rank by rank
    auto v_all = all_gather_sequence(v, cp, 1);
    std::vector<torch::Tensor> k_pos;
    for (int64_t j = 0; j < n; ++j) k_pos.push_back(positions(seq_len, n, j, device));
    out = attend(q_heads, heads_first(k_all, n_rep), heads_first(v_all, n_rep), q_pos, torch::cat(k_pos)).out;
  } else {
    // Step s holds the keys of rank (rank - s) mod n. The blocks' results combine by their
    // log-sum-exp weights, which is the softmax over every key at once.
    // K and V travel as one tensor: one exchange per step, and one order for their gradients.
    std::vector<torch::Tensor> outs, lses;
    auto kv = torch::stack({k, v});  // [2, B, T/n, K, Dh]
    for (int64_t s = 0; s < n; ++s) {
      const int64_t source = (rank - s + n) % n;
      auto part = attend(q_heads, heads_first(kv[0], n_rep), heads_first(kv[1], n_rep), q_pos,
                         positions(seq_len, n, source, device));
      outs.push_back(part.out);
      lses.push_back(part.lse);
      if (s + 1 < n) kv = pass_to_next(kv, cp);
    }
    auto lse = torch::logsumexp(torch::stack(lses), 0);  // [B, H, T/n]
    out = torch::zeros_like(outs[0]);
    for (size_t s = 0; s < outs.size(); ++s) out = out + torch::exp(lses[s] - lse).unsqueeze(-1) * outs[s];
  }
  return out.transpose(1, 2).to(q.scalar_type());  // [B, T/n, H, Dh]
}

void apply_cp(Transformer& model, Comm& cp_group, Rotate rotate) {
  for (int64_t id : model->layer_ids())
    model->block(id)->attention->core = [&cp_group, rotate](const torch::Tensor& q, const torch::Tensor& k,
                                                            const torch::Tensor& v) {
      return cp::attention(q, k, v, cp_group, rotate);
    };
}

}  // namespace meshtrain::cp
