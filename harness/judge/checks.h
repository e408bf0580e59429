// The checks behind a case's verdict (judge.h weighs them). Each check reads the files a
// phase left (docs/contracts.md) and says what differed, where, expected vs got, and the
// tolerance. Documented with example failures in docs/checks.md.
//
// The checks live in rooms by what they read: curve_checks (loss, grad norm, validation
// loss), checkpoint_checks (keys, tensors), rank_checks (rank<R>.json, param_digest.json,
// tokens), log_checks (exit, logs, error messages); check_context.h is what they share.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/outcome.h"
#include "judge/check_sources.h"

namespace meshtest {

// `exit` first (always), then every declared check, in order.
std::vector<CheckResult> run_checks(const CaseOutcome& outcome, const CheckSources& from);

// Fills each phase's `curve` from its metrics (as `outputs` says), where they can be read.
void record_curves(CaseOutcome& outcome);

// What `meshtest diff` and `golden export` read, from where `outputs` says (the default:
// the contract files, docs/contracts.md); throw std::runtime_error.
// `metric`: loss, grad_norm, validation_loss, num_zeros or tokens_seen (only the steps that have one).
// `window`: when the phase ran (summary.json's `metrics_window`), so a TensorBoard folder it
// shared with another phase gives only its own events; none reads every event.
std::map<long long, double> read_loss_curve(const std::string& phase_dir, const Outputs& outputs = {},
                                            const std::string& metric = "loss",
                                            const std::optional<TimeWindow>& window = std::nullopt);
// Every metric the phase reported, by name (`golden export --format megatron`): loss, and
// grad_norm, validation_loss, num_zeros and tokens_seen where some step has one.
std::map<std::string, std::map<long long, double>> read_phase_curves(
    const std::string& phase_dir, const Outputs& outputs = {}, const std::optional<TimeWindow>& window = std::nullopt);
// key (after the checkpoint source's mapping) -> "[shape]"
std::map<std::string, std::string> read_tensor_keys(const std::string& phase_dir, const Outputs& outputs = {});

}  // namespace meshtest
