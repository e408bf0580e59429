// Mesh parsing, rank <-> coordinates in torchtitan's order, and group membership.
#include <gtest/gtest.h>

#include "contract/mesh.h"

using namespace contract;

TEST(Mesh, ParsesAndInfersDpShard) {
  auto m = parse_mesh("dp_replicate=2,dp_shard=-1", 8);
  EXPECT_EQ(m.dp_replicate, 2);
  EXPECT_EQ(m.dp_shard, 4);
  EXPECT_EQ(m.tp, 1);
  EXPECT_EQ(parse_mesh("", 1).world_size(), 1);
  EXPECT_EQ(parse_mesh("dp_shard=-1", 3).dp_shard, 3);
  EXPECT_EQ(parse_mesh("tp=2,dp_shard=2", 4).to_string(), "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=2");
}

TEST(Mesh, RejectsBadSpecsWithTheReason) {
  auto message = [](const std::string& spec, int64_t world) {
    try {
      parse_mesh(spec, world);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("dp_shard=2", 4),
            "--mesh 'dp_shard=2' has 2 ranks (pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1) but WORLD_SIZE is 4");
  EXPECT_NE(message("ep=2", 2).find("unknown dimension 'ep'"), std::string::npos);
  EXPECT_NE(message("dp_shard=two", 2).find("is not an integer"), std::string::npos);
  EXPECT_NE(message("dp_shard=0", 2).find("must be >= 1"), std::string::npos);
  EXPECT_NE(message("dp_replicate=3,dp_shard=-1", 4).find("cannot fill world size 4"), std::string::npos);
  EXPECT_NE(message("dp_shard", 2).find("is not NAME=SIZE"), std::string::npos);
}

TEST(Mesh, TpIsInnermostAndCoordinatesRoundTrip) {
  MeshShape s = parse_mesh_sizes("dp_replicate=2,dp_shard=2,tp=2");
  auto c = coord_of(1, s);
  EXPECT_EQ(c.dp_replicate, 0);
  EXPECT_EQ(c.dp_shard, 0);
  EXPECT_EQ(c.tp, 1);
  c = coord_of(6, s);
  EXPECT_EQ(c.dp_replicate, 1);
  EXPECT_EQ(c.dp_shard, 1);
  EXPECT_EQ(c.tp, 0);
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(rank_of(coord_of(r, s), s), r);
}

TEST(Mesh, GroupsHoldTheRanksThatDifferOnlyInTheirDims) {
  MeshShape s = parse_mesh_sizes("dp_replicate=2,dp_shard=2,tp=2");
  using D = MeshDim;
  EXPECT_EQ(group_ranks(5, s, {D::kDpShard}), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(group_ranks(5, s, {D::kTp}), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(group_ranks(5, s, {D::kDpReplicate}), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(group_ranks(5, s, {D::kDpReplicate, D::kDpShard}), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(group_ranks(5, s, {D::kDpReplicate, D::kDpShard, D::kTp}).size(), 8u);
  EXPECT_EQ(dp_rank_of(coord_of(5, s), s), 2);  // (1, 0) of dp 2x2
}

TEST(Mesh, CpSitsBetweenDpShardAndTp) {
  MeshShape s = parse_mesh_sizes("dp_shard=2,cp=2,tp=2");
  EXPECT_EQ(s.world_size(), 8);
  EXPECT_EQ(s.dp(), 2);  // cp ranks share a batch: they are not data-parallel peers
  EXPECT_EQ(s.dp_shard_cp(), 4);
  auto c = coord_of(5, s);  // 5 = (dp_shard 1, cp 0, tp 1)
  EXPECT_EQ(c.dp_shard, 1);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.tp, 1);
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(rank_of(coord_of(r, s), s), r);
  using D = MeshDim;
  EXPECT_EQ(group_ranks(5, s, {D::kCp}), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(group_ranks(5, s, {D::kDpShard, D::kCp}), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(parse_mesh("cp=2,dp_shard=-1", 8).dp_shard, 4);
  EXPECT_EQ(s.to_compact_string(), "dp_shard=2,cp=2,tp=2");
}

TEST(Mesh, PpIsOutermost) {
  MeshShape s = parse_mesh_sizes("pp=2,dp_shard=2,tp=2");
  EXPECT_EQ(s.world_size(), 8);
  EXPECT_EQ(s.dp(), 2);     // stages are not data-parallel peers
  auto c = coord_of(6, s);  // 6 = (pp 1, dp_shard 1, tp 0)
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp_shard, 1);
  EXPECT_EQ(c.tp, 0);
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(rank_of(coord_of(r, s), s), r);
  EXPECT_EQ(group_ranks(6, s, {MeshDim::kPp}), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(group_ranks(6, s, {MeshDim::kDpShard}), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(parse_mesh("pp=2,dp_shard=-1", 8).dp_shard, 4);
}
