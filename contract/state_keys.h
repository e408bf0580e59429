// The state-dict keys of a save, spelled once (torchtitan's names): "model.<fqn>",
// "optimizer.state.<fqn>.exp_avg", "lr_scheduler", "train_state", "dataloader.dp_rank_<i>".
// meshtrain writes, resumes and exports under them; the checkpoint only styles them
// (--checkpoint.key-style). A model key is its module path (model_names.h) under "model.".
//
// Promises: model_fqn(model(fqn)) == fqn for every fqn, and model_fqn says nullopt for every
// key that is not a model key, so no one strips the prefix by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace contract::state_keys {

inline constexpr char kModelPrefix[] = "model.";

// "model.<fqn>": a parameter or a state buffer of the model.
inline std::string model(const std::string& fqn) { return kModelPrefix + fqn; }

// The module path of a model key ("model.layers.0.attention.wq.weight" -> "layers.0.attention.wq.weight");
// nullopt for an optimizer, schedule, train-state or data key.
inline std::optional<std::string> model_fqn(std::string_view key) {
  const std::string_view prefix(kModelPrefix);
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  return std::string(key.substr(prefix.size()));
}

// "optimizer.state.<fqn>.<moment>", moment one of kMoments.
inline std::string optimizer(const std::string& fqn, const std::string& moment) {
  return "optimizer.state." + fqn + "." + moment;
}
inline const std::vector<std::string> kMoments = {"exp_avg", "exp_avg_sq"};  // AdamW's, in saved order

// "dataloader.dp_rank_<i>": one data position per data-parallel rank.
inline std::string dataloader(int64_t dp_rank) { return "dataloader.dp_rank_" + std::to_string(dp_rank); }

inline const std::string kLrScheduler = "lr_scheduler";
inline const std::string kTrainState = "train_state";

// The non-tensor entries of a full save, in state_dict_keys.json's order.
inline std::vector<std::string> objects(int64_t dp_degree) {
  std::vector<std::string> out{kLrScheduler, kTrainState};
  for (int64_t r = 0; r < dp_degree; ++r) out.push_back(dataloader(r));
  return out;
}

}  // namespace contract::state_keys
