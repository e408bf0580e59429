// CPU offload of one rank's weights when no other rank shares them (FSDP2's CPUOffloadPolicy
// on a single data-parallel rank): each weight's float32 master copy lives in pinned host
// memory; OffloadedWeights streams it to the GPU (cast to the compute dtype) a few weights
// ahead of use on a side stream, and sends its gradient back on another, so the copies
// overlap compute. At the end of each backward the gradients are in host memory, as .grad
// of the host pieces, ready for the host optimizer.
//
// On a CPU build (or a CPU device) nothing is pinned or streamed: the weight is only cast.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace meshtrain {

class OffloadedWeights {
 public:
  // `device`: where forward computes; `dtype`: what it computes in; `bytes_ahead`: how many
  // host bytes the prefetch may have in flight beyond the weight in use.
  OffloadedWeights(torch::Device device, torch::ScalarType dtype, int64_t bytes_ahead = 256ll << 20);
  ~OffloadedWeights();

  // Moves `weight` (a parameter) to pinned host memory and returns its index. Add the
  // weights in the order forward uses them: prefetch follows that order.
  size_t add(torch::Tensor& weight);
  // The device copy of weight `i` in the compute dtype, as an autograd function of the host
  // piece: its gradient goes back to the piece's .grad (at the end of backward).
  torch::Tensor weight(size_t i);

  struct State;  // the streams, the prefetches in flight and the gradients on their way back

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meshtrain
