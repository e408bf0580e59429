// libFuzzer: parse_tfrecord_events on arbitrary bytes. Random bytes rarely pass a CRC, so when
// the first byte is odd the rest is framed as valid TFRecords (CRCs computed here) and the
// protobuf decoder sees the junk too. Only MetricsError may escape the parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "readers/tensorboard.h"

namespace {

std::string little_endian(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

std::string masked_crc(const std::string& b) {
  return little_endian(meshtest::mask_crc32c(meshtest::crc32c(reinterpret_cast<const uint8_t*>(b.data()), b.size())),
                       4);
}

// Splits `payload` into records at every 0xff byte and frames each one.
std::string frame_records(const uint8_t* data, size_t size) {
  std::string file, record;
  auto flush = [&] {
    std::string length = little_endian(record.size(), 8);
    file += length + masked_crc(length) + record + masked_crc(record);
    record.clear();
  };
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0xff)
      flush();
    else
      record.push_back(static_cast<char>(data[i]));
  }
  flush();
  return file;
}

void parse(const uint8_t* data, size_t size, const std::map<std::string, std::string>& tags) {
  std::vector<std::string> warnings;
  try {
    meshtest::parse_tfrecord_events(data, size, "fuzz", tags, &warnings);
  } catch (const meshtest::MetricsError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && (data[0] & 1)) {
    std::string framed = frame_records(data + 1, size - 1);
    parse(reinterpret_cast<const uint8_t*>(framed.data()), framed.size(), {});
    parse(reinterpret_cast<const uint8_t*>(framed.data()), framed.size(), meshtest::default_tensorboard_tags());
  } else {
    parse(data, size, {});
  }
  return 0;
}
