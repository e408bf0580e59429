#include "contract/checkpoint_format.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "contract/hash.h"

namespace contract {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kWrappedWeight = ".parametrizations.weight.original";
constexpr std::string_view kWeight = ".weight";

[[noreturn]] void fail(const std::string& message) { throw CheckpointFormatError(message); }

// nlohmann's get<integer>() converts a float with a static_cast, which is undefined behaviour
// when the value does not fit; and an integer literal beyond uint64 parses as a float. The
// format writes integers only, so anything else is refused before it is converted.
std::string shown(const json& j) { return j.is_primitive() ? j.dump() : j.type_name(); }

uint64_t count(const json& chunk, const char* name, const std::string& where) {
  const json& j = chunk.at(name);
  // A document built in memory holds signed integers; one parsed from text, unsigned ones.
  const bool non_negative = j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
  if (!non_negative) fail(where + ": " + name + " " + shown(j) + " is not a non-negative integer");
  return j.get<uint64_t>();
}

std::vector<int64_t> dims(const json& j, const std::string& where) {
  if (j.is_array())
    for (const auto& d : j)
      if (!d.is_number_integer()) fail(where + ": dim " + shown(d) + " is not an integer");
  std::vector<int64_t> out = j.get<std::vector<int64_t>>();
  for (int64_t d : out)
    if (d < 0) fail(where + ": negative dim in " + j.dump());
  return out;
}

void check_chunk_box(const std::vector<int64_t>& shape, const SavedChunk& c, const std::string& where) {
  if (c.offsets.size() != shape.size() || c.sizes.size() != shape.size())
    fail(where + ": a chunk's offsets/sizes do not have the tensor's " + std::to_string(shape.size()) + " dims");
  for (size_t d = 0; d < shape.size(); ++d)
    if (c.offsets[d] > shape[d] || c.sizes[d] > shape[d] - c.offsets[d])
      fail(where + ": chunk at offsets " + dims_text(c.offsets) + " sizes " + dims_text(c.sizes) +
           " lies outside the " + dims_text(shape) + " tensor");
}

SavedKey parse_key(const json& j, const std::string& where) {
  SavedKey k;
  k.kind = j.at("kind").get<std::string>();
  if (k.is_object()) k.value = j.contains("value") ? j.at("value") : json();
  if (!k.is_tensor()) return k;
  k.dtype = j.at("dtype").get<std::string>();
  k.shape = dims(j.at("shape"), where);
  int64_t numel = 1;
  for (int64_t d : k.shape)
    if (__builtin_mul_overflow(numel, d, &numel)) fail(where + ": shape overflows");
  for (const auto& jc : j.at("chunks")) {
    SavedChunk c = parse_chunk(jc, where);
    check_chunk_box(k.shape, c, where);
    k.chunks.push_back(std::move(c));
  }
  return k;
}

}  // namespace

// ---- step folders -----------------------------------------------------------------------------

std::string step_folder_name(int64_t step) { return std::string(kStepPrefix) + std::to_string(step); }

std::optional<int64_t> parse_step_folder_name(std::string_view name) {
  if (name.substr(0, kStepPrefix.size()) != kStepPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;  // 18 digits always fit int64
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string temp_step_folder_name(int64_t step) { return ".tmp-" + step_folder_name(step); }

std::string data_file_name(int rank) { return "__" + std::to_string(rank) + "_0.distcp"; }

std::map<int64_t, bool> list_step_folders(const std::string& folder) {
  std::map<int64_t, bool> steps;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return steps;
  for (const auto& child : fs::directory_iterator(folder, ec)) {
    const auto step = parse_step_folder_name(child.path().filename().string());
    if (step && child.is_directory(ec)) steps[*step] = fs::exists(child.path() / kMetadataFile, ec);
  }
  return steps;
}

std::optional<int64_t> latest_complete_step(const std::string& folder) {
  const auto steps = list_step_folders(folder);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (it->second) return it->first;
  return std::nullopt;
}

// ---- chunk data and its checksums ---------------------------------------------------------------

int64_t leaf_bytes_for(const std::vector<int64_t>& chunk_sizes, int64_t element_bytes) {
  const int64_t row_bytes = (chunk_sizes.empty() ? 1 : chunk_sizes.back()) * element_bytes;
  int64_t leaf = kMinLeafBytes;
  while (leaf * 2 <= std::min<int64_t>(kMaxLeafBytes, row_bytes / 8)) leaf *= 2;
  return leaf;
}

uint64_t leaf_count(uint64_t length, uint64_t leaf_bytes) { return length / leaf_bytes + (length % leaf_bytes != 0); }

uint64_t leaf_checksum(const void* data, size_t size) { return mix64(data, size); }

int64_t dtype_bytes(std::string_view dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "bfloat16") return 2;
  return 0;
}

// ---- the .metadata document -----------------------------------------------------------------------

uint64_t SavedKey::stored_bytes() const {
  uint64_t bytes = 0;
  for (const auto& c : chunks) bytes += c.byte_length;
  return bytes;
}

SavedChunk parse_chunk(const json& jc, const std::string& where) {
  SavedChunk c;
  c.offsets = dims(jc.at("offsets"), where);
  c.sizes = dims(jc.at("sizes"), where);
  c.file = jc.at("file").get<std::string>();
  c.byte_offset = count(jc, "byte_offset", where);
  c.byte_length = count(jc, "byte_length", where);
  if (c.file.empty() || c.file[0] == '/' || c.file.find("..") != std::string::npos)
    fail(where + ": file '" + c.file + "' leaves the step folder");
  if (jc.contains("leaf_bytes") && jc.contains("hash_offset")) {
    c.leaf_bytes = count(jc, "leaf_bytes", where);
    c.hash_offset = count(jc, "hash_offset", where);
    c.has_checksums = true;
  }
  return c;
}

json to_json(const SavedChunk& c) {
  json j = {{"offsets", c.offsets},
            {"sizes", c.sizes},
            {"file", c.file},
            {"byte_offset", c.byte_offset},
            {"byte_length", c.byte_length}};
  if (c.has_checksums) j["leaf_bytes"] = c.leaf_bytes, j["hash_offset"] = c.hash_offset;
  return j;
}

CheckpointMetadata parse_metadata(std::string_view text, const std::string& path) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(path + ": not valid JSON: " + e.what());
  }
  return metadata_from_json(doc, path);
}

CheckpointMetadata metadata_from_json(const json& doc, const std::string& path) {
  if (!doc.is_object() || !doc.contains("format_version"))
    fail(path + ": no format_version: not a meshtrain checkpoint");
  if (doc.at("format_version") != kCheckpointFormatVersion)
    fail(path + ": format_version " + doc.at("format_version").dump() + ", but this reader reads format " +
         std::to_string(kCheckpointFormatVersion) + " (format 1 is refused)");
  if (!doc.contains("keys") || !doc.at("keys").is_object()) fail(path + ": no \"keys\" object");
  CheckpointMetadata m;
  try {
    if (doc.contains("step")) {
      if (!doc.at("step").is_number_integer()) fail(path + ": step " + shown(doc.at("step")) + " is not an integer");
      m.step = doc.at("step").get<int64_t>();
    }
    if (doc.contains("writer_mesh")) m.writer_mesh = doc.at("writer_mesh").get<std::string>();
    if (doc.contains("key_style")) m.key_style = doc.at("key_style").get<std::string>();
  } catch (const json::exception& e) {
    fail(path + ": " + e.what());
  }
  for (const auto& [key, j] : doc.at("keys").items()) {
    const std::string where = path + ": " + key_label(key);
    try {
      m.keys[key] = parse_key(j, where);
    } catch (const json::exception& e) {
      fail(where + ": " + e.what());
    }
  }
  return m;
}

json to_json(const CheckpointMetadata& m) {
  json keys = json::object();
  for (const auto& [key, k] : m.keys) {
    json& j = keys[key];
    j["kind"] = k.kind;
    if (k.is_object()) j["value"] = k.value;
    if (!k.is_tensor()) continue;
    j["dtype"] = k.dtype;
    j["shape"] = k.shape;
    j["chunks"] = json::array();
    for (const auto& c : k.chunks) j["chunks"].push_back(to_json(c));
  }
  return {{"format_version", m.format_version},
          {"step", m.step},
          {"writer_mesh", m.writer_mesh},
          {"key_style", m.key_style},
          {"keys", keys}};
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string key_label(const std::string& key) {
  return "key '" + (key.size() <= 200 ? key : key.substr(0, 200) + "...") + "'";
}

// ---- state-dict keys --------------------------------------------------------------------------------

bool has_state_namespace(std::string_view key) {
  for (std::string_view ns : {"model.", "optimizer.", "lr_scheduler", "dataloader", "train_state"})
    if (key.substr(0, ns.size()) == ns) return true;
  return false;
}

std::string parametrize_key(const std::string& canonical) {
  const std::string weight(kWeight);
  if (canonical.find(weight) == std::string::npos) return canonical;
  // The weight is the key's last part ("...wq.weight") or, in optimizer state, followed by
  // the slot ("...wq.weight.exp_avg").
  const auto at = canonical.find(weight + ".");
  const auto pos = at != std::string::npos ? at : canonical.size() - weight.size();
  return canonical.substr(0, pos) + std::string(kWrappedWeight) + canonical.substr(pos + weight.size());
}

std::string canonical_key(const std::string& key) {
  std::string out = key;
  if (auto p = out.find(kWrappedWeight); p != std::string::npos) out.replace(p, kWrappedWeight.size(), kWeight);
  return out;
}

}  // namespace contract
