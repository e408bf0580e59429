#include "readers/checkpoint_view.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "readers/dcp.h"
#include "readers/megatron.h"
#include "readers/stored_bytes.h"
#include "readers/safetensors.h"
#include "contract/checkpoint_format.h"

namespace meshtest {

namespace fs = std::filesystem;
using dcp::dims_text;
using dcp::numel_of;

namespace {

[[noreturn]] void fail(const std::string& message) { throw CheckpointError(message); }

using contract::key_label;

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
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return boxes[a].offsets[0] < boxes[b].offsets[0]; });
    std::vector<size_t> open;
    for (size_t i : order) {
      const int64_t start = boxes[i].offsets[0];
      open.erase(std::remove_if(open.begin(), open.end(),
                                [&](size_t j) { return boxes[j].offsets[0] + boxes[j].sizes[0] <= start; }),
                 open.end());
      for (size_t j : open)
        if (overlap(boxes[i], boxes[j]))
          fail(where + ": chunks at offsets " + dims_text(boxes[j].offsets) + " and " + dims_text(boxes[i].offsets) +
               " overlap");
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
void place(std::vector<double>& global, const std::vector<int64_t>& shape, const Box& box,
           const std::vector<double>& values) {
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

// Every byte of a DCP step's data files in exactly one record: records of one file do not
// overlap, each `.distcp` file holds no byte that no record names, and none lies in the folder
// unnamed. A chunk written twice (two ranks saving a replicated tensor) leaves the bytes of the
// copy .metadata did not keep; loading never sees them.
void check_dcp_records_fill_files(const std::string& step_dir, const dcp::Metadata& metadata) {
  struct Placed {
    uint64_t offset, length;
    std::string what;
  };
  std::map<std::string, std::vector<Placed>> by_file;
  for (const dcp::Item& item : metadata.items) {
    for (const dcp::Chunk& c : item.chunks)
      if (c.has_record)
        by_file[c.record.file].push_back(
            {c.record.offset, c.record.length, key_label(item.key) + " chunk at " + dims_text(c.offsets)});
    for (const dcp::Record& r : item.records) by_file[r.file].push_back({r.offset, r.length, key_label(item.key)});
  }
  for (auto& [file, placed] : by_file) {
    dcp::check_record_path(step_dir, file);
    std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
    uint64_t named = 0;
    for (size_t i = 0; i < placed.size(); ++i) {
      if (i > 0 && placed[i].offset < placed[i - 1].offset + placed[i - 1].length)
        fail((step_dir + "/" + file) + ": the records of " + placed[i - 1].what + " and " + placed[i].what +
             " overlap");
      named += placed[i].length;
    }
    const uint64_t size = FileReader((step_dir + "/" + file)).size();
    if (named != size)
      fail((step_dir + "/" + file) + " holds " + std::to_string(size) + " bytes but its records name " +
           std::to_string(named) +
           (size > named ? " (" + std::to_string(size - named) +
                               " bytes belong to no record: a chunk written twice, whose "
                               "other copy .metadata kept)"
                         : ""));
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(step_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".distcp" && !by_file.count(name))
      fail((step_dir + "/" + name) + " is a data file that no record of .metadata names (" +
           std::to_string(entry.file_size(ec)) + " bytes written for nothing)");
  }
}

}  // namespace

// What both formats provide: the listing, and each tensor's chunks one at a time.
struct CheckpointView::Impl {
  std::string step_dir, format;
  std::vector<CheckpointEntry> entries;
  std::vector<std::string> warnings;
  std::string about;                      // see CheckpointView::about()
  std::map<std::string, uint64_t> files;  // see CheckpointView::files()

  virtual ~Impl() = default;
  virtual std::vector<Box> boxes(const std::string& key) const = 0;
  // Checks everything cheap (records in range, long enough) before the global tensor is allocated.
  virtual void check_chunks(const std::string& key) const = 0;
  virtual std::vector<double> read_chunk(const std::string& key, size_t chunk) const = 0;
  // Where the format has records that could be written twice: each byte in one of them.
  virtual void check_records_fill_files() const {}
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
  void check_records_fill_files() const override { check_dcp_records_fill_files(step_dir, metadata_); }
  std::vector<double> read_chunk(const std::string& key, size_t chunk) const override {
    const dcp::Item& it = item(key);
    return dcp::read_chunk(step_dir, it, it.chunks.at(chunk));
  }

 private:
  const dcp::Item& item(const std::string& key) const { return metadata_.items.at(by_key_.at(key)); }
  dcp::Metadata metadata_;
  std::map<std::string, size_t> by_key_;
};

// meshtrain's format: what the metadata says is contract/checkpoint_format.h, the definition
// meshtrain writes through; this reads the chunks it points at and checks their leaf checksums.
class MeshtrainCheckpoint : public CheckpointView::Impl {
 public:
  explicit MeshtrainCheckpoint(const std::string& dir) {
    step_dir = dir;
    format = "meshtrain";
    const std::string path = metadata_path();
    const FileReader file(path);
    const std::vector<uint8_t> bytes = file.read(0, file.size(), path);
    try {
      metadata_ =
          contract::parse_metadata(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
    } catch (const contract::CheckpointFormatError& e) {
      fail(e.what());
    }
    about = "step " + std::to_string(metadata_.step) + ", format " + std::to_string(metadata_.format_version) +
            ", written under " + (metadata_.writer_mesh.empty() ? "?" : metadata_.writer_mesh) + ", key style " +
            metadata_.key_style;
    for (const auto& [key, k] : metadata_.keys) {  // a std::map: entries come out sorted
      CheckpointEntry e;
      e.key = key;
      e.is_tensor = k.is_tensor();
      if (!k.is_tensor() && !k.is_object())
        warnings.push_back(path + ": " + key_label(key) + ": unknown kind '" + k.kind +
                           "'; listed as a non-tensor item");
      e.dtype = k.dtype;
      e.shape = k.shape;
      e.chunks = k.chunks.size();
      e.bytes = k.stored_bytes();
      for (const auto& c : k.chunks) files[c.file] += c.byte_length;
      entries.push_back(std::move(e));
    }
  }

  std::vector<Box> boxes(const std::string& key) const override {
    std::vector<Box> out;
    for (const auto& c : chunks(key)) out.push_back({c.offsets, c.sizes});
    return out;
  }

  void check_chunks(const std::string& key) const override {
    const uint64_t elem = element_bytes(key);
    std::map<std::string, uint64_t> sizes;
    for (const auto& c : chunks(key)) {
      const std::string label = chunk_label(key, c);
      uint64_t needed = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(numel_of(c.sizes)), elem, &needed) || c.byte_length != needed)
        fail(label + ": byte_length is not " + std::to_string(elem) + " x the chunk's " +
             std::to_string(numel_of(c.sizes)) + " elements");
      auto it = sizes.find(c.file);
      if (it == sizes.end()) it = sizes.emplace(c.file, FileReader(step_dir + "/" + c.file).size()).first;
      if (c.byte_offset > it->second || c.byte_length > it->second - c.byte_offset)
        fail(label + " lies beyond the end of the file (size " + std::to_string(it->second) + ")");
    }
  }

  std::vector<double> read_chunk(const std::string& key, size_t index) const override {
    const contract::SavedChunk& c = chunks(key).at(index);
    const std::string label = chunk_label(key, c);
    const FileReader file(step_dir + "/" + c.file);
    const std::vector<uint8_t> bytes = file.read(c.byte_offset, c.byte_length, label);
    if (c.has_checksums) verify_leaves(file, c, bytes, label);
    const std::string& dtype = metadata_.keys.at(key).dtype;
    const uint64_t elem = element_bytes(key);
    std::vector<double> out(bytes.size() / elem);
    for (size_t i = 0; i < out.size(); ++i) out[i] = element_to_double(dtype, bytes.data() + elem * i);
    return out;
  }

 private:
  const std::vector<contract::SavedChunk>& chunks(const std::string& key) const {
    return metadata_.keys.at(key).chunks;
  }

  uint64_t element_bytes(const std::string& key) const {
    const std::string& dtype = metadata_.keys.at(key).dtype;
    if (const int64_t n = contract::dtype_bytes(dtype)) return static_cast<uint64_t>(n);
    fail(metadata_path() + ": " + key_label(key) + ": dtype " + dtype +
         " (known: " + std::string(contract::kKnownDtypes) + ")");
  }

  std::string metadata_path() const { return step_dir + "/" + std::string(contract::kMetadataFile); }

  std::string chunk_label(const std::string& key, const contract::SavedChunk& c) const {
    return step_dir + "/" + c.file + ": chunk of " + key_label(key) + " at offsets " + dims_text(c.offsets) +
           " (byte offset " + std::to_string(c.byte_offset) + " length " + std::to_string(c.byte_length) + ")";
  }

  void verify_leaves(const FileReader& file, const contract::SavedChunk& c, const std::vector<uint8_t>& data,
                     const std::string& label) const {
    if (c.leaf_bytes == 0) fail(label + ": leaf_bytes is 0");
    const uint64_t leaves = contract::leaf_count(data.size(), c.leaf_bytes);
    const std::vector<uint8_t> hashes =
        file.read(c.hash_offset, leaves * contract::kChecksumBytes, label + ": checksums");
    for (uint64_t i = 0; i < leaves; ++i) {
      const uint64_t at = i * c.leaf_bytes, n = std::min<uint64_t>(c.leaf_bytes, data.size() - at);
      uint64_t want = 0;  // little-endian
      for (int b = contract::kChecksumBytes - 1; b >= 0; --b)
        want = (want << 8) | hashes[i * contract::kChecksumBytes + b];
      if (contract::leaf_checksum(data.data() + at, n) != want)
        fail(label + ": leaf " + std::to_string(i) + " (bytes " + std::to_string(at) + ".." + std::to_string(at + n) +
             ") fails its checksum (damaged data)");
    }
  }

  contract::CheckpointMetadata metadata_;
};

// Hugging Face safetensors: one file, or a folder with the single file or an index and its shards.
// Each tensor is one chunk, whole; the file's own checks ran when it was opened.
class SafetensorsCheckpoint : public CheckpointView::Impl {
 public:
  explicit SafetensorsCheckpoint(const std::string& path) : st_(safetensors::open(path)) {
    step_dir = path;
    format = "safetensors";
    for (size_t i = 0; i < st_.tensors.size(); ++i) {
      const safetensors::Tensor& t = st_.tensors[i];
      entries.push_back({t.key, true, t.dtype, t.shape, 1, t.length});
      by_key_[t.key] = i;
    }
    for (const auto& [file, region] : st_.data_regions)
      files[fs::path(file).filename().string()] = region.second - region.first;
    for (const auto& [k, v] : st_.metadata) about += (about.empty() ? "metadata: " : ", ") + k + "=" + v;
  }
  std::vector<Box> boxes(const std::string& key) const override {
    const std::vector<int64_t>& shape = tensor(key).shape;
    return {Box{std::vector<int64_t>(shape.size(), 0), shape}};
  }
  void check_chunks(const std::string&) const override {}  // checked against the file at open
  std::vector<double> read_chunk(const std::string& key, size_t) const override {
    return safetensors::read(tensor(key));
  }
  void check_records_fill_files() const override { safetensors::check_data_covered(st_); }

 private:
  const safetensors::Tensor& tensor(const std::string& key) const { return st_.tensors.at(by_key_.at(key)); }
  safetensors::Checkpoint st_;
  std::map<std::string, size_t> by_key_;
};

// Inside a Hugging Face checkpoint-<N> folder without safetensors, FSDP's sharded state dict is
// DCP in pytorch_model_fsdp_0/; `dir` itself otherwise.
std::string hf_model_dir(const fs::path& dir) {
  std::error_code ec;
  if (!safetensors::is_safetensors(dir.string()) &&
      fs::exists(dir / "pytorch_model_fsdp_0" / contract::kMetadataFile, ec))
    return (dir / "pytorch_model_fsdp_0").string();
  return dir.string();
}

// The Hugging Face Trainer's checkpoint-<N> folders under `path`: the newest complete one (its
// trainer_state.json, written last, is there), or checkpoint-<step>; `path` itself when it holds
// none (a checkpoint-<N> folder itself, or not the Trainer's).
std::string hf_checkpoint_dir(const std::string& path, long long& step) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  std::map<long long, bool> found;  // step -> complete
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0 || !entry.is_directory()) continue;
    const std::string digits = name.substr(11);
    if (digits.empty() || digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    found[std::stoll(digits)] = fs::exists(entry.path() / "trainer_state.json", ec);
  }
  if (found.empty()) return hf_model_dir(path);
  std::string listing;
  for (const auto& [n, complete] : found)
    listing += (listing.empty() ? "" : ", ") + ("checkpoint-" + std::to_string(n)) +
               (complete ? "" : " (no trainer_state.json)");
  long long chosen = -1;
  if (step >= 0) {
    if (!found.count(step)) fail(path + ": no checkpoint-" + std::to_string(step) + " folder (found: " + listing + ")");
    chosen = step;
  } else {
    for (const auto& [n, complete] : found)
      if (complete) chosen = n;
    if (chosen < 0) fail(path + ": no complete checkpoint-<N> folder (found: " + listing + ")");
  }
  step = -1;  // chosen here
  return hf_model_dir(fs::path(path) / ("checkpoint-" + std::to_string(chosen)));
}

std::string resolve_step_dir(const std::string& path, long long step) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) fail(path + ": no such folder");
  if (fs::exists(fs::path(path) / contract::kMetadataFile, ec)) {
    const auto named = contract::parse_step_folder_name(fs::path(path).lexically_normal().filename().string());
    if (step >= 0 && named && *named != step)
      fail(path + ": is " + contract::step_folder_name(*named) + ", but step " + std::to_string(step) +
           " was asked for");
    return path;
  }
  const std::map<int64_t, bool> steps = contract::list_step_folders(path);  // step -> complete
  std::string listing;
  for (const auto& [n, complete] : steps)
    listing += (listing.empty() ? "" : ", ") + contract::step_folder_name(n) + (complete ? "" : " (no .metadata)");
  const std::string found = " (found: " + (listing.empty() ? std::string("none") : listing) + ")";
  if (step >= 0) {
    auto it = steps.find(step);
    if (it == steps.end()) fail(path + ": no " + contract::step_folder_name(step) + " folder" + found);
    if (!it->second)
      fail(path + "/" + contract::step_folder_name(step) + ": no .metadata (an unfinished or failed save?)");
    return (fs::path(path) / contract::step_folder_name(step)).string();
  }
  if (const auto latest = contract::latest_complete_step(path))
    return (fs::path(path) / contract::step_folder_name(*latest)).string();
  fail(path + ": holds no .metadata and no complete step-<N> folder" + found);
}

// A pickle starts with PROTO (0x80); meshtrain's JSON with '{'.
bool metadata_is_pickle(const std::string& step_dir) {
  const std::string path = step_dir + "/.metadata";
  const FileReader file(path);
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
  const std::string where = megatron_step_dir(hf_checkpoint_dir(path, step), step);
  std::error_code ec;
  if (!fs::exists(fs::path(where) / contract::kMetadataFile, ec) && safetensors::is_safetensors(where))
    return CheckpointView(std::make_shared<SafetensorsCheckpoint>(where));
  const std::string dir = resolve_step_dir(where, step);
  if (metadata_is_pickle(dir)) return CheckpointView(std::make_shared<DcpCheckpoint>(dir));
  return CheckpointView(std::make_shared<MeshtrainCheckpoint>(dir));
}

const std::string& CheckpointView::step_dir() const { return impl_->step_dir; }
const std::string& CheckpointView::format() const { return impl_->format; }
const std::vector<CheckpointEntry>& CheckpointView::entries() const { return impl_->entries; }
std::vector<std::string> CheckpointView::warnings() const { return impl_->warnings; }
const std::string& CheckpointView::about() const { return impl_->about; }
const std::map<std::string, uint64_t>& CheckpointView::files() const { return impl_->files; }

const CheckpointEntry* CheckpointView::find(const std::string& key) const {
  auto it = std::lower_bound(impl_->entries.begin(), impl_->entries.end(), key,
                             [](const CheckpointEntry& e, const std::string& k) { return e.key < k; });
  return it != impl_->entries.end() && it->key == key ? &*it : nullptr;
}

void CheckpointView::check_stored_once() const {
  for (const auto& e : impl_->entries)
    if (e.is_tensor)
      check_exact_coverage(impl_->step_dir + "/.metadata: " + key_label(e.key), e.shape, impl_->boxes(e.key));
  impl_->check_records_fill_files();
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
  return contract::has_state_namespace(key) ? key : prefix + key;
}

TensorComparison compare_tensors(const CheckpointView& a, const std::string& key_a, const CheckpointView& b,
                                 const std::string& key_b, const ValueTolerance& tolerance,
                                 const std::function<void(const UnequalElement&)>& on_unequal) {
  const CheckpointEntry *ea = a.find(key_a), *eb = b.find(key_b);
  if (ea && eb && ea->shape != eb->shape)
    fail(a.step_dir() + ": " + key_label(key_a) + " " + dims_text(ea->shape) + " and " + b.step_dir() + ": " +
         key_label(key_b) + " " + dims_text(eb->shape) + " differ in shape; their values do not compare");
  const std::vector<double> xa = a.read_tensor(key_a), xb = b.read_tensor(key_b);
  TensorComparison out;
  out.elements = xa.size();
  for (size_t i = 0; i < xa.size(); ++i) {
    if (xa[i] == xb[i]) continue;  // equal infinities too
    const double diff = std::fabs(xa[i] - xb[i]), bound = tolerance.atol + tolerance.rtol * std::fabs(xb[i]);
    const bool within = diff <= bound;
    out.max_diff = std::max(out.max_diff, std::isnan(diff) ? INFINITY : diff);
    out.outside += !within;
    if (on_unequal) on_unequal({i, xa[i], xb[i], diff, bound, within});
  }
  return out;
}

}  // namespace meshtest
