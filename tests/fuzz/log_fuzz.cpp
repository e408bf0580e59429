// libFuzzer: the torchtitan and Megatron-LM log parsers and a user pattern on arbitrary text. Only
// MetricsError may escape them (and neither should throw it for a stream's content).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "readers/log_metrics.h"
#include "readers/megatron.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const meshtest::LogPattern pattern(
      R"(^(?:\[rank\d+\]:)?.*?step[:= ]\s*(?P<step>[\d,]+)(?:.*loss[:=]\s*(?<loss>\S+))?(?:.*grad_norm[:=]\s*(?P<grad_norm>[^\s(]+))?)");
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> warnings;
  try {
    std::istringstream titan(text);
    meshtest::parse_torchtitan_log(titan, "fuzz", &warnings);
    std::istringstream user(text);
    meshtest::parse_log_with_pattern(user, "fuzz", pattern, &warnings);
    std::istringstream megatron(text);
    meshtest::parse_megatron_log(megatron, "fuzz", &warnings);
  } catch (const meshtest::MetricsError&) {
  }
  return 0;
}
