// The checks that read what a phase saved: its checkpoint's tensor keys and shapes (from
// the checkpoint where `outputs.checkpoint` says, else the phase's state_dict_keys.json)
// and its tensors element by element, each side's keys mapped as its `outputs` says.
#pragma once

#include "judge/check_context.h"

namespace meshtest {

void check_keys_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_tensors_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);

// The digest of a phase's parameters read from its checkpoint (outputs.checkpoint, keys mapped):
// {"model.<fqn>": {"l2", "sum", "numel"}} for each tensor under `model.`, as param_digest.json
// holds them, so params_match judges a trainer that writes only DCP checkpoints.
nlohmann::json checkpoint_param_digest(const Target& t);

// saved_once for a trainer that writes no contract files: the checkpoint outputs.checkpoint
// names stores every element once (CheckpointView::check_stored_once). A Finding when it does
// not; a Failure when it cannot be opened.
void check_checkpoint_stored_once(const Target& t);

}  // namespace meshtest
