#include "distributed/parallelize.h"

#include "base/faults.h"
#include "contract/model_names.h"
#include "distributed/block_bucket.h"
#include "distributed/mappings.h"
#include "distributed/offload.h"

#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>

namespace meshtrain {
using namespace contract::model_names;  // the TP plan and the buckets name the model's weights

DataParallelMode data_parallel_mode(const MeshShape& s) {
  if (s.dp_replicate > 1 && s.dp_shard_cp() > 1) return DataParallelMode::kHybridShard;
  if (s.dp_replicate > 1) return DataParallelMode::kReplicate;
  if (s.dp_shard_cp() > 1) return DataParallelMode::kFullyShard;
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


namespace {

bool is_routed_expert(const std::string& fqn) { return goes_through(fqn, path({kMoe, kExperts})); }

// torchtitan's Llama TP plan, written once. In each region of a block (Megatron's column- then
// row-parallel pair) an activation enters at `entry`'s input replicated (under sequence parallel:
// gathered from its sequence shards), the column-parallel weights split their output features,
// the row-parallel ones their input features, and the partial sums leave at `exit`'s output
// (summed; under sequence parallel reduce-scattered to sequence shards). A block holds either
// feed_forward or moe; the MoE's routed experts (torchtitan's ETP) and shared experts leave
// together. The embedding and the output layer split the vocabulary (their rows); norms and
// the MoE router are replicated.
struct TpRegion {
  std::string entry;
  std::vector<std::string> colwise, rowwise;  // weights under `entry`, "<name>.weight"
  std::string exit;
};
const std::vector<TpRegion>& tp_regions() {
  static const std::vector<TpRegion> regions = {
      {kAttention, {kWq, kWk, kWv}, {kWo}, path({kAttention, kWo})},
      {kFeedForward, {kW1, kW3}, {kW2}, path({kFeedForward, kW2})},
      {kMoe,
       {path({kExperts, kW1}), path({kExperts, kW3}), path({kSharedExperts, kW1}), path({kSharedExperts, kW3})},
       {path({kExperts, kW2}), path({kSharedExperts, kW2})},
       kMoe},
  };
  return regions;
}

// The plan's split dimension of a weight (-1: replicated). Output features are dim 0 of a
// linear [out, in] and dim 1 of the routed experts' [E, out, in]; input features the last.
int tp_split_dim(const std::string& fqn) {
  if (goes_through(fqn, path({kEmbedding, kWeight})) || goes_through(fqn, path({kOutput, kWeight}))) return 0;
  const int out_features = is_routed_expert(fqn) ? 1 : 0;
  for (const TpRegion& region : tp_regions()) {
    for (const auto& w : region.colwise)
      if (goes_through(fqn, path({region.entry, w, kWeight}))) return out_features;
    for (const auto& w : region.rowwise)
      if (goes_through(fqn, path({region.entry, w, kWeight}))) return out_features + 1;
  }
  return -1;
}

// The hooks of the module at `module_path` under `block`; none when the block has no such module.
ModuleHooks* hooks_at(TransformerBlockImpl& block, const std::string& module_path) {
  for (const auto& item : block.named_modules("", /*include_self=*/false))
    if (item.key() == module_path)
      if (auto* m = dynamic_cast<HookedModule*>(item.value().get())) return &m->hooks;
  return nullptr;
}

torch::Tensor slice(const torch::Tensor& t, const Chunk& c) {
  auto out = t;
  for (size_t d = 0; d < c.sizes.size(); ++d) {
    // An empty piece's offset is the global extent: narrow(.., N, 0) is valid.
    out = out.narrow(static_cast<int64_t>(d), c.offsets[d], c.sizes[d]);
  }
  return out.clone();
}

using Transform = std::function<torch::Tensor(const torch::Tensor&)>;

Transform then(Transform first, Transform second) {
  if (!first) return second;
  if (!second) return first;
  return [first, second](const torch::Tensor& x) { return second(first(x)); };
}

// torchtitan's apply_tp: hooks that move activations between the layouts the plan implies.
void apply_tp(Transformer& model, MeshGroups& groups, const ParallelConfig& config, int64_t seq_len,
              const std::map<std::string, const ParamLayout*>& layout_of, std::map<std::string, Transform>& weight_tp) {
  Comm& tp = *groups.tp;
  const bool sp = config.sequence_parallel;
  const auto seq_sizes = shard_sizes(seq_len / groups.shape.cp, groups.shape.tp);
  // Where a replicated (or sequence-sharded) activation enters a column-parallel region.
  Transform enter = sp ? Transform([&tp, seq_sizes](const torch::Tensor& x) { return tp::gather_from_tp(x, tp, 1, seq_sizes); })
                       : Transform([&tp](const torch::Tensor& x) { return tp::copy_to_tp(x, tp); });
  // Where a row-parallel region's partial sums leave it.
  Transform leave = sp ? Transform([&tp, seq_sizes](const torch::Tensor& y) {
                           return tp::reduce_scatter_to_tp(y, tp, 1, seq_sizes);
                         })
                       : Transform([&tp](const torch::Tensor& y) { return tp::reduce_from_tp(y, tp); });

  if (model->tok_embeddings) {  // a pipeline stage may not hold it
    const int64_t vocab_start = first_split_start(*layout_of.at(path({kEmbedding, kWeight})));
    model->tok_embeddings->lookup = [vocab_start](const torch::Tensor& ids, const torch::Tensor& w) {
      return tp::masked_embedding(ids, w, vocab_start);
    };
    model->tok_embeddings->hooks.output = leave;
  }
  for (int64_t id : model->layer_ids()) {
    auto block = model->block(id);
    for (const TpRegion& region : tp_regions())
      if (ModuleHooks* entry = hooks_at(*block, region.entry)) {
        entry->input = enter;
        hooks_at(*block, region.exit)->output = leave;
      }
    // Every tp rank routes the same tokens, but the router's output weights the experts'
    // partial sums: its gradient is partial, summed over tp.
    if (block->moe)
      weight_tp[path({layer(id), kMoe, kRouter, kWeight})] = [&tp](const torch::Tensor& w) {
        return tp::copy_to_tp(w, tp);
      };
  }
  if (model->output) {
    model->output->hooks.input = enter;
    const ParamLayout& out = *layout_of.at(path({kOutput, kWeight}));
    const auto vocab_sizes = shard_sizes(out.global_shape[0], groups.shape.tp);
    if (!config.loss_parallel)
      model->output->hooks.output = [&tp, vocab_sizes](const torch::Tensor& y) {
        return tp::gather_replicated_from_tp(y, tp, 2, vocab_sizes);
      };
  }
  // Under sequence parallel each rank normalises its own tokens: the replicated norm
  // weights' gradients are partial and must be summed over tp.
  if (sp)
    for (const auto& [name, layout] : layout_of)
      if (tp_split_dim(name) < 0 && !weight_tp.count(name))
        weight_tp[name] = [&tp](const torch::Tensor& w) { return tp::copy_to_tp(w, tp); };
}

// Expert parallel (torchtitan's ExpertParallel): `sorted` [M, D] holds this rank's token
// copies grouped by global expert, counts[e] of them for expert e. Each goes to the ep rank
// holding its expert, the experts there run on what every rank sent them, and the outputs
// come back in `sorted`'s order.
torch::Tensor route_to_experts(const torch::Tensor& sorted, const torch::Tensor& counts_on_device, Comm& ep,
                               GroupedExperts& experts) {
  // The all-to-all's splits are host values: expert parallel reads the counts here.
  const auto counts_t = counts_on_device.to(torch::kCPU, torch::kLong);
  const std::vector<int64_t> counts(counts_t.data_ptr<int64_t>(), counts_t.data_ptr<int64_t>() + counts_t.numel());
  const int64_t n = ep.size(), held = static_cast<int64_t>(counts.size()) / n;
  // First the counts: got[i * held + e] is how many copies rank i sends to local expert e.
  auto sent_counts = counts_on_device.to(torch::kLong);
  const auto got_t = ep.all_to_all_dim0(sent_counts, std::vector<int64_t>(n, held), std::vector<int64_t>(n, held)).cpu();
  const std::vector<int64_t> got(got_t.data_ptr<int64_t>(), got_t.data_ptr<int64_t>() + n * held);
  std::vector<int64_t> send_rows(n, 0), recv_rows(n, 0), local_counts(held, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < held; ++e) {
      send_rows[i] += counts[i * held + e];
      recv_rows[i] += got[i * held + e];
      local_counts[e] += got[i * held + e];
    }
  const auto received = ep::exchange_tokens(sorted, ep, send_rows, recv_rows);  // by source rank, then expert
  // Regroup by local expert (then source rank), as the experts take them.
  std::vector<int64_t> source_start(n, 0);
  for (int64_t i = 1; i < n; ++i) source_start[i] = source_start[i - 1] + recv_rows[i - 1];
  std::vector<int64_t> by_expert;
  for (int64_t e = 0; e < held; ++e)
    for (int64_t i = 0; i < n; ++i) {
      int64_t start = source_start[i];
      for (int64_t f = 0; f < e; ++f) start += got[i * held + f];
      for (int64_t r = 0; r < got[i * held + e]; ++r) by_expert.push_back(start + r);
    }
  if (injected(Fault::kEpTokensNotRegrouped)) std::iota(by_expert.begin(), by_expert.end(), 0);
  const auto perm = torch::tensor(by_expert, torch::kLong).to(sorted.device());
  const auto unperm = inverse_permutation(perm);
  const auto counts_here = torch::tensor(local_counts, torch::kLong).to(sorted.device());
  const auto out = experts(gather_rows(received, perm, unperm), counts_here);  // [sum(recv_rows), D]
  const auto back = gather_rows(out, unperm, perm);                          // by source rank again
  return ep::exchange_tokens(back, ep, recv_rows, send_rows);
}

// One data-parallel bucket: the weights it holds (fqns), the
// hooks it is entered at (input) and left at (output), and the layers it spans (-1: the
// embedding, n_layers: the head), which decide prefetch links and reshard options.
struct BucketUnit {
  std::vector<std::string> weights;
  ModuleHooks* entry;
  ModuleHooks* exit;
  int64_t first_layer;
  int64_t last_layer;
  bool linked = true;
};

// The buckets of --fsdp.bucketing, in forward order:
//  - block (default): the embedding, each transformer block, the head (final norm + output);
//  - none: every weight alone (SimpleFSDP without bucketing: one all-gather per parameter),
//    except the routed experts' three, which the experts read together;
//  - auto: consecutive blocks merged until a bucket holds at least `bucket_bytes` in the
//    compute dtype (the eager counterpart of SimpleFSDP's size-driven auto-bucketing). A
//    recomputed block stays alone: its recompute in backward enters only its own bucket.
// Expert-parallel experts are a bucket of their own in every mode (they gather over ep_shard),
// listed after the others.
std::vector<BucketUnit> bucket_units(Transformer& model, Bucketing mode, int64_t bucket_bytes, bool expert_parallel,
                                     const std::function<bool(int64_t)>& recomputed,
                                     const std::map<std::string, const ParamLayout*>& layout_of,
                                     torch::ScalarType dtype) {
  std::vector<BucketUnit> units, expert_units;
  auto weights_under = [&](const std::string& prefix, bool with_experts) {
    std::vector<std::string> out;
    for (const auto& item : model->named_parameters())
      if (item.key().rfind(prefix, 0) == 0 && (with_experts || !is_routed_expert(item.key())))
        out.push_back(item.key());
    return out;
  };
  auto one_weight = [&](const std::string& module, WeightModule& m, int64_t layer_id) {
    units.push_back({{path({module, kWeight})}, &m.hooks, &m.hooks, layer_id, layer_id});
  };
  if (model->tok_embeddings) one_weight(kEmbedding, *model->tok_embeddings, -1);
  for (int64_t id : model->layer_ids()) {
    auto block = model->block(id);
    const std::string at = layer(id);
    if (mode == Bucketing::kNone) {  // forward order: attention, then feed-forward or MoE
      one_weight(path({at, kAttentionNorm}), *block->attention_norm, id);
      for (auto [name, linear] : {std::pair{kWq, block->attention->wq}, {kWk, block->attention->wk},
                                  {kWv, block->attention->wv}, {kWo, block->attention->wo}})
        one_weight(path({at, kAttention, name}), *linear, id);
      one_weight(path({at, kFfnNorm}), *block->ffn_norm, id);
      if (auto moe = block->moe) {
        one_weight(path({at, kMoe, kRouter}), *moe->router, id);
        if (!expert_parallel)
          units.push_back({weights_under(path({at, kMoe, kExperts}) + ".", true), &moe->experts->hooks,
                           &moe->experts->hooks, id, id});
        auto& shared = moe->shared_experts;
        for (auto [name, linear] : {std::pair{kW1, shared->w1}, {kW3, shared->w3}, {kW2, shared->w2}})
          one_weight(path({at, kMoe, kSharedExperts, name}), *linear, id);
      } else {
        auto& ffn = block->feed_forward;
        for (auto [name, linear] : {std::pair{kW1, ffn->w1}, {kW3, ffn->w3}, {kW2, ffn->w2}})
          one_weight(path({at, kFeedForward, name}), *linear, id);
      }
    } else {
      BucketUnit block_unit{weights_under(at + ".", !expert_parallel), &block->hooks, &block->hooks, id, id};
      auto bytes = [&](const BucketUnit& u) {
        int64_t n = 0;
        for (const auto& w : u.weights) {
          int64_t numel = 1;
          for (int64_t d : layout_of.at(w)->tp_local_shape) numel *= d;
          n += numel * static_cast<int64_t>(c10::elementSize(dtype));
        }
        return n;
      };
      BucketUnit* last = units.empty() ? nullptr : &units.back();
      const bool merge = mode == Bucketing::kAuto && last != nullptr && last->last_layer + 1 == id &&
                         last->first_layer >= 0 && !recomputed(id) && !recomputed(last->first_layer) &&
                         bytes(*last) < bucket_bytes;
      if (merge) {
        last->weights.insert(last->weights.end(), block_unit.weights.begin(), block_unit.weights.end());
        last->exit = &block->hooks;
        last->last_layer = id;
      } else {
        units.push_back(block_unit);
      }
    }
    if (expert_parallel && block->moe) {
      BucketUnit experts{weights_under(path({at, kMoe, kExperts}) + ".", true), &block->moe->experts->hooks,
                         &block->moe->experts->hooks, id, id};
      experts.linked = false;
      expert_units.push_back(experts);
    }
  }
  if (model->output) {
    const int64_t head = model->args.n_layers;
    if (mode == Bucketing::kNone) {
      one_weight(kNorm, *model->norm, head);
      one_weight(kOutput, *model->output, head);
    } else {
      units.push_back({{path({kNorm, kWeight}), path({kOutput, kWeight})}, &model->norm->hooks, &model->output->hooks,
                       head, head});
    }
  }
  units.insert(units.end(), expert_units.begin(), expert_units.end());
  return units;
}

}  // namespace

namespace {

// Every parameter's layout: the TP split first, then FSDP splits the TP-local piece
// (torchtitan's _StridedShard order). The placement algebra turns splits into chunks.
std::vector<ParamLayout> param_layouts(Transformer& model, const MeshGroups& groups) {
  const MeshShape& shape = groups.shape;
  const DataParallelMode mode = data_parallel_mode(shape);
  const bool fsdp = mode == DataParallelMode::kFullyShard || mode == DataParallelMode::kHybridShard;
  std::vector<ParamLayout> layouts;
  for (const auto& item : model->named_parameters()) {
    ParamLayout l;
    l.name = item.key();
    l.global_shape = item.value().sizes().vec();
    const int tp_dim = shape.tp > 1 ? tp_split_dim(l.name) : -1;
    if (tp_dim >= 0) {
      l.splits.push_back(Split{tp_dim, shape.tp, groups.coord.tp});
      l.sharded_over.push_back(MeshDim::kTp);
    }
    if (groups.ep_degree > 1 && is_routed_expert(l.name)) {  // each ep rank holds its experts; FSDP shards them over ep_shard (cp is 1)
      const int64_t ep = groups.ep_degree;
      l.splits.push_back(Split{0, ep, groups.coord.dp_shard % ep});
      l.tp_local_shape = local_chunk(l.global_shape, l.splits).sizes;
      l.splits.push_back(Split{0, shape.dp_shard / ep, groups.coord.dp_shard / ep});
      l.sharded_over.push_back(MeshDim::kDpShard);
      l.shard_rows = shard_sizes(l.tp_local_shape[0], shape.dp_shard / ep);
    } else {
      l.tp_local_shape = local_chunk(l.global_shape, l.splits).sizes;
      if (fsdp) {  // over dp_shard x cp, dp_shard outer (torchtitan's dp_shard_cp)
        l.splits.push_back(Split{0, shape.dp_shard_cp(), groups.coord.dp_shard * shape.cp + groups.coord.cp});
        for (MeshDim d : {MeshDim::kDpShard, MeshDim::kCp})
          if (shape.size(d) > 1) l.sharded_over.push_back(d);
      }
      // Under replicate, dp_shard_cp has one rank: the gather is the identity.
      l.shard_rows = shard_sizes(l.tp_local_shape[0], shape.dp_shard_cp());
    }
    l.chunk = local_chunk(l.global_shape, l.splits);
    layouts.push_back(std::move(l));
  }
  return layouts;
}

// Buffers that are state (the MoE routing bias): replicated, checkpointed like weights.
std::vector<ParamLayout> buffer_layouts(Transformer& model) {
  std::vector<ParamLayout> layouts;
  for (const auto& item : model->named_buffers()) {
    if (!goes_through(item.key(), kExpertBias)) continue;
    ParamLayout l;
    l.name = item.key();
    l.global_shape = item.value().sizes().vec();
    l.tp_local_shape = l.global_shape;
    l.chunk = local_chunk(l.global_shape, {});
    layouts.push_back(std::move(l));
  }
  return layouts;
}

// Mean cross-entropy; under loss parallel (torchtitan's loss_parallel) on the
// vocabulary-sharded logits, without gathering them.
std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss_function(
    Transformer& model, MeshGroups& groups, const ParallelConfig& config,
    const std::map<std::string, const ParamLayout*>& layout_of) {
  if (groups.shape.tp > 1 && config.loss_parallel && model->output) {
    const int64_t vocab_start = first_split_start(*layout_of.at(path({kOutput, kWeight})));
    return [&tp = *groups.tp, vocab_start](const torch::Tensor& logits, const torch::Tensor& targets) {
      return tp::vocab_parallel_cross_entropy(logits.flatten(0, 1).to(torch::kFloat32), targets.flatten(), tp,
                                              vocab_start);
    };
  }
  return [](const torch::Tensor& logits, const torch::Tensor& targets) {
    return torch::cross_entropy_loss(logits.flatten(0, 1).to(torch::kFloat32), targets.flatten());
  };
}

// Context parallel: attention reaches the other cp ranks' keys and values.
void apply_cp(Transformer& model, Comm& cp_group, cp::Rotate rotate) {
  for (int64_t id : model->layer_ids())
    model->block(id)->attention->core = [&cp_group, rotate](const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v) {
      return cp::attention(q, k, v, cp_group, rotate);
    };
}

// Expert parallel: routed tokens travel to the ranks holding their experts.
void apply_ep(Transformer& model, Comm& ep) {
  for (int64_t id : model->layer_ids())
    if (auto moe = model->block(id)->moe)
      moe->route = [&ep, experts = moe->experts](const torch::Tensor& sorted, const torch::Tensor& counts) mutable {
        return route_to_experts(sorted, counts, ep, experts);
      };
}

// Activation checkpointing chooses by global layer id, so a pipeline stage recomputes the
// layers it would without PP.
bool recomputed(ActivationCheckpoint ac, int64_t layer_id) {
  return ac == ActivationCheckpoint::kFull || (ac == ActivationCheckpoint::kSelective && (layer_id + 1) % 2 == 0);
}

// Activation checkpointing: the selected blocks run again in backward.
void apply_ac(Transformer& model, ActivationCheckpoint ac) {
  for (int64_t id : model->layer_ids()) model->block(id)->recompute = recomputed(ac, id);
}

// What a bucket holding `weight` talks over: expert-parallel experts gather over ep_shard,
// everything else over dp_shard x cp.
DataParallelWiring wiring_for(const std::string& weight, MeshGroups& groups, const ParallelConfig& config) {
  DataParallelWiring w;
  w.shard_group = groups.ep_degree > 1 && is_routed_expert(weight) ? groups.ep_shard.get() : groups.dp_shard_cp.get();
  w.replicate_group = groups.dp_replicate.get();
  // Each rank's loss is the mean over its own tokens: dp x cp equal shares of the batch.
  w.grad_divisor = static_cast<double>(groups.shape.dp() * groups.shape.cp);
  w.param_dtype = config.param_dtype;
  w.reduce_dtype = injected(Fault::kReduceInParamDtype) ? config.param_dtype : config.reduce_dtype;
  return w;
}

// One BlockBucket per unit, with its reshard and recompute options. Reshard after forward
// frees a bucket's gathered weights at its exit and gathers them again for its backward; by
// default (torchtitan's) not the last block's, whose backward comes right away, and never the
// embedding's or the head's (FSDP2's root).
std::vector<std::shared_ptr<BlockBucket>> make_buckets(const std::vector<BucketUnit>& units, Transformer& model,
                                                       MeshGroups& groups, const ParallelConfig& config) {
  const MeshShape& shape = groups.shape;
  const DataParallelMode mode = data_parallel_mode(shape);
  const bool fsdp = mode == DataParallelMode::kFullyShard || mode == DataParallelMode::kHybridShard;
  // Under pipeline parallel every forward gathers its own copy of the weights and keeps it
  // until its backward, so by default every block reshards: with 1F1B up to pp microbatches
  // (GPipe: all of them) await their backwards, and each would otherwise hold a full copy.
  const bool last_block_keeps = shape.pp == 1;
  const std::vector<int64_t> layer_ids = model->layer_ids();
  std::vector<std::shared_ptr<BlockBucket>> buckets;
  for (const BucketUnit& u : units) {
    BlockBucket::Options options{false, false, groups.device, wiring_for(u.weights.front(), groups, config)};
    if (u.first_layer >= 0 && u.last_layer < model->args.n_layers) {  // transformer blocks
      const bool keeps = u.last_layer == layer_ids.back() && last_block_keeps;
      options.reshard_after_forward =
          fsdp && (config.reshard_after_forward == ReshardAfterForward::kAlways ||
                   (config.reshard_after_forward == ReshardAfterForward::kDefault && !keeps));
      options.recomputed = recomputed(config.ac, u.first_layer);
    }
    buckets.push_back(std::make_shared<BlockBucket>(options));
  }
  return buckets;
}

// Prefetch follows the model's order within a stretch of consecutive layers; an
// interleaved pipeline's next chunk runs many actions later, and expert-parallel experts
// gather over another group, so neither is linked.
void link_buckets(const std::vector<BucketUnit>& units, const std::vector<std::shared_ptr<BlockBucket>>& buckets) {
  auto adjacent = [&](size_t a, size_t b) {
    return units[a].linked && units[b].linked &&
           (units[a].last_layer == units[b].first_layer || units[a].last_layer + 1 == units[b].first_layer);
  };
  std::vector<size_t> linked;
  for (size_t i = 0; i < units.size(); ++i)
    if (units[i].linked) linked.push_back(i);
  for (size_t k = 0; k < linked.size(); ++k) {
    const size_t i = linked[k];
    BlockBucket* previous = k > 0 && adjacent(linked[k - 1], i) ? buckets[linked[k - 1]].get() : nullptr;
    BlockBucket* next = k + 1 < linked.size() && adjacent(i, linked[k + 1]) ? buckets[linked[k + 1]].get() : nullptr;
    buckets[i]->link(previous, next);
  }
}

// Data parallel (SimpleFSDP): every parameter keeps only its piece, and its module computes
// with the gathered weight, then the TP weight transform if any. Where ranks talk, the
// weights travel in buckets (bucket_units: per block by default), in forward order; alone,
// a weight is only cast.
void apply_fsdp(ParallelModel& pm, const ParallelConfig& config,
                const std::map<std::string, const ParamLayout*>& layout_of,
                const std::map<std::string, Transform>& weight_tp) {
  Transformer& model = pm.model;
  MeshGroups& groups = pm.groups;
  const MeshShape& shape = groups.shape;
  const bool needs_dp_function =
      pm.mode() != DataParallelMode::kNone || config.param_dtype != torch::kFloat32 || config.cpu_offload;
  const bool talks = shape.dp_shard_cp() > 1 || shape.dp_replicate > 1;
  std::vector<BucketUnit> units;
  if (needs_dp_function && talks)
    units = bucket_units(model, config.bucketing, static_cast<int64_t>(config.bucket_mb * (1 << 20)), groups.ep_degree > 1,
                         [&config](int64_t id) { return recomputed(config.ac, id); }, layout_of, config.param_dtype);
  const auto buckets = make_buckets(units, model, groups, config);
  std::map<std::string, std::shared_ptr<BlockBucket>> bucket_of;  // weight fqn -> its bucket
  for (size_t i = 0; i < units.size(); ++i) {
    pm.buckets.push_back(buckets[i]);
    for (const auto& w : units[i].weights) bucket_of[w] = buckets[i];
  }
  link_buckets(units, buckets);
  torch::NoGradGuard no_grad;
  std::map<std::shared_ptr<BlockBucket>, size_t> bucket_size;
  std::shared_ptr<OffloadedWeights> offloaded;
  for (const auto& item : model->named_modules()) {
    auto* wm = dynamic_cast<WeightModule*>(item.value().get());
    if (wm == nullptr) continue;
    const std::string fqn = path({item.key(), kWeight});
    const ParamLayout* layout = layout_of.at(fqn);
    // Keep only this rank's piece between steps: the full tensor is dropped here.
    if (!layout->splits.empty()) wm->weight.set_data(slice(wm->weight, layout->chunk));
    if (config.cpu_offload) wm->weight.set_data(wm->weight.to(torch::kCPU));
    Transform dp;
    if (bucket_of.count(fqn)) {
      auto bucket = bucket_of.at(fqn);
      const size_t index = bucket_size[bucket]++;
      bucket->add(layout, wm->weight);
      dp = [bucket, index](const torch::Tensor&) { return bucket->weight(index); };
    } else if (config.cpu_offload && groups.device.is_cuda()) {  // one rank: streamed from pinned host memory
      if (!offloaded) offloaded = std::make_shared<OffloadedWeights>(groups.device, config.param_dtype);
      const size_t index = offloaded->add(wm->weight);
      dp = [offloaded, index](const torch::Tensor&) { return offloaded->weight(index); };
    } else if (needs_dp_function) {  // one rank of data parallelism: only the cast (and the copy)
      dp = [dtype = config.param_dtype, device = groups.device](const torch::Tensor& piece) {
        return piece.to(device, dtype);
      };
    }
    wm->parametrization = then(dp, weight_tp.count(fqn) ? weight_tp.at(fqn) : Transform());
  }
  // Each bucket's entry and exit, around what TP already hooked there.
  for (size_t i = 0; i < units.size(); ++i) {
    auto bucket = buckets[i];
    units[i].entry->input = then(Transform([bucket](const torch::Tensor& x) {
                                   bucket->enter();
                                   return x;
                                 }),
                                 units[i].entry->input);
    units[i].exit->output =
        then(units[i].exit->output, Transform([bucket](const torch::Tensor& y) { return bucket->exit(y); }));
  }
}

}  // namespace

// torchtitan's parallelize_llama: TP, then CP, EP and AC, then data parallel, each applied
// to the model in place; the layouts come first because TP and FSDP both read them.
std::unique_ptr<ParallelModel> parallelize(Transformer model, MeshGroups& groups, const ParallelConfig& config,
                                           int64_t seq_len) {
  const MeshShape& shape = groups.shape;
  auto pm = std::make_unique<ParallelModel>(model, groups, param_layouts(model, groups), data_parallel_mode(shape),
                                            buffer_layouts(model));
  std::map<std::string, const ParamLayout*> layout_of;
  for (const auto& l : pm->layouts()) layout_of[l.name] = &l;

  std::map<std::string, Transform> weight_tp;  // what TP does to a full weight before use
  if (shape.tp > 1) apply_tp(model, groups, config, seq_len, layout_of, weight_tp);
  pm->loss = loss_function(model, groups, config, layout_of);
  if (shape.cp > 1) apply_cp(model, *groups.cp, config.cp_rotate);
  if (groups.ep_degree > 1) apply_ep(model, *groups.ep);
  apply_ac(model, config.ac);
  apply_fsdp(*pm, config, layout_of, weight_tp);
  return pm;
}

torch::Tensor ParallelModel::local_tokens(const torch::Tensor& batch) const {
  return cp::shard_sequence(batch, groups.shape.cp, groups.coord.cp);
}

torch::Tensor ParallelModel::positions(int64_t seq_len) const {
  const int64_t n = groups.shape.cp;
  if (injected(Fault::kCpLocalPositions)) return torch::arange(seq_len / n, torch::dtype(torch::kLong).device(groups.device));
  return cp::positions(seq_len, n, groups.coord.cp, groups.device);
}

namespace {
// Squared norms summed per set of sharding groups, then each set over its groups. Every
// rank of a stage holds every set, so the ranks of each group (never wider than a stage)
// issue the same collectives in the same order.
double reduce_grad_norm(const ParallelModel& pm, std::map<std::vector<MeshDim>, torch::Tensor>& partial) {
  for (const auto& l : pm.layouts())  // a set a rank has no gradient for still takes part
    if (!partial.count(l.sharded_over)) partial[l.sharded_over] = torch::zeros({}, torch::dtype(torch::kFloat64).device(pm.groups.device));
  double total = 0.0;
  for (auto& [dims, sum] : partial) {
    sum = sum.to(pm.groups.device);  // gradients may live in host memory (CPU offload)
    if (!injected(Fault::kGradNormLocalShard))
      for (MeshDim d : dims) pm.groups.along(d).all_reduce_sum(sum);
    total += sum.item<double>();
  }
  // Pipeline stages hold disjoint parameters: their sums add up.
  auto stages = torch::full({1}, total, torch::dtype(torch::kFloat64).device(pm.groups.device));
  pm.groups.pp->all_reduce_sum(stages);
  return std::sqrt(stages.item<double>());
}
}  // namespace

double global_grad_norm(const ParallelModel& pm) {
  std::map<std::vector<MeshDim>, std::vector<torch::Tensor>> grads;  // ordered alike on every rank
  for (const auto& l : pm.layouts()) {
    auto p = pm.model->named_parameters()[l.name];
    grads[l.sharded_over].push_back(p.grad().defined() ? p.grad() : torch::zeros({1}, p.options()));
  }
  std::map<std::vector<MeshDim>, torch::Tensor> partial;
  for (const auto& [dims, list] : grads) {
    // One launch per set (a loop of norms took one per tensor); squares summed in float64.
    partial[dims] = torch::stack(at::_foreach_norm(list, 2)).to(torch::kFloat64).square().sum();
  }
  return reduce_grad_norm(pm, partial);
}

GradNormAccumulator::GradNormAccumulator(const ParallelModel& pm) : pm_(pm) {
  const auto params = pm.model->named_parameters();
  for (const auto& l : pm.layouts()) layout_of_[params[l.name].unsafeGetTensorImpl()] = &l;
}

void GradNormAccumulator::add(const torch::Tensor& param) {
  if (!param.grad().defined()) return;
  const auto& dims = layout_of_.at(param.unsafeGetTensorImpl())->sharded_over;
  auto sq = param.grad().detach().to(torch::kFloat64).square().sum();
  auto& sum = partial_[dims];
  sum = sum.defined() ? sum + sq : sq;
}

double GradNormAccumulator::norm() {
  const double n = reduce_grad_norm(pm_, partial_);
  partial_.clear();
  return n;
}

std::vector<torch::Tensor> ParallelModel::on_gradients_ready(
    std::function<void(const std::vector<torch::Tensor>&)> ready) {
  std::set<const c10::TensorImpl*> covered;
  for (auto& bucket : buckets) {
    bucket->on_gradients_ready = ready;
    for (const auto& piece : bucket->pieces()) covered.insert(piece.unsafeGetTensorImpl());
  }
  std::vector<torch::Tensor> rest;
  for (const auto& item : model->named_parameters())
    if (!covered.count(item.value().unsafeGetTensorImpl())) rest.push_back(item.value());
  return rest;
}

std::map<std::string, std::pair<double, double>> global_sums(const ParallelModel& pm,
                                                          const std::vector<std::string>& names) {
  // Row i: (sum, sum of squares) of names[i]; a pipeline stage fills the rows of the
  // parameters it holds and the sum over stages completes the table.
  auto table = torch::zeros({static_cast<int64_t>(names.size()), 2}, torch::kFloat64);
  const auto params = pm.model->named_parameters();
  for (size_t i = 0; i < names.size(); ++i) {
    const ParamLayout* l = nullptr;
    for (const auto& layout : pm.layouts())
      if (layout.name == names[i]) l = &layout;
    if (l == nullptr) continue;
    auto p = params[l->name].detach().to(torch::kFloat64);
    auto sums = torch::stack({p.sum(), p.pow(2).sum()}).to(pm.groups.device);
    for (MeshDim d : l->sharded_over) pm.groups.along(d).all_reduce_sum(sums);
    table[static_cast<int64_t>(i)] = sums.cpu();
  }
  table = table.to(pm.groups.device);
  pm.groups.pp->all_reduce_sum(table);
  table = table.cpu();
  std::map<std::string, std::pair<double, double>> out;
  for (size_t i = 0; i < names.size(); ++i)
    out[names[i]] = {table[static_cast<int64_t>(i)][0].item<double>(), table[static_cast<int64_t>(i)][1].item<double>()};
  return out;
}

}  // namespace meshtrain
