// Expert parallelism (torchtitan's ExpertParallel): a MoE's routed experts split over `ep`
// consecutive dp_shard ranks, and each routed token copy travels by all-to-all to the rank
// holding its expert and back. Which weights are the routed experts is said once, by
// contract/model_names.h's is_routed_expert: TP splits them on their own dimension, the
// layouts (parallelize.cpp) over ep, and data parallel gives them a bucket of their own over
// ep_shard.
//
// Promises: apply_ep changes only each MoE's `route`; a token's expert output comes back to
// the rank and the row it left from, so the model after the MoE sees no difference.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "distributed/comm.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain {

// --ep.
struct ExpertParallelConfig {
  int64_t degree = 1;  // MoE experts split over this many consecutive dp_shard ranks
};
void add_options(CLI::App& cmd, ExpertParallelConfig& config);

// Routed tokens travel to the ranks of `ep` holding their experts, in every MoE of the model.
void apply_ep(Transformer& model, Comm& ep);

}  // namespace meshtrain
