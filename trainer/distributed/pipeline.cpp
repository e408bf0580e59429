#include "distributed/pipeline.h"

#include "base/faults.h"
#include "base/options.h"
#include "distributed/parallel_model.h"

#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace meshtrain::pp {

void add_options(CLI::App& cmd, PipelineConfig& c) {
  cmd.add_option("--pp.schedule", c.schedule, "PP: gpipe | 1f1b | interleaved_1f1b")->capture_default_str();
  cmd.add_option("--pp.microbatches", c.microbatches,
                 "PP: microbatches per (micro-)batch; they must divide the local batch (-1: pp)")
      ->capture_default_str();
  cmd.add_option("--pp.virtual-stages", c.virtual_stages, "PP: stages per pp rank (-1: 2 for interleaved_1f1b, else 1)")
      ->capture_default_str();
  cmd.add_option("--pp.split", c.split,
                 "PP: layers per stage, e.g. 3,2 (one entry per stage; default: as even as possible)");
}

Schedule parse_schedule(const std::string& s) {
  if (s == "gpipe") return Schedule::kGPipe;
  if (s == "1f1b") return Schedule::k1F1B;
  if (s == "interleaved_1f1b") return Schedule::kInterleaved1F1B;
  throw std::invalid_argument("unknown --pp.schedule '" + s + "' (known: gpipe, 1f1b, interleaved_1f1b)");
}

std::vector<int64_t> layers_per_stage(int64_t n_layers, int64_t n_stages, const std::vector<int64_t>& split) {
  if (!split.empty()) {
    if (static_cast<int64_t>(split.size()) != n_stages)
      throw std::invalid_argument("--pp.split has " + std::to_string(split.size()) + " entries for " +
                                  std::to_string(n_stages) + " pipeline stages");
    for (int64_t n : split)
      if (n < 1) throw std::invalid_argument("--pp.split: every stage needs at least one layer");
    if (std::accumulate(split.begin(), split.end(), int64_t{0}) != n_layers)
      throw std::invalid_argument("--pp.split sums to " +
                                  std::to_string(std::accumulate(split.begin(), split.end(), int64_t{0})) +
                                  " layers; the model has " + std::to_string(n_layers));
    return split;
  }
  if (n_stages > n_layers)
    throw std::invalid_argument(std::to_string(n_stages) + " pipeline stages for " + std::to_string(n_layers) +
                                " layers: every stage needs at least one layer");
  std::vector<int64_t> out;
  for (int64_t s = 0; s < n_stages; ++s) out.push_back(n_layers / n_stages + (s < n_layers % n_stages ? 1 : 0));
  return out;
}

std::vector<int64_t> StageMap::layers_held() const {
  std::vector<int64_t> ids;
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t id = first_layer[stage(c)]; id < first_layer[stage(c) + 1]; ++id) ids.push_back(id);
  return ids;
}

StageMap stage_map(int64_t n_layers, int64_t pp, int64_t rank, int64_t chunks, const std::vector<int64_t>& split) {
  StageMap m;
  m.pp = pp;
  m.rank = rank;
  m.chunks = chunks;
  m.first_layer = {0};
  for (int64_t n : layers_per_stage(n_layers, pp * chunks, split)) m.first_layer.push_back(m.first_layer.back() + n);
  return m;
}

std::vector<Action> schedule(Schedule s, int64_t pp, int64_t rank, int64_t microbatches, int64_t chunks) {
  std::vector<Action> out;
  const int64_t n = microbatches;
  if (s == Schedule::kGPipe) {
    for (int64_t m = 0; m < n; ++m) out.push_back({true, m, 0});
    for (int64_t m = 0; m < n; ++m) out.push_back({false, m, 0});
    return out;
  }
  if (s == Schedule::k1F1B)
    chunks = 1;
  else if (n % pp != 0)
    throw std::invalid_argument("interleaved_1f1b needs --pp.microbatches divisible by pp (" + std::to_string(n) +
                                " over pp " + std::to_string(pp) + ")");
  // The k-th forward and backward of this rank (Megatron-LM's interleaved order: pp
  // microbatches through one chunk, then the same ones through the next; backwards
  // visit the chunks last first). With one chunk it is plain 1F1B.
  const int64_t total = n * chunks, group = pp * chunks;
  auto forward = [&](int64_t k) { return Action{true, (k / group) * pp + k % pp, (k % group) / pp}; };
  auto backward = [&](int64_t k) { return Action{false, (k / group) * pp + k % pp, chunks - 1 - (k % group) / pp}; };
  const int64_t warmup = std::min(total, chunks == 1 ? pp - rank - 1 : (pp - rank - 1) * 2 + (chunks - 1) * pp);
  for (int64_t k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

namespace {
// Messages into stage s: activations with tag 2s, gradients with tag 2s + 1.
int tag_into(int64_t stage, bool activation) { return static_cast<int>(2 * stage + (activation ? 0 : 1)); }

// pipeline_step, or with `train` false its forwards alone.
torch::Tensor run_schedule(ParallelModel& pm, const StageMap& stages, const PipelineOptions& options,
                           const torch::Tensor& inputs, const torch::Tensor& targets, const torch::Tensor& positions,
                           double loss_scale, bool train) {
  Transformer& model = pm.model;
  const MeshGroups& g = pm.groups;
  const bool first_rank = stages.rank == 0, last_rank = stages.rank == stages.pp - 1;
  // Into the next stage wraps from the last rank to the first; from the previous one, the other way.
  Comm& activations_out = last_rank ? *g.pp_activations_wrap : *g.pp_activations;
  Comm& activations_in = first_rank ? *g.pp_activations_wrap : *g.pp_activations;
  Comm& gradients_out = first_rank ? *g.pp_gradients_wrap : *g.pp_gradients;
  Comm& gradients_in = last_rank ? *g.pp_gradients_wrap : *g.pp_gradients;
  const int64_t n = options.microbatches, batch = inputs.size(0);
  if (batch % n != 0)
    throw std::invalid_argument("--pp.microbatches " + std::to_string(n) + " does not divide the local batch of " +
                                std::to_string(batch) + " samples");
  const auto input_mbs = inputs.split(batch / n, 0);
  const auto target_mbs = targets.split(batch / n, 0);
  const std::vector<int64_t> activation_shape{batch / n, options.activation_tokens, model->args.dim};
  const auto activation_options = torch::dtype(options.activation_dtype).device(inputs.device());
  const int64_t last_stage = stages.n_stages() - 1;
  const int next = static_cast<int>((stages.rank + 1) % stages.pp);
  const int prev = static_cast<int>((stages.rank + stages.pp - 1) % stages.pp);

  // What a microbatch's forward through a stage leaves for its backward.
  struct InFlightMicrobatch {
    torch::Tensor input;   // received activations (a leaf: its gradient goes back upstream)
    torch::Tensor output;  // sent activations, or the scaled loss on the last stage
    InFlight sent;         // the activations' send: done once their gradient is back
  };
  std::map<std::pair<int64_t, int64_t>, InFlightMicrobatch> alive;  // (chunk, microbatch)
  std::vector<InFlight> gradient_sends;  // waited for at the end: a send never blocks the schedule
  auto loss_sum = torch::zeros({}, torch::dtype(torch::kFloat32).device(inputs.device()));
  for (const Action& a : schedule(options.schedule, stages.pp, stages.rank, n, stages.chunks)) {
    if (!a.forward && !train) continue;
    const int64_t stage = stages.stage(a.chunk);
    const int64_t first = stages.first_layer[stage], last = stages.first_layer[stage + 1];
    const auto key = std::make_pair(a.chunk, a.microbatch);
    if (a.forward) {
      InFlightMicrobatch mb;
      if (stage == 0) {
        mb.input = input_mbs[a.microbatch];
      } else {
        mb.input = torch::empty(activation_shape, activation_options);
        activations_in.recv(mb.input, prev, tag_into(stage, true));
        mb.input.requires_grad_(train);
      }
      auto y = model->forward_layers(mb.input, positions, first, last);
      if (stage == last_stage) {
        // The step's loss is the mean over microbatches: each one's share is 1/n.
        const double share = loss_scale / static_cast<double>(n);
        auto loss = pm.loss(y, target_mbs[a.microbatch]);
        mb.output = loss * (injected(Fault::kPpLossNotDivided) ? loss_scale : share);
        loss_sum += loss.detach() * share;
      } else {
        mb.output = y;
        mb.sent = activations_out.start_send(y.detach(), next, tag_into(stage + 1, true));
      }
      alive[key] = std::move(mb);
    } else {
      InFlightMicrobatch mb = std::move(alive.at(key));
      alive.erase(key);
      if (stage == last_stage) {
        mb.output.backward();
      } else {
        auto grad = torch::empty(activation_shape, activation_options);
        gradients_in.recv(grad, next, tag_into(stage, false));
        mb.sent();  // the next stage used those activations for this gradient: the send is over
        torch::autograd::backward({mb.output}, {grad});
      }
      if (stage > 0)
        gradient_sends.push_back(gradients_out.start_send(mb.input.grad(), prev, tag_into(stage - 1, false)));
    }
  }
  for (auto& send : gradient_sends) send();
  for (auto& [key, mb] : alive)  // forwards alone: nothing waited for their sends yet
    if (mb.sent) mb.sent();
  g.pp->all_reduce_sum(loss_sum);  // only the last stage's is non-zero
  return loss_sum / loss_scale;
}

}  // namespace

torch::Tensor pipeline_step(ParallelModel& pm, const StageMap& stages, const PipelineOptions& options,
                            const torch::Tensor& inputs, const torch::Tensor& targets, const torch::Tensor& positions,
                            double loss_scale) {
  return run_schedule(pm, stages, options, inputs, targets, positions, loss_scale, /*train=*/true);
}

torch::Tensor pipeline_forward(ParallelModel& pm, const StageMap& stages, const PipelineOptions& options,
                               const torch::Tensor& inputs, const torch::Tensor& targets,
                               const torch::Tensor& positions) {
  torch::NoGradGuard no_grad;
  return run_schedule(pm, stages, options, inputs, targets, positions, 1.0, /*train=*/false);
}

PipelinePlan plan_pipeline(const PipelineConfig& config, int64_t n_layers, const contract::MeshShape& shape, int rank,
                           int64_t local_batch_size, int64_t activation_tokens, torch::ScalarType activation_dtype) {
  PipelinePlan plan;
  if (shape.pp == 1) return plan;
  auto& o = plan.options;
  o.schedule = parse_schedule(config.schedule);
  const bool interleaved = o.schedule == Schedule::kInterleaved1F1B;
  const int64_t chunks = config.virtual_stages > 0 ? config.virtual_stages : interleaved ? 2 : 1;
  if (chunks > 1 && !interleaved)
    throw std::invalid_argument("--pp.virtual-stages " + std::to_string(chunks) +
                                " needs --pp.schedule interleaved_1f1b");
  o.microbatches = config.microbatches > 0 ? config.microbatches : shape.pp;
  if (local_batch_size % o.microbatches != 0)
    throw std::invalid_argument("--pp.microbatches " + std::to_string(o.microbatches) +
                                (config.microbatches > 0 ? "" : " (the default: pp)") +
                                " does not divide --local-batch-size " + std::to_string(local_batch_size));
  if (interleaved && o.microbatches % shape.pp != 0)
    throw std::invalid_argument("interleaved_1f1b needs --pp.microbatches divisible by pp (" +
                                std::to_string(o.microbatches) + " over pp " + std::to_string(shape.pp) + ")");
  o.activation_dtype = activation_dtype;
  o.activation_tokens = activation_tokens;
  std::vector<int64_t> split;
  std::stringstream in(config.split);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    try {
      split.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw std::invalid_argument("--pp.split '" + config.split + "': '" + item + "' is not a layer count");
  }
  plan.stages = stage_map(n_layers, shape.pp, contract::coord_of(rank, shape).pp, chunks, split);
  return plan;
}

}  // namespace meshtrain::pp
