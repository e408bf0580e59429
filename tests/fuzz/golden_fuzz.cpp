// libFuzzer: the golden file readers on arbitrary bytes: Megatron-LM's golden_values JSON (its
// grid walked, every message built) and meshtest's `<step> <value>` / `<step> <min> <max>` lines.
// Only MetricsError may escape them.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "readers/golden_curve.h"
#include "readers/golden_values.h"
#include "readers/metric_series.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    meshtest::parse_golden_values(text, "fuzz.json");
  } catch (const meshtest::MetricsError&) {
  }
  try {
    std::istringstream in(text);
    meshtest::parse_golden_curve(in, "fuzz.txt").text();
  } catch (const meshtest::MetricsError&) {
  }
  return 0;
}
