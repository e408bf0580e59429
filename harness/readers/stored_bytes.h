// Reading the bytes a checkpoint stores, whatever its format (PyTorch DCP, meshtrain's,
// safetensors): a file read at 64-bit offsets, each read checked against the file's size, and
// one stored element of a dtype turned into a double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meshtest {

// Bytes per element of a dtype name, 0 when unknown; and the conversion of one stored element.
size_t element_size(const std::string& dtype);
double element_to_double(const std::string& dtype, const uint8_t* little_endian);

// A file read at 64-bit offsets with pread, each read checked against the file's size.
class FileReader {
 public:
  explicit FileReader(const std::string& path);  // throws CheckpointError when it cannot be opened
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Exactly `length` bytes at `offset`; `what` says what they are for the error message.
  std::vector<uint8_t> read(uint64_t offset, uint64_t length, const std::string& what) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace meshtest
