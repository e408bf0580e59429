#include "core/run_options.h"

namespace meshtest {

std::vector<std::string> SlurmOptions::to_args() const {
  std::vector<std::string> args = {"--gpus-per-node", std::to_string(gpus_per_node), "--max-pending",
                                   std::to_string(max_pending)};
  if (!partition.empty()) args.insert(args.end(), {"--partition", partition});
  if (!account.empty()) args.insert(args.end(), {"--account", account});
  if (time_limit_min > 0) args.insert(args.end(), {"--time-limit", std::to_string(time_limit_min)});
  for (const auto& a : srun_args) args.push_back("--srun-arg=" + a);
  return args;
}

nlohmann::json SlurmOptions::to_json() const {
  return {{"partition", partition},           {"account", account},         {"gpus_per_node", gpus_per_node},
          {"time_limit_min", time_limit_min}, {"max_pending", max_pending}, {"srun_args", srun_args}};
}

SlurmOptions SlurmOptions::from_json(const nlohmann::json& j) {
  SlurmOptions o;
  o.partition = j.value("partition", o.partition);
  o.account = j.value("account", o.account);
  o.gpus_per_node = j.value("gpus_per_node", o.gpus_per_node);
  o.time_limit_min = j.value("time_limit_min", o.time_limit_min);
  o.max_pending = j.value("max_pending", o.max_pending);
  o.srun_args = j.value("srun_args", o.srun_args);
  return o;
}

}  // namespace meshtest
