// torchtitan's validator: every `freq` steps, the mean loss over the first `steps` global
// batches of held-out text, under the run's mesh and without gradients (pipeline stages run
// forwards only). Every validation sees the same batches. Decides its own cadence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "components/data.h"

namespace CLI {
class App;
}

namespace meshtrain {

// --validation.*: how often, over how many global batches, and on which held-out text.
struct ValidationConfig {
  int64_t freq = 0;   // validate after every N steps (0: never)
  int64_t steps = 4;  // global batches of held-out text per validation (-1: all of it)
  std::string corpus = shipped_validation_corpus_path();
};
void add_options(CLI::App& cmd, ValidationConfig& config);

class ParallelModel;
namespace pp {
struct PipelinePlan;
}

class Validator {
 public:
  // freq 0: never (the held-out corpus is not read); steps -1: the whole corpus. Throws on a
  // negative freq or on steps 0 or below -1.
  Validator(const ValidationConfig& config, int64_t seq_len, uint64_t seed);
  // The validation loss after `step` when one is due, else none. Collective: every rank calls it.
  std::optional<double> validate_if_due(int64_t step, ParallelModel& pm, const pp::PipelinePlan& pipeline,
                                        int64_t global_batch, int64_t accum_steps) const;

 private:
  int64_t freq_, steps_;
  std::optional<DataLoader> held_out_;
};

}  // namespace meshtrain
