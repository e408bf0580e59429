// Every harness test process knows meshtrain as `meshtest` does, but from meshtrain's own flavor
// table (trainer/model/flavors.h) instead of by starting the binary: loading a matrix in a test starts
// no process and needs no meshtrain built.
#include <nlohmann/json.hpp>

#include "model/flavors.h"
#include "meshtrain/adapter.h"

namespace {

const bool registered = [] {
  meshtest::register_meshtrain_adapter(meshtest::trainer_adapters(), nlohmann::json::parse(meshtrain::describe_json()));
  return true;
}();

}  // namespace
