// `meshtest golden regen ID --runs K`: goldens as bands. Runs the case K times through `meshtest
// run`'s own machinery (run_matrix.h), then writes, for each golden file its loss_matches checks
// name, `<step> <min> <max>` over the K runs (readers/golden_curve.h), keyed by hardware where the
// path says {hardware} (core/hardware.h), with the hardware in the file's header; and prints,
// per file, what changed against the file it replaces. docs/matrix.md#golden-bands-meshtest-golden-regen.
#pragma once

#include <string>
#include <vector>

#include "run_matrix.h"

namespace meshtest {

struct RegenRequest {
  std::string case_id;
  std::vector<std::string> matrices;  // none: the built-in CPU matrix
  int runs = 3;
  std::string out = "meshtest-out/regen";  // run k's --out folder is <out>/run-<k>
  std::string write_to;                    // "": each golden file where the matrix names it
  RunRequest run;                          // backend, pool, meshtrain, ... (selection and --out are set here)
};

// 0 once the band files are written; 128 + a signal when one stopped a run. Throws
// std::runtime_error with why: no such case, a case that judges by no golden file, a run that did
// not finish cleanly, runs that logged different steps or a non-finite value.
int regen_golden(const RegenRequest& request, const std::string& program);

}  // namespace meshtest
