#include "contract/mesh.h"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace contract {

const char* name_of(MeshDim d) {
  switch (d) {
    case MeshDim::kPp: return "pp";
    case MeshDim::kDpReplicate: return "dp_replicate";
    case MeshDim::kDpShard: return "dp_shard";
    case MeshDim::kCp: return "cp";
    case MeshDim::kTp: return "tp";
  }
  return "?";
}

std::vector<std::string> mesh_dim_names() {
  std::vector<std::string> names;
  for (MeshDim d : kMeshDims) names.push_back(name_of(d));
  return names;
}

namespace {
// A shape's size, or a coordinate, along `d` (MeshShape and MeshCoord name their fields alike).
template <class ShapeOrCoord>
auto& along(ShapeOrCoord& s, MeshDim d) {
  switch (d) {
    case MeshDim::kPp: return s.pp;
    case MeshDim::kDpReplicate: return s.dp_replicate;
    case MeshDim::kDpShard: return s.dp_shard;
    case MeshDim::kCp: return s.cp;
    case MeshDim::kTp: break;
  }
  return s.tp;
}
}  // namespace

int64_t MeshShape::size(MeshDim d) const { return along(*this, d); }
int64_t MeshCoord::at(MeshDim d) const { return along(*this, d); }

std::string MeshShape::to_compact_string() const {
  std::string out;
  for (MeshDim d : kMeshDims)
    if (size(d) != 1) out += (out.empty() ? "" : ",") + std::string(name_of(d)) + "=" + std::to_string(size(d));
  return out.empty() ? "dp_shard=1" : out;
}

std::string MeshShape::to_string() const {
  std::string out;
  for (MeshDim d : kMeshDims) out += (out.empty() ? "" : ",") + std::string(name_of(d)) + "=" + std::to_string(size(d));
  return out;
}

namespace {
// The sizes written in `spec`; `infer_shard` is set for dp_shard=-1.
MeshShape parse_sizes(const std::string& spec, bool& infer_shard) {
  MeshShape shape;
  infer_shard = false;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--mesh '" + spec + "': '" + item + "' is not NAME=SIZE");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    int64_t size = 0;
    try {
      size_t used = 0;
      size = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw std::invalid_argument("--mesh '" + spec + "': size of " + key + " ('" + value + "') is not an integer");
    }
    if (key == name_of(MeshDim::kDpShard) && size == -1) {
      infer_shard = true;
      continue;
    }
    if (size < 1) throw std::invalid_argument("--mesh '" + spec + "': " + key + " must be >= 1 (or dp_shard=-1)");
    const MeshDim* dim =
        std::find_if(std::begin(kMeshDims), std::end(kMeshDims), [&key](MeshDim d) { return key == name_of(d); });
    if (dim == std::end(kMeshDims)) {
      std::string known;
      for (MeshDim d : kMeshDims) known += (known.empty() ? "" : ", ") + std::string(name_of(d));
      throw std::invalid_argument("--mesh '" + spec + "': unknown dimension '" + key + "' (known: " + known + ")");
    }
    along(shape, *dim) = size;
  }
  return shape;
}
}  // namespace

MeshShape parse_mesh_sizes(const std::string& spec) {
  bool infer_shard = false;
  MeshShape shape = parse_sizes(spec, infer_shard);
  if (infer_shard) throw std::invalid_argument("mesh '" + spec + "': dp_shard=-1 needs a world size; write the size");
  return shape;
}

MeshShape parse_mesh(const std::string& spec, int64_t world_size) {
  bool infer_shard = false;
  MeshShape shape = parse_sizes(spec, infer_shard);
  if (infer_shard) {
    const int64_t rest = shape.pp * shape.dp_replicate * shape.cp * shape.tp;
    if (world_size % rest != 0)
      throw std::invalid_argument("--mesh '" + spec + "': dp_shard=-1 cannot fill world size " +
                                  std::to_string(world_size) +
                                  " (pp x dp_replicate x cp x tp = " + std::to_string(rest) + ")");
    shape.dp_shard = world_size / rest;
  }
  if (shape.world_size() != world_size)
    throw std::invalid_argument("--mesh '" + spec + "' has " + std::to_string(shape.world_size()) + " ranks (" +
                                shape.to_string() + ") but WORLD_SIZE is " + std::to_string(world_size));
  return shape;
}

MeshCoord coord_of(int64_t rank, const MeshShape& s) {
  MeshCoord c;
  c.tp = rank % s.tp;
  c.cp = (rank / s.tp) % s.cp;
  c.dp_shard = (rank / (s.tp * s.cp)) % s.dp_shard;
  c.dp_replicate = (rank / (s.tp * s.cp * s.dp_shard)) % s.dp_replicate;
  c.pp = rank / (s.tp * s.cp * s.dp_shard * s.dp_replicate);
  return c;
}

int64_t rank_of(const MeshCoord& c, const MeshShape& s) {
  return (((c.pp * s.dp_replicate + c.dp_replicate) * s.dp_shard + c.dp_shard) * s.cp + c.cp) * s.tp + c.tp;
}

std::vector<int64_t> group_ranks(int64_t rank, const MeshShape& shape, const std::vector<MeshDim>& dims) {
  const MeshCoord base = coord_of(rank, shape);
  std::vector<int64_t> ranks;
  int64_t count = 1;
  for (auto d : dims) count *= shape.size(d);
  for (int64_t i = 0; i < count; ++i) {
    MeshCoord c = base;
    int64_t rest = i;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
      const int64_t n = shape.size(*it), idx = rest % n;
      rest /= n;
      if (*it == MeshDim::kPp) c.pp = idx;
      if (*it == MeshDim::kDpReplicate) c.dp_replicate = idx;
      if (*it == MeshDim::kDpShard) c.dp_shard = idx;
      if (*it == MeshDim::kCp) c.cp = idx;
      if (*it == MeshDim::kTp) c.tp = idx;
    }
    ranks.push_back(rank_of(c, shape));
  }
  return ranks;
}

int64_t dp_rank_of(const MeshCoord& c, const MeshShape& s) { return c.dp_replicate * s.dp_shard + c.dp_shard; }

}  // namespace contract
