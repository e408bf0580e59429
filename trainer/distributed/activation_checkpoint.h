// Activation checkpointing (torchtitan's apply_ac): the chosen transformer blocks keep no
// activations in forward and run again in backward.
//
// Promises: a block is chosen by its global layer id (recomputed), so a pipeline stage
// recomputes the layers it would without PP, and data parallel's buckets ask the same rule.
#pragma once

#include <cstdint>
#include <string>

#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain {

enum class ActivationCheckpoint { kNone, kFull, kSelective };
ActivationCheckpoint parse_ac(const std::string& s);  // "none" | "full" | "selective"

// --ac.
struct ActivationCheckpointConfig {
  ActivationCheckpoint mode = ActivationCheckpoint::kNone;
};
void add_options(CLI::App& cmd, ActivationCheckpointConfig& config);

// Whether layer `layer_id` runs again in backward: every layer (full) or every second one (selective).
bool recomputed(ActivationCheckpoint ac, int64_t layer_id);

// Marks the chosen blocks of `model` to run again in backward.
void apply_ac(Transformer& model, ActivationCheckpoint ac);

}  // namespace meshtrain
