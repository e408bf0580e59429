// The global L2 norm of all gradients, which clipping and metrics.jsonl's grad_norm use: each
// piece's squared norm summed over the groups it is sharded across (its layout's sharded_over),
// then over pipeline stages.
//
// Promises: no shard and no replica is counted twice, so every layout gives the single-rank
// norm up to reduction order; both ways below are collective, called on every rank in the
// same order, and give the same number for the same gradients.
#pragma once

#include <torch/torch.h>

#include <map>
#include <vector>

#include "distributed/parallel_model.h"

namespace meshtrain {

// The norm of every parameter's gradient, when all of them exist (after backward).
double global_grad_norm(const ParallelModel& pm);

// The same norm accumulated piece by piece, for gradients that do not all exist at once
// (the optimizer in backward frees each as soon as it has stepped): add() each parameter's
// gradient before it goes, then norm() once per step, on every rank.
class GradNormAccumulator {
 public:
  explicit GradNormAccumulator(const ParallelModel& pm);
  void add(const torch::Tensor& param);  // a registered parameter with its .grad()
  double norm();                         // collective; resets the sums
 private:
  const ParallelModel& pm_;
  std::map<const c10::TensorImpl*, const ParamLayout*> layout_of_;
  std::map<std::vector<MeshDim>, torch::Tensor> partial_;
};

}  // namespace meshtrain
