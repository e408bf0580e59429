#include "distributed/expert_parallel.h"

#include <numeric>
#include <vector>

#include "base/faults.h"
#include "base/options.h"
#include "distributed/mappings.h"

namespace meshtrain {

void add_options(CLI::App& cmd, ExpertParallelConfig& c) {
  cmd.add_option("--ep", c.degree,
                 "Expert parallel degree (MoE flavors): the routed experts are split over this many consecutive "
                 "dp_shard ranks, and tokens travel to their experts by all-to-all; it must divide dp_shard")
      ->capture_default_str();
}

namespace {

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
  const auto got_t =
      ep.all_to_all_dim0(sent_counts, std::vector<int64_t>(n, held), std::vector<int64_t>(n, held)).cpu();
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
  const auto back = gather_rows(out, unperm, perm);                            // by source rank again
  return ep::exchange_tokens(back, ep, recv_rows, send_rows);
}

}  // namespace

void apply_ep(Transformer& model, Comm& ep) {
  for (int64_t id : model->layer_ids())
    if (auto moe = model->block(id)->moe)
      moe->route = [&ep, experts = moe->experts](const torch::Tensor& sorted, const torch::Tensor& counts) mutable {
        return route_to_experts(sorted, counts, ep, experts);
      };
}

}  // namespace meshtrain
