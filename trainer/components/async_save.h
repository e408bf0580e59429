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
