// What the harness knows about a trainer, kept in one place per trainer. The core (matrix,
// runner, checks) asks a case's adapter; it never names a trainer. A case without `command:`
// runs meshtrain (the one built-in adapter); any other program is described by YAML alone:
// `command:` plus `outputs:` (where its loss curve and checkpoint are, docs/foreign-trainers.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/matrix.h"

namespace meshtest {

class TrainerAdapter {
 public:
  virtual ~TrainerAdapter() = default;
  virtual std::string name() const = 0;
  // The argv a phase runs when its case names no command; {action}, {model}, {mesh} are filled
  // when the matrix loads, {meshtrain}, {backend}, {case_dir}, {phase_dir} when it runs.
  virtual std::vector<std::string> default_command() const = 0;
  // Flags the default command already sets; a matrix's `options:` may not set them again.
  virtual std::vector<std::string> reserved_options() const = 0;
  // Where the trainer writes its numbers.
  virtual Outputs default_outputs() const = 0;
  // The models it can train, or nullopt when it cannot be asked (then nothing is rejected).
  virtual std::optional<std::vector<std::string>> models() const = 0;
  // Why `model` cannot run under `mesh` ("" when it can). `option` reads the case's options.
  virtual std::string mesh_problem(const std::string& model, const contract::MeshShape& mesh,
                                   const std::function<std::string(const std::string&)>& option) const = 0;
};

// The meshtrain binary: $MESHTEST_MESHTRAIN when set (`meshtest run --meshtrain` sets it), else
// `meshtrain` next to meshtest. Both {meshtrain} and the adapter use this one.
std::string meshtrain_binary();
// meshtrain, asked once per process with `meshtrain_binary() describe --json`.
const TrainerAdapter& meshtrain_adapter();

}  // namespace meshtest
