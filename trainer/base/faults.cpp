#include "base/faults.h"

#include <stdexcept>
#include <utility>

namespace meshtrain {

namespace {
const std::vector<std::pair<std::string, Fault>>& table() {
  static const std::vector<std::pair<std::string, Fault>> t = {
      {"none", Fault::kNone},
      {"grad-sum-not-mean", Fault::kGradSumNotMean},
      {"tp-missing-allreduce", Fault::kTpMissingAllReduce},
      {"grad-norm-local-shard", Fault::kGradNormLocalShard},
      {"dataloader-not-restored", Fault::kDataloaderNotRestored},
      {"optimizer-not-restored", Fault::kOptimizerNotRestored},
      {"hsdp-replicas-unsynced", Fault::kHsdpReplicasUnsynced},
      {"wrong-shard-offset", Fault::kWrongShardOffset},
      {"keys-renamed", Fault::kKeysRenamed},
      {"cp-local-positions", Fault::kCpLocalPositions},
      {"pp-loss-not-divided", Fault::kPpLossNotDivided},
      {"rope-theta-10k", Fault::kRopeTheta10k},
      {"uneven-bucket-offsets", Fault::kUnevenBucketOffsets},
      {"replicas-write-their-copy", Fault::kReplicasWriteTheirCopy},
      {"reduce-in-param-dtype", Fault::kReduceInParamDtype},
      {"hang-before-all-reduce", Fault::kHangBeforeAllReduce},
      {"hf-rows-not-reordered", Fault::kHfRowsNotReordered},
      {"validation-loss-local", Fault::kValidationLossLocal},
      {"float8-scale-not-inverted", Fault::kFloat8ScaleNotInverted},
      {"ep-tokens-not-regrouped", Fault::kEpTokensNotRegrouped},
      {"expert-bias-local-counts", Fault::kExpertBiasLocalCounts},
      {"opt-in-bwd-steps-twice", Fault::kOptInBwdStepsTwice},
  };
  return t;
}
Fault g_fault = Fault::kNone;  // one per process, set once before training starts
}  // namespace

Fault parse_fault(const std::string& name) {
  for (const auto& [n, f] : table())
    if (n == name) return f;
  std::string known;
  for (const auto& n : fault_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown --inject-fault '" + name + "' (known: " + known + ")");
}

std::vector<std::string> fault_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : table()) names.push_back(n);
  return names;
}

void inject_fault(Fault f) { g_fault = f; }
bool injected(Fault f) { return f != Fault::kNone && g_fault == f; }

}  // namespace meshtrain
