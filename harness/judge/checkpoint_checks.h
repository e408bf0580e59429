// The checks that read what a phase saved: its checkpoint's tensor keys and shapes (from
// the checkpoint where `outputs.checkpoint` says, else meshtrain's state_dict_keys.json)
// and its tensors element by element, each side's keys mapped as its `outputs` says.
#pragma once

#include "judge/check_context.h"

namespace meshtest {

void check_keys_match(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result);
void check_tensors_match(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result);

}  // namespace meshtest
