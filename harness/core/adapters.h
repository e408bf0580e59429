// The door between the core and the trainers. The core (matrix, plan, checks) knows trainers
// only through a TrainerAdapter found by name in the AdapterRegistry; it never names one.
// A case says `adapter: NAME`; without it, a case with `command:` uses the `command` adapter
// (any program, described by YAML alone: docs/foreign-trainers.md) and one without uses the
// registry's default. main.cpp registers the built-in adapters (harness/meshtrain/ is one);
// docs/architecture.md says how to add another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/outputs.h"

namespace meshtest {

// A parallel layout as data: named axes and their sizes, in the order the case wrote them
// (`mesh: {dp_shard: 2, tp: 2}` or "dp_shard=2,tp=2"). Which names are allowed is the adapter's.
struct Layout {
  std::vector<std::pair<std::string, int64_t>> axes;
  int64_t ranks() const;                        // the product of the sizes
  int64_t size(const std::string& axis) const;  // 1 when the layout does not name it
  bool names(const std::string& axis) const;    // written in the mesh, whatever its size
  std::string to_compact_string() const;        // "dp_shard=2,tp=2": the sizes other than 1
};

// Reads "a=2,b=3" (sizes >= 1). Throws std::invalid_argument naming the bad part.
Layout parse_layout(const std::string& spec);

// One entry of a phase's `options:`, in the order the matrix wrote them.
struct PhaseOption {
  std::string key;
  std::optional<bool> flag;  // `key: true` / `key: false`
  std::string value;         // any other value, as written (a list joined with ',')
};

// What an adapter turns into the flags that follow its command.
struct PhaseRequest {
  std::string model;  // "" when the case names none
  Layout layout;      // the phase's mesh, or the adapter's default; no axes when neither
  std::vector<PhaseOption> options;
};

// A flag the adapter's command sets itself, and the matrix key to use instead.
struct ReservedOption {
  std::string option;   // as written under `options:`
  std::string use_key;  // "mesh", "model", "command", ...
};

// How the ranks of a simulated world (`simulate: true`, docs/simulation.md) share one device.
struct SimulatedWorld {
  std::string backend;  // what {backend} becomes ("": the run's, as without simulation)
  std::vector<std::pair<std::string, std::string>> env;  // added to every rank's environment
  std::string python_path;                               // put first on every rank's PYTHONPATH ("": none)
};

// A PyTorch trainer's simulated world: meshtest_sim (sim/), which its ranks' Python loads at
// start-up (sim/python/sitecustomize.py) and which takes over the trainer's NCCL. nullopt when
// this meshtest has no sim/ folder (an installed meshtest without it, $MESHTEST_SIM_DIR unset).
std::optional<SimulatedWorld> pytorch_simulation();

class TrainerAdapter {
 public:
  virtual ~TrainerAdapter() = default;
  virtual std::string name() const = 0;
  // The argv a phase runs when its case names no command; {action}, {model}, {mesh} are filled
  // when the matrix loads, {backend}, {case_dir}, {phase_dir} and program placeholders when it runs.
  // Empty: a case must give `command:`.
  virtual std::vector<std::string> default_command() const = 0;
  // Flags the adapter sets itself; a matrix's `options:` may not set them again.
  virtual std::vector<ReservedOption> reserved_options() const = 0;
  // The flags after the command. This default writes each option as `--key value`, `--key` for
  // true and nothing for false; an adapter that derives flags from the phase (its layout, a
  // translated option) overrides it. Throws std::invalid_argument with a message for the case.
  virtual std::vector<std::string> phase_args(const PhaseRequest& phase) const;
  // Where the trainer writes its numbers under `layout`, when a phase's `outputs:` says nothing.
  virtual Outputs default_outputs(const Layout& layout) const = 0;
  // Whether a case must name a model (it fills {model} in the default command).
  virtual bool needs_model() const = 0;
  // The models it can train, or nullopt when it cannot say (then nothing is rejected).
  virtual std::optional<std::vector<std::string>> models() const = 0;
  // The axes a layout may name, outermost first; empty: any name.
  virtual std::vector<std::string> layout_axes() const = 0;
  // The layout of a case that names none, for `nproc` ranks (nullopt: {mesh} stays unfilled).
  virtual std::optional<Layout> default_layout(int nproc) const = 0;
  // Why `model` cannot run under `layout` ("" when it can). `option` reads the case's options.
  virtual std::string layout_problem(const std::string& model, const Layout& layout,
                                     const std::function<std::string(const std::string&)>& option) const = 0;
  // How many steps a phase with this argv trains, if the adapter can tell (for duration estimates).
  virtual std::optional<double> steps(const std::vector<std::string>& argv) const = 0;
  // The flag or setting that makes the trainer report `metric` ("" when it always does or cannot
  // tell), for the message that says a phase reported none.
  virtual std::string how_to_report(const std::string& metric) const = 0;
  // Run-time placeholders it defines for every command, e.g. {"mytrainer", "/path/to/binary"}.
  virtual std::vector<std::pair<std::string, std::string>> placeholders() const = 0;
  // Why the program behind its placeholders cannot run on this machine ("" when it can), e.g.
  // a meshtest built without meshtrain: cases whose command uses a placeholder are then skipped
  // with this reason, or the run stops when every selected case would be.
  virtual std::string program_problem() const { return ""; }
  // The subcommand of argv[0] that starts this argv's ranks as forks of one process that loaded
  // the trainer once (run/fork_server.h), or "" when each rank must be an exec of argv[0].
  virtual std::string fork_server(const std::vector<std::string>& argv) const {
    (void)argv;
    return "";
  }
  // Variables every rank of its phases gets, unless the case's `env:` sets them (the switches
  // that make the trainer deterministic, say).
  virtual std::vector<std::pair<std::string, std::string>> environment() const { return {}; }
  // How this trainer's ranks share one device in a simulated world (`simulate: true`), or
  // nullopt when they cannot.
  virtual std::optional<SimulatedWorld> simulation() const { return std::nullopt; }
  // About how many bytes of GPU memory a simulated world of `nproc` ranks of `model` takes
  // (every rank's share summed), or nullopt when the adapter cannot tell.
  virtual std::optional<double> simulated_world_bytes(const std::string& model, int nproc) const {
    (void)model, (void)nproc;
    return std::nullopt;
  }
};

// The adapters this process knows, by name.
class AdapterRegistry {
 public:
  AdapterRegistry();  // holds the `command` adapter; main.cpp adds the built-in trainers
  void add(std::unique_ptr<TrainerAdapter> adapter);
  void set_default(const std::string& name);  // the adapter of a case with neither `adapter:` nor `command:`
  const TrainerAdapter* find(const std::string& name) const;  // nullptr when unknown
  const std::string& default_name() const { return default_; }
  std::vector<std::string> names() const;
  std::vector<const TrainerAdapter*> all() const;  // in the order added
  // Every adapter's placeholders, for resolving any case's argv.
  std::vector<std::pair<std::string, std::string>> placeholders() const;

 private:
  std::vector<std::unique_ptr<TrainerAdapter>> adapters_;
  std::string default_;
};

// The process's registry (main.cpp fills it before loading a matrix).
AdapterRegistry& trainer_adapters();

}  // namespace meshtest
