// How a rank finds its peers (the torchrun environment) and talks to them
// (a c10d backend: Gloo on CPU, NCCL on CUDA; or shared memory, for a simulated world of
// many ranks on one device: shm_comm.h). Version differences stay in compat.h.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/collective.h"
#include "contract/mesh.h"

namespace meshtrain {
using namespace contract;  // the mesh, placement and hash names meshtrain shares with meshtest

// What torchrun tells a rank. With no RANK / WORLD_SIZE set, a single rank.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this host (torchrun and meshtest set LOCAL_WORLD_SIZE)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Throws std::invalid_argument on malformed or inconsistent values.
  static LaunchEnv from_environment();
};

enum class Backend { kGloo, kNccl, kShm };
// "gloo" | "nccl" | "shm"; throws std::invalid_argument for anything else.
Backend parse_backend(const std::string& name);
// Whether a rank of this backend computes on a GPU: NCCL always; shm in the CUDA build
// when a GPU is visible (all of a simulated world's ranks share the visible GPUs).
bool computes_on_cuda(Backend backend);

// The process groups of one job: the world and one group per mesh dimension.
struct MeshGroups {
  MeshShape shape;
  MeshCoord coord;
  torch::Device device{torch::kCPU};
  std::shared_ptr<Comm> world;
  std::shared_ptr<Comm> pp;  // one model replica's pipeline stages: loss and norm sums
  // Point-to-point channels between stages, one per direction, and one more each for the
  // wrap from the last pp rank to the first (interleaved schedules). Each carries messages
  // one way between any two ranks, and on NCCL each is its own communicator and stream,
  // so a transfer one way can never queue behind a transfer the other way.
  std::shared_ptr<Comm> pp_activations, pp_activations_wrap, pp_gradients, pp_gradients_wrap;
  std::shared_ptr<Comm> dp_replicate;
  std::shared_ptr<Comm> dp_shard;
  std::shared_ptr<Comm> cp;
  std::shared_ptr<Comm> tp;
  std::shared_ptr<Comm> dp_shard_cp;  // dp_shard x cp flattened: FSDP shards the weights over it
  std::shared_ptr<Comm> dp_cp;        // dp_replicate x dp_shard x cp: the ranks whose losses average
  // Expert parallel (ep ranks, consecutive along dp_shard): `ep` exchanges tokens and
  // holds the experts between them; `ep_shard` (dp_shard / ep ranks, same place in their ep
  // group) is where FSDP shards expert weights. Without expert parallel, ep is one rank and
  // ep_shard is dp_shard itself.
  int64_t ep_degree = 1;
  std::shared_ptr<Comm> ep;
  std::shared_ptr<Comm> ep_shard;

  Comm& along(MeshDim d) const {
    switch (d) {
      case MeshDim::kPp: return *pp;
      case MeshDim::kDpReplicate: return *dp_replicate;
      case MeshDim::kDpShard: return *dp_shard;
      case MeshDim::kCp: return *cp;
      case MeshDim::kTp: return *tp;
    }
    return *tp;
  }
};

// One group over `store` whose members are the global `ranks` (this process is
// `global_rank`); members meet under the prefix name/<ranks>. A one-rank group is a
// local no-op unless `single_rank_talks`. join_mesh makes every mesh group with it;
// tests use it to run ranks as threads of one process.
std::shared_ptr<Comm> make_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                 const std::vector<int64_t>& ranks, int global_rank, Backend backend,
                                 std::chrono::milliseconds timeout, int64_t cuda_device = -1,
                                 bool single_rank_talks = false);

// Joins the job described by `env` (one TCPStore; each group under its own PrefixStore
// prefix; single-rank jobs need no rendezvous) and builds the mesh's groups.
// `ep` (expert parallel) must divide shape.dp_shard.
MeshGroups join_mesh(const LaunchEnv& env, const MeshShape& shape, Backend backend, std::chrono::milliseconds timeout,
                     int64_t ep = 1);

}  // namespace meshtrain
