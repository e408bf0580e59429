#include "distributed/digests.h"

namespace meshtrain {

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
    out[names[i]] = {table[static_cast<int64_t>(i)][0].item<double>(),
                     table[static_cast<int64_t>(i)][1].item<double>()};
  return out;
}

}  // namespace meshtrain
