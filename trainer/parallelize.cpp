#include "parallelize.h"

#include <cmath>
#include <stdexcept>

namespace meshtrain {

namespace {

// SimpleFSDP's ReplicateComputation for one parameter: forward turns this rank's piece
// into the full tensor (all-gather over dp_shard, cast to param_dtype); backward turns
// the full gradient into this rank's piece of the mean gradient (reduce-scatter over
// dp_shard, all-reduce over dp_replicate, divide by the dp degree, in reduce_dtype).
struct ReplicateComputation : torch::autograd::Function<ReplicateComputation> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& piece,
                               const ParamLayout* layout) {
    // The layout lives as long as the ParallelModel; contexts hold plain values only.
    ctx->saved_data["layout"] = reinterpret_cast<int64_t>(layout);
    ctx->saved_data["dtype"] = static_cast<int64_t>(piece.scalar_type());
    return layout->shard_group->all_gather_dim0(piece.to(layout->param_dtype), layout->shard_rows);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* layout = reinterpret_cast<const ParamLayout*>(ctx->saved_data["layout"].toInt());
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    auto grad = grads[0].to(layout->reduce_dtype);
    grad = layout->shard_group->reduce_scatter_sum_dim0(grad, layout->shard_rows);
    layout->replicate_group->all_reduce_sum(grad);
    grad.div_(layout->grad_divisor);
    return {grad.to(dtype), torch::Tensor()};
  }
};

}  // namespace

ReshardAfterForward parse_reshard(const std::string& s) {
  if (s == "default") return ReshardAfterForward::kDefault;
  if (s == "always") return ReshardAfterForward::kAlways;
  if (s == "never") return ReshardAfterForward::kNever;
  throw std::invalid_argument("unknown --reshard-after-forward '" + s + "' (known: default, always, never)");
}

ActivationCheckpoint parse_ac(const std::string& s) {
  if (s == "none") return ActivationCheckpoint::kNone;
  if (s == "full") return ActivationCheckpoint::kFull;
  if (s == "selective") return ActivationCheckpoint::kSelective;
  throw std::invalid_argument("unknown --ac '" + s + "' (known: none, full, selective)");
}

torch::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32") return torch::kFloat32;
  if (s == "bfloat16") return torch::kBFloat16;
  throw std::invalid_argument("unknown dtype '" + s + "' (known: float32, bfloat16)");
}

DataParallelMode data_parallel_mode(const MeshShape& s) {
  if (s.dp_replicate > 1 && s.dp_shard > 1) return DataParallelMode::kHybridShard;
  if (s.dp_replicate > 1) return DataParallelMode::kReplicate;
  if (s.dp_shard > 1) return DataParallelMode::kFullyShard;
  return DataParallelMode::kNone;
}

std::string to_string(DataParallelMode mode) {
  switch (mode) {
    case DataParallelMode::kNone: return "none";
    case DataParallelMode::kReplicate: return "replicate (DDP)";
    case DataParallelMode::kFullyShard: return "fully_shard (FSDP)";
    case DataParallelMode::kHybridShard: return "hybrid_shard (HSDP)";
  }
  return "?";
}

std::unique_ptr<ParallelModel> parallelize(Transformer model, MeshGroups& groups, const ParallelConfig& config) {
  const DataParallelMode mode = data_parallel_mode(groups.shape);
  const bool sharded = mode == DataParallelMode::kFullyShard || mode == DataParallelMode::kHybridShard;

  // Activation checkpointing, and reshard-after-forward, which frees a block's gathered
  // weights by recomputing the block (gathering again) in backward.
  const bool reshard = sharded && config.reshard_after_forward != ReshardAfterForward::kNever;
  int64_t layer_id = 0;
  for (const auto& layer : *model->layers) {
    auto* block = layer->as<TransformerBlock>();
    const bool selected = config.ac == ActivationCheckpoint::kFull ||
                          (config.ac == ActivationCheckpoint::kSelective && (layer_id + 1) % 2 == 0);
    block->recompute = selected || reshard;
    ++layer_id;
  }

  // Data parallel: every parameter becomes its dp_shard piece (placement algebra), and
  // its module computes with ReplicateComputation(piece).
  std::vector<ParamLayout> layouts;
  for (const auto& item : model->named_parameters()) {
    ParamLayout l;
    l.name = item.key();
    l.global_shape = item.value().sizes().vec();
    if (sharded) l.splits.push_back(Split{0, groups.shape.dp_shard, groups.coord.dp_shard});
    l.chunk = local_chunk(l.global_shape, l.splits);
    if (sharded) l.sharded_over.push_back(MeshDim::kDpShard);
    // Under replicate, dp_shard has one rank: the gather is the identity.
    l.shard_rows = shard_sizes(l.global_shape[0], groups.shape.dp_shard);
    l.shard_group = groups.dp_shard.get();
    l.replicate_group = groups.dp_replicate.get();
    l.grad_divisor = static_cast<double>(groups.shape.dp());
    l.param_dtype = config.param_dtype;
    l.reduce_dtype = config.reduce_dtype;
    layouts.push_back(std::move(l));
  }
  auto pm = std::make_unique<ParallelModel>(model, groups, std::move(layouts), mode);
  std::map<std::string, const ParamLayout*> by_name;
  for (const auto& l : pm->layouts()) by_name[l.name] = &l;

  torch::NoGradGuard no_grad;
  for (const auto& item : model->named_modules()) {
    auto* wm = dynamic_cast<WeightModule*>(item.value().get());
    if (wm == nullptr) continue;
    const ParamLayout* layout = by_name.at(item.key() + ".weight");
    if (mode == DataParallelMode::kNone && config.param_dtype == torch::kFloat32) continue;
    if (sharded) {
      // Keep only this rank's rows between steps: the full tensor is dropped here.
      auto piece = wm->weight.narrow(0, layout->chunk.offsets[0], layout->chunk.sizes[0]).clone();
      wm->weight.set_data(piece);
    }
    wm->parametrization = [layout](const torch::Tensor& piece) {
      return ReplicateComputation::apply(piece, layout);
    };
  }
  return pm;
}

double global_grad_norm(const ParallelModel& pm) {
  // Sum squared norms per set of sharding groups, then reduce each set over its groups.
  std::map<std::vector<MeshDim>, torch::Tensor> partial;  // ordered alike on every rank
  for (const auto& l : pm.layouts()) {
    auto p = pm.model->named_parameters()[l.name];
    // Every rank adds every key, so all issue the same collectives in the same order.
    auto sq = p.grad().defined() ? p.grad().to(torch::kFloat64).pow(2).sum()
                                 : torch::zeros({}, p.options().dtype(torch::kFloat64));
    auto& acc = partial[l.sharded_over];
    acc = acc.defined() ? acc + sq : sq;
  }
  double total = 0.0;
  for (auto& [dims, sum] : partial) {
    for (MeshDim d : dims) pm.groups.along(d).all_reduce_sum(sum);
    total += sum.item<double>();
  }
  return std::sqrt(total);
}

std::map<std::string, std::pair<double, double>> global_sums(const ParallelModel& pm) {
  std::map<std::string, std::pair<double, double>> out;
  for (const auto& l : pm.layouts()) {
    auto p = pm.model->named_parameters()[l.name].detach().to(torch::kFloat64);
    auto sums = torch::stack({p.sum(), p.pow(2).sum()});
    for (MeshDim d : l.sharded_over) pm.groups.along(d).all_reduce_sum(sums);
    sums = sums.cpu();
    out[l.name] = {sums[0].item<double>(), sums[1].item<double>()};
  }
  return out;
}

}  // namespace meshtrain
