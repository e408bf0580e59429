// The placement algebra against torch.chunk, exhaustively, and a worked strided table.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "contract/placement.h"

using namespace contract;

TEST(Placement, TorchChunkTable) {
  EXPECT_EQ(shard_sizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(shard_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(shard_sizes(259, 4), (std::vector<int64_t>{65, 65, 65, 64}));
  EXPECT_EQ(shard_sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  // Empty pieces sit at the end of the extent (DTensor's convention).
  EXPECT_EQ(shard_extent(5, 4, 3).offset, 5);
  EXPECT_EQ(shard_extent(2, 4, 2).offset, 2);
  EXPECT_THROW(shard_extent(5, 4, 4), std::invalid_argument);
}

TEST(Placement, OneDimensionMatchesTorchChunkExhaustively) {
  for (int64_t n = 0; n <= 20; ++n)
    for (int64_t k = 1; k <= 9; ++k) {
      auto pieces = torch::arange(n).chunk(k);  // torch returns fewer pieces when uneven
      int64_t covered = 0;
      for (int64_t i = 0; i < k; ++i) {
        const auto e = shard_extent(n, k, i);
        const int64_t expected = i < static_cast<int64_t>(pieces.size()) ? pieces[i].size(0) : 0;
        ASSERT_EQ(e.size, expected) << "n=" << n << " k=" << k << " i=" << i;
        if (e.size > 0) {
          ASSERT_EQ(e.offset, covered) << "pieces are contiguous and in order";
          ASSERT_EQ(pieces[i][0].item<int64_t>(), e.offset);
        } else {
          ASSERT_EQ(e.offset, n);
        }
        covered += e.size;
      }
      ASSERT_EQ(covered, n);
    }
}

TEST(Placement, TwoDimensionalChunksCoverEachElementOnce) {
  for (int64_t rows = 1; rows <= 7; ++rows)
    for (int64_t cols = 1; cols <= 5; ++cols)
      for (int64_t kr = 1; kr <= 4; ++kr)
        for (int64_t kc = 1; kc <= 3; ++kc) {
          auto global = torch::arange(rows * cols).view({rows, cols});
          auto owners = torch::zeros({rows, cols}, torch::kInt64);
          for (int64_t i = 0; i < kr; ++i)
            for (int64_t j = 0; j < kc; ++j) {
              auto c = local_chunk({rows, cols}, {{0, kr, i}, {1, kc, j}});
              ASSERT_EQ(c.offsets.size(), 2u);
              if (c.numel() == 0) continue;
              owners.narrow(0, c.offsets[0], c.sizes[0]).narrow(1, c.offsets[1], c.sizes[1]) += 1;
              // The same elements torch.chunk would hand this rank.
              auto rows_piece = global.chunk(kr, 0);
              auto expected = rows_piece[i].chunk(kc, 1)[j];
              auto got = global.narrow(0, c.offsets[0], c.sizes[0]).narrow(1, c.offsets[1], c.sizes[1]);
              ASSERT_TRUE(torch::equal(got, expected)) << to_string(c);
            }
          ASSERT_TRUE(torch::equal(owners, torch::ones({rows, cols}, torch::kInt64)))
              << rows << "x" << cols << " over " << kr << "x" << kc;
        }
}

TEST(Placement, StridedShardWorkedTable) {
  // 8 rows on mesh (dp 2, tp 2). torchtitan's FSDP+TP: TP splits first, then FSDP splits
  // the TP-local piece (_StridedShard): rank (d, t) starts at t*8/2 + d*8/2/2.
  struct Row {
    int64_t d, t, offset;
  };
  for (auto row : {Row{0, 0, 0}, Row{1, 0, 2}, Row{0, 1, 4}, Row{1, 1, 6}}) {
    auto c = local_chunk({8, 3}, {{0, 2, row.t}, {0, 2, row.d}});
    EXPECT_EQ(c.offsets, (std::vector<int64_t>{row.offset, 0})) << "d=" << row.d << " t=" << row.t;
    EXPECT_EQ(c.sizes, (std::vector<int64_t>{2, 3}));
  }
  // Splitting in the other order (plain [Shard(0), Shard(0)]) permutes the rows.
  EXPECT_EQ(local_chunk({8, 3}, {{0, 2, 1}, {0, 2, 0}}).offsets[0], 4);  // dp first: d=1,t=0 -> 4, not 2
  // An empty piece stays at the global end even when nested.
  auto empty = local_chunk({3}, {{0, 2, 1}, {0, 2, 1}});
  EXPECT_EQ(empty.sizes[0], 0);
  EXPECT_EQ(empty.offsets[0], 3);
}

TEST(Placement, BoxesOverlapOnlyWhenEveryExtentDoes) {
  const Box a = box_of({0, 0}, {2, 4}), b = box_of({1, 3}, {2, 2}), c = box_of({2, 0}, {1, 4});
  EXPECT_FALSE(intersect(a, b).empty());
  EXPECT_EQ(intersect(a, b).lo, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(intersect(a, b).hi, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(intersect(a, c).empty());   // rows 0..1 and row 2 only touch
  EXPECT_TRUE(box_of({5}, {0}).empty());  // an empty piece overlaps nothing
}

TEST(Placement, OneRankWritesEachReplicatedChunk) {
  ParamLayout l;
  l.sharded_over = {MeshDim::kTp};  // replicated over data parallel and cp
  MeshCoord c;
  c.tp = 1, c.pp = 1;
  EXPECT_TRUE(writes_chunk(l, c));  // tp holds different pieces; pp stages hold different params
  c.dp_shard = 1;
  EXPECT_FALSE(writes_chunk(l, c));
  l.sharded_over = {MeshDim::kDpShard, MeshDim::kTp};
  EXPECT_TRUE(writes_chunk(l, c));
  c.dp_replicate = 1;
  EXPECT_FALSE(writes_chunk(l, c));
}

TEST(Placement, FirstSplitStartIsTheVocabularyOffsetOfATpPiece) {
  ParamLayout l;
  l.global_shape = {10, 4};
  l.splits = {{0, 4, 3}, {0, 2, 1}};  // tp piece 3 of 4 (row 9), then an FSDP split of it
  EXPECT_EQ(first_split_start(l), 9);
  l.splits = {{0, 4, 1}};
  EXPECT_EQ(first_split_start(l), 3);
}
