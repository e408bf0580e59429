#include "distributed/grad_norm.h"

#include <cmath>

#include "base/faults.h"

namespace meshtrain {

namespace {
// Squared norms summed per set of sharding groups, then each set over its groups. Every
// rank of a stage holds every set, so the ranks of each group (never wider than a stage)
// issue the same collectives in the same order.
double reduce_grad_norm(const ParallelModel& pm, std::map<std::vector<MeshDim>, torch::Tensor>& partial) {
  for (const auto& l : pm.layouts())  // a set a rank has no gradient for still takes part
    if (!partial.count(l.sharded_over))
      partial[l.sharded_over] = torch::zeros({}, torch::dtype(torch::kFloat64).device(pm.groups.device));
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

}  // namespace meshtrain
