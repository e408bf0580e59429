// A test matrix: YAML in, validated cases out. Loading either returns every case
// with its phases resolved to argv arrays, or throws a MatrixError listing every
// problem with file:line:col. The schema is documented in docs/matrix.md.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/adapters.h"
#include "core/case_parts.h"
#include "core/outputs.h"
#include "core/yaml_reader.h"

namespace meshtest {

// One launch of `nproc` ranks. argv may still hold the run-time placeholders
// {backend}, {case_dir}, {phase_dir} and the adapters' program placeholders (see resolve_argv).
struct Phase {
  std::string name;
  int nproc = 1;
  std::optional<Layout> mesh;  // the case's `mesh:`, as its adapter allowed it
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  double timeout_s = 0;
  Outputs outputs;
  std::vector<std::pair<std::string, std::string>> outputs_from;  // setting -> "file:line:col" or "adapter NAME"
  Where where;
};

struct Case {
  std::string id;  // "<suite>/<name>", stable across runs
  std::string suite;
  std::string name;
  std::string file;
  Where where;
  std::string adapter;  // the trainer adapter that reads this case (core/adapters.h), by name
  // That adapter, resolved once at load (nullptr only for a Case built by hand).
  const TrainerAdapter* trainer_adapter = nullptr;
  std::string model;       // the adapter's model name, "" when it needs none
  std::string seed;        // options.seed as written, for reports
  int ngpu = 1;            // ranks of the widest phase: the GPUs (or CPU slots) it holds, unless simulated
  bool simulated = false;  // `simulate: true`: every rank on one GPU, through the adapter's simulated backend
  std::vector<Phase> phases;
  std::vector<std::string> tags;
  Expectation expect;
  std::vector<CheckSpec> checks;
  std::vector<Requirement> requirements;  // `requires:`: the defaults' first, then the case's own
  double duration_hint_s = 0;             // `duration:` in the YAML, 0 when absent
  std::vector<std::pair<std::string, std::string>> matrix_values;  // the axes that made it

  // GPUs (gpus) or CPU slots it holds: one GPU for a simulated world, else a device per rank.
  int devices(bool gpus) const { return simulated && gpus ? 1 : ngpu; }
  // The other cases this one's checks compare against (resolved ids).
  std::vector<std::string> baselines() const;
  nlohmann::json to_json() const;
};

struct Suite {
  std::string name;
  std::string file;
  std::string description;
  std::vector<Case> cases;
};

// Loads and validates one matrix file (or YAML text, for tests and the embedded default).
Suite load_suite_file(const std::string& path);
Suite load_suite_text(const std::string& yaml, const std::string& file_name);

// Validation across files: duplicate ids and baselines that name no case.
void validate_suites(const std::vector<Suite>& suites);

// GitHub Actions strategy.matrix semantics: the cartesian product of `axes` in order,
// minus every combination that `exclude` entries partially match, then `include`
// entries extend matching combinations or become new ones. Exposed for tests.
using Combination = std::vector<std::pair<std::string, std::string>>;
std::vector<Combination> expand_axes(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes,
                                     const std::vector<Combination>& include, const std::vector<Combination>& exclude);

// Values for the run-time placeholders of Phase::argv.
struct RunPaths {
  std::string backend;
  std::string case_dir;
  std::string phase_dir;
  std::vector<std::pair<std::string, std::string>> programs;  // the adapters' placeholders
};
std::vector<std::string> resolve_argv(const std::vector<std::string>& argv, const RunPaths& paths);
std::string resolve_path(const std::string& text, const RunPaths& paths);  // placeholders; relative → phase_dir

}  // namespace meshtest
