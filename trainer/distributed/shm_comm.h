// The backend of a simulated world (`--backend shm`): any number of ranks per device.
// NCCL refuses two ranks on one GPU and the CUDA wheel ships no Gloo, so a world of N
// ranks on one GPU talks through host shared memory instead.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace meshtrain {

class Comm;

// A group of `size` processes on this host whose collectives meet in one shared-memory
// segment (one slot per rank, tensors on a GPU staged through host memory). Every rank
// reduces the slots itself, in rank order and in float32 for 16-bit dtypes, so all ranks
// get bit-identical results and a rerun repeats them exactly. Point-to-point messages
// (pipeline, context-parallel ring) travel through `store`. A peer that does not arrive
// within `timeout` fails the collective with the group and the ranks that are missing;
// a rank that fails marks the segment, so its peers fail at once instead of waiting.
// The segment is created by group rank 0, announced through `store`, and unlinked as soon
// as every member has mapped it: nothing outlives the group's processes.
std::shared_ptr<Comm> make_shm_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                     int global_rank, int rank, int size, std::chrono::milliseconds timeout);

}  // namespace meshtrain
