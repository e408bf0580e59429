#include "distributed/parallelize.h"

#include <map>
#include <vector>

#include "base/options.h"
#include "contract/model_names.h"
#include "contract/placement.h"
#include "distributed/loss.h"

namespace meshtrain {
using namespace contract::model_names;  // the layouts name the model's weights and state buffers

void add_options(CLI::App& cmd, ParallelConfig& c) {
  cmd.add_option("--mesh", c.mesh,
                 "Device mesh pp=P,dp_replicate=R,dp_shard=S,cp=C,tp=T (missing dims 1; dp_shard=-1 fills the "
                 "world). pp>1: pipeline parallel; dp_shard>1: FSDP; dp_replicate>1: DDP; both: HSDP; cp>1: context "
                 "parallel (FSDP over dp_shard x cp); tp>1: tensor parallel")
      ->capture_default_str();
  add_options(cmd, c.tp);
  cp::add_options(cmd, c.cp);
  add_options(cmd, c.ep);
  add_options(cmd, c.ac);
  add_options(cmd, c.dp);
}

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
    if (groups.ep_degree > 1 &&
        is_routed_expert(l.name)) {  // each ep rank holds its experts; FSDP shards them over ep_shard (cp is 1)
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
  if (shape.tp > 1) apply_tp(model, groups, config.tp, seq_len, layout_of, weight_tp);
  pm->loss = loss_function(model, groups, config.tp.loss_parallel, layout_of);
  if (shape.cp > 1) cp::apply_cp(model, *groups.cp, config.cp.rotate);
  if (groups.ep_degree > 1) apply_ep(model, *groups.ep);
  apply_ac(model, config.ac.mode);
  pm->buckets = apply_fsdp(model, groups, config.dp, config.ac.mode, layout_of, weight_tp);
  return pm;
}

}  // namespace meshtrain
