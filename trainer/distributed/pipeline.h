// Pipeline parallelism (torchtitan's pp): the model cut into stages by layer, the
// embedding on the first stage and the norm + output on the last. Each step's batch is
// cut into microbatches; activations flow to the next stage and gradients back over
// point-to-point transfers, in the order a schedule gives each rank.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "contract/mesh.h"

namespace CLI {
class App;
}
namespace meshtrain {
class ParallelModel;  // parallel_model.h: the stages run a parallelized model
}

namespace meshtrain::pp {

enum class Schedule { kGPipe, k1F1B, kInterleaved1F1B };
// "gpipe" | "1f1b" | "interleaved_1f1b"
Schedule parse_schedule(const std::string& s);

// Layers of each of n_stages stages, in order: `split` when given (one entry per stage,
// each >= 1, summing to n_layers), else as even as possible, earlier stages taking the
// extra layers. Throws std::invalid_argument with the reason otherwise.
std::vector<int64_t> layers_per_stage(int64_t n_layers, int64_t n_stages, const std::vector<int64_t>& split);

// Which stages a pp rank runs: `chunks` of them (interleaved schedules: 2 or more; else
// 1), stage c * pp + rank for chunk c, so stages wrap around the ranks.
struct StageMap {
  int64_t pp = 1;
  int64_t rank = 0;
  int64_t chunks = 1;
  std::vector<int64_t> first_layer;  // per stage (all pp * chunks of them), and one past the last
  int64_t stage(int64_t chunk) const { return chunk * pp + rank; }
  int64_t n_stages() const { return pp * chunks; }
  std::vector<int64_t> layers_held() const;  // this rank's layers, ascending
};
StageMap stage_map(int64_t n_layers, int64_t pp, int64_t rank, int64_t chunks, const std::vector<int64_t>& split);

// One unit of work: the forward or the backward of one microbatch through one of this
// rank's stages.
struct Action {
  bool forward;
  int64_t microbatch;
  int64_t chunk;
  bool operator==(const Action& o) const {
    return forward == o.forward && microbatch == o.microbatch && chunk == o.chunk;
  }
};
// The order rank `rank` of `pp` runs its actions: GPipe runs every forward, then every
// backward; 1F1B starts pp - rank - 1 forwards ahead and then alternates, so at most pp
// microbatches' activations are alive; interleaved 1F1B does the same over `chunks`
// stages per rank (Megatron-LM's order; microbatches must divide by pp).
std::vector<Action> schedule(Schedule s, int64_t pp, int64_t rank, int64_t microbatches, int64_t chunks);

// Runs a stage's part of one step: every microbatch's forward and backward, in the
// schedule's order. inputs / targets: [b, T] this rank's tokens of the (micro-)batch,
// cut into `microbatches` along b. Returns the mean loss over the microbatches on every
// pp rank (the last stage computes it); each microbatch's loss is scaled by
// loss_scale / microbatches before backward, so gradients accumulate to the step's mean.
struct PipelineOptions {
  Schedule schedule = Schedule::k1F1B;
  int64_t microbatches = 1;
  torch::ScalarType activation_dtype = torch::kFloat32;
  int64_t activation_tokens = 0;  // tokens per sample between stages (seq_len / cp, / tp under SP)
};
torch::Tensor pipeline_step(ParallelModel& pm, const StageMap& stages, const PipelineOptions& options,
                            const torch::Tensor& inputs, const torch::Tensor& targets, const torch::Tensor& positions,
                            double loss_scale);
// The forwards of pipeline_step alone, without gradients (validation): the mean loss over
// the microbatches, on every pp rank.
torch::Tensor pipeline_forward(ParallelModel& pm, const StageMap& stages, const PipelineOptions& options,
                               const torch::Tensor& inputs, const torch::Tensor& targets,
                               const torch::Tensor& positions);

// The --pp.* options as given on the command line.
struct PipelineConfig {
  std::string schedule = "1f1b";
  int64_t microbatches = -1;    // -1: pp
  int64_t virtual_stages = -1;  // stages per pp rank; -1: 2 for interleaved_1f1b, else 1
  std::string split;            // layers per stage, "3,2,2"; empty: as even as possible
};
// --pp.*: the fields above.
void add_options(CLI::App& cmd, PipelineConfig& config);

// Which pipeline stages this rank runs and how; no stages without pp.
struct PipelinePlan {
  std::optional<StageMap> stages;
  PipelineOptions options;
};
// Checks `config` against the mesh and the batch before any rendezvous (throws
// std::invalid_argument naming the option) and plans rank `rank`'s stages.
// activation_tokens: tokens per sample between stages (seq_len / cp, / tp under SP).
PipelinePlan plan_pipeline(const PipelineConfig& config, int64_t n_layers, const contract::MeshShape& shape, int rank,
                           int64_t local_batch_size, int64_t activation_tokens, torch::ScalarType activation_dtype);

}  // namespace meshtrain::pp
