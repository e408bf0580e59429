// The parts of an asynchronous checkpoint save (--checkpoint.async-mode async, docs/checkpoint.md):
// the host snapshot the step pauses for, and the one background save that writes it.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <future>
#include <vector>

namespace meshtrain {

// Contiguous copies of `tensors` in host memory, converted to `dtype`: page-locked for device
// tensors, so the copies run at the bus's speed, and all of them finished when this returns.
// What a step pauses for in an asynchronous save; training may change the originals afterwards.
std::vector<torch::Tensor> host_snapshot(const std::vector<torch::Tensor>& tensors, torch::ScalarType dtype);

// The host copies of asynchronous saves, kept from one save to the next: page-locked memory is
// slow to allocate (seconds for the 1B model's 18 GB) and fresh pages fault on first touch, so
// only the first save allocates. The caller must not snapshot again while a save still reads
// the last snapshot (Checkpointer waits for it first).
class HostStaging {
 public:
  // host_snapshot's copies, into the last call's buffers where the count, shapes and dtype match.
  std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& tensors, torch::ScalarType dtype);

 private:
  std::vector<torch::Tensor> buffers_;
};

// At most one save running on a background thread. Promises: start() returns at once; wait()
// returns when the running save has ended and rethrows what it threw; destroying it while a save
// runs raises the save's `abandoned` flag (a save waiting on other ranks gives up when it sees it)
// and waits, so the thread never outlives what it reads.
class BackgroundSave {
 public:
  using Save = std::function<void(const std::atomic<bool>& abandoned)>;
  BackgroundSave() = default;
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;
  ~BackgroundSave();

  void start(Save save);  // waits for the previous save first
  void wait();
  bool running() const { return pending_.valid(); }

 private:
  std::future<void> pending_;
  std::atomic<bool> abandoned_{false};
};

}  // namespace meshtrain
