#include "distributed/offload.h"

#include <torch/csrc/autograd/engine.h>

#include <map>
#include <set>

#ifdef MESHTEST_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace meshtrain {

#ifdef MESHTEST_CUDA

struct OffloadedWeights::State {
  State(torch::Device device_, torch::ScalarType dtype_, int64_t bytes_ahead_)
      : device(device_),
        dtype(dtype_),
        bytes_ahead(bytes_ahead_),
        to_device(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index())),
        to_host(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index())) {}

  struct Prefetch {
    torch::Tensor on_device;  // the weight in the compute dtype, written on to_device
    int64_t version = 0;      // the piece's version it was copied from
    std::shared_ptr<at::cuda::CUDAEvent> ready;
  };

  torch::Device device;
  torch::ScalarType dtype;
  int64_t bytes_ahead;
  c10::cuda::CUDAStream to_device, to_host;
  std::vector<torch::Tensor> pieces;  // pinned host memory, float32 masters
  std::map<size_t, Prefetch> in_flight;
  // The order forward takes the weights in, learnt from the first forward (the order they
  // were added is the modules' order, which is not quite the order they compute in).
  std::vector<size_t> sequence;
  std::map<size_t, size_t> position;
  bool sequence_known = false;
  std::vector<std::pair<size_t, torch::Tensor>> returning;  // gradients on their way to host memory
  bool landing_queued = false;

  c10::cuda::CUDAStream current() const { return c10::cuda::getCurrentCUDAStream(device.index()); }

  void start_copy(size_t i) {
    if (in_flight.count(i)) return;
    torch::NoGradGuard no_grad;
    Prefetch p;
    p.version = pieces[i]._version();
    {
      c10::cuda::CUDAStreamGuard on_side(to_device);
      // float32 over PCIe, then the cast on the GPU (as FSDP2 does); the staging copy is
      // freed here, on the side stream, which is the stream that allocated it.
      p.on_device = pieces[i].to(device, pieces[i].scalar_type(), /*non_blocking=*/true).to(dtype);
    }
    p.ready = std::make_shared<at::cuda::CUDAEvent>();
    p.ready->record(to_device);
    in_flight[i] = std::move(p);
  }

  void learn_order(size_t i) {
    if (sequence_known) return;
    if (position.count(i)) {  // a weight used twice: one whole forward has been seen
      sequence_known = true;
      return;
    }
    position[i] = sequence.size();
    sequence.push_back(i);
  }

  void prefetch_after(size_t i) {
    if (!sequence_known || !position.count(i)) return;  // a weight the first forward did not use: no order to follow
    int64_t bytes = 0;
    for (size_t p = position.at(i) + 1; p < sequence.size() && bytes < bytes_ahead; ++p) {
      start_copy(sequence[p]);
      bytes += static_cast<int64_t>(pieces[sequence[p]].nbytes());
    }
  }

  torch::Tensor take(size_t i) {
    learn_order(i);
    auto it = in_flight.find(i);
    if (it != in_flight.end() && it->second.version != pieces[i]._version()) {  // the optimizer stepped since
      in_flight.erase(it);
      it = in_flight.end();
    }
    if (it == in_flight.end()) {
      start_copy(i);
      it = in_flight.find(i);
    }
    auto stream = current();
    it->second.ready->block(stream);
    torch::Tensor weight = it->second.on_device;
    weight.record_stream(stream);  // allocated on to_device, used here: keep it until this stream is done
    in_flight.erase(it);
    prefetch_after(i);
    return weight;
  }

  // Starts the gradient's copy into pinned host memory on to_host; it lands in the piece's
  // .grad when backward ends.
  void send_back(size_t i, const torch::Tensor& grad, const std::shared_ptr<State>& self) {
    torch::NoGradGuard no_grad;
    const auto stream = current();
    const auto full = grad.to(pieces[i].scalar_type()).contiguous();
    auto host = torch::empty(full.sizes(), full.options().device(torch::kCPU).pinned_memory(true));
    at::cuda::CUDAEvent computed;
    computed.record(stream);
    computed.block(to_host);
    {
      c10::cuda::CUDAStreamGuard on_side(to_host);
      host.copy_(full, /*non_blocking=*/true);
    }
    full.record_stream(to_host);
    returning.emplace_back(i, host);
    if (!landing_queued) {
      landing_queued = true;
      torch::autograd::Engine::get_default_engine().queue_callback([self] { self->land_gradients(); });
    }
  }

  void land_gradients() {
    to_host.synchronize();
    torch::NoGradGuard no_grad;
    for (auto& [i, host] : returning) {
      auto& slot = pieces[i].mutable_grad();
      if (slot.defined())
        slot.add_(host);
      else
        slot = host;
    }
    returning.clear();
    landing_queued = false;
  }
};

namespace {
// The device copy of an offloaded weight; its backward sends the gradient to host memory.
struct ToDevice : torch::autograd::Function<ToDevice> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& piece,
                               const std::shared_ptr<OffloadedWeights::State>* state, int64_t i) {
    (void)piece;  // the autograd input whose gradient this carries; the data comes from `state`
    ctx->saved_data["state"] = reinterpret_cast<int64_t>(state);
    ctx->saved_data["i"] = i;
    return (*state)->take(static_cast<size_t>(i));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* state =
        reinterpret_cast<const std::shared_ptr<OffloadedWeights::State>*>(ctx->saved_data["state"].toInt());
    (*state)->send_back(static_cast<size_t>(ctx->saved_data["i"].toInt()), grads[0], *state);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};  // the gradient lands in .grad itself
  }
};
}  // namespace

OffloadedWeights::OffloadedWeights(torch::Device device, torch::ScalarType dtype, int64_t bytes_ahead)
    : state_(std::make_shared<State>(device, dtype, bytes_ahead)) {}

OffloadedWeights::~OffloadedWeights() = default;

size_t OffloadedWeights::add(torch::Tensor& weight) {
  torch::NoGradGuard no_grad;
  weight.set_data(weight.to(torch::kCPU).pin_memory());
  state_->pieces.push_back(weight);
  return state_->pieces.size() - 1;
}

torch::Tensor OffloadedWeights::weight(size_t i) {
  return ToDevice::apply(state_->pieces[i], &state_, static_cast<int64_t>(i));
}

#else  // a CPU build: no streams to overlap on; the weight is copied and cast where it is used

struct OffloadedWeights::State {
  torch::Device device;
  torch::ScalarType dtype;
  std::vector<torch::Tensor> pieces;
};

OffloadedWeights::OffloadedWeights(torch::Device device, torch::ScalarType dtype, int64_t)
    : state_(std::make_shared<State>(State{device, dtype, {}})) {}

OffloadedWeights::~OffloadedWeights() = default;

size_t OffloadedWeights::add(torch::Tensor& weight) {
  torch::NoGradGuard no_grad;
  weight.set_data(weight.to(torch::kCPU));
  state_->pieces.push_back(weight);
  return state_->pieces.size() - 1;
}

torch::Tensor OffloadedWeights::weight(size_t i) { return state_->pieces[i].to(state_->device, state_->dtype); }

#endif

}  // namespace meshtrain
