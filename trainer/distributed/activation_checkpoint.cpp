#include "distributed/activation_checkpoint.h"

#include <stdexcept>

#include "base/options.h"

namespace meshtrain {

ActivationCheckpoint parse_ac(const std::string& s) {
  if (s == "none") return ActivationCheckpoint::kNone;
  if (s == "full") return ActivationCheckpoint::kFull;
  if (s == "selective") return ActivationCheckpoint::kSelective;
  throw std::invalid_argument("unknown --ac '" + s + "' (known: none, full, selective)");
}

void add_options(CLI::App& cmd, ActivationCheckpointConfig& c) {
  add_parsed_option(cmd, "--ac", c.mode, parse_ac, "none",
                    "Activation checkpointing: none | full (every block) | selective (every 2nd block)");
}

bool recomputed(ActivationCheckpoint ac, int64_t layer_id) {
  return ac == ActivationCheckpoint::kFull || (ac == ActivationCheckpoint::kSelective && (layer_id + 1) % 2 == 0);
}

void apply_ac(Transformer& model, ActivationCheckpoint ac) {
  for (int64_t id : model->layer_ids()) model->block(id)->recompute = recomputed(ac, id);
}

}  // namespace meshtrain
