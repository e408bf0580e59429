// The placement algebra: which piece of a global tensor each rank holds.
//
// One concept, one place. FSDP, tensor parallelism, the checkpoint writer and the
// checkpoint reader all ask this module for chunk offsets and sizes, for whether two
// chunks overlap and for which rank writes a replicated chunk; nothing else computes them. Sharding follows torch.chunk semantics: with N rows over k ranks,
// each of the first ranks gets ceil(N/k) rows, the last non-empty one the rest, and
// any rank whose start is past N gets an empty shard whose offset is N (DTensor's
// convention, which checkpoint dedup relies on).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "contract/mesh.h"

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

// A chunk as two corners, [lo, hi) per dimension: what overlap tests need.
struct Box {
  std::vector<int64_t> lo, hi;
  bool empty() const;  // some extent is empty
};
Box box_of(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes);
Box intersect(const Box& a, const Box& b);  // empty when they do not overlap

// What one parameter (or state buffer) became on this rank: the placement facts only, no
// process groups, so a checkpoint can be read or written from them without a job.
struct ParamLayout {
  std::string name;  // model fqn, e.g. "layers.0.attention.wq.weight"
  std::vector<int64_t> global_shape;
  std::vector<Split> splits;            // how the global tensor was cut, in order
  Chunk chunk;                          // this rank's piece of the global tensor
  std::vector<MeshDim> sharded_over;    // mesh dims whose ranks hold different pieces
  std::vector<int64_t> tp_local_shape;  // the piece tensor parallelism leaves before FSDP splits it
  // For the data-parallel parametrization: the row counts of every dp_shard piece.
  std::vector<int64_t> shard_rows;
};

// The offset along the split dimension where the first split (tensor parallel's) starts
// this rank's piece: the first vocabulary id of a vocabulary-parallel embedding or output.
int64_t first_split_start(const ParamLayout& layout);

// One copy of each replicated chunk is written: by the rank at coordinate 0 of every data,
// context and tensor parallel dimension the layout is not sharded over (pipeline stages hold
// different parameters, so pp never replicates).
bool writes_chunk(const ParamLayout& layout, const MeshCoord& coord);

}  // namespace contract
