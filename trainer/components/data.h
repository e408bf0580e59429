// Tokenizer and a layout-independent data loader.
//
// The loader's promise: the global batch of optimizer step s is a function of
// (corpus, seq_len, seed, s) only. A data-parallel rank takes a contiguous slice of
// that global batch and splits it into micro-batches, so every mesh sees the same
// samples in every step and losses can be compared across layouts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace meshtrain {

// Bytes are tokens 0..255; BOS and EOS follow.
struct ByteTokenizer {
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int64_t kVocabSize = 258;
  static std::vector<int32_t> encode(std::string_view text, bool bos, bool eos);
  // Special tokens are dropped; ids outside the vocabulary throw.
  static std::string decode(const std::vector<int64_t>& ids);
};

// Documents are separated by a blank line; each becomes BOS + bytes + EOS.
std::vector<int32_t> tokenize_corpus(std::string_view text);
// Reads and tokenizes a corpus file; throws std::runtime_error naming the path.
std::vector<int32_t> load_corpus(const std::string& path);
// The shipped corpora (trainer/data/): the training text and the held-out validation text.
// Absolute paths into the source tree, compiled into one small translation unit only, so that
// every other one compiles the same in any checkout (and ccache shares it between clones).
std::string shipped_corpus_path();
std::string shipped_validation_corpus_path();

// --corpus: the training text.
struct DataConfig {
  std::string corpus = shipped_corpus_path();
};
void add_options(CLI::App& cmd, DataConfig& config);

// A micro-batch: `samples` rows of `seq_len` input tokens and their next tokens.
struct Batch {
  int64_t samples = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> inputs;   // [samples * seq_len], row-major
  std::vector<int64_t> targets;  // [samples * seq_len]
};

class DataLoader {
 public:
  // The token stream is cut into non-overlapping windows of seq_len + 1 tokens;
  // each epoch visits them in an order shuffled from (seed, epoch).
  DataLoader(std::vector<int32_t> tokens, int64_t seq_len, uint64_t seed);

  int64_t windows_per_epoch() const { return num_windows_; }
  // Window index of global sample k (k counts samples since the start of training).
  int64_t window_of_sample(int64_t k) const;
  // Micro-batch `micro` of `n_micro` for data-parallel rank `dp_rank` of `dp_degree`,
  // out of the current step's global batch of `global_batch` samples.
  Batch micro_batch(int64_t global_batch, int64_t dp_rank, int64_t dp_degree, int64_t micro, int64_t n_micro) const;
  // Moves to the next step's global batch.
  void advance(int64_t global_batch) { samples_consumed_ += global_batch; }
  int64_t samples_consumed() const { return samples_consumed_; }

  // Loader state for checkpoints: the position plus what must match on reload.
  nlohmann::json state() const;
  // Throws std::invalid_argument if the state was saved with another seed or seq_len.
  void load_state(const nlohmann::json& state);

 private:
  std::vector<int32_t> tokens_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t num_windows_;
  int64_t samples_consumed_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

}  // namespace meshtrain
