// Context parallelism (torchtitan's cp): each sequence is split over the cp ranks, with
// the load balancing causal attention needs, and attention still sees the whole sequence.
// Weights are untouched (FSDP shards them over dp_shard x cp, data_parallel.h); only
// tokens, positions and the attention core change (apply_cp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "distributed/comm.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain::cp {

// How a rank's queries meet the other ranks' keys and values: all-gather every K/V once
// (torchtitan's cp_allgather), or pass K/V around the ring, one neighbour exchange per
// step (torchtitan's cp_alltoall, "rotate" method alltoall).
enum class Rotate { kAllGather, kAllToAll };
Rotate parse_rotate(const std::string& s);  // "allgather" | "alltoall"

// --cp-rotate.
struct ContextParallelConfig {
  Rotate rotate = Rotate::kAllGather;
};
void add_options(CLI::App& cmd, ContextParallelConfig& config);

// The sequence [0, seq_len) cut into 2n equal chunks; rank i of n holds chunks i and
// 2n-1-i, so that under a causal mask every rank has the same amount of attention work.
// Returns their global positions, [seq_len / n] int64 on `device` (made there: no copy,
// no wait for the device), seq_len divisible by 2n.
torch::Tensor positions(int64_t seq_len, int64_t n, int64_t i, torch::Device device = torch::kCPU);

// This rank's tokens of x [B, T, ...]: x[:, positions(T, n, i)].
torch::Tensor shard_sequence(const torch::Tensor& x, int64_t n, int64_t i);

// Causal attention of this rank's queries against the keys and values of the whole
// sequence. q: [B, T/n, H, Dh]; k, v: [B, T/n, K, Dh], this rank's tokens in the order
// of positions(T, n, rank) -> [B, T/n, H, Dh]. Softmax in float32.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Comm& cp,
                        Rotate rotate);

// Every block's attention core of `model` becomes attention() over `cp`: the one change
// context parallelism makes to the model.
void apply_cp(Transformer& model, Comm& cp, Rotate rotate);

}  // namespace meshtrain::cp
