#include "distributed/parallel_model.h"

#include <set>

#include "base/faults.h"
#include "distributed/block_bucket.h"
#include "distributed/context_parallel.h"

namespace meshtrain {

torch::Tensor ParallelModel::local_tokens(const torch::Tensor& batch) const {
  return cp::shard_sequence(batch, groups.shape.cp, groups.coord.cp);
}

torch::Tensor ParallelModel::positions(int64_t seq_len) const {
  const int64_t n = groups.shape.cp;
  if (injected(Fault::kCpLocalPositions))
    return torch::arange(seq_len / n, torch::dtype(torch::kLong).device(groups.device));
  return cp::positions(seq_len, n, groups.coord.cp, groups.device);
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

}  // namespace meshtrain
