// A micro-batch on this rank's device: its token ids as tensors, cut to this rank's share of
// the sequence under context parallel, and their positions.
#pragma once

#include <torch/torch.h>

#include "components/data.h"
#include "distributed/parallel_model.h"

namespace meshtrain {

struct DeviceBatch {
  torch::Tensor inputs, targets;  // [b, T], or [b, T / cp] under context parallel
  torch::Tensor positions;
};

inline DeviceBatch to_device(ParallelModel& pm, const Batch& batch) {
  auto ids = [&](const std::vector<int64_t>& v) {
    return pm.local_tokens(torch::tensor(v, torch::kInt64).view({batch.samples, batch.seq_len}).to(pm.groups.device));
  };
  return {ids(batch.inputs), ids(batch.targets), pm.positions(batch.seq_len)};
}

}  // namespace meshtrain
