// `meshtrain generate`: greedy decoding from weights already loaded into a parallelized
// model, under any mesh without pp. No KV cache: every token re-runs the whole prefix, so
// the numbers match a plain forward. Every rank sees the same logits (gathered over tp,
// replicated over dp) and so picks the same tokens.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain {

// `meshtrain generate`'s own options: --prompt and --max-new-tokens.
struct GenerateConfig {
  std::string prompt = "In the beginning";
  int64_t max_new_tokens = 32;
};
void add_options(CLI::App& cmd, GenerateConfig& config);

struct Generation {
  std::vector<int64_t> prompt_ids;  // with BOS
  std::vector<int64_t> generated_ids;
  // The mean next-token loss over the prompt: a number to compare with other
  // implementations of the same model (tests/hf/).
  double prompt_loss = 0;
};

// Throws unless the run can generate: it has weights to load (a complete step folder, or
// --checkpoint.initial-load-path), no sequence parallel (it needs a fixed seq_len), no pp.
void check_can_generate(bool has_weights, const std::string& checkpoint_folder, bool sequence_parallel, bool pipelined);

// Decodes up to `max_new_tokens` after `prompt`, stopping at EOS. Collective.
Generation generate(Transformer& model, const torch::Device& device, const std::string& prompt, int64_t max_new_tokens);

}  // namespace meshtrain
