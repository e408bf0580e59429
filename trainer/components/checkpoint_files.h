// The file primitives meshtrain's checkpoint is written and read with (components/checkpoint.h,
// checkpointer.h). Promises: a failure throws std::runtime_error naming the file and errno; a
// DurableFile is on disk when sync_and_close() returns; leaf checksums hash on several threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace meshtrain::checkpoint_files {

[[noreturn]] void fail(const std::string& what);

// Removes a folder and everything in it; a folder that is not there is no error, and what
// cannot be removed stays (as fs::remove_all with an error_code). Not fs::remove_all itself: the
// PyTorch wheel's libtorch.so exports its own copy, which a CUDA build's calls bind to, and that
// copy jumps to address 0 on a folder with files in it (docs/building.md, CUDA).
void remove_folder(const std::string& path);

// A file written from start to end and made durable, or an exception: the caller's
// folder is temporary, so a failure leaves nothing that looks complete. Written at the disk's
// pace, not the caller's: append() copies into one of a few large aligned staging buffers, and
// writer threads put the full ones at their offsets with pwrite (O_DIRECT where the file system
// takes it, past the page cache), so hashing the next chunk overlaps writing this one. append()
// waits only when every buffer is in flight, and throws a writer's error (file and errno).
class DurableFile {
 public:
  explicit DurableFile(std::string path);
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  ~DurableFile();  // stops the writers; a file not synced is left for the caller's folder to go
  void append(const void* data, size_t size);
  int64_t size() const { return size_; }
  void sync_and_close();

 private:
  struct Pipeline;                // the buffers, the queue of full ones, the writer threads
  void hand_over(size_t length);  // the current buffer's first `length` bytes, to the writers
  void write_loop();              // one writer thread
  void stop_writers();

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;  // opened with O_DIRECT: whole aligned blocks only
  int64_t size_ = 0;     // bytes appended
  int64_t handed_ = 0;   // bytes handed to the writers: the next buffer's offset in the file
  std::unique_ptr<Pipeline> pipeline_;
};

void write_file(const std::string& path, const std::string& bytes);  // small, written and synced at once
std::string read_text(const std::string& path);

// pread until `size` bytes or the end of the file (one call returns at most ~2 GiB).
int64_t pread_fully(int fd, char* out, int64_t size, int64_t at);

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
std::vector<uint64_t> leaf_sums(const char* p, int64_t length, int64_t leaf);

}  // namespace meshtrain::checkpoint_files
