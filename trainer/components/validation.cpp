#include "components/validation.h"

#include <algorithm>

#include "base/faults.h"
#include "components/device_batch.h"
#include "distributed/pipeline.h"

namespace meshtrain {

Validator::Validator(int64_t freq, int64_t steps, const std::string& corpus, int64_t seq_len, uint64_t seed)
    : freq_(freq), steps_(steps) {
  if (freq_ > 0) held_out_.emplace(load_corpus(corpus), seq_len, seed);
}

std::optional<double> Validator::validate_if_due(int64_t step, ParallelModel& pm, const pp::PipelinePlan& pipeline,
                                                 int64_t global_batch, int64_t accum_steps) const {
  if (!held_out_ || step % freq_ != 0) return std::nullopt;
  torch::NoGradGuard no_grad;
  const MeshGroups& g = pm.groups;
  const int64_t dp_rank = dp_rank_of(g.coord, g.shape), dp_degree = g.shape.dp();
  const int64_t steps = steps_ < 0 ? std::max<int64_t>(1, held_out_->windows_per_epoch() / global_batch) : steps_;
  DataLoader data = *held_out_;  // from its first sample
  auto sum = torch::zeros({}, torch::dtype(torch::kFloat32).device(g.device));
  for (int64_t s = 0; s < steps; ++s, data.advance(global_batch)) {
    for (int64_t micro = 0; micro < accum_steps; ++micro) {
      const DeviceBatch b = to_device(pm, data.micro_batch(global_batch, dp_rank, dp_degree, micro, accum_steps));
      sum += pipeline.stages ? pp::pipeline_forward(pm, *pipeline.stages, pipeline.options, b.inputs, b.targets, b.positions)
                             : pm.loss(pm.model(b.inputs, b.positions), b.targets);
    }
  }
  auto loss = sum / static_cast<double>(steps * accum_steps);
  if (!injected(Fault::kValidationLossLocal)) g.dp_cp->all_reduce_mean(loss);
  return loss.item<double>();
}

}  // namespace meshtrain
