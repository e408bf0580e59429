#include "distributed/comm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "base/compat.h"
#include "contract/rank_environment.h"
#include "base/faults.h"
#include "distributed/shm_comm.h"

#ifdef MESHTEST_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace meshtrain {

namespace {

namespace rank_env = contract::rank_environment;

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

int64_t max_of(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (auto x : v) m = std::max(m, x);
  return m;
}

// Pads `t` along dim 0 with zeros to `rows` rows.
torch::Tensor pad_rows(const torch::Tensor& t, int64_t rows) {
  if (t.size(0) == rows) return t.contiguous();
  auto shape = t.sizes().vec();
  shape[0] = rows;
  auto padded = torch::zeros(shape, t.options());
  padded.narrow(0, 0, t.size(0)).copy_(t);
  return padded;
}

class SelfComm : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(torch::Tensor&) override {}
  void all_reduce_max(torch::Tensor&) override {}
  torch::Tensor all_gather_dim0(const torch::Tensor& local, const std::vector<int64_t>&) override { return local; }
  torch::Tensor reduce_scatter_sum_dim0(const torch::Tensor& full, const std::vector<int64_t>&) override {
    return full;
  }
  void barrier() override {}
  torch::Tensor all_to_all_dim0(const torch::Tensor& x, const std::vector<int64_t>&,
                                const std::vector<int64_t>&) override {
    return x;
  }
  InFlight start_all_gather(const torch::Tensor& piece) override {
    return [piece] { return piece; };
  }
  InFlight start_reduce_scatter_sum(const torch::Tensor& full) override {
    return [full] { return full; };
  }
  InFlight start_all_reduce_sum(const torch::Tensor& t) override {
    return [t] { return t; };
  }
  torch::Tensor send_recv(const torch::Tensor& t, int, int) override { return t.clone(); }
  InFlight start_send(const torch::Tensor&, int, int) override {
    throw std::logic_error("a one-rank group has no peer to send to");
  }
  void recv(torch::Tensor&, int, int) override {
    throw std::logic_error("a one-rank group has no peer to receive from");
  }
};

class C10dComm : public Comm {
 public:
  // `wire_float32`: the backend cannot move bfloat16 (Gloo in 1.13 says "Invalid scalar
  // type"), so such tensors travel as float32 and come back in their own dtype.
  C10dComm(c10::intrusive_ptr<compat::Backend> backend, std::string name, int global_rank, int rank, int size,
           bool wire_float32, int64_t cuda_device = -1)
      : backend_(std::move(backend)),
        name_(std::move(name)),
        global_rank_(global_rank),
        rank_(rank),
        size_(size),
        wire_float32_(wire_float32),
        cuda_device_(cuda_device) {}
  ~C10dComm() override {
    try {
      compat::shutdown(*backend_);
    } catch (const std::exception&) {
      // Already failing (a dead peer); the exit code says so.
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(torch::Tensor& t) override {
    enter("all_reduce_sum");
    all_reduce(t, c10d::ReduceOp::SUM);
  }
  void all_reduce_max(torch::Tensor& t) override {
    enter("all_reduce_max");
    all_reduce(t, c10d::ReduceOp::MAX);
  }

  torch::Tensor all_gather_dim0(const torch::Tensor& local, const std::vector<int64_t>& sizes) override {
    enter("all_gather");
    if (needs_wire_cast(local)) return all_gather_dim0(local.to(torch::kFloat32), sizes).to(local.scalar_type());
    // Collectives need equal sizes: pad every piece to the largest, gather, unpad.
    const int64_t rows = max_of(sizes);
    auto input = pad_rows(local, rows);
#ifdef MESHTEST_CUDA
    // NCCL: one gather into one flat buffer, which is the result when nothing was padded.
    auto shape = input.sizes().vec();
    shape[0] = rows * size_;
    auto gathered = torch::empty(shape, input.options());
    backend_->_allgather_base(gathered, input)->wait();
    comm_volume().all_gather_bytes += static_cast<int64_t>(gathered.nbytes());
    ++comm_volume().all_gather_calls;
    if (std::all_of(sizes.begin(), sizes.end(), [&](int64_t s) { return s == rows; })) return gathered;
    std::vector<torch::Tensor> pieces;
    for (int i = 0; i < size_; ++i) pieces.push_back(gathered.narrow(0, i * rows, sizes[i]));
#else
    // Gloo in LibTorch 1.13 gathers into a list only.
    std::vector<torch::Tensor> inputs{input};
    std::vector<std::vector<torch::Tensor> > output(1);
    for (int i = 0; i < size_; ++i) output[0].push_back(torch::empty_like(input));
    backend_->allgather(output, inputs)->wait();
    comm_volume().all_gather_bytes += static_cast<int64_t>(input.nbytes()) * size_;
    ++comm_volume().all_gather_calls;
    std::vector<torch::Tensor> pieces;
    for (int i = 0; i < size_; ++i) pieces.push_back(output[0][i].narrow(0, 0, sizes[i]));
#endif
    return torch::cat(pieces, 0);
  }

  torch::Tensor reduce_scatter_sum_dim0(const torch::Tensor& full, const std::vector<int64_t>& sizes) override {
    enter("reduce_scatter");
    if (needs_wire_cast(full)) return reduce_scatter_sum_dim0(full.to(torch::kFloat32), sizes).to(full.scalar_type());
    int64_t offset = 0;
    for (int i = 0; i < rank_; ++i) offset += sizes[i];
#ifdef MESHTEST_CUDA
    // NCCL: a real reduce-scatter over pieces padded to equal size (already equal for
    // a bucket, whose input is then sent as it is).
    const int64_t rows = max_of(sizes);
    torch::Tensor input;
    if (std::all_of(sizes.begin(), sizes.end(), [&](int64_t s) { return s == rows; })) {
      input = full.contiguous();
    } else {
      std::vector<torch::Tensor> padded;
      int64_t start = 0;
      for (int i = 0; i < size_; ++i) {
        padded.push_back(pad_rows(full.narrow(0, start, sizes[i]), rows));
        start += sizes[i];
      }
      input = torch::cat(padded, 0);
    }
    auto piece_shape = input.sizes().vec();
    piece_shape[0] = rows;
    auto output = torch::empty(piece_shape, input.options());
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    backend_->_reduce_scatter_base(output, input, opts)->wait();
    comm_volume().reduce_scatter_bytes += static_cast<int64_t>(input.nbytes());
    ++comm_volume().reduce_scatter_calls;
    return output.narrow(0, 0, sizes[rank_]);
#else
    // Gloo in LibTorch 1.13 has no reduce-scatter: all-reduce, keep our rows.
    auto summed = full.contiguous().clone();
    all_reduce_sum(summed);
    // Counted as the reduce-scatter it stands for, not as an all-reduce.
    auto& v = comm_volume();
    v.all_reduce_bytes -= static_cast<int64_t>(summed.nbytes()), --v.all_reduce_calls;
    v.reduce_scatter_bytes += static_cast<int64_t>(summed.nbytes()), ++v.reduce_scatter_calls;
    return summed.narrow(0, offset, sizes[rank_]).clone();
#endif
  }

  InFlight start_all_gather(const torch::Tensor& piece) override {
    enter("all_gather");
    if (needs_wire_cast(piece)) {
      auto wide = start_all_gather(piece.to(torch::kFloat32));
      return [wide, dtype = piece.scalar_type()] { return wide().to(dtype); };
    }
    auto input = piece.contiguous();
    comm_volume().all_gather_bytes += static_cast<int64_t>(input.nbytes()) * size_;
    ++comm_volume().all_gather_calls;
#ifdef MESHTEST_CUDA
    auto output = torch::empty({input.numel() * size_}, input.options());
    auto work = backend_->_allgather_base(output, input);
    // The input travels with the handle: its memory must outlive the transfer.
    return [work, output, input] {
      work->wait();
      return output;
    };
#else
    std::vector<torch::Tensor> inputs{input};
    std::vector<std::vector<torch::Tensor> > outputs(1);
    for (int i = 0; i < size_; ++i) outputs[0].push_back(torch::empty_like(input));
    auto work = backend_->allgather(outputs, inputs);
    return [work, pieces = outputs[0], input] {
      work->wait();
      return torch::cat(pieces);
    };
#endif
  }

  InFlight start_reduce_scatter_sum(const torch::Tensor& full) override {
    enter("reduce_scatter");
    if (needs_wire_cast(full)) {
      auto wide = start_reduce_scatter_sum(full.to(torch::kFloat32));
      return [wide, dtype = full.scalar_type()] { return wide().to(dtype); };
    }
    const int64_t n = full.numel() / size_;
    comm_volume().reduce_scatter_bytes += static_cast<int64_t>(full.nbytes());
    ++comm_volume().reduce_scatter_calls;
#ifdef MESHTEST_CUDA
    auto input = full.contiguous();
    auto output = torch::empty({n}, input.options());
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    auto work = backend_->_reduce_scatter_base(output, input, opts);
    return [work, output, input] {
      work->wait();
      return output;
    };
#else
    // Gloo in LibTorch 1.13 has no reduce-scatter: all-reduce, keep our part.
    std::vector<torch::Tensor> tensors{full.contiguous().clone()};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    auto work = backend_->allreduce(tensors, opts);
    return [work, summed = tensors[0], offset = n * rank_, n] {
      work->wait();
      return summed.narrow(0, offset, n);
    };
#endif
  }

  InFlight start_all_reduce_sum(const torch::Tensor& t) override {
    enter("all_reduce_sum");
    if (needs_wire_cast(t)) {
      auto wide = start_all_reduce_sum(t.to(torch::kFloat32));
      return [wide, t] { return t.copy_(wide()); };
    }
    std::vector<torch::Tensor> tensors{t.is_contiguous() ? t : t.contiguous()};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    auto work = backend_->allreduce(tensors, opts);
    comm_volume().all_reduce_bytes += static_cast<int64_t>(t.nbytes());
    ++comm_volume().all_reduce_calls;
    return [work, summed = tensors[0]] {
      work->wait();
      return summed;
    };
  }

  torch::Tensor all_to_all_dim0(const torch::Tensor& x, const std::vector<int64_t>& send_rows,
                                const std::vector<int64_t>& recv_rows) override {
    enter("all_to_all");
    if (needs_wire_cast(x)) return all_to_all_dim0(x.to(torch::kFloat32), send_rows, recv_rows).to(x.scalar_type());
    auto input = x.contiguous();
    auto shape = input.sizes().vec();
    shape[0] = 0;
    for (int64_t rows : recv_rows) shape[0] += rows;
    auto output = torch::empty(shape, input.options());
    auto send = send_rows, recv = recv_rows;  // c10d takes them by non-const reference
    backend_->alltoall_base(output, input, recv, send)->wait();
    return output;
  }

  torch::Tensor send_recv(const torch::Tensor& t, int to, int from) override {
    enter("send_recv");
    if (needs_wire_cast(t)) return send_recv(t.to(torch::kFloat32), to, from).to(t.scalar_type());
    std::vector<torch::Tensor> outgoing{t.contiguous()};
    std::vector<torch::Tensor> incoming{torch::empty_like(outgoing[0])};
    // NCCL runs point-to-point transfers in the order they are posted, and a send waits for
    // its receiver: even ranks send first and odd ranks receive first, so every send meets a
    // posted receive in any ring (odd sizes too: rank 0's receive comes after its send).
    decltype(backend_->send(outgoing, to, 0)) sent, received;  // c10d::Work (ProcessGroup::Work in 1.13)
    if (rank_ % 2 == 0) {
      sent = backend_->send(outgoing, to, /*tag=*/0);
      received = backend_->recv(incoming, from, /*tag=*/0);
    } else {
      received = backend_->recv(incoming, from, /*tag=*/0);
      sent = backend_->send(outgoing, to, /*tag=*/0);
    }
    sent->wait();
    received->wait();
    return incoming[0];
  }

  InFlight start_send(const torch::Tensor& t, int to, int tag) override {
    enter("send");
    std::vector<torch::Tensor> outgoing{needs_wire_cast(t) ? t.to(torch::kFloat32) : t.contiguous()};
    auto work = backend_->send(outgoing, to, tag);
    return [work, outgoing] {
      work->wait();
      return outgoing[0];
    };
  }

  void recv(torch::Tensor& t, int from, int tag) override {
    enter("recv");
    std::vector<torch::Tensor> incoming{needs_wire_cast(t) ? torch::empty_like(t, torch::dtype(torch::kFloat32)) : t};
    backend_->recv(incoming, from, tag)->wait();
    if (incoming[0].data_ptr() != t.data_ptr()) t.copy_(incoming[0]);
  }

  void barrier() override {
    enter("barrier");
    c10d::BarrierOptions opts;
    // Tell NCCL our GPU; otherwise a barrier before any collective guesses it from the rank.
    if (cuda_device_ >= 0) opts.device_ids = {cuda_device_};
    backend_->barrier(opts)->wait();
  }

 private:
  void enter(const char* op) { enter_collective(op, name_, global_rank_, size_); }

  bool needs_wire_cast(const torch::Tensor& t) const { return wire_float32_ && t.scalar_type() == torch::kBFloat16; }

  void all_reduce(torch::Tensor& t, c10d::ReduceOp op) {
    if (needs_wire_cast(t)) {
      auto wide = t.to(torch::kFloat32);
      all_reduce(wide, op);
      t.copy_(wide);
      return;
    }
    std::vector<torch::Tensor> tensors{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    backend_->allreduce(tensors, opts)->wait();
    comm_volume().all_reduce_bytes += static_cast<int64_t>(t.nbytes());
    ++comm_volume().all_reduce_calls;
  }

  c10::intrusive_ptr<compat::Backend> backend_;
  std::string name_;
  int global_rank_;
  int rank_;
  int size_;
  bool wire_float32_;
  int64_t cuda_device_;
};

}  // namespace

std::shared_ptr<Comm> make_group(const c10::intrusive_ptr<c10d::Store>& root, const std::string& name,
                                 const std::vector<int64_t>& ranks, int global_rank, Backend backend,
                                 std::chrono::milliseconds timeout, int64_t device_index, bool single_rank_talks) {
  if (ranks.size() == 1 && !single_rank_talks) return std::make_shared<SelfComm>();
  int group_rank = -1;
  std::string id;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == global_rank) group_rank = static_cast<int>(i);
    id += (i ? "_" : "") + std::to_string(ranks[i]);
  }
  if (group_rank < 0) throw std::logic_error("rank " + std::to_string(global_rank) + " is not in group " + name);
  // One prefix per group instance: its members meet there and nowhere else.
  auto store = c10::make_intrusive<c10d::PrefixStore>(name + "/" + id, root);
  const int size = static_cast<int>(ranks.size());
  if (backend == Backend::kShm) return make_shm_group(store, name, global_rank, group_rank, size, timeout);
  if (backend == Backend::kNccl) {
#ifdef MESHTEST_CUDA
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    return std::make_shared<C10dComm>(c10::make_intrusive<c10d::ProcessGroupNCCL>(store, group_rank, size, opts), name,
                                      global_rank, group_rank, size, /*wire_float32=*/false, device_index);
#else
    throw std::invalid_argument("backend 'nccl' needs the CUDA build (this is the CPU build; use --backend gloo)");
#endif
  }
#ifdef MESHTEST_CUDA
  throw std::invalid_argument(
      "backend 'gloo' is not in the CUDA build (the PyTorch wheel ships no Gloo headers; use --backend nccl)");
#else
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = timeout;
  // Loopback: meshtest launches every rank of a case on one host.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  opts->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                            : c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return std::make_shared<C10dComm>(c10::make_intrusive<c10d::ProcessGroupGloo>(store, group_rank, size, opts), name,
                                    global_rank, group_rank, size, /*wire_float32=*/true);
#endif
}

LaunchEnv LaunchEnv::from_environment() {
  LaunchEnv env;
  env.rank = env_int(rank_env::kRank, 0);
  env.world_size = env_int(rank_env::kWorldSize, 1);
  env.local_rank = env_int(rank_env::kLocalRank, env.rank);
  env.local_world_size = env_int(rank_env::kLocalWorldSize, env.world_size);
  env.master_port = env_int(rank_env::kMasterPort, 29500);
  if (const char* addr = std::getenv(rank_env::kMasterAddr); addr && *addr) env.master_addr = addr;
  if (env.world_size < 1) throw std::invalid_argument("WORLD_SIZE must be at least 1");
  if (env.local_world_size < 1) throw std::invalid_argument("LOCAL_WORLD_SIZE must be at least 1");
  if (env.rank >= env.world_size)
    throw std::invalid_argument("RANK=" + std::to_string(env.rank) +
                                " is not below WORLD_SIZE=" + std::to_string(env.world_size));
  if (env.master_port < 1 || env.master_port > 65535)
    throw std::invalid_argument("MASTER_PORT=" + std::to_string(env.master_port) + " is not a port");
  return env;
}

Backend parse_backend(const std::string& name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  if (name == "shm") return Backend::kShm;
  throw std::invalid_argument("unknown backend '" + name + "' (known: gloo, nccl, shm)");
}

bool computes_on_cuda(Backend backend) {
  if (backend == Backend::kNccl) return true;
#ifdef MESHTEST_CUDA
  if (backend == Backend::kShm) return c10::cuda::device_count() > 0;
#endif
  return false;
}

MeshGroups join_mesh(const LaunchEnv& env, const MeshShape& shape, Backend backend, std::chrono::milliseconds timeout,
                     int64_t ep) {
  MeshGroups g;
  g.shape = shape;
  g.coord = coord_of(env.rank, shape);
#ifdef MESHTEST_CUDA
  if (computes_on_cuda(backend)) {
    // NCCL: one rank per GPU. A simulated world (shm) deals its ranks out over the GPUs it sees.
    const auto index = static_cast<c10::DeviceIndex>(
        backend == Backend::kShm ? env.local_rank % c10::cuda::device_count() : env.local_rank);
    c10::cuda::set_device(index);
    g.device = torch::Device(torch::kCUDA, index);
  }
#endif
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
  auto root = c10::make_intrusive<c10d::PrefixStore>("meshtrain", store);
  using D = MeshDim;
  auto group = [&](const std::string& name, std::vector<D> dims, bool single_rank_talks = false) {
    return make_group(root, name, group_ranks(env.rank, shape, dims), env.rank, backend, timeout,
                      g.device.is_cuda() ? g.device.index() : -1, single_rank_talks);
  };
  // Every rank builds its groups in this same order (Gloo connects in the constructor).
  // The world group is always a real backend, so even a one-rank run proves the backend works.
  g.world = group("world", {D::kPp, D::kDpReplicate, D::kDpShard, D::kCp, D::kTp}, true);
  g.pp = group(name_of(D::kPp), {D::kPp});
  g.pp_activations = group("pp_activations", {D::kPp});
  g.pp_activations_wrap = group("pp_activations_wrap", {D::kPp});
  g.pp_gradients = group("pp_gradients", {D::kPp});
  g.pp_gradients_wrap = group("pp_gradients_wrap", {D::kPp});
  g.dp_replicate = group(name_of(D::kDpReplicate), {D::kDpReplicate});
  g.dp_shard = group(name_of(D::kDpShard), {D::kDpShard});
  g.cp = group(name_of(D::kCp), {D::kCp});
  g.tp = group(name_of(D::kTp), {D::kTp});
  g.dp_shard_cp = group("dp_shard_cp", {D::kDpShard, D::kCp});
  g.dp_cp = group("dp_cp", {D::kDpReplicate, D::kDpShard, D::kCp});
  // dp_shard = ep_shard x ep, ep inner: an ep group is a run of ep consecutive dp_shard ranks.
  if (ep < 1 || shape.dp_shard % ep != 0)
    throw std::invalid_argument("ep " + std::to_string(ep) + " does not divide dp_shard " +
                                std::to_string(shape.dp_shard));
  g.ep_degree = ep;
  const auto dp_shard_ranks = group_ranks(env.rank, shape, {D::kDpShard});
  const int64_t inner = g.coord.dp_shard % ep, outer = g.coord.dp_shard / ep;
  std::vector<int64_t> ep_ranks, ep_shard_ranks;
  for (int64_t i = 0; i < shape.dp_shard; ++i) {
    if (i / ep == outer) ep_ranks.push_back(dp_shard_ranks[static_cast<size_t>(i)]);
    if (i % ep == inner) ep_shard_ranks.push_back(dp_shard_ranks[static_cast<size_t>(i)]);
  }
  auto sub_group = [&](const std::string& name, const std::vector<int64_t>& ranks) {
    return make_group(root, name, ranks, env.rank, backend, timeout, g.device.is_cuda() ? g.device.index() : -1);
  };
  g.ep = sub_group("ep", ep_ranks);  // one rank (no connection) without expert parallel
  g.ep_shard = ep > 1 ? sub_group("ep_shard", ep_shard_ranks) : g.dp_shard;
  return g;
}

}  // namespace meshtrain
