// The collectives meshtrain needs, whatever carries them (comm.h: Gloo, NCCL; shm_comm.h:
// a simulated world's shared memory), and what every backend notes about them.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace meshtrain {

// A collective in flight. Calling it waits for the result and returns it: on CUDA the
// current stream waits for the collective's stream (the host does not block); on CPU the
// host waits. Call it once, on the thread that started the collective.
using InFlight = std::function<torch::Tensor()>;

// A group of ranks and the collectives meshtrain needs. Every call blocks until its
// result is usable, except the start_* ones, which return at once so that compute can
// overlap the transfer; a peer that stops answering raises an error after the timeout.
// A group of one rank makes every collective the identity and talks to nobody.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the element-wise sum / mean / max.
  virtual void all_reduce_sum(torch::Tensor& t) = 0;
  void all_reduce_mean(torch::Tensor& t);
  virtual void all_reduce_max(torch::Tensor& t) = 0;
  // Rank i contributes `local` with sizes[i] rows (uneven and empty pieces allowed);
  // every rank gets the pieces concatenated along dim 0.
  virtual torch::Tensor all_gather_dim0(const torch::Tensor& local, const std::vector<int64_t>& sizes) = 0;
  // `full` has sum(sizes) rows; returns this rank's rows of the element-wise sum over ranks.
  virtual torch::Tensor reduce_scatter_sum_dim0(const torch::Tensor& full, const std::vector<int64_t>& sizes) = 0;
  virtual void barrier() = 0;
  // Variable all-to-all along dim 0: `x`'s first send_rows[0] rows go to group rank 0, the
  // next send_rows[1] to rank 1, ...; the result holds recv_rows[i] rows from each rank i,
  // in rank order. Every pair must agree (rank i's recv_rows[j] is rank j's send_rows[i]).
  virtual torch::Tensor all_to_all_dim0(const torch::Tensor& x, const std::vector<int64_t>& send_rows,
                                        const std::vector<int64_t>& recv_rows) = 0;

  // Flat buffers of n elements on every rank (equal sizes: callers pad). The all-gather's
  // result holds rank i's `piece` at [i*n, (i+1)*n); the reduce-scatter's input `full`
  // holds size()*n elements and its result is this rank's n elements of the sum.
  virtual InFlight start_all_gather(const torch::Tensor& piece) = 0;
  virtual InFlight start_reduce_scatter_sum(const torch::Tensor& full) = 0;
  // The result is the element-wise sum over ranks of `t` (summed in place).
  virtual InFlight start_all_reduce_sum(const torch::Tensor& t) = 0;

  // Point to point: sends `t` to group rank `to` and returns what group rank `from`
  // sent to this rank (a tensor shaped like `t`). Both transfers are posted before
  // either is waited for, so a ring where every rank sends and receives cannot deadlock.
  virtual torch::Tensor send_recv(const torch::Tensor& t, int to, int from) = 0;
  // Pipeline transfers. start_send returns at once (the handle waits for completion);
  // recv fills `t` (its shape and dtype say what arrives) with the next message that group
  // rank `from` sent with `tag`. Messages of one (sender, tag) arrive in the order sent.
  virtual InFlight start_send(const torch::Tensor& t, int to, int tag) = 0;
  virtual void recv(torch::Tensor& t, int from, int tag) = 0;
};

// Calls and bytes of this process's collectives (all-gather: the gathered output;
// reduce-scatter: the input reduced; all-reduce: the tensor), counted over groups of
// two or more ranks since the last reset. tools/bench divides them by the NCCL kernel
// time in a step's trace to get bus bandwidth.
struct CommVolume {
  int64_t all_gather_bytes = 0;
  int64_t reduce_scatter_bytes = 0;
  int64_t all_reduce_bytes = 0;
  int64_t all_gather_calls = 0;
  int64_t reduce_scatter_calls = 0;
  int64_t all_reduce_calls = 0;
};
CommVolume& comm_volume();

// Notes a collective this process enters, for the harness ($MESHTEST_COLLECTIVE_FILE,
// docs/contracts.md), and applies the planted hang fault. Every backend calls it first.
void enter_collective(const char* op, const std::string& group, int global_rank, int size);

}  // namespace meshtrain
