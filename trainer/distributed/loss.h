// The training loss: mean cross-entropy of the model's logits against the targets, in float32.
// Under tensor parallel with --loss-parallel (a TensorParallelConfig option: it also keeps the
// output layer's logits sharded, tensor_parallel.h) it is torchtitan's loss_parallel, computed
// on vocabulary-sharded logits without gathering them.
//
// Promises: the loss is the mean over this rank's own tokens, whatever the layout; data
// parallel divides the summed gradients by dp x cp (data_parallel.cpp, wiring_for), so every
// layout trains on the global mean.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>

#include "contract/placement.h"
#include "distributed/comm.h"
#include "model/model.h"

namespace meshtrain {

// Mean cross-entropy of the model's output [B, T, V or V/tp] against targets [B, T].
using LossFunction = std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& targets)>;

// The loss of `model` (whose output layer's layout `layout_of` holds) under `groups`' mesh.
LossFunction loss_function(Transformer& model, MeshGroups& groups, bool loss_parallel,
                           const std::map<std::string, const ParamLayout*>& layout_of);

}  // namespace meshtrain
