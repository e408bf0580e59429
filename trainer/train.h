// `meshtrain train`: the training loop.
#pragma once

#include "train_config.h"

namespace meshtrain {

// Runs training; returns the process exit code. Throws on bad configuration.
int train(const TrainConfig& config);

}  // namespace meshtrain
