#include "components/data.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/options.h"
#include "contract/hash.h"

namespace meshtrain {

void add_options(CLI::App& cmd, DataConfig& c) {
  cmd.add_option("--corpus", c.corpus, "Training text; documents separated by blank lines")->capture_default_str();
}
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, bool bos, bool eos) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 2);
  if (bos) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(c);
  if (eos) ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) {
  std::string text;
  for (auto id : ids) {
    if (id < 0 || id >= kVocabSize)
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the byte vocabulary");
    if (id < 256) text.push_back(static_cast<char>(id));
  }
  return text;
}

std::vector<int32_t> tokenize_corpus(std::string_view text) {
  std::vector<int32_t> tokens;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    if (end == std::string_view::npos) end = text.size();
    auto doc = text.substr(start, end - start);
    while (!doc.empty() && doc.back() == '\n') doc.remove_suffix(1);
    if (!doc.empty()) {
      auto ids = ByteTokenizer::encode(doc, /*bos=*/true, /*eos=*/true);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    }
    start = end + 2;
  }
  return tokens;
}

std::vector<int32_t> load_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read corpus '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto tokens = tokenize_corpus(buffer.str());
  if (tokens.empty()) throw std::runtime_error("corpus '" + path + "' is empty");
  return tokens;
}

DataLoader::DataLoader(std::vector<int32_t> tokens, int64_t seq_len, uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  if (seq_len_ <= 0) throw std::invalid_argument("seq_len must be positive");
  num_windows_ = (static_cast<int64_t>(tokens_.size()) - 1) / seq_len_;
  if (num_windows_ < 1)
    throw std::invalid_argument("corpus of " + std::to_string(tokens_.size()) +
                                " tokens is shorter than one sequence of " + std::to_string(seq_len_ + 1));
}

int64_t DataLoader::window_of_sample(int64_t k) const {
  // Position k % W of a Fisher-Yates permutation seeded by (seed, epoch); the
  // current epoch's permutation is kept, since a step reads many samples of one epoch.
  const int64_t epoch = k / num_windows_;
  if (epoch != cached_epoch_) {
    perm_.resize(num_windows_);
    for (int64_t i = 0; i < num_windows_; ++i) perm_[i] = i;
    uint64_t state = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch) + 1));
    for (int64_t i = num_windows_ - 1; i > 0; --i) {
      state = splitmix64(state);
      std::swap(perm_[i], perm_[state % static_cast<uint64_t>(i + 1)]);
    }
    cached_epoch_ = epoch;
  }
  return perm_[k % num_windows_];
}

Batch DataLoader::micro_batch(int64_t global_batch, int64_t dp_rank, int64_t dp_degree, int64_t micro,
                              int64_t n_micro) const {
  if (global_batch % (dp_degree * n_micro) != 0)
    throw std::invalid_argument("global batch " + std::to_string(global_batch) +
                                " is not divisible by dp degree x micro-batches " +
                                std::to_string(dp_degree * n_micro));
  const int64_t per_rank = global_batch / dp_degree, per_micro = per_rank / n_micro;
  const int64_t first = samples_consumed_ + dp_rank * per_rank + micro * per_micro;
  Batch b;
  b.samples = per_micro;
  b.seq_len = seq_len_;
  b.inputs.reserve(per_micro * seq_len_);
  b.targets.reserve(per_micro * seq_len_);
  for (int64_t k = first; k < first + per_micro; ++k) {
    const int64_t start = window_of_sample(k) * seq_len_;
    for (int64_t t = 0; t < seq_len_; ++t) {
      b.inputs.push_back(tokens_[start + t]);
      b.targets.push_back(tokens_[start + t + 1]);
    }
  }
  return b;
}

nlohmann::json DataLoader::state() const {
  return {{"samples_consumed", samples_consumed_}, {"seed", seed_}, {"seq_len", seq_len_}, {"tokens", tokens_.size()}};
}

void DataLoader::load_state(const nlohmann::json& s) {
  if (s.at("seed").get<uint64_t>() != seed_ || s.at("seq_len").get<int64_t>() != seq_len_ ||
      s.at("tokens").get<size_t>() != tokens_.size())
    throw std::invalid_argument("dataloader state was saved with seed " + s.at("seed").dump() + ", seq_len " +
                                s.at("seq_len").dump() + ", corpus of " + s.at("tokens").dump() +
                                " tokens; this run has seed " + std::to_string(seed_) + ", seq_len " +
                                std::to_string(seq_len_) + ", " + std::to_string(tokens_.size()) + " tokens");
  samples_consumed_ = s.at("samples_consumed").get<int64_t>();
}

}  // namespace meshtrain
