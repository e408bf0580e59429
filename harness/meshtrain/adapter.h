// Everything meshtest knows about meshtrain, behind the core's adapter door (core/adapters.h):
// its command template and reserved flags, its mesh axes and the dp_shard=N default, how
// many steps a phase trains, and the models and tp rules it reports through
// `meshtrain describe --json` (asked once per binary, docs/contracts.md).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/adapters.h"

namespace meshtest {

// The meshtrain binary: $MESHTEST_MESHTRAIN when set (`meshtest run --meshtrain` sets it), else
// `meshtrain` next to meshtest. {meshtrain} in a command is this path.
std::string meshtrain_binary();
// `--meshtrain PATH`: made absolute when it is a path (a bare name is looked up in PATH) and
// passed on as $MESHTEST_MESHTRAIN, so ranks and `meshtest slurm-task` see the same binary.
void use_meshtrain_binary(const std::string& path);

// Adds the meshtrain adapter and makes it the default (a case without `command:` runs meshtrain).
void register_meshtrain_adapter(AdapterRegistry& registry);
// The same with a fixed describe document (what `meshtrain describe --json` prints), so a test
// loads matrices without starting the binary. Throws std::invalid_argument if it is not one.
void register_meshtrain_adapter(AdapterRegistry& registry, const nlohmann::json& description);

}  // namespace meshtest
