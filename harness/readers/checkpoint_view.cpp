#include "readers/checkpoint_view.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "readers/dcp.h"
#include "contract/hash.h"

namespace meshtest {

namespace fs = std::filesystem;
using dcp::dims_text;
using dcp::numel_of;

namespace {

[[noreturn]] void fail(const std::string& message) { throw CheckpointError(message); }

// Keys are short in practice; a damaged file's may not be.
std::string key_label(const std::string& key) {
  return "key '" + (key.size() <= 200 ? key : key.substr(0, 200) + "...") + "'";
}

// A chunk's place in the global tensor.
struct Box {
  std::vector<int64_t> offsets, sizes;
};

bool overlap(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (a.offsets[d] >= b.offsets[d] + b.sizes[d] || b.offsets[d] >= a.offsets[d] + a.sizes[d]) return false;
  return true;
}

// Every element of `shape` in exactly one box: no overlap, and the volumes add up. Boxes are
// swept in order of their first-dim offset and compared only with those still open there, so
// the usual Shard(0) layouts cost n log n, not n^2.
void check_exact_coverage(const std::string& where, const std::vector<int64_t>& shape, const std::vector<Box>& boxes) {
  int64_t covered = 0;
  std::vector<size_t> order;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const int64_t n = numel_of(boxes[i].sizes);
    if (n == 0) continue;
    if (__builtin_add_overflow(covered, n, &covered)) fail(where + ": chunks cover more elements than the tensor has");
    order.push_back(i);
  }
  if (!shape.empty()) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return boxes[a].offsets[0] < boxes[b].offsets[0]; });
    std::vector<size_t> open;
    for (size_t i : order) {
      const int64_t start = boxes[i].offsets[0];
      open.erase(std::remove_if(open.begin(), open.end(),
                                [&](size_t j) { return boxes[j].offsets[0] + boxes[j].sizes[0] <= start; }),
                 open.end());
      for (size_t j : open)
        if (overlap(boxes[i], boxes[j]))
          fail(where + ": chunks at offsets " + dims_text(boxes[j].offsets) + " and " + dims_text(boxes[i].offsets) + " overlap");
      open.push_back(i);
    }
  } else if (order.size() > 1) {
    fail(where + ": a scalar tensor has " + std::to_string(order.size()) + " chunks (they overlap)");
  }
  if (covered != numel_of(shape))
    fail(where + ": chunks cover " + std::to_string(covered) + " of the " + std::to_string(numel_of(shape)) +
         " elements of the " + dims_text(shape) + " tensor (a chunk is missing)");
}

// Copies a chunk's row-major values into the row-major global tensor, one innermost run at a time.
void place(std::vector<double>& global, const std::vector<int64_t>& shape, const Box& box, const std::vector<double>& values) {
  const size_t dims = shape.size();
  if (dims == 0) {
    global[0] = values[0];
    return;
  }
  const int64_t run = box.sizes[dims - 1];
  const int64_t runs = run == 0 ? 0 : static_cast<int64_t>(values.size()) / run;
  std::vector<int64_t> index(dims - 1, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t at = 0;
    for (size_t d = 0; d < dims; ++d) at = at * shape[d] + box.offsets[d] + (d + 1 < dims ? index[d] : 0);
    std::copy_n(values.begin() + r * run, run, global.begin() + at);
    for (size_t d = dims - 1; d-- > 0;) {
      if (++index[d] < box.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

// What both formats provide: the listing, and each tensor's chunks one at a time.
struct CheckpointView::Impl {
  std::string step_dir, format;
  std::vector<CheckpointEntry> entries;
  std::vector<std::string> warnings;

  virtual ~Impl() = default;
  virtual std::vector<Box> boxes(const std::string& key) const = 0;
  // Checks everything cheap (records in range, long enough) before the global tensor is allocated.
  virtual void check_chunks(const std::string& key) const = 0;
  virtual std::vector<double> read_chunk(const std::string& key, size_t chunk) const = 0;
};

namespace {

class DcpCheckpoint : public CheckpointView::Impl {
 public:
  explicit DcpCheckpoint(const std::string& dir) : metadata_(dcp::read_metadata(dir)) {
    step_dir = dir;
    format = "pytorch-dcp";
    warnings = metadata_.warnings;
    for (size_t i = 0; i < metadata_.items.size(); ++i) {
      const dcp::Item& item = metadata_.items[i];
      CheckpointEntry e{item.key, item.is_tensor, item.dtype, item.shape, 0, 0};
      e.chunks = item.is_tensor ? item.chunks.size() : item.records.size();
      for (const auto& c : item.chunks) e.bytes += c.has_record ? c.record.length : 0;
      for (const auto& r : item.records) e.bytes += r.length;
      entries.push_back(std::move(e));
      by_key_[item.key] = i;
    }
  }

  std::vector<Box> boxes(const std::string& key) const override {
    std::vector<Box> out;
    for (const auto& c : item(key).chunks) out.push_back({c.offsets, c.sizes});
    return out;
  }
  void check_chunks(const std::string& key) const override { dcp::check_chunk_records(step_dir, item(key)); }
  std::vector<double> read_chunk(const std::string& key, size_t chunk) const override {
    const dcp::Item& it = item(key);
    return dcp::read_chunk(step_dir, it, it.chunks.at(chunk));
  }

 private:
  const dcp::Item& item(const std::string& key) const { return metadata_.items.at(by_key_.at(key)); }
  dcp::Metadata metadata_;
  std::map<std::string, size_t> by_key_;
};

// meshtrain's format (docs/checkpoint.md, format_version 2): raw little-endian float32 chunks
// (bfloat16 in a model-only export) with one mix64 checksum per leaf.
class MeshtrainCheckpoint : public CheckpointView::Impl {
  struct Chunk {
    Box box;
    std::string file;
    uint64_t byte_offset = 0, byte_length = 0, leaf_bytes = 0, hash_offset = 0;
    bool has_hashes = false;
  };

 public:
  explicit MeshtrainCheckpoint(const std::string& dir) {
    step_dir = dir;
    format = "meshtrain";
    const std::string path = metadata_path();
    const dcp::FileReader file(path);
    const std::vector<uint8_t> bytes = file.read(0, file.size(), path);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(bytes.begin(), bytes.end());
    } catch (const nlohmann::json::exception& e) {
      fail(path + ": not valid JSON: " + e.what());
    }
    read_document(doc);
  }

  std::vector<Box> boxes(const std::string& key) const override {
    std::vector<Box> out;
    for (const auto& c : chunks_.at(key)) out.push_back(c.box);
    return out;
  }

  void check_chunks(const std::string& key) const override {
    const CheckpointEntry& e = entry(key);
    const uint64_t elem = element_bytes(key);
    std::map<std::string, uint64_t> sizes;
    for (const auto& c : chunks_.at(key)) {
      const std::string label = chunk_label(key, c);
      uint64_t needed = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(numel_of(c.box.sizes)), elem, &needed) ||
          c.byte_length != needed)
        fail(label + ": byte_length is not " + std::to_string(elem) + " x the chunk's " +
             std::to_string(numel_of(c.box.sizes)) + " elements");
      auto it = sizes.find(c.file);
      if (it == sizes.end()) it = sizes.emplace(c.file, dcp::FileReader(step_dir + "/" + c.file).size()).first;
      if (c.byte_offset > it->second || c.byte_length > it->second - c.byte_offset)
        fail(label + " lies beyond the end of the file (size " + std::to_string(it->second) + ")");
    }
  }

  std::vector<double> read_chunk(const std::string& key, size_t index) const override {
    const Chunk& c = chunks_.at(key).at(index);
    const std::string label = chunk_label(key, c);
    const dcp::FileReader file(step_dir + "/" + c.file);
    const std::vector<uint8_t> bytes = file.read(c.byte_offset, c.byte_length, label);
    if (c.has_hashes) verify_leaves(file, c, bytes, label);
    const std::string& dtype = entry(key).dtype;
    const uint64_t elem = element_bytes(key);
    std::vector<double> out(bytes.size() / elem);
    for (size_t i = 0; i < out.size(); ++i) out[i] = dcp::element_to_double(dtype, bytes.data() + elem * i);
    return out;
  }

 private:
  uint64_t element_bytes(const std::string& key) const {
    const CheckpointEntry& e = entry(key);
    if (e.dtype == "float32") return 4;
    if (e.dtype == "bfloat16") return 2;
    fail(metadata_path() + ": " + key_label(key) + ": dtype " + e.dtype + " (known: float32, bfloat16)");
  }

  std::string metadata_path() const { return step_dir + "/.metadata"; }

  std::string chunk_label(const std::string& key, const Chunk& c) const {
    return step_dir + "/" + c.file + ": chunk of " + key_label(key) + " at offsets " + dims_text(c.box.offsets) +
           " (byte offset " + std::to_string(c.byte_offset) + " length " + std::to_string(c.byte_length) + ")";
  }

  const CheckpointEntry& entry(const std::string& key) const {
    return *std::lower_bound(entries.begin(), entries.end(), key,
                             [](const CheckpointEntry& e, const std::string& k) { return e.key < k; });
  }

  void verify_leaves(const dcp::FileReader& file, const Chunk& c, const std::vector<uint8_t>& data, const std::string& label) const {
    if (c.leaf_bytes == 0) fail(label + ": leaf_bytes is 0");
    // Rounded up without adding leaf_bytes first: a damaged leaf_bytes near 2^64 would wrap that
    // sum to 0 leaves and skip the checksums silently.
    const uint64_t leaves = data.size() / c.leaf_bytes + (data.size() % c.leaf_bytes != 0);
    const std::vector<uint8_t> hashes = file.read(c.hash_offset, leaves * 8, label + ": checksums");
    for (uint64_t i = 0; i < leaves; ++i) {
      const uint64_t at = i * c.leaf_bytes, n = std::min<uint64_t>(c.leaf_bytes, data.size() - at);
      uint64_t want = 0;
      for (int b = 7; b >= 0; --b) want = (want << 8) | hashes[i * 8 + b];
      if (contract::mix64(data.data() + at, n) != want)
        fail(label + ": leaf " + std::to_string(i) + " (bytes " + std::to_string(at) + ".." + std::to_string(at + n) +
             ") fails its checksum (damaged data)");
    }
  }

  // nlohmann's get<integer>() converts a float with a static_cast, which is undefined behaviour
  // when the value does not fit; and an integer literal beyond uint64 parses as a float. The
  // format writes integers only, so anything else is refused before it is converted.
  static std::string shown(const nlohmann::json& j) { return j.is_primitive() ? j.dump() : j.type_name(); }

  static uint64_t count(const nlohmann::json& chunk, const char* name, const std::string& where) {
    const nlohmann::json& j = chunk.at(name);
    if (!j.is_number_unsigned()) fail(where + ": " + name + " " + shown(j) + " is not a non-negative integer");
    return j.get<uint64_t>();
  }

  static std::vector<int64_t> dims(const nlohmann::json& j, const std::string& where) {
    if (j.is_array())
      for (const auto& d : j)
        if (!d.is_number_integer()) fail(where + ": dim " + shown(d) + " is not an integer");
    std::vector<int64_t> out = j.get<std::vector<int64_t>>();
    for (int64_t d : out)
      if (d < 0) fail(where + ": negative dim in " + j.dump());
    return out;
  }

  void read_document(const nlohmann::json& doc) {
    const std::string path = metadata_path();
    if (!doc.is_object() || !doc.contains("format_version")) fail(path + ": no format_version: not a meshtrain checkpoint");
    if (doc.at("format_version") != 2)
      fail(path + ": format_version " + doc.at("format_version").dump() + " (this reader reads format 2; format 1 is refused)");
    if (!doc.contains("keys") || !doc.at("keys").is_object()) fail(path + ": no \"keys\" object");
    for (const auto& [key, j] : doc.at("keys").items()) {
      try {
        read_key(key, j);
      } catch (const nlohmann::json::exception& e) {
        fail(path + ": " + key_label(key) + ": " + e.what());
      }
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  }

  void read_key(const std::string& key, const nlohmann::json& j) {
    const std::string where = metadata_path() + ": " + key_label(key);
    CheckpointEntry e;
    e.key = key;
    const std::string kind = j.at("kind").get<std::string>();
    if (kind != "tensor") {
      if (kind != "object") warnings.push_back(where + ": unknown kind '" + kind + "'; listed as a non-tensor item");
      entries.push_back(std::move(e));
      return;
    }
    e.is_tensor = true;
    e.dtype = j.at("dtype").get<std::string>();
    e.shape = dims(j.at("shape"), where);
    int64_t numel = 1;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(numel, d, &numel)) fail(where + ": shape overflows");
    auto& chunks = chunks_[key];
    for (const auto& jc : j.at("chunks")) {
      Chunk c{{dims(jc.at("offsets"), where), dims(jc.at("sizes"), where)}, jc.at("file").get<std::string>(),
              count(jc, "byte_offset", where), count(jc, "byte_length", where)};
      check_chunk_box(e.shape, c, where);
      if (c.file.empty() || c.file[0] == '/' || c.file.find("..") != std::string::npos)
        fail(where + ": file '" + c.file + "' leaves the step folder");
      if (jc.contains("leaf_bytes") && jc.contains("hash_offset")) {
        c.leaf_bytes = count(jc, "leaf_bytes", where);
        c.hash_offset = count(jc, "hash_offset", where);
        c.has_hashes = true;
      }
      e.bytes += c.byte_length;
      chunks.push_back(std::move(c));
    }
    e.chunks = chunks.size();
    entries.push_back(std::move(e));
  }

  static void check_chunk_box(const std::vector<int64_t>& shape, const Chunk& c, const std::string& where) {
    if (c.box.offsets.size() != shape.size() || c.box.sizes.size() != shape.size())
      fail(where + ": a chunk's offsets/sizes do not have the tensor's " + std::to_string(shape.size()) + " dims");
    for (size_t d = 0; d < shape.size(); ++d)
      if (c.box.offsets[d] > shape[d] || c.box.sizes[d] > shape[d] - c.box.offsets[d])
        fail(where + ": chunk at offsets " + dims_text(c.box.offsets) + " sizes " + dims_text(c.box.sizes) +
             " lies outside the " + dims_text(shape) + " tensor");
  }

  std::map<std::string, std::vector<Chunk>> chunks_;
};

bool is_step_name(const std::string& name, long long* step) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return false;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *step = std::stoll(name.substr(5));
  return true;
}

std::string resolve_step_dir(const std::string& path, long long step) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) fail(path + ": no such folder");
  if (fs::exists(fs::path(path) / ".metadata", ec)) {
    long long named = -1;
    if (step >= 0 && is_step_name(fs::path(path).lexically_normal().filename().string(), &named) && named != step)
      fail(path + ": is step-" + std::to_string(named) + ", but step " + std::to_string(step) + " was asked for");
    return path;
  }
  std::map<long long, bool> steps;  // step -> complete (has .metadata)
  for (const auto& child : fs::directory_iterator(path, ec)) {
    long long n = -1;
    if (child.is_directory(ec) && is_step_name(child.path().filename().string(), &n))
      steps[n] = fs::exists(child.path() / ".metadata", ec);
  }
  std::string listing;
  for (const auto& [n, complete] : steps) listing += (listing.empty() ? "" : ", ") + ("step-" + std::to_string(n)) + (complete ? "" : " (no .metadata)");
  if (step >= 0) {
    auto it = steps.find(step);
    if (it == steps.end()) fail(path + ": no step-" + std::to_string(step) + " folder (found: " + (listing.empty() ? "none" : listing) + ")");
    if (!it->second) fail(path + "/step-" + std::to_string(step) + ": no .metadata (an unfinished or failed save?)");
    return (fs::path(path) / ("step-" + std::to_string(step))).string();
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (it->second) return (fs::path(path) / ("step-" + std::to_string(it->first))).string();
  fail(path + ": holds no .metadata and no complete step-<N> folder (found: " + (listing.empty() ? "none" : listing) + ")");
}

// A pickle starts with PROTO (0x80); meshtrain's JSON with '{'.
bool metadata_is_pickle(const std::string& step_dir) {
  const std::string path = step_dir + "/.metadata";
  const dcp::FileReader file(path);
  const std::vector<uint8_t> head = file.read(0, std::min<uint64_t>(file.size(), 64), path);
  if (!head.empty() && head[0] == 0x80) return true;
  for (uint8_t c : head) {
    if (c == '{') return false;
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
  }
  fail(path + ": neither a pickle (PyTorch DCP) nor JSON (meshtrain)");
}

}  // namespace

CheckpointView CheckpointView::open(const std::string& path, long long step) {
  const std::string dir = resolve_step_dir(path, step);
  if (metadata_is_pickle(dir)) return CheckpointView(std::make_shared<DcpCheckpoint>(dir));
  return CheckpointView(std::make_shared<MeshtrainCheckpoint>(dir));
}

const std::string& CheckpointView::step_dir() const { return impl_->step_dir; }
const std::string& CheckpointView::format() const { return impl_->format; }
const std::vector<CheckpointEntry>& CheckpointView::entries() const { return impl_->entries; }
std::vector<std::string> CheckpointView::warnings() const { return impl_->warnings; }

const CheckpointEntry* CheckpointView::find(const std::string& key) const {
  auto it = std::lower_bound(impl_->entries.begin(), impl_->entries.end(), key,
                             [](const CheckpointEntry& e, const std::string& k) { return e.key < k; });
  return it != impl_->entries.end() && it->key == key ? &*it : nullptr;
}

std::vector<double> CheckpointView::read_tensor(const std::string& key) const {
  const CheckpointEntry* e = find(key);
  if (!e) fail(impl_->step_dir + ": no " + key_label(key) + " in the checkpoint");
  if (!e->is_tensor) fail(impl_->step_dir + ": " + key_label(key) + " is not a tensor");
  const std::vector<Box> boxes = impl_->boxes(key);
  check_exact_coverage(impl_->step_dir + "/.metadata: " + key_label(key), e->shape, boxes);
  impl_->check_chunks(key);
  std::vector<double> global(static_cast<size_t>(numel_of(e->shape)));
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (numel_of(boxes[i].sizes) == 0) continue;
    const std::vector<double> values = impl_->read_chunk(key, i);
    if (values.size() != static_cast<size_t>(numel_of(boxes[i].sizes)))
      fail(impl_->step_dir + ": " + key_label(key) + ": chunk at offsets " + dims_text(boxes[i].offsets) + " read " +
           std::to_string(values.size()) + " elements, expected " + std::to_string(numel_of(boxes[i].sizes)));
    place(global, e->shape, boxes[i], values);
  }
  return global;
}

std::string with_model_prefix(const std::string& key, const std::string& prefix) {
  if (prefix.empty()) return key;
  for (const char* ns : {"model.", "optimizer.", "lr_scheduler", "dataloader", "train_state"})
    if (key.rfind(ns, 0) == 0) return key;
  return prefix + key;
}

}  // namespace meshtest
