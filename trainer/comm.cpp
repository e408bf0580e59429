#include "comm.h"

#include <cstdlib>
#include <stdexcept>

#include "compat.h"

#ifdef MESHTEST_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace meshtrain {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long value = std::strtol(v, &end, 10);
  if (*end != '\0' || value < 0)
    throw std::invalid_argument(std::string("environment variable ") + name + "='" + v +
                                "' is not a non-negative integer");
  return static_cast<int>(value);
}

class C10dComm : public Comm {
 public:
  C10dComm(c10::intrusive_ptr<compat::Backend> backend, torch::Device device, int rank, int size)
      : backend_(std::move(backend)), device_(device), rank_(rank), size_(size) {}
  ~C10dComm() override {
    try {
      compat::shutdown(*backend_);
    } catch (const std::exception&) {
      // Already failing (a dead peer); the exit code says so.
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  torch::Device device() const override { return device_; }

  void all_reduce_sum(torch::Tensor& t) override {
    std::vector<torch::Tensor> tensors{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    backend_->allreduce(tensors, opts)->wait();
  }

  void barrier() override { backend_->barrier()->wait(); }

 private:
  c10::intrusive_ptr<compat::Backend> backend_;
  torch::Device device_;
  int rank_;
  int size_;
};

}  // namespace

LaunchEnv LaunchEnv::from_environment() {
  LaunchEnv env;
  env.rank = env_int("RANK", 0);
  env.world_size = env_int("WORLD_SIZE", 1);
  env.local_rank = env_int("LOCAL_RANK", env.rank);
  env.master_port = env_int("MASTER_PORT", 29500);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) env.master_addr = addr;
  if (env.world_size < 1) throw std::invalid_argument("WORLD_SIZE must be at least 1");
  if (env.rank >= env.world_size)
    throw std::invalid_argument("RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" +
                                std::to_string(env.world_size));
  if (env.master_port < 1 || env.master_port > 65535)
    throw std::invalid_argument("MASTER_PORT=" + std::to_string(env.master_port) + " is not a port");
  return env;
}

Backend parse_backend(const std::string& name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  throw std::invalid_argument("unknown backend '" + name + "' (known: gloo, nccl)");
}

void Comm::all_reduce_mean(torch::Tensor& t) {
  // Gloo has no AVG reduction: sum, then divide.
  all_reduce_sum(t);
  if (size() > 1) t.div_(size());
}

std::shared_ptr<Comm> Comm::create(const LaunchEnv& env, Backend backend,
                                   std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Store> store;
  if (env.world_size == 1) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0;
    opts.numWorkers = env.world_size;
    opts.timeout = timeout;
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  }
  store = c10::make_intrusive<c10d::PrefixStore>("meshtrain/world", store);

  if (backend == Backend::kNccl) {
#ifdef MESHTEST_CUDA
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(env.local_rank));
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, opts);
    return std::make_shared<C10dComm>(pg, torch::Device(torch::kCUDA, env.local_rank), env.rank,
                                      env.world_size);
#else
    throw std::invalid_argument("backend 'nccl' needs the CUDA build (this is the CPU build; use --backend gloo)");
#endif
  }
#ifdef MESHTEST_CUDA
  throw std::invalid_argument("backend 'gloo' is not in the CUDA build (the PyTorch wheel ships no Gloo headers; use --backend nccl)");
#else
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = timeout;
  // Loopback: meshtest launches every rank of a case on one host.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  opts->devices.push_back(ifname && *ifname
                              ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                              : c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, opts);
  return std::make_shared<C10dComm>(pg, torch::Device(torch::kCPU), env.rank, env.world_size);
#endif
}

}  // namespace meshtrain
