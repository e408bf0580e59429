// meshtest_sim: a c10d backend whose collectives run over meshtrain's shared-memory transport
// (trainer/distributed/shm_comm.h), so that a PyTorch trainer's N rank processes can share one
// GPU (or a CPU) with real numerics. Every rank reduces the ranks' contributions itself, in rank
// order and in float32 for 16-bit dtypes: all ranks get bit-identical results and a rerun repeats
// them exactly. Tensors on a GPU are staged through host memory on the caller's current stream,
// so every collective is complete, in stream order, when it returns (its Work is already done);
// a receive waits until its Work is waited for, so a batch of sends and receives in any order
// cannot deadlock.
//
// Built against the torch that runs the trainer (1.13's ProcessGroup or 2.x's Backend: the same
// methods), on first use, by sim/python/sitecustomize.py, which registers it as "meshtest_sim"
// and maps the trainer's nccl onto it. $MESHTEST_SIM_FAULT plants a collective bug (canaries,
// docs/simulation.md): reduce-scatter-wrong-shard, sum-for-avg, drop-last-rank.
#include <torch/extension.h>
#include <torch/version.h>

#include <pybind11/chrono.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
using SimBase = c10d::Backend;
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
using SimBase = c10d::ProcessGroup;
#endif

#include "distributed/collective.h"
#include "distributed/shm_comm.h"

namespace meshtest_sim {

using c10d::ReduceOp;
using Tensors = std::vector<at::Tensor>;

// A collective bug planted on purpose, for canaries: each is a real bug's effect.
enum class Fault { kNone, kReduceScatterWrongShard, kSumForAvg, kDropLastRank };

Fault fault_from_environment() {
  const char* name = std::getenv("MESHTEST_SIM_FAULT");
  const std::string fault = name ? name : "";
  if (fault.empty()) return Fault::kNone;
  if (fault == "reduce-scatter-wrong-shard") return Fault::kReduceScatterWrongShard;
  if (fault == "sum-for-avg") return Fault::kSumForAvg;
  if (fault == "drop-last-rank") return Fault::kDropLastRank;
  TORCH_CHECK(false, "meshtest_sim: unknown $MESHTEST_SIM_FAULT '", fault,
              "' (reduce-scatter-wrong-shard, sum-for-avg or drop-last-rank)");
}

// A finished collective: its outputs in a completed future (DDP's comm hooks ask for it), on
// the outputs' devices so that waiting orders the caller's stream after the copies.
c10::intrusive_ptr<c10d::Work> done(const Tensors& outputs) {
  std::vector<c10::Device> devices;
  for (const auto& t : outputs)
    if (!t.is_cpu() && std::find(devices.begin(), devices.end(), t.device()) == devices.end())
      devices.push_back(t.device());
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  future->markCompleted(c10::IValue(outputs));
  return c10d::Work::create_from_future(future);
}

// A receive, run when first waited for (or asked whether it is done, or for its future).
class ReceiveWork : public c10d::Work {
 public:
  ReceiveWork(int rank, std::function<void()> receive, Tensors outputs)
      : c10d::Work(rank, c10d::OpType::RECV), receive_(std::move(receive)), outputs_(std::move(outputs)) {}
  bool isCompleted() override { return received_; }
  bool isSuccess() const override { return received_; }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    std::call_once(once_, [this] {
      // The caller waits with autograd on, on a tensor that may be a leaf requiring grad (a
      // pipeline's activation): the bytes land below autograd, as the receive itself would.
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      receive_();
      received_ = true;
    });
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(std::chrono::milliseconds(0));
    return done(outputs_)->getFuture();
  }

 private:
  std::function<void()> receive_;
  Tensors outputs_;
  std::once_flag once_;
  std::atomic<bool> received_{false};
};

class SimBackend final : public SimBase {
 public:
  SimBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
      : SimBase(rank, size),
        comm_(meshtrain::make_shm_group(store, group_name(size), global_rank(rank), rank, size, timeout)),
        fault_(fault_from_environment()) {}

  const std::string getBackendName() const override { return "meshtest_sim"; }

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    for (auto& t : tensors) all_reduce(t, opts.reduceOp);
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    for (auto& t : tensors) all_reduce(t, opts.reduceOp);
    return done(tensors);
  }

  // Every rank gets the reduction (a root's peers may keep anything, by c10d's contract).
  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    for (auto& t : tensors) all_reduce(t, opts.reduceOp);
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    for (auto& t : tensors) t.copy_(piece_of(gather(t), opts.rootRank, t.numel()).view(t.sizes()));
    return done(tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions& /*opts*/) override {
    Tensors all;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto gathered = gather(inputs[i]);
      check_count(outputs[i].size(), "allgather");
      for (int r = 0; r < size_; ++r) {
        outputs[i][r].copy_(piece_of(gathered, r, inputs[i].numel()).view(outputs[i][r].sizes()));
        all.push_back(outputs[i][r]);
      }
    }
    return done(all);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return allgather(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& /*opts*/) override {
    gather_into(output, input);
    return done({output});
  }

#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::AllgatherOptions& /*opts*/) override {
    for (size_t i = 0; i < inputs.size(); ++i) gather_into(outputs[i], inputs[i]);
    return done(outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    for (size_t i = 0; i < inputs.size(); ++i) reduce_scatter_into(outputs[i], inputs[i], opts.reduceOp);
    return done(outputs);
  }
#endif

  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    for (size_t i = 0; i < outputs.size(); ++i) {
      check_count(inputs[i].size(), "reduce_scatter");
      Tensors flat;
      for (const auto& t : inputs[i]) flat.push_back(t.reshape({-1}));
      reduce_scatter_into(outputs[i], at::cat(flat), opts.reduceOp);
    }
    return done(outputs);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    reduce_scatter_into(output, input, opts.reduceOp);
    return done({output});
  }

  // Rows of dim 0 by split sizes (none: equal parts), as all_to_all_single sends them.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& /*opts*/) override {
    const auto send = split_rows(input, input_split_sizes), receive = split_rows(output, output_split_sizes);
    output.copy_(comm_->all_to_all_dim0(input, send, receive).view(output.sizes()));
    return done({output});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllToAllOptions& /*opts*/) override {
    check_count(inputs.size(), "alltoall"), check_count(outputs.size(), "alltoall");
    Tensors flat;
    std::vector<int64_t> send, receive;
    for (const auto& t : inputs) flat.push_back(t.reshape({-1})), send.push_back(t.numel());
    for (const auto& t : outputs) receive.push_back(t.numel());
    const auto got = comm_->all_to_all_dim0(at::cat(flat), send, receive);
    int64_t at = 0;
    for (auto& t : outputs) t.copy_(got.narrow(0, at, t.numel()).view(t.sizes())), at += t.numel();
    return done(outputs);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                        const c10d::GatherOptions& opts) override {
    const auto gathered = gather(inputs.at(0));
    if (rank_ == opts.rootRank) {
      check_count(outputs.at(0).size(), "gather");
      for (int r = 0; r < size_; ++r)
        outputs[0][r].copy_(piece_of(gathered, r, inputs[0].numel()).view(outputs[0][r].sizes()));
      return done(outputs[0]);
    }
    return done({});
  }

  // The root's pieces travel to every rank (each takes its own): small objects, as DCP sends.
  c10::intrusive_ptr<c10d::Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    at::Tensor& mine = outputs.at(0);
    const int64_t n = mine.numel();
    at::Tensor all;
    if (rank_ == opts.rootRank) {
      check_count(inputs.at(0).size(), "scatter");
      Tensors flat;
      for (const auto& t : inputs[0]) {
        TORCH_CHECK(t.numel() == n, "meshtest_sim: scatter needs pieces of one size");
        flat.push_back(t.reshape({-1}));
      }
      all = at::cat(flat);
    } else {
      all = at::zeros({n * size_}, mine.options());
    }
    const auto from_root = piece_of(gather(all), opts.rootRank, n * size_);
    mine.copy_(from_root.narrow(0, n * rank_, n).view(mine.sizes()));
    return done(outputs);
  }

  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dst_rank, int tag) override {
    for (const auto& t : tensors) comm_->start_send(t, dst_rank, tag);
    return done({});
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int src_rank, int tag) override {
    auto comm = comm_;
    Tensors out = tensors;
    return c10::make_intrusive<ReceiveWork>(
        rank_,
        [comm, out, src_rank, tag]() mutable {
          for (auto& t : out) comm->recv(t, src_rank, tag);
        },
        tensors);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override {
    comm_->barrier();
    return done({});
  }

 private:
  static int global_rank(int group_rank) {
    const char* rank = std::getenv("RANK");
    return rank && *rank ? std::atoi(rank) : group_rank;
  }
  // A label for messages and the collective trace: the same on every member of a group as long
  // as they create their groups in the same order, which c10d requires anyway.
  static std::string group_name(int size) {
    static std::atomic<int> groups{0};
    return "meshtest_sim#" + std::to_string(groups++) + "(" + std::to_string(size) + " ranks)";
  }

  void check_count(size_t n, const char* op) const {
    TORCH_CHECK(static_cast<int>(n) == size_, "meshtest_sim: ", op, " needs ", size_, " tensors, got ", n);
  }

  // Every rank's copy of `t`, flattened and concatenated in rank order.
  at::Tensor gather(const at::Tensor& t) { return comm_->start_all_gather(t.contiguous().reshape({-1}))(); }
  static at::Tensor piece_of(const at::Tensor& gathered, int64_t rank, int64_t n) {
    return gathered.narrow(0, rank * n, n);
  }

  void gather_into(at::Tensor& output, const at::Tensor& input) {
    TORCH_CHECK(output.numel() == input.numel() * size_, "meshtest_sim: all_gather_into_tensor's output holds ",
                output.numel(), " elements, not ", size_, " x ", input.numel());
    output.copy_(gather(input).view(output.sizes()));
  }

  // The ops reduced by a sum: SUM, AVG (then divided), and PREMUL_SUM, which FSDP2 asks for when a
  // trainer sets its own gradient divide factor (torchtitan does): each tensor times the factor,
  // then summed, as NCCL does.
  static bool is_sum(const ReduceOp& op) {
    const auto kind = static_cast<ReduceOp::RedOpType>(op);
    return kind == ReduceOp::SUM || kind == ReduceOp::AVG || kind == ReduceOp::PREMUL_SUM;
  }

  // What this rank contributes to a sum: its tensor (times PREMUL_SUM's factor), or nothing under
  // the planted drop-last-rank. Under sum-for-avg the factor is dropped: FSDP2 averages gradients
  // by a PREMUL_SUM of 1/N when the trainer sets a divide factor (torchtitan), not by AVG.
  at::Tensor contribution(const at::Tensor& t, const ReduceOp& op) const {
    if (fault_ == Fault::kDropLastRank && rank_ == size_ - 1 && size_ > 1) return at::zeros_like(t);
    if (static_cast<ReduceOp::RedOpType>(op) != ReduceOp::PREMUL_SUM || fault_ == Fault::kSumForAvg) return t;
    const auto* factor = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(factor, "meshtest_sim: a PREMUL_SUM without its factor");
#if TORCH_VERSION_MAJOR >= 2
    const at::Tensor& tensor_factor = factor->tensor_factor;
#else
    const at::Tensor tensor_factor = factor->tensor_factors.empty() ? at::Tensor() : factor->tensor_factors.front();
#endif
    return tensor_factor.defined() ? t * tensor_factor.to(t.device()) : t * factor->double_factor;
  }

  void divide(at::Tensor& t) const {
    if (fault_ == Fault::kSumForAvg) return;
    if (t.is_floating_point() || t.is_complex())
      t.div_(size_);
    else
      t.div_(size_, "floor");
  }

  // The reduction of every rank's `t` in rank order, into `t`.
  void all_reduce(at::Tensor& t, const ReduceOp& op) {
    if (is_sum(op)) {
      auto sum = contribution(t, op).clone();
      comm_->all_reduce_sum(sum);
      t.copy_(sum);
      if (static_cast<ReduceOp::RedOpType>(op) == ReduceOp::AVG) divide(t);
    } else if (static_cast<ReduceOp::RedOpType>(op) == ReduceOp::MAX) {
      comm_->all_reduce_max(t);
    } else {
      t.copy_(fold(gather(t).view({size_, -1}), op).view(t.sizes()));
    }
  }

  // Row r is rank r's tensor: the rows combined in rank order by one of the ops that have no
  // transport of their own (min, product, bitwise).
  static at::Tensor fold(const at::Tensor& rows, const ReduceOp& op) {
    at::Tensor acc = rows[0].clone();
    for (int64_t r = 1; r < rows.size(0); ++r) {
      const auto x = rows[r];
      switch (static_cast<ReduceOp::RedOpType>(op)) {
        case ReduceOp::MIN: acc = at::minimum(acc, x); break;
        case ReduceOp::PRODUCT: acc.mul_(x); break;
        case ReduceOp::BAND: acc.bitwise_and_(x); break;
        case ReduceOp::BOR: acc.bitwise_or_(x); break;
        case ReduceOp::BXOR: acc.bitwise_xor_(x); break;
        default:
          TORCH_CHECK(false, "meshtest_sim: reduce op ", static_cast<int>(static_cast<ReduceOp::RedOpType>(op)),
                      " is not supported (sum, avg, premul_sum, max, min, product, band, bor, bxor are)");
      }
    }
    return acc;
  }

  // This rank's part of the reduction of every rank's `input` (size_ equal parts, flattened).
  void reduce_scatter_into(at::Tensor& output, const at::Tensor& input, const ReduceOp& op) {
    const int64_t n = output.numel();
    TORCH_CHECK(input.numel() == n * size_, "meshtest_sim: reduce_scatter's input holds ", input.numel(),
                " elements, not ", size_, " x ", n);
    const auto kind = static_cast<ReduceOp::RedOpType>(op);
    at::Tensor mine;
    if (is_sum(op)) {
      const auto flat = contribution(input, op).contiguous().reshape({-1});
      if (fault_ == Fault::kReduceScatterWrongShard && size_ > 1) {
        auto sum = flat.clone();
        comm_->all_reduce_sum(sum);
        mine = sum.narrow(0, n * ((rank_ + 1) % size_), n);
      } else {
        mine = comm_->start_reduce_scatter_sum(flat)();
      }
      mine = mine.clone();
      if (kind == ReduceOp::AVG) divide(mine);
    } else {
      auto all = gather(input).view({size_, -1});
      mine = kind == ReduceOp::MAX ? std::get<0>(all.max(0)) : fold(all, op);
      mine = mine.narrow(0, n * rank_, n);
    }
    output.copy_(mine.view(output.sizes()));
  }

  std::vector<int64_t> split_rows(const at::Tensor& t, const std::vector<int64_t>& sizes) const {
    if (!sizes.empty()) return sizes;
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    TORCH_CHECK(rows % size_ == 0, "meshtest_sim: all_to_all of ", rows, " rows over ", size_,
                " ranks needs split sizes");
    return std::vector<int64_t>(static_cast<size_t>(size_), rows / size_);
  }

  std::shared_ptr<meshtrain::Comm> comm_;
  Fault fault_;
};

c10::intrusive_ptr<SimBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   const std::chrono::duration<float>& timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  return c10::make_intrusive<SimBackend>(store, rank, size, ms);
}

}  // namespace meshtest_sim

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "meshtest_sim: a c10d backend over meshtrain's shared-memory transport (docs/simulation.md)";
  m.def("create", &meshtest_sim::create, "A meshtest_sim backend for one process group");
}
