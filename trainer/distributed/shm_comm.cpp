#include "distributed/shm_comm.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "distributed/collective.h"

namespace meshtrain {

namespace {

// Bytes a rank can post per round; a larger tensor goes through in rounds. Only the pages
// a collective touches are ever backed by memory.
constexpr int64_t kSlotBytes = 4 << 20;
constexpr int kMaxRanks = 1000;
constexpr int64_t kHeaderBytes = 64 << 10;

// The segment's first pages. `generation` counts completed barriers (the futex word);
// `failed` is 1 + the global rank of a member that gave up. Each member holds its `alive`
// mutex (robust, process-shared) as long as it is in the group: the kernel releases it when
// the member's process dies, however it dies, so a waiting rank can tell a dead peer from a
// slow one.
struct Header {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
  std::atomic<int32_t> failed;
  int32_t global_rank[kMaxRanks];
  pthread_mutex_t alive[kMaxRanks];
};
static_assert(sizeof(Header) <= kHeaderBytes);

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// /dev/shm when it has room for the segment (containers often mount 64 MB there), else the
// temp folder: either way page-cache memory, and unlinked once mapped.
std::string segment_folder(int64_t bytes) {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) == 0 && ::access("/dev/shm", W_OK) == 0 &&
      static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_bsize) > 4 * bytes)
    return "/dev/shm";
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

bool low_precision(torch::ScalarType t) { return t == torch::kBFloat16 || t == torch::kHalf; }

class ShmComm : public Comm {
 public:
  ShmComm(const c10::intrusive_ptr<c10d::Store>& store, std::string name, int global_rank, int rank, int size,
          std::chrono::milliseconds timeout)
      : store_(store), name_(std::move(name)), global_rank_(global_rank), rank_(rank), size_(size), timeout_(timeout) {
    if (size_ > kMaxRanks) throw std::invalid_argument("shm backend: at most " + std::to_string(kMaxRanks) + " ranks");
    const int64_t bytes = kHeaderBytes + kSlotBytes * size_;
    std::string path;
    int fd = -1;
    if (rank_ == 0) {
      char tmpl[4096];
      std::snprintf(tmpl, sizeof tmpl, "%s/meshtrain-shm-XXXXXX", segment_folder(bytes).c_str());
      fd = ::mkstemp(tmpl);
      if (fd < 0)
        throw std::runtime_error(std::string("shm backend: cannot create a segment in ") + tmpl + ": " +
                                 std::strerror(errno));
      if (::ftruncate(fd, bytes) != 0) {
        ::close(fd);
        ::unlink(tmpl);
        throw std::runtime_error(std::string("shm backend: cannot size ") + tmpl + ": " + std::strerror(errno));
      }
      path = tmpl;
      store_->set("shm_path", std::vector<uint8_t>(path.begin(), path.end()));
    } else {
      const auto value = store_->get("shm_path");  // waits for rank 0, up to the store's timeout
      path.assign(value.begin(), value.end());
      fd = ::open(path.c_str(), O_RDWR);
      if (fd < 0) throw std::runtime_error("shm backend: cannot open " + path + ": " + std::strerror(errno));
    }
    void* mapped = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped == MAP_FAILED) throw std::runtime_error("shm backend: cannot map " + path + ": " + std::strerror(errno));
    base_ = static_cast<uint8_t*>(mapped);
    mapped_bytes_ = bytes;
    header_ = reinterpret_cast<Header*>(base_);
    header_->global_rank[rank_] = global_rank_;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&header_->alive[rank_], &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_mutex_lock(&header_->alive[rank_]);
    barrier_wait("join");  // every member has mapped the segment: its name can go
    if (rank_ == 0) ::unlink(path.c_str());
  }

  ~ShmComm() override {
    if (!base_) return;
    pthread_mutex_unlock(&header_->alive[rank_]);  // leaving: peers that still wait fail at once
    ::munmap(base_, static_cast<size_t>(mapped_bytes_));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(torch::Tensor& t) override {
    enter("all_reduce_sum");
    count(comm_volume().all_reduce_bytes, comm_volume().all_reduce_calls, t.nbytes());
    t.copy_(reduce(t, 0, t.numel(), [](torch::Tensor& acc, const torch::Tensor& x) { acc.add_(x); }).view(t.sizes()));
  }

  void all_reduce_max(torch::Tensor& t) override {
    enter("all_reduce_max");
    count(comm_volume().all_reduce_bytes, comm_volume().all_reduce_calls, t.nbytes());
    t.copy_(reduce(t, 0, t.numel(), [](torch::Tensor& acc, const torch::Tensor& x) {
              acc.copy_(torch::maximum(acc, x));
            }).view(t.sizes()));
  }

  torch::Tensor all_gather_dim0(const torch::Tensor& local, const std::vector<int64_t>& sizes) override {
    enter("all_gather");
    const int64_t rows = *std::max_element(sizes.begin(), sizes.end());
    auto shape = local.sizes().vec();
    shape[0] = rows;
    auto padded = torch::zeros(shape, local.options());
    if (local.size(0) > 0) padded.narrow(0, 0, local.size(0)).copy_(local);
    auto gathered = gather(padded);  // [size * rows, ...]
    count(comm_volume().all_gather_bytes, comm_volume().all_gather_calls, gathered.nbytes());
    std::vector<torch::Tensor> pieces;
    for (int i = 0; i < size_; ++i) pieces.push_back(gathered.narrow(0, i * rows, sizes[i]));
    return torch::cat(pieces, 0);
  }

  torch::Tensor reduce_scatter_sum_dim0(const torch::Tensor& full, const std::vector<int64_t>& sizes) override {
    enter("reduce_scatter");
    count(comm_volume().reduce_scatter_bytes, comm_volume().reduce_scatter_calls, full.nbytes());
    int64_t offset = 0;
    for (int i = 0; i < rank_; ++i) offset += sizes[i];
    const int64_t row = full.dim() > 0 && full.size(0) > 0 ? full.numel() / full.size(0) : 0;
    auto mine =
        reduce(full, offset * row, sizes[rank_] * row, [](torch::Tensor& acc, const torch::Tensor& x) { acc.add_(x); });
    auto shape = full.sizes().vec();
    shape[0] = sizes[rank_];
    return mine.view(shape);
  }

  void barrier() override {
    enter("barrier");
    barrier_wait("barrier");
  }

  torch::Tensor all_to_all_dim0(const torch::Tensor& x, const std::vector<int64_t>& send_rows,
                                const std::vector<int64_t>& recv_rows) override {
    enter("all_to_all");
    // Every rank posts what it sends, padded to the longest; each takes its rows from each.
    const auto gathered = gather(torch::tensor(send_rows, torch::kInt64)).contiguous();
    const int64_t* counts = gathered.data_ptr<int64_t>();  // [from * size + to]: rows from -> to
    std::vector<int64_t> sent(static_cast<size_t>(size_));
    for (int from = 0; from < size_; ++from)
      for (int to = 0; to < size_; ++to) sent[static_cast<size_t>(from)] += counts[from * size_ + to];
    const int64_t rows = *std::max_element(sent.begin(), sent.end());
    auto shape = x.sizes().vec();
    shape[0] = rows;
    auto padded = torch::zeros(shape, x.options());
    if (x.size(0) > 0) padded.narrow(0, 0, x.size(0)).copy_(x);
    auto everything = gather(padded);
    std::vector<torch::Tensor> pieces;
    for (int from = 0; from < size_; ++from) {
      int64_t start = 0;
      for (int to = 0; to < rank_; ++to) start += counts[from * size_ + to];
      const int64_t n = counts[from * size_ + rank_];
      if (n != recv_rows[static_cast<size_t>(from)])
        throw std::logic_error("all_to_all in group " + name_ + ": rank " + std::to_string(from) + " sends " +
                               std::to_string(n) + " rows to rank " + std::to_string(rank_) + ", which expects " +
                               std::to_string(recv_rows[static_cast<size_t>(from)]));
      pieces.push_back(everything.narrow(0, from * rows + start, n));
    }
    return torch::cat(pieces, 0);
  }

  InFlight start_all_gather(const torch::Tensor& piece) override {
    enter("all_gather");
    auto gathered = gather(piece.contiguous().view({-1}));
    count(comm_volume().all_gather_bytes, comm_volume().all_gather_calls, gathered.nbytes());
    return [gathered] { return gathered; };
  }

  InFlight start_reduce_scatter_sum(const torch::Tensor& full) override {
    enter("reduce_scatter");
    count(comm_volume().reduce_scatter_bytes, comm_volume().reduce_scatter_calls, full.nbytes());
    const int64_t n = full.numel() / size_;
    auto mine = reduce(full, n * rank_, n, [](torch::Tensor& acc, const torch::Tensor& x) { acc.add_(x); });
    return [mine] { return mine; };
  }

  InFlight start_all_reduce_sum(const torch::Tensor& t) override {
    enter("all_reduce_sum");
    count(comm_volume().all_reduce_bytes, comm_volume().all_reduce_calls, t.nbytes());
    t.copy_(reduce(t, 0, t.numel(), [](torch::Tensor& acc, const torch::Tensor& x) { acc.add_(x); }).view(t.sizes()));
    return [t] { return t; };
  }

  torch::Tensor send_recv(const torch::Tensor& t, int to, int from) override {
    enter("send_recv");
    post(t, to, /*tag=*/-1);
    auto incoming = torch::empty_like(t);
    take(incoming, from, /*tag=*/-1);
    return incoming;
  }

  InFlight start_send(const torch::Tensor& t, int to, int tag) override {
    enter("send");
    post(t, to, tag);
    return [t] { return t; };
  }

  void recv(torch::Tensor& t, int from, int tag) override {
    enter("recv");
    take(t, from, tag);
  }

 private:
  using Combine = std::function<void(torch::Tensor& acc, const torch::Tensor& x)>;

  void enter(const char* op) { enter_collective(op, name_, global_rank_, size_); }

  static void count(int64_t& bytes, int64_t& calls, size_t n) {
    bytes += static_cast<int64_t>(n);
    ++calls;
  }

  uint8_t* slot(int r) const { return base_ + kHeaderBytes + kSlotBytes * r; }

  // Every member calls it; returns once all have. Fails, instead of waiting on, a group
  // whose member gave up, and gives up itself (marking the group) after the timeout.
  void barrier_wait(const char* what) {
    const uint32_t gen = header_->generation.load(std::memory_order_acquire);
    if (header_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
      header_->arrived.store(0, std::memory_order_relaxed);
      header_->generation.fetch_add(1, std::memory_order_release);
      futex(&header_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int spin = 0; header_->generation.load(std::memory_order_acquire) == gen; ++spin) {
      if (const int32_t failed = header_->failed.load(std::memory_order_acquire))
        throw std::runtime_error("shm backend: group " + name_ + ": global rank " + std::to_string(failed - 1) +
                                 " failed in a collective (" + what + ")");
      if (std::chrono::steady_clock::now() > deadline) {
        header_->failed.store(global_rank_ + 1, std::memory_order_release);
        futex(&header_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
        throw std::runtime_error("shm backend: group " + name_ + " (" + std::to_string(size_) + " ranks): rank " +
                                 std::to_string(rank_) + " waited " + std::to_string(timeout_.count() / 1000) +
                                 " s in " + what + " for peers that never arrived");
      }
      if (spin < 64) {
        std::this_thread::yield();
        continue;
      }
      const timespec tick{0, 50 * 1000 * 1000};  // wake now and then to look at the deadline and the peers
      futex(&header_->generation, FUTEX_WAIT, gen, &tick);
      if (spin % 20 == 0) fail_if_a_peer_is_gone(what);
    }
  }

  // A peer that left the group (its process died, or it closed the group) never arrives:
  // say which, instead of waiting for the timeout. Only members past the join hold a mutex.
  void fail_if_a_peer_is_gone(const char* what) {
    if (std::strcmp(what, "join") == 0) return;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const int state = pthread_mutex_trylock(&header_->alive[r]);
      if (state == EBUSY) continue;  // held: the peer is alive
      if (state == 0 || state == EOWNERDEAD) pthread_mutex_unlock(&header_->alive[r]);
      const int peer = header_->global_rank[r];
      header_->failed.store(peer + 1, std::memory_order_release);
      throw std::runtime_error("shm backend: group " + name_ + ": global rank " + std::to_string(peer) +
                               (state == EOWNERDEAD ? " died" : " left the group") + " while rank " +
                               std::to_string(rank_) + " waited for it in " + what);
    }
  }

  // The world's copies of `mine` (the same byte count on every rank) concatenated in rank
  // order, on mine's device.
  torch::Tensor gather(const torch::Tensor& mine) {
    auto host = mine.contiguous().to(torch::kCPU);
    auto shape = host.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= size_;
    auto out = torch::empty(shape, host.options());
    const int64_t bytes = static_cast<int64_t>(host.nbytes());
    const auto* src = static_cast<const uint8_t*>(host.data_ptr());
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t at = 0; at == 0 || at < bytes; at += kSlotBytes) {
      const int64_t n = std::min(kSlotBytes, bytes - at);
      if (n > 0) std::memcpy(slot(rank_), src + at, static_cast<size_t>(n));
      barrier_wait("all_gather");
      for (int r = 0; r < size_; ++r)
        if (n > 0) std::memcpy(dst + r * bytes + at, slot(r), static_cast<size_t>(n));
      barrier_wait("all_gather");
      if (bytes == 0) break;
    }
    return out.to(mine.device());
  }

  // Elements [first, first + n) of the combination over ranks of `mine` (flattened, the
  // same size everywhere), combined in rank order; float32 arithmetic for 16-bit dtypes.
  torch::Tensor reduce(const torch::Tensor& mine, int64_t first, int64_t n, const Combine& combine) {
    auto host = mine.contiguous().to(torch::kCPU).view({-1});
    const auto dtype = host.scalar_type();
    const auto acc_dtype = low_precision(dtype) ? torch::kFloat32 : dtype;
    auto acc = torch::empty({n}, torch::dtype(acc_dtype));
    const int64_t elem = static_cast<int64_t>(host.element_size());
    const int64_t per_round = kSlotBytes / elem, total = host.numel();
    for (int64_t at = 0; at == 0 || at < total; at += per_round) {
      const int64_t count = std::min(per_round, total - at);
      if (count > 0)
        std::memcpy(slot(rank_), static_cast<const uint8_t*>(host.data_ptr()) + at * elem,
                    static_cast<size_t>(count * elem));
      barrier_wait("reduce");
      // The part of this round that falls in [first, first + n).
      const int64_t lo = std::max(at, first), hi = std::min(at + count, first + n);
      if (lo < hi) {
        auto part = acc.narrow(0, lo - first, hi - lo);
        for (int r = 0; r < size_; ++r) {
          auto x = torch::from_blob(slot(r), {count}, torch::dtype(dtype)).narrow(0, lo - at, hi - lo).to(acc_dtype);
          if (r == 0)
            part.copy_(x);
          else
            combine(part, x);
        }
      }
      barrier_wait("reduce");
      if (total == 0) break;
    }
    return acc.to(dtype).to(mine.device());
  }

  // Point to point through the store: one key per message, numbered per (from, to, tag).
  std::string message_key(int from, int to, int tag) {
    auto& seq = sequence_[{from, to, tag}];
    return "p2p/" + std::to_string(from) + ">" + std::to_string(to) + "/" + std::to_string(tag) + "/" +
           std::to_string(seq++);
  }

  void post(const torch::Tensor& t, int to, int tag) {
    auto host = t.contiguous().to(torch::kCPU);
    const auto* p = static_cast<const uint8_t*>(host.data_ptr());
    store_->set(message_key(rank_, to, tag), std::vector<uint8_t>(p, p + host.nbytes()));
  }

  void take(torch::Tensor& t, int from, int tag) {
    const std::string key = message_key(from, rank_, tag);
    const auto bytes = store_->get(key);  // waits up to the store's timeout
    store_->deleteKey(key);
    auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
    if (static_cast<int64_t>(bytes.size()) != static_cast<int64_t>(host.nbytes()))
      throw std::logic_error("shm backend: group " + name_ + ": rank " + std::to_string(from) + " sent " +
                             std::to_string(bytes.size()) + " bytes where rank " + std::to_string(rank_) + " expects " +
                             std::to_string(host.nbytes()));
    std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
    t.copy_(host);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string name_;
  int global_rank_, rank_, size_;
  std::chrono::milliseconds timeout_;
  uint8_t* base_ = nullptr;
  int64_t mapped_bytes_ = 0;
  Header* header_ = nullptr;
  std::map<std::tuple<int, int, int>, int64_t> sequence_;
};

}  // namespace

std::shared_ptr<Comm> make_shm_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                     int global_rank, int rank, int size, std::chrono::milliseconds timeout) {
  return std::make_shared<ShmComm>(store, name, global_rank, rank, size, timeout);
}

}  // namespace meshtrain
