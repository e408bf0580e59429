#include "components/checkpoint_files.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "contract/checkpoint_format.h"

namespace meshtrain::checkpoint_files {

namespace {

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) fail("checkpoint: writing '" + path + "' failed: " + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

void remove_folder(const std::string& path) {
  auto remove_entry = [](const char* entry, const struct stat*, int, struct FTW*) {
    ::remove(entry);
    return 0;  // go on with the rest
  };
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// ---- DurableFile: staging buffers filled by append(), written by writer threads

namespace {
constexpr size_t kAlign = 4096;            // O_DIRECT's alignment of address, offset and length
constexpr size_t kBufferBytes = 32 << 20;  // one pwrite
constexpr int kBuffers = 4;                // staging memory: 128 MiB at most, allocated as needed
constexpr int kWriters = 2;                // writes in flight: keeps a disk's queue busy

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
}  // namespace

struct DurableFile::Pipeline {
  struct Job {
    char* data;
    size_t length;
    int64_t at;
  };
  std::mutex mu;
  std::condition_variable changed;
  std::vector<std::unique_ptr<char, AlignedFree>> owned;
  std::vector<char*> free;  // buffers to fill
  std::deque<Job> queue;    // full buffers waiting for a writer
  int writing = 0;          // jobs a writer holds
  bool stopping = false;
  std::string error;                // the first write's failure; later jobs are dropped
  std::atomic<bool> failed{false};  // error is set: append() throws it at once
  std::vector<std::thread> writers;
  char* current = nullptr;  // the buffer append() fills
  size_t used = 0;
};

DurableFile::DurableFile(std::string path) : path_(std::move(path)), pipeline_(std::make_unique<Pipeline>()) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);  // tmpfs
  if (fd_ < 0) fail("checkpoint: cannot create '" + path_ + "': " + std::strerror(errno));
  try {
    for (int w = 0; w < kWriters; ++w) pipeline_->writers.emplace_back([this] { write_loop(); });
  } catch (...) {  // no thread to be had: the ones started are joined, as the destructor would
    stop_writers();
    ::close(fd_);
    throw;
  }
}

DurableFile::~DurableFile() {
  stop_writers();
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::stop_writers() {
  Pipeline& p = *pipeline_;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.stopping = true;
  }
  p.changed.notify_all();
  for (auto& w : p.writers) w.join();
  p.writers.clear();
}

void DurableFile::append(const void* data, size_t size) {
  Pipeline& p = *pipeline_;
  if (p.failed) {
    std::lock_guard<std::mutex> lock(p.mu);
    fail(p.error);
  }
  const auto* from = static_cast<const char*>(data);
  while (size > 0) {
    if (p.current == nullptr) {
      std::unique_lock<std::mutex> lock(p.mu);
      if (p.free.empty() && static_cast<int>(p.owned.size()) < kBuffers) {
        void* memory = nullptr;
        if (::posix_memalign(&memory, kAlign, kBufferBytes) != 0) fail("checkpoint: out of memory for staging");
        p.owned.emplace_back(static_cast<char*>(memory));
        p.free.push_back(p.owned.back().get());
      }
      p.changed.wait(lock, [&p] { return !p.free.empty() || !p.error.empty(); });
      if (!p.error.empty()) fail(p.error);
      p.current = p.free.back(), p.used = 0;
      p.free.pop_back();
    }
    const size_t n = std::min(size, kBufferBytes - p.used);
    std::memcpy(p.current + p.used, from, n);
    p.used += n, from += n, size -= n;
    size_ += static_cast<int64_t>(n);
    if (p.used == kBufferBytes) hand_over(kBufferBytes);
  }
}

void DurableFile::hand_over(size_t length) {
  Pipeline& p = *pipeline_;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.queue.push_back({p.current, length, handed_});
  }
  p.changed.notify_all();
  handed_ += static_cast<int64_t>(length);
  p.current = nullptr, p.used = 0;
}

void DurableFile::write_loop() {
  Pipeline& p = *pipeline_;
  for (;;) {
    Pipeline::Job job{};
    {
      std::unique_lock<std::mutex> lock(p.mu);
      p.changed.wait(lock, [&p] { return p.stopping || !p.queue.empty(); });
      if (p.queue.empty() || (p.stopping && !p.error.empty())) return;
      job = p.queue.front();
      p.queue.pop_front();
      ++p.writing;
    }
    std::string error;
    bool buffered = false;
    const size_t start = p.failed ? job.length : 0;  // after a failure the file is lost: not written
    for (size_t done = start; done < job.length && error.empty();) {
      const ssize_t n = ::pwrite(fd_, job.data + done, job.length - done, job.at + static_cast<int64_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct_ && !buffered) {      // opened O_DIRECT, refuses it (or a short write
        ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT);  // left the rest unaligned): through the cache
        buffered = true;
        continue;
      }
      if (n <= 0)
        error = "checkpoint: writing '" + path_ + "' failed: " + std::strerror(n < 0 ? errno : EIO);
      else
        done += static_cast<size_t>(n);
    }
    {
      std::lock_guard<std::mutex> lock(p.mu);
      --p.writing;
      p.free.push_back(job.data);
      if (!error.empty() && p.error.empty()) p.error = error, p.failed = true;
    }
    p.changed.notify_all();
  }
}

void DurableFile::sync_and_close() {
  Pipeline& p = *pipeline_;
  if (p.current != nullptr) {  // the tail: whole blocks for O_DIRECT, cut back to size below
    const size_t length = direct_ ? (p.used + kAlign - 1) / kAlign * kAlign : p.used;
    std::memset(p.current + p.used, 0, length - p.used);
    hand_over(length);
  }
  {
    std::unique_lock<std::mutex> lock(p.mu);
    p.changed.wait(lock, [&p] { return (p.queue.empty() && p.writing == 0) || !p.error.empty(); });
  }
  stop_writers();
  if (!p.error.empty()) fail(p.error);
  const int fd = fd_;
  fd_ = -1;
  const bool sized = ::ftruncate(fd, size_) == 0;
  const bool synced = sized && ::fsync(fd) == 0;
  const int sync_errno = errno;
  if (::close(fd) != 0 || !synced)
    fail("checkpoint: cannot sync '" + path_ + "': " + std::strerror(synced ? errno : sync_errno));
}

void write_file(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("checkpoint: cannot create '" + path + "': " + std::strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  if (::close(fd) != 0 || !synced)
    fail("checkpoint: cannot sync '" + path + "': " + std::strerror(synced ? errno : sync_errno));
}

std::vector<uint64_t> leaf_sums(const char* p, int64_t length, int64_t leaf) {
  const int64_t leaves = (length + leaf - 1) / leaf;
  std::vector<uint64_t> sums(static_cast<size_t>(leaves));
  for_leaf_ranges(leaves, length, [&](int64_t first, int64_t last) {
    for (int64_t l = first; l < last; ++l)
      sums[static_cast<size_t>(l)] =
          contract::leaf_checksum(p + l * leaf, static_cast<size_t>(std::min(leaf, length - l * leaf)));
  });
  return sums;
}

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

}  // namespace meshtrain::checkpoint_files
