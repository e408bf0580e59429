// Which cases a command works on: the matrices loaded, then the selection options of `run`
// and `list` (-k, --id, --tag, --exclude, --shard), with the baselines the chosen cases are
// judged against added back; and how `list` and `show` print a case.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "core/run_options.h"

namespace meshtest {

struct Selection {
  std::vector<std::string> matrices;  // none: the CPU matrix built into meshtest (test_matrix/cpu.yaml)
  std::vector<std::string> ids;       // exact
  std::vector<std::string> keywords;  // -k: substring of the id
  std::vector<std::string> tags;
  std::vector<std::string> excludes;  // substring of the id
  std::string shard;                  // "I/N", 1-based
};

// Loads and validates every matrix; throws one MatrixError with every file's errors.
std::vector<Suite> load_matrices(const std::vector<std::string>& files);

// The cases the filters choose (every filter given must hold; within one, any value), then
// the baselines they compare against, transitively, in matrix order. Throws
// std::invalid_argument for an --id that names no case.
std::vector<const Case*> select_cases(const std::vector<Suite>& suites, const Selection& selection);

// select_cases, then the shard's part of it when `selection.shard` says so: planned first with
// `durations`, so the shards balance the durations a run would expect. Throws
// std::invalid_argument for a malformed shard.
std::vector<const Case*> select_shard(const std::vector<Suite>& suites, const Selection& selection,
                                      const RunOptions& options, const std::map<std::string, double>& durations);

// `meshtest list`'s line for a case: id, ranks, phases, expectation, tags and requirements.
std::string listing_line(const Case& c);

// `meshtest show`: the case as loaded, each phase with the command it would run (under
// meshtest-out, on the gloo backend).
nlohmann::json shown_case(const Case& c);

}  // namespace meshtest
