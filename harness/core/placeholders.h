// The one placeholder rule (docs/matrix.md#placeholders): `{name}`, a letter or `_` then letters,
// digits or `_`, in any string meshtest fills: a command and its options, env values, outputs
// paths, probes. Each place fills some names when the matrix loads, keeps others for when the
// phase runs, and refuses every other name at load, in one form of message.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace meshtest {

struct PlaceholderPlace {
  std::string what;                            // "command", "env A", "outputs.tokens", "requires.command"
  std::map<std::string, std::string> now;      // filled at load
  std::vector<std::string> later;              // kept as written, filled when the phase runs
  std::map<std::string, std::string> lacking;  // names this place cannot have, and why ("this phase has no mesh")
  std::string takes;                           // what the place takes, said when it refuses a name ("" to say nothing)
};

// `text` with the place's `now` names filled and its `later` ones kept. Every other name is
// kept as written and reported through `refuse`: "unknown placeholder {x} in WHAT; WHY; did you
// mean {y}?".
std::string fill_placeholders(const std::string& text, const PlaceholderPlace& place,
                              const std::function<void(const std::string& message)>& refuse);

// When a phase runs: each `{name}` of `values` filled, in one pass over `text` (a filled value
// is never read for placeholders again); other names stay as written.
std::string fill_run_time(const std::string& text, const std::map<std::string, std::string>& values);

}  // namespace meshtest
