#include "components/generate.h"

#include <stdexcept>

#include "base/options.h"
#include "components/data.h"

namespace meshtrain {

void add_options(CLI::App& cmd, GenerateConfig& c) {
  cmd.add_option("--prompt", c.prompt, "Text to continue")->capture_default_str();
  cmd.add_option("--max-new-tokens", c.max_new_tokens, "Tokens to generate at most")->capture_default_str();
}

void check_can_generate(bool has_weights, const std::string& checkpoint_folder, bool sequence_parallel,
                        bool pipelined) {
  if (!has_weights)
    throw std::runtime_error("generate: no complete checkpoint in '" + checkpoint_folder +
                             "' (or weights from --checkpoint.initial-load-path)");
  if (sequence_parallel) throw std::invalid_argument("generate: --sequence-parallel needs a fixed seq_len");
  if (pipelined)
    throw std::invalid_argument(
        "generate: pp > 1 is not supported; generate under a mesh without pp (checkpoints "
        "load under any mesh)");
}

Generation generate(Transformer& model, const torch::Device& device, const std::string& prompt,
                    int64_t max_new_tokens) {
  // Every cp rank decodes the whole prefix itself (the weights stay sharded over dp_shard x cp).
  for (int64_t id : model->layer_ids()) model->block(id)->attention->core = nullptr;
  torch::NoGradGuard no_grad;
  Generation g;
  const auto prompt_ids = ByteTokenizer::encode(prompt, /*bos=*/true, /*eos=*/false);
  g.prompt_ids.assign(prompt_ids.begin(), prompt_ids.end());
  std::vector<int64_t> ids = g.prompt_ids;
  {
    auto tokens = torch::tensor(ids, torch::kInt64).view({1, -1}).to(device);
    auto logits = model(tokens).to(torch::kFloat32).squeeze(0);  // [T, V]
    const int64_t T = tokens.size(1);
    if (T > 1)
      g.prompt_loss =
          torch::nn::functional::cross_entropy(logits.narrow(0, 0, T - 1), tokens.squeeze(0).narrow(0, 1, T - 1))
              .item<double>();
  }
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    auto tokens = torch::tensor(ids, torch::kInt64).view({1, -1}).to(device);
    auto logits = model(tokens).select(1, tokens.size(1) - 1).to(torch::kFloat32);  // [1, V]
    const int64_t next = logits.argmax(-1).item<int64_t>();
    if (next >= ByteTokenizer::kVocabSize || next == ByteTokenizer::kEos) break;
    ids.push_back(next);
  }
  g.generated_ids.assign(ids.begin() + static_cast<int64_t>(g.prompt_ids.size()), ids.end());
  return g;
}

}  // namespace meshtrain
