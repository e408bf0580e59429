#include "components/checkpoint.h"

#include "base/dtype.h"
#include "base/faults.h"
#include "base/options.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <atomic>

#include "contract/hash.h"
#include "contract/model_names.h"
#include "components/checkpoint_files.h"
#include "components/outputs.h"
#include "contract/placement.h"

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_files;

namespace {

// The format itself (metadata schema, step-<N> names, leaves and their checksums, key styles)
// is contract/checkpoint_format.h, which meshtest reads through too; this file reads the data
// files and checkpointer.cpp writes them. A checksum per leaf of a chunk (64 bytes to 4 KiB) is stored after the
// chunk's bytes in the same file: a reshard that needs a column slice of every row reads those
// bytes and their checksums, not whole blocks of rows.
const std::string kMetadata(kMetadataFile);

std::vector<int64_t> strides_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * sizes[d + 1];
  return s;
}

// Calls fn(global index of the run's first element, run length) for each contiguous
// run along the last dimension of box `o`.
template <typename Fn>
void for_each_run(const Box& o, Fn fn) {
  const size_t n = o.lo.size();
  if (n == 0) return fn(std::vector<int64_t>{}, int64_t{1});
  std::vector<int64_t> idx = o.lo;
  const int64_t run = o.hi[n - 1] - o.lo[n - 1];
  while (true) {
    fn(idx, run);
    int d = static_cast<int>(n) - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < o.hi[d]) break;
      idx[d] = o.lo[d];
    }
    if (d < 0) return;
  }
}

int64_t flat_index(const std::vector<int64_t>& idx, const std::vector<int64_t>& origin,
                   const std::vector<int64_t>& strides) {
  int64_t f = 0;
  for (size_t d = 0; d < idx.size(); ++d) f += (idx[d] - origin[d]) * strides[d];
  return f;
}

// Reads byte ranges of one saved chunk, verifying every 64-byte leaf it touches.
class ChunkReader {
 public:
  ChunkReader(const std::string& dir, const std::string& key, const SavedChunk& chunk, CheckpointIo& io)
      : key_(key), io_(io) {
    path_ = dir + "/" + chunk.file;
    // Cast from the format's unsigned fields: a value past int64 turns negative and is refused.
    base_ = static_cast<int64_t>(chunk.byte_offset);
    length_ = static_cast<int64_t>(chunk.byte_length);
    leaf_ = static_cast<int64_t>(chunk.leaf_bytes);
    hashes_at_ = static_cast<int64_t>(chunk.hash_offset);
    if (!chunk.has_checksums) fail("checkpoint: '" + path_ + "': chunk of key '" + key_ + "' has no leaf checksums");
    if (base_ < 0 || length_ < 0 || leaf_ <= 0 || hashes_at_ < base_ + length_)
      fail("checkpoint: '" + path_ + "': chunk of key '" + key_ + "' has an inconsistent byte range");
  }
  ~ChunkReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Copies `bytes` bytes starting at `offset` within the chunk into `out`: one read of
  // the leaves that hold them, one of their checksums.
  void copy(int64_t offset, int64_t bytes, char* out) {
    if (bytes <= 0) return;
    if (offset < 0 || offset + bytes > length_)
      fail("checkpoint: '" + path_ + "': key '" + key_ + "' needs bytes past its chunk");
    const int64_t first = offset / leaf_, last = (offset + bytes - 1) / leaf_;
    const int64_t lo = first * leaf_, hi = std::min(length_, (last + 1) * leaf_);
    std::vector<uint64_t> sums(static_cast<size_t>(last - first + 1));
    read_exactly(reinterpret_cast<char*>(sums.data()), static_cast<int64_t>(sums.size()) * kChecksumBytes,
                 hashes_at_ + first * kChecksumBytes);
    // Whole leaves are read straight into place; a partial leaf goes through a buffer.
    const bool whole_leaves = offset == lo && offset + bytes == hi;
    std::string buffer;
    char* data = out;
    if (!whole_leaves) {
      buffer.resize(static_cast<size_t>(hi - lo));
      data = buffer.data();
    }
    // Read and check in parallel ranges of whole leaves: the data is hashed while it is
    // still in the reading core's cache.
    const int64_t leaves = last - first + 1;
    std::vector<uint64_t> actual(static_cast<size_t>(leaves));
    std::atomic<bool> short_read{false};
    open_file();
    for_leaf_ranges(leaves, hi - lo, [&](int64_t a, int64_t b) {
      if (a >= b) return;
      const int64_t from = a * leaf_, to = std::min(hi - lo, b * leaf_);
      if (pread_fully(fd_, data + from, to - from, base_ + lo + from) != to - from) short_read = true;
      if (short_read) return;
      for (int64_t l = a; l < b; ++l)
        actual[static_cast<size_t>(l)] =
            leaf_checksum(data + l * leaf_, static_cast<size_t>(std::min(leaf_, hi - lo - l * leaf_)));
    });
    if (short_read) truncated(base_ + lo, base_ + hi);
    io_.bytes_read += hi - lo;
    for (size_t i = 0; i < sums.size(); ++i) {
      if (actual[i] == sums[i]) continue;
      const int64_t l = first + static_cast<int64_t>(i), size = std::min(leaf_, length_ - l * leaf_);
      fail("checkpoint: '" + path_ + "': checksum mismatch in key '" + key_ + "' (bytes " +
           std::to_string(base_ + l * leaf_) + ".." + std::to_string(base_ + l * leaf_ + size) +
           "): the file is corrupt");
    }
    if (!whole_leaves) std::memcpy(out, data + (offset - lo), static_cast<size_t>(bytes));
  }

 private:
  void open_file() {
    if (fd_ >= 0) return;
    fd_ = ::open(path_.c_str(), O_RDONLY);
    if (fd_ < 0) fail("checkpoint: cannot open '" + path_ + "' for key '" + key_ + "': " + std::strerror(errno));
  }
  [[noreturn]] void truncated(int64_t from, int64_t to) const {
    fail("checkpoint: '" + path_ + "' is truncated: key '" + key_ + "' needs bytes " + std::to_string(from) + ".." +
         std::to_string(to));
  }
  void read_exactly(char* out, int64_t size, int64_t at) {
    open_file();
    if (pread_fully(fd_, out, size, at) != size) truncated(at, at + size);
    io_.bytes_read += size;
  }

  std::string key_, path_;
  CheckpointIo& io_;
  int64_t base_ = 0, length_ = 0, leaf_ = kMinLeafBytes, hashes_at_ = 0;
  int fd_ = -1;
};

}  // namespace

void add_options(CLI::App& cmd, CheckpointConfig& c) {
  cmd.add_flag("--checkpoint.enable", c.enable,
               "Save checkpoints, and resume from the latest complete one in the folder at start");
  cmd.add_option("--checkpoint.folder", c.folder, "Checkpoint folder (default <dump-folder>/checkpoint)");
  cmd.add_option("--checkpoint.interval", c.interval, "Save every N steps (0: only after the last step)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.keep-latest-k", c.keep_latest_k, "Keep only the newest K steps (0: all)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.load-step", c.load_step, "Resume from this step (-1: the latest)")
      ->capture_default_str();
  add_parsed_option(cmd, "--checkpoint.async-mode", c.async_mode, parse_async_mode, "disabled",
                    "disabled | async (a save pauses training only to copy this rank's chunks to host memory; a "
                    "background thread writes them, and the next save waits for it)");
  add_parsed_option(cmd, "--checkpoint.exclude-from-loading", c.exclude_from_loading, parse_exclusions, "",
                    "Comma-separated parts not to load: optimizer, lr_scheduler, dataloader");
  cmd.add_option("--checkpoint.key-style", c.key_style,
                 "canonical | parametrize (data-parallel-wrapped weights named <m>.parametrizations.weight.original)")
      ->capture_default_str();
  cmd.add_option("--checkpoint.key-map", c.key_map,
                 "none | parametrize-to-canonical (load parametrize-style keys into any model)")
      ->capture_default_str();
  cmd.add_flag("--checkpoint.last-save-model-only", c.last_save_model_only,
               "The save after the last step (--steps) holds model weights only, in --checkpoint.export-dtype");
  add_parsed_option(cmd, "--checkpoint.export-dtype", c.export_dtype, parse_dtype, "float32",
                    "dtype of a model-only last save: float32 | bfloat16");
  cmd.add_flag("--checkpoint.last-save-in-hf", c.last_save_in_hf,
               "The model-only last save also as Hugging Face safetensors (model.safetensors, config.json) in its "
               "step folder");
  cmd.add_option("--checkpoint.initial-load-path", c.initial_load_path,
                 "When the checkpoint folder holds no checkpoint (or checkpointing is off), start from the weights "
                 "of this step-<N> folder (model only; a fresh optimizer, schedule and data position)");
  cmd.add_flag("--checkpoint.initial-load-in-hf", c.initial_load_in_hf,
               "--checkpoint.initial-load-path is a Hugging Face checkpoint: a folder with model.safetensors (or "
               "an index and its shards), or a .safetensors file");
}

AsyncMode parse_async_mode(const std::string& name) {
  if (name == "disabled") return AsyncMode::kDisabled;
  if (name == "async") return AsyncMode::kAsync;
  throw std::invalid_argument("--checkpoint.async-mode: unknown mode '" + name + "' (known: disabled, async)");
}

std::set<std::string> parse_exclusions(const std::string& list) {
  std::set<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    if (item != "optimizer" && item != "lr_scheduler" && item != "dataloader")
      throw std::invalid_argument("--checkpoint.exclude-from-loading: unknown part '" + item +
                                  "' (known: optimizer, lr_scheduler, dataloader)");
    out.insert(item);
  }
  return out;
}

CheckpointReader::CheckpointReader(CheckpointConfig config, MeshShape shape)
    : config_(std::move(config)), shape_(shape) {
  if (config_.key_style != "canonical" && config_.key_style != "parametrize")
    throw std::invalid_argument("--checkpoint.key-style '" + config_.key_style + "' (known: canonical, parametrize)");
  if (config_.key_map != "none" && config_.key_map != "parametrize-to-canonical")
    throw std::invalid_argument("--checkpoint.key-map '" + config_.key_map +
                                "' (known: none, parametrize-to-canonical)");
}

std::string CheckpointReader::step_dir(int64_t step) const { return config_.folder + "/" + step_folder_name(step); }

std::string CheckpointReader::saved_key(const std::string& key) const {
  if (!injected(Fault::kKeysRenamed)) return styled_key(key);
  std::string renamed = styled_key(key);  // "tok_embeddings" loses its last letter
  const std::string_view embedding = contract::model_names::kEmbedding;
  const auto at = renamed.find(embedding);
  return at == std::string::npos ? renamed
                                 : renamed.replace(at, embedding.size(), embedding.substr(0, embedding.size() - 1));
}

std::string CheckpointReader::styled_key(const std::string& canonical) const {
  // torch.nn.utils.parametrize renames a wrapped parameter `w` of module m to
  // m.parametrizations.w.original. SimpleFSDP wraps every parameter in data parallel,
  // which context parallel implies (FSDP over dp_shard x cp).
  const bool wrapped = shape_.dp() * shape_.cp > 1;
  if (config_.key_style != "parametrize" || !wrapped || config_.key_map != "none") return canonical;
  return parametrize_key(canonical);
}

std::vector<int64_t> CheckpointReader::complete_steps() const {
  std::vector<int64_t> steps;
  for (const auto& [step, complete] : list_step_folders(config_.folder))
    if (complete) steps.push_back(step);
  return steps;
}

std::optional<int64_t> CheckpointReader::latest_step() const {
  const auto steps = complete_steps();
  if (steps.empty()) return std::nullopt;
  return *std::max_element(steps.begin(), steps.end());
}

// ---- load

json CheckpointReader::load(int64_t step, const std::vector<CheckpointTensor>& tensors) {
  const std::string dir = step_dir(step), meta_path = dir + "/" + kMetadata;
  const std::map<std::string, SavedKey> keys = mapped_keys(read_metadata(meta_path).keys);
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) load_tensor(dir, meta_path, keys, t);
  json objects = json::object();
  for (const auto& [key, k] : keys)
    if (k.is_object()) objects[key] = k.value;
  return objects;
}

CheckpointMetadata CheckpointReader::read_metadata(const std::string& meta_path) const {
  try {
    return parse_metadata(read_text(meta_path), meta_path);
  } catch (const CheckpointFormatError& e) {
    fail(std::string("checkpoint: ") + e.what());
  }
}

std::map<std::string, SavedKey> CheckpointReader::mapped_keys(std::map<std::string, SavedKey> keys) const {
  if (config_.key_map != "parametrize-to-canonical") return keys;
  std::map<std::string, SavedKey> mapped;
  for (auto& [key, k] : keys) mapped[canonical_key(key)] = std::move(k);
  return mapped;
}

namespace {

[[noreturn]] void missing_key(const std::map<std::string, SavedKey>& keys, const std::string& dir,
                              const std::string& key) {
  const auto train_state = keys.find("train_state");
  const bool model_only = train_state != keys.end() && train_state->second.value.is_object() &&
                          train_state->second.value.value("model_only", false);
  if (model_only)
    fail("checkpoint: '" + dir + "' is a model-only export (--checkpoint.last-save-model-only) without " + key +
         "; start a run from its weights with --checkpoint.initial-load-path " + dir +
         ", or load only the model (--checkpoint.exclude-from-loading optimizer,lr_scheduler,dataloader)");
  fail("Missing key in checkpoint state_dict: " + key + ".");
}

// Every element is read exactly once (the buffer starts uninitialised): chunks that
// overlap could make the count come out right with elements missing.
void check_saved_chunks_disjoint(const std::vector<SavedChunk>& chunks, const std::string& meta_path,
                                 const std::string& key) {
  std::vector<Box> saved_boxes;
  for (const auto& c : chunks) {
    const Box box = box_of(c.offsets, c.sizes);
    for (const auto& other : saved_boxes)
      if (!intersect(box, other).empty())
        fail("checkpoint: '" + meta_path + "': chunks of '" + key + "' overlap: the metadata is corrupt");
    saved_boxes.push_back(box);
  }
}

}  // namespace

void CheckpointReader::load_tensor(const std::string& dir, const std::string& meta_path,
                                   const std::map<std::string, SavedKey>& keys, const CheckpointTensor& t) {
  const std::string key = saved_key(t.key);
  const auto found = keys.find(key);
  if (found == keys.end() || !found->second.is_tensor()) missing_key(keys, dir, key);
  // The metadata's parse checked each chunk: as many dims as the shape, and inside it.
  const SavedKey& k = found->second;
  const std::vector<int64_t>& shape = k.shape;
  if (shape != t.layout->global_shape)
    fail("checkpoint: '" + meta_path + "': size mismatch for " + key + ": saved " + dims_text(shape) + ", current " +
         dims_text(t.layout->global_shape));
  const Chunk& want = t.layout->chunk;
  const Box mine = box_of(want.offsets, want.sizes);
  const std::string& dtype = k.dtype;
  if (dtype_bytes(dtype) == 0)
    fail("checkpoint: '" + meta_path + "': " + key + " has dtype " + dtype + " (known: " + std::string(kKnownDtypes) +
         ")");
  // Read in the saved dtype; copy_ below converts to the parameter's.
  auto local = torch::empty(want.sizes,
                            dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);  // every element is read below
  const int64_t elem = static_cast<int64_t>(local.element_size());
  auto* out = static_cast<char*>(local.data_ptr());
  const auto local_strides = strides_of(want.sizes);
  check_saved_chunks_disjoint(k.chunks, meta_path, key);
  int64_t filled = 0;
  for (const SavedChunk& c : k.chunks) {
    const std::vector<int64_t>&offsets = c.offsets, &sizes = c.sizes;
    const Box overlap = intersect(mine, box_of(offsets, sizes));
    if (overlap.empty()) continue;
    ChunkReader reader(dir, key, c, io_);
    const auto saved_strides = strides_of(sizes);
    // Runs adjacent both in the file and in memory are read as one (a whole chunk, when
    // this rank needs all of it).
    int64_t from = 0, bytes = 0;
    char* to = nullptr;
    for_each_run(overlap, [&](const std::vector<int64_t>& idx, int64_t run) {
      const int64_t src = flat_index(idx, offsets, saved_strides) * elem;
      char* dst = out + flat_index(idx, want.offsets, local_strides) * elem;
      if (bytes > 0 && src == from + bytes && dst == to + bytes) {
        bytes += run * elem;
      } else {
        reader.copy(from, bytes, to);
        from = src, to = dst, bytes = run * elem;
      }
      filled += run;
    });
    reader.copy(from, bytes, to);
  }
  if (filled != want.numel())
    fail("checkpoint: '" + meta_path + "': chunks of '" + key + "' cover " + std::to_string(filled) + " of the " +
         std::to_string(want.numel()) + " elements this rank needs");
  if (injected(Fault::kWrongShardOffset) && local.dim() > 0 && local.size(0) > 1) local = local.roll(1, 0);
  t.local.copy_(local.view(t.local.sizes()));
}

}  // namespace meshtrain
