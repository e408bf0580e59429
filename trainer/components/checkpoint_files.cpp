#include "components/checkpoint_files.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <cerrno>
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

DurableFile::DurableFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) fail("checkpoint: cannot create '" + path_ + "': " + std::strerror(errno));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::append(const void* data, size_t size) {
  write_all(fd_, data, size, path_);
  size_ += static_cast<int64_t>(size);
}

void DurableFile::sync_and_close() {
  const int fd = fd_;
  fd_ = -1;
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  if (::close(fd) != 0 || !synced)
    fail("checkpoint: cannot sync '" + path_ + "': " + std::strerror(synced ? errno : sync_errno));
}

void write_file(const std::string& path, const std::string& bytes) {
  DurableFile f(path);
  f.append(bytes.data(), bytes.size());
  f.sync_and_close();
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
