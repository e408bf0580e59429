// libFuzzer: the Hugging Face readers on arbitrary bytes, as a file (both read files): a
// safetensors file (header, offsets, every tensor read, the data coverage) and a trainer_state.json.
// Only CheckpointError and MetricsError may escape them.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "readers/safetensors.h"
#include "readers/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/meshtest-hf-fuzz-" + std::to_string(::getpid()) + ".safetensors";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  try {
    const meshtest::safetensors::Checkpoint c = meshtest::safetensors::open(path);
    for (const auto& t : c.tensors) meshtest::safetensors::read(t);
    meshtest::safetensors::check_data_covered(c);
  } catch (const meshtest::CheckpointError&) {
  }
  try {
    meshtest::read_trainer_state(path);
  } catch (const meshtest::MetricsError&) {
  }
  return 0;
}
