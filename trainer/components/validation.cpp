#include "components/validation.h"

#include <algorithm>

#include "base/faults.h"
#include "base/options.h"
#include "components/device_batch.h"
#include "distributed/pipeline.h"

namespace meshtrain {

void add_options(CLI::App& cmd, ValidationConfig& c) {
  cmd.add_option("--validation.freq", c.freq,
                 "Every N steps, the mean loss on held-out text (metrics.jsonl's validation_loss; 0: never)")
      ->capture_default_str();
  cmd.add_option("--validation.steps", c.steps,
                 "Global batches of held-out text per validation (-1: the whole validation corpus)")
      ->capture_default_str();
  cmd.add_option("--validation.corpus", c.corpus, "Held-out text; documents separated by blank lines")
      ->capture_default_str();
}

Validator::Validator(const ValidationConfig& config, int64_t seq_len, uint64_t seed)
    : freq_(config.freq), steps_(config.steps) {
  if (freq_ < 0) throw std::invalid_argument("--validation.freq must be >= 0");
  if (steps_ == 0 || steps_ < -1)
    throw std::invalid_argument("--validation.steps must be >= 1, or -1 for the whole validation corpus");
  if (freq_ > 0) held_out_.emplace(load_corpus(config.corpus), seq_len, seed);
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
      sum += pipeline.stages
                 ? pp::pipeline_forward(pm, *pipeline.stages, pipeline.options, b.inputs, b.targets, b.positions)
                 : pm.loss(pm.model(b.inputs, b.positions), b.targets);
    }
  }
  auto loss = sum / static_cast<double>(steps * accum_steps);
  if (!injected(Fault::kValidationLossLocal)) g.dp_cp->all_reduce_mean(loss);
  return loss.item<double>();
}

}  // namespace meshtrain
