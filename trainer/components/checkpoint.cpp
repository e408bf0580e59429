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
#include "components/outputs.h"
#include "contract/placement.h"

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Removes a folder and everything in it; a folder that is not there is no error, and what
// cannot be removed stays (as fs::remove_all with an error_code). Not fs::remove_all itself: the
// PyTorch wheel's libtorch.so exports its own copy, which a CUDA build's calls bind to, and that
// copy jumps to address 0 on a folder with files in it (docs/building.md, CUDA).
void remove_folder(const std::string& path) {
  auto remove_entry = [](const char* entry, const struct stat*, int, struct FTW*) {
    ::remove(entry);
    return 0;  // go on with the rest
  };
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// The format itself (metadata schema, step-<N> names, leaves and their checksums, key styles)
// is contract/checkpoint_format.h, which meshtest reads through too; this file writes and
// reads the data files. A checksum per leaf of a chunk (64 bytes to 4 KiB) is stored after the
// chunk's bytes in the same file: a reshard that needs a column slice of every row reads those
// bytes and their checksums, not whole blocks of rows.
const std::string kMetadata(kMetadataFile);

// In a step's temporary folder: each rank's plan (where its chunks landed, its objects), which
// rank 0 merges into the metadata; and, from an asynchronous save whose write failed, the error.
std::string plan_file_name(int rank) { return "rank" + std::to_string(rank) + ".plan.json"; }
std::string failed_file_name(int rank) { return "rank" + std::to_string(rank) + ".failed"; }

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) fail("checkpoint: writing '" + path + "' failed: " + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// A file written from start to end and made durable, or an exception: the caller's
// folder is temporary, so a failure leaves nothing that looks complete.
class DurableFile {
 public:
  explicit DurableFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_ < 0) fail("checkpoint: cannot create '" + path_ + "': " + std::strerror(errno));
  }
  ~DurableFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void append(const void* data, size_t size) {
    write_all(fd_, data, size, path_);
    size_ += static_cast<int64_t>(size);
  }
  int64_t size() const { return size_; }
  void sync_and_close() {
    const int fd = fd_;
    fd_ = -1;
    const bool synced = ::fsync(fd) == 0;
    const int sync_errno = errno;
    if (::close(fd) != 0 || !synced)
      fail("checkpoint: cannot sync '" + path_ + "': " + std::strerror(synced ? errno : sync_errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

void write_file(const std::string& path, const std::string& bytes) {
  DurableFile f(path);
  f.append(bytes.data(), bytes.size());
  f.sync_and_close();
}

// Runs fn(first, last) over the leaves [0, leaves) in up to 8 contiguous ranges, one
// thread each, when there are many bytes: one core reads the page cache or hashes at a
// few GB/s, and a 1B model's checkpoint is 18 GB. fn must not throw.
template <class Fn>
void for_leaf_ranges(int64_t leaves, int64_t bytes, Fn fn) {
  const int64_t threads = std::max<int64_t>(
      1, std::min<int64_t>({8, std::max(1u, std::thread::hardware_concurrency()), 1 + bytes / (64 << 20), leaves}));
  const int64_t per = (leaves + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back(fn, std::min(leaves, t * per), std::min(leaves, (t + 1) * per));
  fn(0, std::min(leaves, per));
  for (auto& th : pool) th.join();
}

// The checksum of every `leaf`-byte leaf of `length` bytes (the last leaf may be short).
std::vector<uint64_t> leaf_sums(const char* p, int64_t length, int64_t leaf) {
  const int64_t leaves = (length + leaf - 1) / leaf;
  std::vector<uint64_t> sums(static_cast<size_t>(leaves));
  for_leaf_ranges(leaves, length, [&](int64_t first, int64_t last) {
    for (int64_t l = first; l < last; ++l)
      sums[static_cast<size_t>(l)] =
          leaf_checksum(p + l * leaf, static_cast<size_t>(std::min(leaf, length - l * leaf)));
  });
  return sums;
}

// pread until `size` bytes or the end of the file (one call returns at most ~2 GiB).
int64_t pread_fully(int fd, char* out, int64_t size, int64_t at) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, static_cast<size_t>(size - done), at + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += n;
  }
  return done;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("checkpoint: cannot read '" + path + "': " + std::strerror(errno));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

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

Checkpointer::Checkpointer(CheckpointConfig config, MeshGroups& groups, int rank)
    : CheckpointReader(std::move(config), groups.shape), groups_(groups), rank_(rank) {}

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

// ---- save

void Checkpointer::save(int64_t step, const std::vector<CheckpointTensor>& tensors, const json& objects,
                        torch::ScalarType dtype) {
  background_.wait();  // the previous asynchronous save: published (rank 0) or its error thrown
  const std::string tmp = make_temporary_folder(step);
  groups_.world->barrier();
  if (config_.async_mode == AsyncMode::kDisabled) {
    write_own_chunks(tmp, tensors, objects, dtype, step);
    groups_.world->barrier();
    if (rank_ == 0) complete(tmp, step);
    groups_.world->barrier();
    return;
  }
  std::vector<CheckpointTensor> written;  // the chunks this rank writes, as host copies
  std::vector<torch::Tensor> originals;
  for (const auto& t : tensors)
    if (writes(t)) written.push_back(t), originals.push_back(t.local);
  const auto copies = host_snapshot(originals, dtype);
  for (size_t i = 0; i < written.size(); ++i) written[i].local = copies[i];
  background_.start([this, tmp, step, dtype, objects, written](const std::atomic<bool>& abandoned) {
    try {
      write_own_chunks(tmp, written, objects, dtype, step);
    } catch (const std::exception& e) {  // rank 0 stops waiting for this rank's plan, and says why
      try {
        write_file(tmp + "/" + failed_file_name(rank_), e.what());
      } catch (const std::exception&) {
        // The disk that failed the write may refuse this too; rank 0 then learns it from the
        // process group, as this rank's next save or finish() throws `e`.
      }
      throw;
    }
    if (rank_ != 0) return;
    wait_for_plans(tmp, abandoned);
    complete(tmp, step);
  });
}

void Checkpointer::finish() {
  background_.wait();
  groups_.world->barrier();
}

void Checkpointer::complete(const std::string& tmp, int64_t step) {
  write_file(tmp + "/" + kMetadata,
             to_json(metadata(step, merge_plans(tmp))).dump(1));  // last: it marks the folder whole
  publish(tmp, step);
  if (config_.keep_latest_k > 0) remove_old_steps();
}

void Checkpointer::wait_for_plans(const std::string& tmp, const std::atomic<bool>& abandoned) const {
  for (int r = 0; r < groups_.world->size(); ++r)
    while (!fs::exists(tmp + "/" + plan_file_name(r))) {
      if (fs::exists(tmp + "/" + failed_file_name(r)))
        fail("checkpoint: rank " + std::to_string(r) + " could not write its part of '" + tmp +
             "': " + read_text(tmp + "/" + failed_file_name(r)));
      if (abandoned) fail("checkpoint: the save into '" + tmp + "' was abandoned");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

std::string Checkpointer::make_temporary_folder(int64_t step) {
  const std::string tmp = config_.folder + "/" + temp_step_folder_name(step);
  if (rank_ == 0) {
    remove_folder(tmp);  // a save that died earlier
    std::error_code ec;
    fs::create_directories(tmp, ec);
    if (ec) fail("checkpoint: cannot create '" + tmp + "': " + ec.message());
  }
  return tmp;
}

// This rank's data file: the chunks it owns, back to back, raw little-endian `dtype`,
// each followed by its leaf checksums, written as it is produced (one tensor in memory);
// then its plan: where each chunk landed, and its objects.
void Checkpointer::write_own_chunks(const std::string& tmp, const std::vector<CheckpointTensor>& tensors,
                                    const json& objects, torch::ScalarType dtype, int64_t step) {
  const std::string file = data_file_name(rank_);
  DurableFile data_file(tmp + "/" + file);
  json entries = json::object();
  for (const auto& t : tensors) {
    if (!writes(t)) continue;
    const Chunk& c = t.layout->chunk;
    const bool owner = writes_chunk(*t.layout, groups_.coord);
    auto data = t.local.detach().to(torch::kCPU, dtype).contiguous();
    const auto* p = static_cast<const char*>(data.data_ptr());
    const int64_t length = static_cast<int64_t>(data.nbytes());
    io_.tensor_bytes_written += length;
    if (!owner) {  // the planted bug: the bytes land in the file; the plan keeps the owner's copy
      data_file.append(p, static_cast<size_t>(length));
      continue;
    }
    const int64_t leaf = leaf_bytes_for(c.sizes, static_cast<int64_t>(data.element_size()));
    const auto sums = leaf_sums(p, length, leaf);
    const int64_t at = data_file.size();
    SavedChunk saved{c.offsets,
                     c.sizes,
                     file,
                     static_cast<uint64_t>(at),
                     static_cast<uint64_t>(length),
                     true,
                     static_cast<uint64_t>(leaf),
                     static_cast<uint64_t>(at + length)};
    // The plan's entry: the chunk as the metadata will hold it, and its tensor's shape and dtype.
    json entry = to_json(saved);
    entry["shape"] = t.layout->global_shape, entry["dtype"] = dtype_name(dtype);
    entries[saved_key(t.key)] = entry;
    data_file.append(p, static_cast<size_t>(length));
    data_file.append(sums.data(), sums.size() * kChecksumBytes);
  }
  io_.bytes_written += data_file.size();
  io_.steps_saved.push_back(step);
  data_file.sync_and_close();
  // Renamed into place: an asynchronous rank 0 takes a plan that exists as whole.
  const std::string plan = tmp + "/" + plan_file_name(rank_);
  write_file(plan + ".partial", json{{"tensors", entries}, {"objects", objects}}.dump());
  fs::rename(plan + ".partial", plan);
}

bool Checkpointer::writes(const CheckpointTensor& t) const {
  const bool owner = writes_chunk(*t.layout, groups_.coord);
  return t.layout->chunk.numel() > 0 && (owner || injected(Fault::kReplicasWriteTheirCopy));
}

// Merges the ranks' plans into the metadata's keys and checks every tensor is covered
// exactly once.
std::map<std::string, SavedKey> Checkpointer::merge_plans(const std::string& tmp) const {
  std::map<std::string, SavedKey> keys;
  for (int r = 0; r < groups_.world->size(); ++r) {
    const std::string plan_path = tmp + "/" + plan_file_name(r);
    const json plan = json::parse(read_text(plan_path));
    for (const auto& [key, e] : plan["tensors"].items()) {
      SavedKey& k = keys[key];
      k.kind = "tensor", k.dtype = e.at("dtype").get<std::string>(),
      k.shape = e.at("shape").get<std::vector<int64_t>>();
      k.chunks.push_back(parse_chunk(e, plan_path + ": " + key_label(key)));
    }
    for (const auto& [key, value] : plan["objects"].items()) {
      SavedKey& k = keys[key];
      k.kind = "object", k.value = value;
    }
    fs::remove(plan_path);
  }
  for (const auto& [key, k] : keys) {
    if (!k.is_tensor()) continue;
    int64_t numel = 1, covered = 0;
    for (auto d : k.shape) numel *= d;
    std::vector<Box> boxes;
    for (const auto& c : k.chunks) {
      Box b = box_of(c.offsets, c.sizes);
      for (const auto& other : boxes)
        if (!intersect(b, other).empty()) fail("checkpoint: save plan writes overlapping chunks of '" + key + "'");
      boxes.push_back(b);
      covered += Chunk{c.offsets, c.sizes}.numel();
    }
    if (covered != numel)
      fail("checkpoint: save plan covers " + std::to_string(covered) + " of " + std::to_string(numel) +
           " elements of '" + key + "'");
  }
  return keys;
}

CheckpointMetadata Checkpointer::metadata(int64_t step, std::map<std::string, SavedKey> keys) const {
  CheckpointMetadata m;
  m.step = step;
  m.writer_mesh = groups_.shape.to_string();
  m.key_style = config_.key_style;
  m.keys = std::move(keys);
  return m;
}

// One rename makes the folder visible. An older folder of the same step moves aside first.
void Checkpointer::publish(const std::string& tmp, int64_t step) const {
  const std::string final_dir = step_dir(step), old = final_dir + ".old";
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  remove_folder(old);
}

void Checkpointer::remove_old_steps() const {
  std::vector<int64_t> steps = complete_steps();
  std::sort(steps.rbegin(), steps.rend());
  std::error_code ec;
  for (size_t i = static_cast<size_t>(config_.keep_latest_k); i < steps.size(); ++i) {
    // Metadata first: a folder half-deleted by a crash must not look complete.
    fs::remove(step_dir(steps[i]) + "/" + kMetadata, ec);
    remove_folder(step_dir(steps[i]));
  }
}

void Checkpointer::check_writable() const {
  std::error_code ec;
  fs::create_directories(config_.folder, ec);
  if (ec) fail("checkpoint: cannot create folder '" + config_.folder + "': " + ec.message());
  const std::string probe = config_.folder + "/.write-probe-rank" + std::to_string(rank_);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const bool written = fd >= 0 && ::write(fd, "1", 1) == 1;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  if (!written)
    fail("checkpoint: folder '" + config_.folder + "' is not writable: " + std::strerror(error) +
         "; refusing to train a run that could not save");
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
