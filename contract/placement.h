// The placement algebra: which piece of a global tensor each rank holds.
//
// One concept, one place. FSDP, tensor parallelism, the checkpoint writer and the
// checkpoint reader all ask this module for chunk offsets and sizes; nothing else
// computes them. Sharding follows torch.chunk semantics: with N rows over k ranks,
// each of the first ranks gets ceil(N/k) rows, the last non-empty one the rest, and
// any rank whose start is past N gets an empty shard whose offset is N (DTensor's
// convention, which checkpoint dedup relies on).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace contract {

// A hyper-rectangle of a global tensor.
struct Chunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  int64_t numel() const;
  bool operator==(const Chunk& o) const { return offsets == o.offsets && sizes == o.sizes; }
};

// torch.chunk rule for one dimension: the piece of a length-n extent that index i of k owns.
struct Extent {
  int64_t offset;
  int64_t size;
};
Extent shard_extent(int64_t n, int64_t k, int64_t i);
// Sizes of all k pieces (they sum to n); shard_sizes(5, 4) == {2, 2, 1, 0}.
std::vector<int64_t> shard_sizes(int64_t n, int64_t k);

// One sharding applied to the data: split tensor dim `dim` into `parts` pieces and
// keep piece `index`. A layout is a list of such splits *in the order they were
// applied*: tensor parallel first, then FSDP splitting the TP-local piece, which is
// torchtitan's _StridedShard layout. Replicated mesh dimensions add no split.
struct Split {
  int dim;
  int64_t parts;
  int64_t index;
};
// The chunk this rank owns of a tensor of `global_shape` after `splits`.
Chunk local_chunk(const std::vector<int64_t>& global_shape, const std::vector<Split>& splits);

std::string to_string(const Chunk& c);

}  // namespace contract
