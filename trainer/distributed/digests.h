// The numbers that identify each global parameter whatever the layout (param_digest.json,
// docs/contracts.md: its sum and L2 norm), gathered from the pieces every rank holds. The harness
// compares them across layouts (params_match) and against golden files.
//
// Promises: global_sums is collective over the whole job, every rank calls it with the same
// names, and each piece counts once: summed over the groups it is sharded across and over
// pipeline stages, never over replicas.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "distributed/parallel_model.h"

namespace meshtrain {

// Per parameter of `names` (every parameter of the whole model, whichever pipeline stage
// holds it): (sum, sum of squares) of the global tensor, in float64.
std::map<std::string, std::pair<double, double>> global_sums(const ParallelModel& pm,
                                                             const std::vector<std::string>& names);

}  // namespace meshtrain
