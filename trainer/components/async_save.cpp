#include "components/async_save.h"

#include <optional>

#include "base/compat.h"

namespace meshtrain {

std::vector<torch::Tensor> host_snapshot(const std::vector<torch::Tensor>& tensors, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> copies;
  copies.reserve(tensors.size());
  std::optional<torch::Device> device;  // a device the copies were queued on
  for (const auto& t : tensors) {
    const bool on_device = !t.device().is_cpu();
    auto host = torch::empty(t.sizes(), torch::TensorOptions().dtype(dtype).pinned_memory(on_device));
    host.copy_(t.detach(), /*non_blocking=*/on_device);
    if (on_device) device = t.device();
    copies.push_back(std::move(host));
  }
  if (device) compat::synchronize(*device);  // the non-blocking copies have landed
  return copies;
}

BackgroundSave::~BackgroundSave() {
  if (!pending_.valid()) return;
  abandoned_ = true;
  try {
    pending_.get();
  } catch (...) {
    // Unwinding from another error already: this one would only hide it.
  }
}

void BackgroundSave::start(Save save) {
  wait();
  pending_ = std::async(std::launch::async, [this, save = std::move(save)] { save(abandoned_); });
}

void BackgroundSave::wait() {
  if (pending_.valid()) pending_.get();  // rethrows the save's error, once
}

}  // namespace meshtrain
