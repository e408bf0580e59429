#include "components/checkpointer.h"

#include "base/dtype.h"
#include "base/faults.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "components/checkpoint_files.h"
#include "components/outputs.h"
#include "contract/placement.h"

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest
using namespace checkpoint_files;

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// In a step's temporary folder: each rank's plan (where its chunks landed, its objects), which
// rank 0 merges into the metadata; and, from an asynchronous save whose write failed, the error.
std::string plan_file_name(int rank) { return "rank" + std::to_string(rank) + ".plan.json"; }
std::string failed_file_name(int rank) { return "rank" + std::to_string(rank) + ".failed"; }
// An asynchronous save's empty marker, made before the write starts: a failed write renames it to
// rank<R>.failed, which needs no space on a full disk. Rank 0 removes the markers before it
// publishes.
std::string writing_file_name(int rank) { return "rank" + std::to_string(rank) + ".writing"; }

}  // namespace

Checkpointer::Checkpointer(CheckpointConfig config, MeshGroups& groups, int rank)
    : CheckpointReader(std::move(config), groups.shape), groups_(groups), rank_(rank) {}

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
  // Rank 0's thread waits for this rank's plan: a failure here or on this rank's thread leaves
  // rank<R>.failed instead, the error written into the marker and the marker renamed (a rename
  // needs no space on a full disk, where the message itself may not fit).
  auto report_failure = [this, tmp](const std::exception& e) {
    const std::string writing = tmp + "/" + writing_file_name(rank_);
    try {
      write_file(writing, e.what());
    } catch (const std::exception&) {
      // The marker stays as it was (empty): rank 0 still learns that this rank failed.
    }
    std::error_code ec;
    fs::rename(writing, tmp + "/" + failed_file_name(rank_), ec);
  };
  try {
    write_file(tmp + "/" + writing_file_name(rank_), "");
    std::vector<CheckpointTensor> written;  // the chunks this rank writes, as host copies
    std::vector<torch::Tensor> originals;
    for (const auto& t : tensors)
      if (writes(t)) written.push_back(t), originals.push_back(t.local);
    const auto copies = staging_.snapshot(originals, dtype);  // the last save ended: see the top
    for (size_t i = 0; i < written.size(); ++i) written[i].local = copies[i];
    background_.start([this, tmp, step, dtype, objects, written, report_failure](const std::atomic<bool>& abandoned) {
      try {
        write_own_chunks(tmp, written, objects, dtype, step);
      } catch (const std::exception& e) {
        report_failure(e);
        throw;
      }
      if (rank_ != 0) return;
      wait_for_plans(tmp, abandoned);
      complete(tmp, step);
    });
  } catch (const std::exception& e) {  // the snapshot (memory) or the thread: before any write
    report_failure(e);
    throw;
  }
}

void Checkpointer::finish() {
  background_.wait();
  groups_.world->barrier();
}

void Checkpointer::complete(const std::string& tmp, int64_t step) {
  std::error_code ec;
  for (int r = 0; r < groups_.world->size(); ++r) fs::remove(tmp + "/" + writing_file_name(r), ec);
  write_file(tmp + "/" + std::string(kMetadataFile),
             to_json(metadata(step, merge_plans(tmp))).dump(1));  // last: it marks the folder whole
  publish(tmp, step);
  if (config_.keep_latest_k > 0) remove_old_steps();
}

void Checkpointer::wait_for_plans(const std::string& tmp, const std::atomic<bool>& abandoned) const {
  for (int r = 0; r < groups_.world->size(); ++r)
    while (!fs::exists(tmp + "/" + plan_file_name(r))) {
      if (fs::exists(tmp + "/" + failed_file_name(r))) {
        std::string why = read_text(tmp + "/" + failed_file_name(r));
        if (why.empty()) why = "the disk refused the message too; rank " + std::to_string(r) + "'s log has it";
        fail("checkpoint: rank " + std::to_string(r) + " could not write its part of '" + tmp + "': " + why);
      }
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
    // A device tensor comes through page-locked memory (the bus's speed, not a pageable bounce).
    auto data = t.local.is_cpu() ? t.local.detach().to(dtype).contiguous() : host_snapshot({t.local}, dtype)[0];
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
    fs::remove(step_dir(steps[i]) + "/" + std::string(kMetadataFile), ec);
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

}  // namespace meshtrain
