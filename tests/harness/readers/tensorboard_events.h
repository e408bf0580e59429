// A tiny writer of TensorBoard event files, as SummaryWriter writes them: protobuf Events in
// TFRecord frames (length, masked CRC-32C of the length, data, masked CRC-32C of the data). For
// tests that read TensorBoard through meshtest's reader (readers/tensorboard.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "readers/tensorboard.h"

namespace meshtest::tensorboard_events {

inline std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
  return out;
}

inline std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

inline std::string key(int field, int wire) { return varint(uint64_t(field) << 3 | wire); }
inline std::string varint_field(int field, uint64_t v) { return key(field, 0) + varint(v); }
inline std::string bytes_field(int field, const std::string& b) { return key(field, 2) + varint(b.size()) + b; }
inline std::string float_field(int field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return key(field, 5) + le(bits, 4);
}
inline std::string double_bits(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  return le(bits, 8);
}

// Summary.Value with simple_value (add_scalar's default).
inline std::string simple_value(const std::string& tag, float v) { return bytes_field(1, tag) + float_field(2, v); }
// Summary.Value with a tensor (add_scalar(new_style=True)) and scalars-plugin metadata.
inline std::string tensor_value(const std::string& tag, const std::string& tensor_proto) {
  std::string metadata = bytes_field(1, bytes_field(1, "scalars"));
  return bytes_field(1, tag) + bytes_field(8, tensor_proto) + bytes_field(9, metadata);
}
// An Event written at `wall_time` (seconds since the epoch; 0 leaves the field out, as proto3 does).
inline std::string event_at(double wall_time, long long step, const std::vector<std::string>& values) {
  std::string summary;
  for (const auto& v : values) summary += bytes_field(1, v);
  std::string e = wall_time != 0 ? key(1, 1) + double_bits(wall_time) : "";
  if (step != 0) e += varint_field(2, static_cast<uint64_t>(step));
  return e + bytes_field(5, summary);
}
inline std::string event(long long step, const std::vector<std::string>& values) {
  return event_at(1.7e9, step, values);
}
inline std::string file_version_event_at(double wall_time) {
  return key(1, 1) + double_bits(wall_time) + bytes_field(3, "brain.Event:2");
}
inline std::string file_version_event() { return file_version_event_at(1.7e9); }

inline std::string masked_crc(const std::string& b) {
  return le(mask_crc32c(crc32c(reinterpret_cast<const uint8_t*>(b.data()), b.size())), 4);
}
inline std::string tfrecord(const std::string& data) {
  std::string length = le(data.size(), 8);
  return length + masked_crc(length) + data + masked_crc(data);
}

// An events file: the file_version event, then per step its scalars (simple_value, add_scalar's default).
inline std::string events_file(const std::map<long long, std::vector<std::pair<std::string, float>>>& scalars) {
  std::string file = tfrecord(file_version_event());
  for (const auto& [step, values] : scalars) {
    std::vector<std::string> summary;
    for (const auto& [tag, v] : values) summary.push_back(simple_value(tag, v));
    file += tfrecord(event(step, summary));
  }
  return file;
}

}  // namespace meshtest::tensorboard_events
