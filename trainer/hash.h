// Small, platform-independent hashes: seeds derived from names and numbers must be the
// same on every machine and compiler (std::hash and <random> distributions are not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meshtrain {

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

}  // namespace meshtrain
