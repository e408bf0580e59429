// The parts of a case a matrix declares that are not how it runs: what it must do to stay
// green (Expectation), how it is judged (CheckSpec) and what it needs of the machine
// (Requirement). Read by core/matrix_fields.cpp, built into cases by core/matrix.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/check_kinds.h"
#include "core/yaml_reader.h"

namespace meshtest {

// What a case must do for the run to stay green.
struct Expectation {
  enum Kind { kPass, kXfail, kSkip, kFail };
  Kind kind = kPass;
  std::string reason;                  // xfail / skip
  CheckKind check = CheckKind::kExit;  // fail: the check a canary must trip
  std::string str() const;             // "pass", "xfail: reason", "skip: reason", "fail: loss_matches"
};

// One check a case declares: its kind and its parameters, defaults filled in (check_kinds.h).
struct CheckSpec {
  CheckKind kind = CheckKind::kExit;
  CheckParams params;
  Where where;
  // {"kind": "loss_matches", "params": every parameter that has a value, "where": "m.yaml:5:9"}
  nlohmann::json to_json() const;
};

// One thing a case needs from the machine it runs on (`requires:`, docs/matrix.md#requirements).
// Probes are run by requirements.h; the matrix only reads and validates them.
struct Requirement {
  enum Kind { kPython, kCommand, kPythonVersion, kGpus };
  Kind kind = kCommand;
  std::string text;                     // python: the snippet; python_version: the spec as written ("torch>=2.4")
  std::vector<std::string> argv;        // command: the argv, {matrix_dir} filled
  std::string interpreter = "python3";  // python, python_version: {matrix_dir} filled
  std::string module;                   // python_version: the module whose __version__ is compared
  std::vector<std::pair<std::string, std::string>> constraints;  // python_version: (">=", "2.4"), ...
  int gpus = 0;                                                  // gpus
  double timeout_s = 60;                                         // a probe that runs longer is unmet
  std::string reason;  // the matrix's words; "" for the default (docs/matrix.md)
  std::string dir;     // the matrix file's folder: where a probe runs, what relative programs resolve against
  Where where;
  std::string describe() const;  // "python 'import torch'", "command 'sh -c true'", "gpus 2", ...
  nlohmann::json to_json() const;
};

}  // namespace meshtest
