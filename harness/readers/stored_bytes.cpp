#include "readers/stored_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include "readers/checkpoint_error.h"

namespace meshtest {

namespace {

[[noreturn]] void refuse(const std::string& message) { throw CheckpointError(message); }

uint64_t little_endian(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

FileReader::FileReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) refuse(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    refuse(path + ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<uint8_t> FileReader::read(uint64_t offset, uint64_t length, const std::string& what) const {
  if (offset > size_ || length > size_ - offset)
    refuse(what + ": bytes " + std::to_string(offset) + ".." + std::to_string(offset + length) +
           " lie beyond the end of " + path_ + " (size " + std::to_string(size_) + ")");
  std::vector<uint8_t> out(static_cast<size_t>(length));
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n =
        ::pread(fd_, out.data() + done, static_cast<size_t>(length - done), static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(what + ": reading " + path_ + " failed: " + std::strerror(errno));
    if (n == 0) refuse(what + ": " + path_ + " ended early (truncated while reading?)");
    done += static_cast<uint64_t>(n);
  }
  return out;
}

size_t element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8},  {"int32", 4}, {"int16", 2},
      {"int8", 1},    {"uint8", 1},   {"bool", 1},    {"uint16", 2},   {"uint32", 4}, {"uint64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

double element_to_double(const std::string& dtype, const uint8_t* p) {
  auto bits_to_float = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return static_cast<double>(f);
  };
  if (dtype == "float32") return bits_to_float(static_cast<uint32_t>(little_endian(p, 4)));
  if (dtype == "bfloat16") return bits_to_float(static_cast<uint32_t>(little_endian(p, 2)) << 16);
  if (dtype == "float64") {
    const uint64_t bits = little_endian(p, 8);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  if (dtype == "float16") {
    const uint32_t h = static_cast<uint32_t>(little_endian(p, 2));
    const int exponent = (h >> 10) & 0x1F;
    const double mantissa = h & 0x3FF;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0) return sign * std::ldexp(mantissa, -24);
    if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
    return sign * std::ldexp(1024 + mantissa, exponent - 25);
  }
  if (dtype == "int64") return static_cast<double>(static_cast<int64_t>(little_endian(p, 8)));
  if (dtype == "int32") return static_cast<int32_t>(little_endian(p, 4));
  if (dtype == "int16") return static_cast<int16_t>(little_endian(p, 2));
  if (dtype == "int8") return static_cast<int8_t>(p[0]);
  if (dtype == "uint8") return p[0];
  if (dtype == "bool") return p[0] != 0;
  if (dtype == "uint16") return static_cast<double>(little_endian(p, 2));
  if (dtype == "uint32") return static_cast<double>(little_endian(p, 4));
  if (dtype == "uint64") return static_cast<double>(little_endian(p, 8));
  refuse("dtype " + dtype + " cannot be read as numbers");
}

}  // namespace meshtest
