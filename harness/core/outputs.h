// Where a phase's numbers are (`outputs:`, docs/matrix.md). The defaults are meshtest's own
// contract files (docs/contracts.md), which any trainer may write; an adapter or a case says
// otherwise.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/check_kinds.h"

namespace meshtest {

// Where a phase's loss curve comes from (the `outputs.metrics` key, docs/matrix.md).
struct MetricsSource {
  // kMegatron: Megatron-LM's TensorBoard scalars in `path`, else (no event files there) its
  // console line in rank<rank>.log (readers/megatron.h).
  enum Kind { kJsonl, kTorchtitanLog, kLogPattern, kTensorboard, kHfTrainerState, kMegatron };
  Kind kind = kJsonl;
  std::string path =
      "metrics.jsonl";  // jsonl file, tensorboard folder, trainer_state.json or its folder; relative to the phase folder
  int rank = 0;         // log sources: whose rank<R>.log; for kMegatron -1 is the last rank (Megatron's log rank)
  std::string pattern;                      // log-pattern: ECMAScript with named groups
  std::map<std::string, std::string> tags;  // tensorboard: metric name -> tag, over the defaults
  std::string describe() const;             // "torchtitan log of rank 0", for messages
};

// Where a phase's state-dict keys and tensors come from (`outputs.checkpoint`). Without it,
// keys come from the phase's state_dict_keys.json (meshtrain's contract file).
struct CheckpointSource {
  std::string path;     // a step folder or a folder of step-<N>; relative to the phase folder
  long long step = -1;  // -1: the newest complete step
  // Keys outside model./optimizer./lr_scheduler/dataloader/train_state get this prefix, so
  // torchtitan's unprefixed model keys compare with meshtrain's `model.<fqn>`.
  std::string model_prefix;
  std::vector<std::pair<std::string, std::string>> rename;  // regex -> replacement, in order
};

struct Outputs {
  MetricsSource metrics;
  std::optional<CheckpointSource> checkpoint;
  // Generated tokens: a JSON file with `generated_ids` (and `prompt`), as generate.json; "" when
  // the trainer writes none.
  std::string tokens = "generate.json";
  // The phase leaves meshtest's contract files (rank<R>.json, param_digest.json,
  // state_dict_keys.json; docs/contracts.md), as meshtrain does and any trainer may.
  bool contract_files = true;
};
// As `show` and summary.json write them, so `meshtest diff` reads a finished run the same way.
nlohmann::json outputs_to_json(const Outputs& outputs);
Outputs outputs_from_json(const nlohmann::json& j);  // absent or malformed fields keep defaults

// Why a phase with these outputs cannot feed a check that reads `input`, with what would make it
// work; "" when it can. `adapter` names the trainer adapter in the message.
std::string input_problem(CheckInput input, const Outputs& outputs, const std::string& adapter);

// The names `outputs.metrics.from` takes, in MetricsSource::Kind order.
std::vector<std::string> metrics_source_names();
std::optional<MetricsSource::Kind> metrics_source_kind(const std::string& name);

}  // namespace meshtest
