#include "components/async_save.h"

#include <optional>

#include "base/compat.h"

namespace meshtrain {

namespace {

// Copies `tensors` into `into` (same count; an undefined entry is allocated, pinned for a device
// tensor) and waits until every copy has landed.
void copy_to_host(const std::vector<torch::Tensor>& tensors, torch::ScalarType dtype,
                  std::vector<torch::Tensor>& into) {
  torch::NoGradGuard no_grad;
  std::optional<torch::Device> device;  // a device the copies were queued on
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const bool on_device = !t.device().is_cpu();
    if (!into[i].defined())
      into[i] = torch::empty(t.sizes(), torch::TensorOptions().dtype(dtype).pinned_memory(on_device));
    into[i].copy_(t.detach(), /*non_blocking=*/on_device);
    if (on_device) device = t.device();
  }
  if (device) compat::synchronize(*device);  // the non-blocking copies have landed
}

}  // namespace

std::vector<torch::Tensor> host_snapshot(const std::vector<torch::Tensor>& tensors, torch::ScalarType dtype) {
  std::vector<torch::Tensor> copies(tensors.size());
  copy_to_host(tensors, dtype, copies);
  return copies;
}

std::vector<torch::Tensor> HostStaging::snapshot(const std::vector<torch::Tensor>& tensors, torch::ScalarType dtype) {
  bool reusable = buffers_.size() == tensors.size();
  for (size_t i = 0; reusable && i < tensors.size(); ++i)
    reusable = buffers_[i].scalar_type() == dtype && buffers_[i].sizes() == tensors[i].sizes() &&
               buffers_[i].is_pinned() == !tensors[i].device().is_cpu();
  if (!reusable) buffers_.assign(tensors.size(), torch::Tensor());
  copy_to_host(tensors, dtype, buffers_);
  return buffers_;
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
