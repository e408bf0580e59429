// Tokenizer and loader: determinism, layout-independent slicing, state round trip.
#include <gtest/gtest.h>

#include <set>

#include "components/data.h"

using namespace meshtrain;

namespace {

std::vector<int32_t> synthetic_tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = i % 251;
  return t;
}

// The rows of a whole global batch, as (inputs, targets) per sample.
std::vector<std::vector<int64_t>> rows(const Batch& b) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = 0; s < b.samples; ++s)
    out.emplace_back(b.inputs.begin() + s * b.seq_len, b.inputs.begin() + (s + 1) * b.seq_len);
  return out;
}

}  // namespace

TEST(ByteTokenizer, RoundTripsWithSpecialTokens) {
  auto ids = ByteTokenizer::encode("Let there be light", true, true);
  ASSERT_EQ(ids.size(), 20u);
  EXPECT_EQ(ids.front(), ByteTokenizer::kBos);
  EXPECT_EQ(ids.back(), ByteTokenizer::kEos);
  EXPECT_EQ(ids[1], 'L');
  std::vector<int64_t> wide(ids.begin(), ids.end());
  EXPECT_EQ(ByteTokenizer::decode(wide), "Let there be light");
  EXPECT_THROW(ByteTokenizer::decode({300}), std::out_of_range);
}

TEST(ByteTokenizer, CorpusDocumentsAreSeparatedByBlankLines) {
  auto t = tokenize_corpus("ab\ncd\n\nef\n");
  std::vector<int32_t> expected{256, 'a', 'b', '\n', 'c', 'd', 257, 256, 'e', 'f', 257};
  EXPECT_EQ(t, expected);
}

TEST(DataLoader, ShippedCorpusLoads) {
  auto tokens = load_corpus(shipped_corpus_path());
  EXPECT_GT(tokens.size(), 300000u);
  EXPECT_EQ(tokens.front(), ByteTokenizer::kBos);
  EXPECT_THROW(load_corpus("/nonexistent/corpus.txt"), std::runtime_error);
}

TEST(DataLoader, SameSeedSameBatchesOtherSeedOtherBatches) {
  DataLoader a(synthetic_tokens(5000), 16, 7), b(synthetic_tokens(5000), 16, 7), c(synthetic_tokens(5000), 16, 8);
  for (int step = 0; step < 5; ++step) {
    auto ba = a.micro_batch(8, 0, 1, 0, 1), bb = b.micro_batch(8, 0, 1, 0, 1), bc = c.micro_batch(8, 0, 1, 0, 1);
    EXPECT_EQ(ba.inputs, bb.inputs);
    EXPECT_EQ(ba.targets, bb.targets);
    EXPECT_NE(ba.inputs, bc.inputs);
    a.advance(8), b.advance(8), c.advance(8);
  }
}

TEST(DataLoader, TargetsAreInputsShiftedByOne) {
  auto tokens = synthetic_tokens(5000);
  DataLoader loader(tokens, 16, 3);
  auto b = loader.micro_batch(4, 0, 1, 0, 1);
  for (int64_t s = 0; s < 4; ++s)
    for (int64_t t = 0; t + 1 < 16; ++t) EXPECT_EQ(b.targets[s * 16 + t], b.inputs[s * 16 + t + 1]);
}

TEST(DataLoader, EveryLayoutSeesTheSameGlobalBatch) {
  const int64_t global = 8;
  for (int step = 0; step < 3; ++step) {
    DataLoader whole(synthetic_tokens(5000), 16, 11);
    for (int i = 0; i < step; ++i) whole.advance(global);
    const auto expected = rows(whole.micro_batch(global, 0, 1, 0, 1));
    for (int64_t dp : {1, 2, 4, 8})
      for (int64_t n_micro : {int64_t{1}, global / dp}) {
        if ((global / dp) % n_micro != 0) continue;
        std::vector<std::vector<int64_t>> got;
        for (int64_t r = 0; r < dp; ++r)
          for (int64_t m = 0; m < n_micro; ++m) {
            auto part = rows(whole.micro_batch(global, r, dp, m, n_micro));
            EXPECT_EQ(static_cast<int64_t>(part.size()), global / dp / n_micro);
            got.insert(got.end(), part.begin(), part.end());
          }
        EXPECT_EQ(got, expected) << "dp=" << dp << " micro-batches=" << n_micro << " step=" << step;
      }
  }
  DataLoader loader(synthetic_tokens(5000), 16, 11);
  EXPECT_THROW(loader.micro_batch(8, 0, 3, 0, 1), std::invalid_argument);
}

TEST(DataLoader, EachEpochVisitsEveryWindowOnce) {
  DataLoader loader(synthetic_tokens(1000), 10, 5);
  const int64_t W = loader.windows_per_epoch();
  ASSERT_EQ(W, 99);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t k = epoch * W; k < (epoch + 1) * W; ++k) seen.insert(loader.window_of_sample(k));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), W);
  }
  EXPECT_NE(loader.window_of_sample(0), loader.window_of_sample(W));  // reshuffled per epoch
}

TEST(DataLoader, StateRoundTripResumesTheStream) {
  DataLoader a(synthetic_tokens(5000), 16, 9);
  a.advance(8);
  a.advance(8);
  DataLoader b(synthetic_tokens(5000), 16, 9);
  b.load_state(a.state());
  EXPECT_EQ(a.micro_batch(8, 1, 2, 0, 1).inputs, b.micro_batch(8, 1, 2, 0, 1).inputs);
  DataLoader other_seed(synthetic_tokens(5000), 16, 10);
  try {
    other_seed.load_state(a.state());
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("saved with seed 9"), std::string::npos) << e.what();
  }
}
