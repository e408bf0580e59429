// libFuzzer: the non-executing unpickler and DCP's interpretation of a parsed `.metadata`, on
// arbitrary bytes. Every input must end in a value or one of the documented exceptions
// (PickleError, CheckpointError): never a crash, a hang or memory out of proportion to the input.
// Seeds: the `.metadata` files under shared/fixtures/dcp-torch-2.11.
#include <cstddef>
#include <cstdint>

#include "readers/dcp.h"
#include "readers/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const meshtest::pickle::Pickle parsed = meshtest::pickle::parse(data, size, "fuzz.metadata");
    (void)meshtest::pickle::describe(parsed.root());
    (void)meshtest::dcp::interpret_metadata(parsed, "fuzz.metadata");
  } catch (const meshtest::pickle::PickleError&) {
  } catch (const meshtest::CheckpointError&) {
  }
  return 0;
}
