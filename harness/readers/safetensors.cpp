#include "readers/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "readers/dcp.h"
#include "readers/stored_bytes.h"

namespace meshtest::safetensors {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& message) { throw CheckpointError(message); }

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
// A header larger than this is not one a writer made (the Rust reader refuses 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

struct DtypeName {
  const char* stored;  // the header's name
  const char* name;    // meshtest's
  uint64_t bytes;
};
constexpr DtypeName kDtypes[] = {
    {"F64", "float64", 8},         {"F32", "float32", 4},
    {"F16", "float16", 2},         {"BF16", "bfloat16", 2},
    {"I64", "int64", 8},           {"I32", "int32", 4},
    {"I16", "int16", 2},           {"I8", "int8", 1},
    {"U64", "uint64", 8},          {"U32", "uint32", 4},
    {"U16", "uint16", 2},          {"U8", "uint8", 1},
    {"BOOL", "bool", 1},           {"F8_E4M3", "float8_e4m3fn", 1},
    {"F8_E5M2", "float8_e5m2", 1},
};

const DtypeName* dtype_named(const std::string& stored) {
  for (const auto& d : kDtypes)
    if (stored == d.stored) return &d;
  return nullptr;
}

// One file's header, checked against the file's size; its tensors appended to `out`.
void read_file(const std::string& file, Checkpoint& out) {
  const FileReader reader(file);
  const uint64_t size = reader.size();
  if (size < 8)
    fail(file + ": " + std::to_string(size) +
         " bytes: too short for a safetensors file, which starts with an 8-byte header length (truncated?)");
  const std::vector<uint8_t> head = reader.read(0, 8, "header length");
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | head[static_cast<size_t>(b)];
  if (n > size - 8)
    fail(file + ": the header length " + std::to_string(n) + " runs past the file's end (" + std::to_string(size) +
         " bytes; truncated, or not a safetensors file)");
  if (n > kMaxHeaderBytes) fail(file + ": the header length " + std::to_string(n) + " is over 100 MB");
  const std::vector<uint8_t> text = reader.read(8, n, "header");
  json header;
  try {
    header = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(file + ": the header is not JSON (" + e.what() + ")");
  }
  if (!header.is_object()) fail(file + ": the header is not a JSON object");
  const uint64_t data_start = 8 + n, data_bytes = size - data_start;
  out.files.push_back(file);
  out.data_regions[file] = {data_start, size};
  for (const auto& [key, entry] : header.items()) {
    const std::string where = file + ": tensor '" + key + "'";
    if (key == "__metadata__") {
      if (!entry.is_object()) fail(file + ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items())
        if (v.is_string()) out.metadata[k] = v.get<std::string>();
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      fail(where + ": needs dtype, shape and data_offsets");
    const json& dtype = entry["dtype"];
    const DtypeName* d = dtype.is_string() ? dtype_named(dtype.get<std::string>()) : nullptr;
    if (!d) fail(where + ": unknown dtype " + dtype.dump());
    Tensor t;
    t.key = key;
    t.dtype = d->name;
    t.file = file;
    uint64_t numel = 1;
    if (!entry["shape"].is_array()) fail(where + ": shape is not a list");
    for (const auto& dim : entry["shape"]) {
      if (!dim.is_number_unsigned()) fail(where + ": shape " + entry["shape"].dump() + " holds a non-count");
      t.shape.push_back(dim.get<int64_t>());
      if (__builtin_mul_overflow(numel, dim.get<uint64_t>(), &numel)) fail(where + ": its shape overflows");
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail(where + ": data_offsets " + offsets.dump() + " is not [begin, end]");
    const uint64_t begin = offsets[0], end = offsets[1];
    if (begin > end || end > data_bytes)
      fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
           "] lie outside the file's " + std::to_string(data_bytes) + " data bytes (truncated?)");
    uint64_t want = 0;
    if (__builtin_mul_overflow(numel, d->bytes, &want) || end - begin != want)
      fail(where + ": data_offsets span " + std::to_string(end - begin) + " bytes, its " + d->stored + " shape " +
           entry["shape"].dump() + " needs " + std::to_string(numel) + " x " + std::to_string(d->bytes));
    t.offset = data_start + begin;
    t.length = end - begin;
    out.tensors.push_back(std::move(t));
  }
}

// The index's weight_map: each tensor's shard, which must exist and hold it.
void read_index(const std::string& index, Checkpoint& out) {
  std::ifstream in(index);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(index + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index + ": has no weight_map object");
  std::map<std::string, std::vector<std::string>> keys_of;  // shard -> keys the index gives it
  for (const auto& [key, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) fail(index + ": weight_map['" + key + "'] is not a file name");
    const std::string name = shard.get<std::string>();
    if (name.find('/') != std::string::npos || name == "..")
      fail(index + ": weight_map['" + key + "'] names '" + name + "', outside the folder");
    keys_of[name].push_back(key);
  }
  const fs::path folder = fs::path(index).parent_path();
  for (const auto& [shard, keys] : keys_of)
    if (!fs::exists(folder / shard))
      fail(index + ": names shard " + shard + " (for '" + keys.front() + "' and " + std::to_string(keys.size() - 1) +
           " other tensors), which is missing");
  for (const auto& [shard, keys] : keys_of) {
    const std::string file = (folder / shard).string();
    const size_t before = out.tensors.size();
    read_file(file, out);
    std::vector<std::string> held;
    for (size_t i = before; i < out.tensors.size(); ++i) held.push_back(out.tensors[i].key);
    std::sort(held.begin(), held.end());
    for (const auto& key : keys)
      if (!std::binary_search(held.begin(), held.end(), key))
        fail(index + ": puts '" + key + "' in " + shard + ", which does not hold it");
    for (const auto& key : held)
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        const auto& map = j["weight_map"];
        fail(file + ": holds '" + key + "', which the index " +
             (map.contains(key) ? "puts in " + map[key].get<std::string>() : std::string("does not name")));
      }
  }
}

}  // namespace

bool is_safetensors(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::exists(fs::path(path) / kIndexFile, ec) || fs::exists(fs::path(path) / kSingleFile, ec);
  return fs::path(path).extension() == ".safetensors";
}

Checkpoint open(const std::string& path) {
  Checkpoint out;
  out.path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / kIndexFile, ec))
      read_index((fs::path(path) / kIndexFile).string(), out);
    else if (fs::exists(fs::path(path) / kSingleFile, ec))
      read_file((fs::path(path) / kSingleFile).string(), out);
    else
      fail(path + ": holds neither " + kSingleFile + " nor " + kIndexFile);
  } else {
    read_file(path, out);
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const Tensor& a, const Tensor& b) { return a.key < b.key; });
  for (size_t i = 1; i < out.tensors.size(); ++i)
    if (out.tensors[i].key == out.tensors[i - 1].key)
      fail(path + ": tensor '" + out.tensors[i].key + "' is in both " + out.tensors[i - 1].file + " and " +
           out.tensors[i].file);
  return out;
}

std::vector<double> read(const Tensor& t) {
  const size_t element = element_size(t.dtype);
  if (element == 0) fail(t.file + ": tensor '" + t.key + "': dtype " + t.dtype + " cannot be read as numbers");
  const FileReader file(t.file);
  const std::vector<uint8_t> bytes = file.read(t.offset, t.length, "tensor '" + t.key + "'");
  std::vector<double> out(bytes.size() / element);
  for (size_t i = 0; i < out.size(); ++i) out[i] = element_to_double(t.dtype, bytes.data() + element * i);
  return out;
}

void check_data_covered(const Checkpoint& c) {
  std::map<std::string, std::vector<const Tensor*>> by_file;
  for (const auto& t : c.tensors) by_file[t.file].push_back(&t);
  for (const auto& [file, region] : c.data_regions) {
    auto& tensors = by_file[file];
    std::sort(tensors.begin(), tensors.end(), [](const Tensor* a, const Tensor* b) { return a->offset < b->offset; });
    uint64_t at = region.first;
    for (const Tensor* t : tensors) {
      if (t->length == 0) continue;
      if (t->offset < at)
        fail(file + ": tensor '" + t->key + "' shares bytes " + std::to_string(t->offset - region.first) + ".." +
             std::to_string(at - region.first) + " of the data with the tensor before it");
      if (t->offset > at)
        fail(file + ": data bytes " + std::to_string(at - region.first) + ".." +
             std::to_string(t->offset - region.first) + " belong to no tensor");
      at = t->offset + t->length;
    }
    if (at != region.second)
      fail(file + ": data bytes " + std::to_string(at - region.first) + ".." +
           std::to_string(region.second - region.first) + " at the end belong to no tensor");
  }
}

}  // namespace meshtest::safetensors
