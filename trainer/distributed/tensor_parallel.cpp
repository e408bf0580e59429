#include "distributed/tensor_parallel.h"

#include <vector>

#include "base/options.h"
#include "contract/model_names.h"
#include "distributed/mappings.h"

namespace meshtrain {
using namespace contract::model_names;  // the TP plan names the model's weights

void add_options(CLI::App& cmd, TensorParallelConfig& c) {
  cmd.add_flag("--loss-parallel", c.loss_parallel,
               "TP: compute the loss on vocabulary-sharded logits without gathering them");
  cmd.add_flag("--sequence-parallel", c.sequence_parallel,
               "TP: shard norms and residual activations along the sequence (seq_len divisible by tp)");
}

namespace {

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

// The hooks of the module at `module_path` under `block`; none when the block has no such module.
ModuleHooks* hooks_at(TransformerBlockImpl& block, const std::string& module_path) {
  for (const auto& item : block.named_modules("", /*include_self=*/false))
    if (item.key() == module_path)
      if (auto* m = dynamic_cast<HookedModule*>(item.value().get())) return &m->hooks;
  return nullptr;
}

}  // namespace

// Output features are dim 0 of a linear [out, in] and dim 1 of the routed experts' [E, out, in];
// input features the last.
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

void apply_tp(Transformer& model, MeshGroups& groups, const TensorParallelConfig& config, int64_t seq_len,
              const std::map<std::string, const ParamLayout*>& layout_of, std::map<std::string, Transform>& weight_tp) {
  Comm& tp = *groups.tp;
  const bool sp = config.sequence_parallel;
  const auto seq_sizes = shard_sizes(seq_len / groups.shape.cp, groups.shape.tp);
  // Where a replicated (or sequence-sharded) activation enters a column-parallel region.
  Transform enter =
      sp ? Transform([&tp, seq_sizes](const torch::Tensor& x) { return tp::gather_from_tp(x, tp, 1, seq_sizes); })
         : Transform([&tp](const torch::Tensor& x) { return tp::copy_to_tp(x, tp); });
  // Where a row-parallel region's partial sums leave it.
  Transform leave =
      sp ? Transform([&tp, seq_sizes](const torch::Tensor& y) { return tp::reduce_scatter_to_tp(y, tp, 1, seq_sizes); })
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

}  // namespace meshtrain
