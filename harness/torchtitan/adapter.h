// torchtitan as a built-in trainer (`adapter: torchtitan`, docs/foreign-trainers.md): a case
// writes `model: llama3/llama3_debugmodel` and `mesh: {dp_shard: 4, tp: 2}` as a meshtrain case
// does, and the adapter writes torchtitan's command line: `--module`/`--config`, the
// `--parallelism.*` degrees, the dump and checkpoint folders, seed and determinism, and the
// `stop-at` of a save phase. Flag names are checked against the torchtitan that will run
// (its `--help`, asked once per torchtitan and cached), so a renamed flag is a clear error at
// load time instead of a crash on the GPU runner.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/adapters.h"

namespace meshtest {

// The Python that runs torchtitan: $MESHTEST_TORCHTITAN_PYTHON, else python3. {torchtitan_python}.
std::string torchtitan_python();

// What `python -m torchtitan.train --module M --config C --help` printed, or nullopt when it
// could not be asked (no Python, torchtitan not importable, a timeout).
using TorchtitanHelp = std::function<std::optional<std::string>(const std::string& module, const std::string& config)>;

// Adds the torchtitan adapter, asking the installed torchtitan for its flags (cached).
void register_torchtitan_adapter(AdapterRegistry& registry);
// The same with a given help source, so a test loads matrices without Python.
void register_torchtitan_adapter(AdapterRegistry& registry, TorchtitanHelp help);

}  // namespace meshtest
