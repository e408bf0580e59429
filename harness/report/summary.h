// summary.json: every case with its verdict, durations, phases (with their loss
// curves), checks (with the curves they compared) and paths. Every report (report.h,
// html_report.h) is rendered from it, so `meshtest report` can redo them later.
// Its fields are documented in docs/summary-json.md.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/run_options.h"

namespace meshtest {

// 2: typed verdicts (`verdict`), phase curves, check numbers and series.
constexpr int kSummaryFormatVersion = 2;

nlohmann::json summary_json(const RunResult& result, const RunOptions& options);
// Atomically: a reader never sees half a file.
void write_summary(const nlohmann::json& summary, const std::string& path);

}  // namespace meshtest
