// Small, platform-independent hashes: seeds derived from names and numbers must be the
// same on every machine and compiler (std::hash and <random> distributions are not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace contract {

// SplitMix64's finaliser: a well-mixed 64-bit value from any 64-bit input.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a over bytes.
inline uint64_t fnv1a64(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  return h;
}

inline uint64_t fnv1a64(std::string_view s) { return fnv1a64(s.data(), s.size()); }

// Checkpoint checksums: FNV-style over 64-bit words (eight times fewer steps than
// FNV-1a over bytes), then SplitMix64's finaliser so every input bit reaches every
// output bit. Little-endian words, as the checkpoint's floats are.
inline uint64_t mix64(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ULL ^ size;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = (h ^ word) * 0x100000001b3ULL;
  }
  if (i < size) {
    uint64_t tail = 0;
    std::memcpy(&tail, bytes + i, size - i);
    h = (h ^ tail) * 0x100000001b3ULL;
  }
  return splitmix64(h);
}

}  // namespace contract
