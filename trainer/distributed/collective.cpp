#include "distributed/collective.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/faults.h"
#include "contract/rank_environment.h"

namespace meshtrain {

namespace {

// What this rank last entered, for the harness to read when a case hangs
// ($MESHTEST_COLLECTIVE_FILE, docs/contracts.md): a rank that never arrives at a
// collective its peers wait in has entered fewer. One fixed-size line in a shared
// mapping of the file, so noting a collective costs no system call and the line
// outlives the rank being killed.
class CollectiveTrace {
 public:
  static CollectiveTrace& instance() {
    static CollectiveTrace trace;
    return trace;
  }
  void enter(const char* op, const std::string& group, int size) {
    ++entered_;
    if (line_ == nullptr) return;
    char text[kLineBytes + 1];
    int n = std::snprintf(text, sizeof text, "collectives_entered=%lld last=%s group=%s ranks=%d",
                          static_cast<long long>(entered_), op, group.c_str(), size);
    n = std::min(std::max(n, 0), kLineBytes - 1);
    std::memset(text + n, ' ', static_cast<size_t>(kLineBytes - 1 - n));
    text[kLineBytes - 1] = '\n';
    std::memcpy(line_, text, kLineBytes);
  }

 private:
  static constexpr int kLineBytes = 128;
  CollectiveTrace() {
    const char* path = std::getenv(contract::rank_environment::kCollectiveFile);
    if (path == nullptr || *path == '\0') return;
    const int fd = ::open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::ftruncate(fd, kLineBytes) != 0) {
      if (fd >= 0) ::close(fd);
      return;  // a missing trace only makes a hang harder to attribute
    }
    void* mapped = ::mmap(nullptr, kLineBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped != MAP_FAILED) line_ = static_cast<char*>(mapped);
  }
  char* line_ = nullptr;
  int64_t entered_ = 0;
};

}  // namespace

// The planted hang (--inject-fault hang-before-all-reduce) stops global rank 1 for good
// just before an all-reduce its peers enter, until meshtest's timeout ends it.
void enter_collective(const char* op, const std::string& group, int global_rank, int size) {
  if (injected(Fault::kHangBeforeAllReduce) && global_rank == 1 && std::strncmp(op, "all_reduce", 10) == 0)
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  CollectiveTrace::instance().enter(op, group, size);
}

CommVolume& comm_volume() {
  static CommVolume volume;
  return volume;
}

void Comm::all_reduce_mean(torch::Tensor& t) {
  // Gloo has no AVG reduction: sum, then divide.
  all_reduce_sum(t);
  if (size() > 1) t.div_(size());
}

}  // namespace meshtrain
