// The device mesh: how ranks are arranged in [pp, dp_replicate, dp_shard, cp, tp]
// (torchtitan's order, tp innermost) and which ranks share each dimension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace contract {

enum class MeshDim { kPp = 0, kDpReplicate = 1, kDpShard = 2, kCp = 3, kTp = 4 };
// Every dimension, outermost first, and its one spelling: in --mesh, rank<R>.json's coord, the
// process groups' names and the harness's layout axes.
inline constexpr MeshDim kMeshDims[] = {MeshDim::kPp, MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kCp,
                                        MeshDim::kTp};
const char* name_of(MeshDim d);             // "pp", "dp_replicate", "dp_shard", "cp", "tp"
std::vector<std::string> mesh_dim_names();  // in kMeshDims' order

struct MeshShape {
  int64_t pp = 1;  // pipeline parallel: the ranks hold consecutive stages of the model
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  int64_t cp = 1;  // context parallel: the ranks split each sequence
  int64_t tp = 1;

  int64_t world_size() const { return pp * dp_replicate * dp_shard * cp * tp; }
  int64_t dp() const { return dp_replicate * dp_shard; }  // data-parallel degree: batches
  // FSDP shards the weights over dp_shard x cp (torchtitan's dp_shard_cp): cp ranks hold
  // the same weights and see different tokens, exactly like data-parallel peers.
  int64_t dp_shard_cp() const { return dp_shard * cp; }
  int64_t size(MeshDim d) const;
  std::string to_string() const;          // "pp=1,dp_replicate=2,dp_shard=2,cp=1,tp=1"
  std::string to_compact_string() const;  // sizes other than 1: "dp_replicate=2,dp_shard=2"
};

// Parses "pp=P,dp_replicate=R,dp_shard=S,cp=C,tp=T" (any subset, any order; missing dims are 1;
// dp_shard=-1 takes what the world leaves). Throws std::invalid_argument when a key is
// unknown, a value malformed, or the product is not world_size.
MeshShape parse_mesh(const std::string& spec, int64_t world_size);
// The same syntax with every size written out (no -1); the world size is their product.
MeshShape parse_mesh_sizes(const std::string& spec);

struct MeshCoord {
  int64_t pp = 0;
  int64_t dp_replicate = 0;
  int64_t dp_shard = 0;
  int64_t cp = 0;
  int64_t tp = 0;
  int64_t at(MeshDim d) const;
};

MeshCoord coord_of(int64_t rank, const MeshShape& shape);
int64_t rank_of(const MeshCoord& coord, const MeshShape& shape);

// The global ranks that share every coordinate with `rank` except those in `dims`,
// ordered by their index along `dims` (first dim outermost). Its position in the
// list is a rank's rank within that group.
std::vector<int64_t> group_ranks(int64_t rank, const MeshShape& shape, const std::vector<MeshDim>& dims);

// This rank's data-parallel index among shape.dp() (dp_replicate outer, dp_shard inner).
int64_t dp_rank_of(const MeshCoord& coord, const MeshShape& shape);

}  // namespace contract
