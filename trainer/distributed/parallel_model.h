// A model under a mesh: what parallelize (parallelize.h) returns, and all the loop, the
// pipeline, the checkpoint and the norms need of it. Every parameter holds this rank's piece,
// described by its layout (contract/placement.h), in model order.
//
// Promises: layouts() and buffer_layouts() name every tensor this rank holds of the model's
// state, and nothing else; on_gradients_ready covers every parameter exactly once, in a bucket
// or in what it returns.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "contract/placement.h"
#include "distributed/comm.h"
#include "distributed/data_parallel.h"
#include "distributed/loss.h"
#include "model/model.h"

namespace meshtrain {

class BlockBucket;

// The result of parallelize: the model holding this rank's pieces, and every parameter's layout.
class ParallelModel {
 public:
  ParallelModel(Transformer model, MeshGroups& groups, std::vector<ParamLayout> layouts, DataParallelMode mode,
                std::vector<ParamLayout> buffer_layouts = {})
      : model(std::move(model)),
        groups(groups),
        layouts_(std::move(layouts)),
        buffer_layouts_(std::move(buffer_layouts)),
        mode_(mode) {}
  Transformer model;
  MeshGroups& groups;
  LossFunction loss;  // loss.h
  // What this rank feeds the model of a [B, T] batch (inputs or targets), and those
  // tokens' positions [T / cp] for the model's forward: under context parallel its
  // sequence chunks (context_parallel.h), otherwise the whole batch and 0..T-1.
  torch::Tensor local_tokens(const torch::Tensor& batch) const;
  torch::Tensor positions(int64_t seq_len) const;
  const std::vector<ParamLayout>& layouts() const { return layouts_; }
  // Calls `ready` with a group of parameters as soon as their gradients are final in a step,
  // during backward: each data-parallel bucket's pieces when its reduction lands. Returns
  // the parameters no bucket covers (their gradients are final when backward returns).
  std::vector<torch::Tensor> on_gradients_ready(std::function<void(const std::vector<torch::Tensor>&)> ready);
  std::vector<std::shared_ptr<BlockBucket>> buckets;  // set by parallelize
  // Buffers that are model state (each MoE layer's expert_bias): replicated on every rank
  // of a stage, saved and loaded with the weights, never trained.
  const std::vector<ParamLayout>& buffer_layouts() const { return buffer_layouts_; }
  DataParallelMode mode() const { return mode_; }

 private:
  std::vector<ParamLayout> layouts_;
  std::vector<ParamLayout> buffer_layouts_;
  DataParallelMode mode_;
};

}  // namespace meshtrain
