#include "distributed/data_parallel.h"

#include <stdexcept>

#include "base/dtype.h"
#include "base/faults.h"
#include "base/options.h"
#include "contract/model_names.h"
#include "distributed/block_bucket.h"
#include "distributed/offload.h"

namespace meshtrain {
using namespace contract::model_names;  // the buckets name the model's weights

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

ReshardAfterForward parse_reshard(const std::string& s) {
  if (s == "default") return ReshardAfterForward::kDefault;
  if (s == "always") return ReshardAfterForward::kAlways;
  if (s == "never") return ReshardAfterForward::kNever;
  throw std::invalid_argument("unknown --reshard-after-forward '" + s + "' (known: default, always, never)");
}

Bucketing parse_bucketing(const std::string& s) {
  if (s == "none") return Bucketing::kNone;
  if (s == "block") return Bucketing::kBlock;
  if (s == "auto") return Bucketing::kAuto;
  throw std::invalid_argument("unknown --fsdp.bucketing '" + s + "' (known: none, block, auto)");
}

void add_options(CLI::App& cmd, DataParallelConfig& c) {
  add_parsed_option(cmd, "--reshard-after-forward", c.reshard_after_forward, parse_reshard, "default",
                    "FSDP/HSDP: free a block's gathered weights after its forward and gather them again just "
                    "before its backward: default (every block but the last) | always | never");
  add_parsed_option(cmd, "--fsdp.bucketing", c.bucketing, parse_bucketing, "block",
                    "How data-parallel weights share collectives: none (one all-gather and reduce-scatter per "
                    "weight) | block (per transformer block) | auto (consecutive blocks up to --fsdp.bucket-mb)");
  cmd.add_option("--fsdp.bucket-mb", c.bucket_mb, "auto bucketing: a bucket grows to at least this many MiB")
      ->capture_default_str();
  cmd.add_flag("--fsdp.cpu-offload", c.cpu_offload,
               "Keep each rank's parameter pieces, their gradients and AdamW state in host memory (FSDP2's "
               "CPUOffloadPolicy); they travel to the device to be gathered and computed with. The identity on the "
               "CPU build");
  add_parsed_option(cmd, "--param-dtype", c.param_dtype, parse_dtype, "float32",
                    "Mixed precision: dtype the forward computes with (float32|bfloat16)");
  add_parsed_option(cmd, "--reduce-dtype", c.reduce_dtype, parse_dtype, "float32",
                    "Mixed precision: dtype gradients are reduced in (float32|bfloat16)");
}

namespace {

// This rank's piece `c` of the full tensor `t`, in storage of its own (the full one can go).
torch::Tensor slice(const torch::Tensor& t, const Chunk& c) {
  auto out = t;
  for (size_t d = 0; d < c.sizes.size(); ++d) {
    // An empty piece's offset is the global extent: narrow(.., N, 0) is valid.
    out = out.narrow(static_cast<int64_t>(d), c.offsets[d], c.sizes[d]);
  }
  return out.clone();
}

// `first`, then `second`; either may be empty.
Transform then(Transform first, Transform second) {
  if (!first) return second;
  if (!second) return first;
  return [first, second](const torch::Tensor& x) { return second(first(x)); };
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
      for (auto [name, linear] : {std::pair{kWq, block->attention->wq},
                                  {kWk, block->attention->wk},
                                  {kWv, block->attention->wv},
                                  {kWo, block->attention->wo}})
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
      units.push_back(
          {{path({kNorm, kWeight}), path({kOutput, kWeight})}, &model->norm->hooks, &model->output->hooks, head, head});
    }
  }
  units.insert(units.end(), expert_units.begin(), expert_units.end());
  return units;
}

// What a bucket holding `weight` talks over: expert-parallel experts gather over ep_shard,
// everything else over dp_shard x cp.
DataParallelWiring wiring_for(const std::string& weight, MeshGroups& groups, const DataParallelConfig& config) {
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
                                                       MeshGroups& groups, const DataParallelConfig& config,
                                                       ActivationCheckpoint ac) {
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
      options.recomputed = recomputed(ac, u.first_layer);
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

}  // namespace

// Where ranks talk, the weights travel in buckets (bucket_units: per block by default), in
// forward order; alone, a weight is only cast.
std::vector<std::shared_ptr<BlockBucket>> apply_fsdp(Transformer& model, MeshGroups& groups,
                                                     const DataParallelConfig& config, ActivationCheckpoint ac,
                                                     const std::map<std::string, const ParamLayout*>& layout_of,
                                                     const std::map<std::string, Transform>& weight_tp) {
  const MeshShape& shape = groups.shape;
  const bool needs_dp_function = data_parallel_mode(shape) != DataParallelMode::kNone ||
                                 config.param_dtype != torch::kFloat32 || config.cpu_offload;
  const bool talks = shape.dp_shard_cp() > 1 || shape.dp_replicate > 1;
  std::vector<BucketUnit> units;
  if (needs_dp_function && talks)
    units = bucket_units(
        model, config.bucketing, static_cast<int64_t>(config.bucket_mb * (1 << 20)), groups.ep_degree > 1,
        [ac](int64_t id) { return recomputed(ac, id); }, layout_of, config.param_dtype);
  const auto buckets = make_buckets(units, model, groups, config, ac);
  std::map<std::string, std::shared_ptr<BlockBucket>> bucket_of;  // weight fqn -> its bucket
  for (size_t i = 0; i < units.size(); ++i)
    for (const auto& w : units[i].weights) bucket_of[w] = buckets[i];
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
  return buckets;
}

}  // namespace meshtrain
