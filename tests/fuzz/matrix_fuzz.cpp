// libFuzzer: a matrix file's text through the loader and the cross-file validation, as
// `meshtest run` reads it. Bad YAML must come out as MatrixError (file:line:col lines);
// any other exception, a crash or undefined behaviour is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/matrix.h"
#include "model/flavors.h"
#include "meshtrain/adapter.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Model and mesh checks from meshtrain's own flavor table: no process per input.
  meshtest::register_meshtrain_adapter(meshtest::trainer_adapters(), nlohmann::json::parse(meshtrain::describe_json()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // yaml-cpp recurses per nesting level; real matrices are < 20 KB
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<meshtest::Suite> suites;
    suites.push_back(meshtest::load_suite_text(text, "fuzz.yaml"));
    meshtest::validate_suites(suites);
  } catch (const meshtest::MatrixError&) {
  }
  return 0;
}
