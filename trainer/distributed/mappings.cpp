#include "distributed/mappings.h"

#include "base/faults.h"

namespace meshtrain::tp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd contexts hold plain values; the group outlives every step.
void save_comm(AutogradContext* ctx, Comm& c) { ctx->saved_data["comm"] = reinterpret_cast<int64_t>(&c); }
Comm& saved_comm(AutogradContext* ctx) { return *reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt()); }

torch::Tensor all_gather_along(Comm& c, const torch::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  return c.all_gather_dim0(x.movedim(dim, 0).contiguous(), sizes).movedim(0, dim).contiguous();
}

torch::Tensor reduce_scatter_along(Comm& c, const torch::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  return c.reduce_scatter_sum_dim0(x.movedim(dim, 0).contiguous(), sizes).movedim(0, dim).contiguous();
}

torch::Tensor all_reduced(Comm& c, const torch::Tensor& x) {
  auto y = x.clone();
  c.all_reduce_sum(y);
  return y;
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* c) {
    save_comm(ctx, *c);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(saved_comm(ctx), g[0]), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, Comm* c) {
    return injected(Fault::kTpMissingAllReduce) ? x.clone() : all_reduced(*c, x);
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

struct GatherFromTp : torch::autograd::Function<GatherFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* c, int64_t dim,
                               std::vector<int64_t> sizes) {
    save_comm(ctx, *c);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = sizes;
    return all_gather_along(*c, x, dim, sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto dim = ctx->saved_data["dim"].toInt();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    return {reduce_scatter_along(saved_comm(ctx), g[0], dim, sizes), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ReduceScatterToTp : torch::autograd::Function<ReduceScatterToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* c, int64_t dim,
                               std::vector<int64_t> sizes) {
    save_comm(ctx, *c);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = sizes;
    return reduce_scatter_along(*c, x, dim, sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto dim = ctx->saved_data["dim"].toInt();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    return {all_gather_along(saved_comm(ctx), g[0], dim, sizes), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct GatherReplicatedFromTp : torch::autograd::Function<GatherReplicatedFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* c, int64_t dim,
                               std::vector<int64_t> sizes) {
    int64_t start = 0;
    for (int i = 0; i < c->rank(); ++i) start += sizes[i];
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["start"] = start;
    ctx->saved_data["length"] = sizes[c->rank()];
    return all_gather_along(*c, x, dim, sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto piece = g[0].narrow(ctx->saved_data["dim"].toInt(), ctx->saved_data["start"].toInt(),
                             ctx->saved_data["length"].toInt());
    return {piece.contiguous(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets, Comm* c,
                               int64_t vocab_start) {
    const int64_t local_vocab = logits.size(1);
    // Subtract the global max for stability.
    auto max = std::get<0>(logits.max(1));  // [N]
    c->all_reduce_max(max);
    auto shifted = logits - max.unsqueeze(1);  // [N, Vl]
    // The target's logit lives on exactly one rank.
    auto local_target = targets - vocab_start;
    auto mine = (local_target >= 0) & (local_target < local_vocab);  // [N]
    auto safe_target = local_target.clamp(0, std::max<int64_t>(local_vocab - 1, 0));
    auto target_logit = shifted.gather(1, safe_target.unsqueeze(1)).squeeze(1) * mine;
    c->all_reduce_sum(target_logit);
    auto exp = shifted.exp();
    auto sum_exp = exp.sum(1);
    c->all_reduce_sum(sum_exp);
    auto loss = (sum_exp.log() - target_logit).mean();
    ctx->save_for_backward({exp / sum_exp.unsqueeze(1), safe_target, mine});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    auto grad = saved[0].clone();  // softmax [N, Vl]
    const auto& safe_target = saved[1];
    const auto& mine = saved[2];
    grad.scatter_add_(1, safe_target.unsqueeze(1), -mine.to(grad.scalar_type()).unsqueeze(1));
    grad.mul_(g[0] / grad.size(0));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, Comm& c) { return c.size() == 1 ? x : CopyToTp::apply(x, &c); }

torch::Tensor reduce_from_tp(const torch::Tensor& x, Comm& c) { return c.size() == 1 ? x : ReduceFromTp::apply(x, &c); }

torch::Tensor gather_from_tp(const torch::Tensor& x, Comm& c, int64_t dim, const std::vector<int64_t>& sizes) {
  return c.size() == 1 ? x : GatherFromTp::apply(x, &c, dim, sizes);
}

torch::Tensor reduce_scatter_to_tp(const torch::Tensor& x, Comm& c, int64_t dim, const std::vector<int64_t>& sizes) {
  return c.size() == 1 ? x : ReduceScatterToTp::apply(x, &c, dim, sizes);
}

torch::Tensor gather_replicated_from_tp(const torch::Tensor& x, Comm& c, int64_t dim,
                                        const std::vector<int64_t>& sizes) {
  return c.size() == 1 ? x : GatherReplicatedFromTp::apply(x, &c, dim, sizes);
}

torch::Tensor masked_embedding(const torch::Tensor& ids, const torch::Tensor& weight, int64_t vocab_start) {
  const int64_t rows = weight.size(0);
  auto local = ids - vocab_start;
  auto mine = (local >= 0) & (local < rows);
  auto out = torch::embedding(weight, local.clamp(0, std::max<int64_t>(rows - 1, 0)));
  return out * mine.unsqueeze(-1).to(out.scalar_type());
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, Comm& c,
                                           int64_t vocab_start) {
  return VocabParallelCrossEntropy::apply(logits, targets, &c, vocab_start);
}

}  // namespace meshtrain::tp

namespace meshtrain::cp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct PassToNext : torch::autograd::Function<PassToNext> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* c) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(c);
    const int n = c->size(), r = c->rank();
    return c->send_recv(x, (r + 1) % n, (r + n - 1) % n);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto* c = reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
    const int n = c->size(), r = c->rank();
    return {c->send_recv(g[0], (r + n - 1) % n, (r + 1) % n), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor all_gather_sequence(const torch::Tensor& x, Comm& cp, int64_t dim) {
  return tp::gather_from_tp(x, cp, dim, std::vector<int64_t>(cp.size(), x.size(dim)));
}

torch::Tensor pass_to_next(const torch::Tensor& x, Comm& cp) {
  if (cp.size() == 1) return x;
  return PassToNext::apply(x, &cp);
}

}  // namespace meshtrain::cp

namespace meshtrain::ep {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ExchangeTokens : torch::autograd::Function<ExchangeTokens> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* c, std::vector<int64_t> send_rows,
                               std::vector<int64_t> recv_rows) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(c);
    ctx->saved_data["send_rows"] = send_rows;
    ctx->saved_data["recv_rows"] = recv_rows;
    return c->all_to_all_dim0(x, send_rows, recv_rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto* c = reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
    const auto send_rows = ctx->saved_data["send_rows"].toIntVector();
    const auto recv_rows = ctx->saved_data["recv_rows"].toIntVector();
    return {c->all_to_all_dim0(g[0], recv_rows, send_rows), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor exchange_tokens(const torch::Tensor& x, Comm& ep, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows) {
  if (ep.size() == 1) return x;
  return ExchangeTokens::apply(x, &ep, send_rows, recv_rows);
}

}  // namespace meshtrain::ep
