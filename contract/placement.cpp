#include "contract/placement.h"

#include <algorithm>
#include <stdexcept>

namespace contract {

int64_t Chunk::numel() const {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

Extent shard_extent(int64_t n, int64_t k, int64_t i) {
  if (k < 1 || i < 0 || i >= k || n < 0)
    throw std::invalid_argument("shard_extent(" + std::to_string(n) + ", " + std::to_string(k) + ", " +
                                std::to_string(i) + ") is out of range");
  const int64_t full = (n + k - 1) / k;  // ceil(n / k)
  const int64_t start = i * full;
  if (start >= n) return {n, 0};
  return {start, std::min(full, n - start)};
}

std::vector<int64_t> shard_sizes(int64_t n, int64_t k) {
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < k; ++i) sizes.push_back(shard_extent(n, k, i).size);
  return sizes;
}

Chunk local_chunk(const std::vector<int64_t>& global_shape, const std::vector<Split>& splits) {
  Chunk c{std::vector<int64_t>(global_shape.size(), 0), global_shape};
  for (const auto& s : splits) {
    if (s.dim < 0 || s.dim >= static_cast<int>(global_shape.size()))
      throw std::invalid_argument("split of dim " + std::to_string(s.dim) + " on a " +
                                  std::to_string(global_shape.size()) + "-d tensor");
    const Extent e = shard_extent(c.sizes[s.dim], s.parts, s.index);
    // An empty piece sits at the end of the global extent, whatever came before.
    c.offsets[s.dim] = e.size == 0 ? global_shape[s.dim] : c.offsets[s.dim] + e.offset;
    c.sizes[s.dim] = e.size;
  }
  return c;
}

std::string to_string(const Chunk& c) {
  auto list = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  return "offsets " + list(c.offsets) + " sizes " + list(c.sizes);
}

bool Box::empty() const {
  for (size_t d = 0; d < lo.size(); ++d)
    if (hi[d] <= lo[d]) return true;
  return false;
}

Box box_of(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  Box b{offsets, offsets};
  for (size_t d = 0; d < sizes.size(); ++d) b.hi[d] += sizes[d];
  return b;
}

Box intersect(const Box& a, const Box& b) {
  Box o = a;
  for (size_t d = 0; d < a.lo.size(); ++d) o.lo[d] = std::max(a.lo[d], b.lo[d]), o.hi[d] = std::min(a.hi[d], b.hi[d]);
  return o;
}

int64_t first_split_start(const ParamLayout& layout) {
  return local_chunk(layout.global_shape, {layout.splits.front()})
      .offsets[static_cast<size_t>(layout.splits.front().dim)];
}

bool writes_chunk(const ParamLayout& layout, const MeshCoord& coord) {
  const auto& over = layout.sharded_over;
  for (MeshDim d : {MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kCp, MeshDim::kTp})
    if (std::find(over.begin(), over.end(), d) == over.end() && coord.at(d) != 0) return false;
  return true;
}

}  // namespace contract
