// Packing cases onto a fixed pool of GPUs (or CPU slots): list scheduling in
// longest-expected-first order (baselines ahead of everything) with EASY backfilling. The head of the queue gets a
// reservation at the earliest time enough devices free up; smaller cases start
// ahead of it only if they end before that time or use devices it will not need.
// Never hands out more devices than the pool has. Pure logic: no clocks, no processes.
#pragma once

#include <string>
#include <vector>

namespace meshtest {

struct Task {
  int ngpu = 1;
  double expected_s = 1;
  std::string id;         // tie-breaker, so the order is deterministic
  bool baseline = false;  // others are judged against it: it goes first, so they need not wait
};

// Which physical devices are free; hands out the lowest-numbered contiguous block
// that fits (neighbouring GPUs share NVLink/NUMA more often), else the lowest free ids.
class DevicePool {
 public:
  explicit DevicePool(int size);
  int size() const { return static_cast<int>(busy_.size()); }
  int free() const;
  std::vector<int> acquire(int count);  // throws std::logic_error when count > free()
  void release(const std::vector<int>& ids);

 private:
  std::vector<bool> busy_;
};

class Scheduler {
 public:
  // Tasks needing more than `capacity` devices are never started: ask oversized().
  Scheduler(std::vector<Task> tasks, int capacity, int max_parallel = 0);

  struct Running {
    int task = 0;
    double expected_end = 0;
  };
  // The tasks to start at time `now`, given what runs. Each pick's devices are
  // taken from `free_devices` in order; the caller starts them and reports the end.
  std::vector<int> pick(double now, int free_devices, const std::vector<Running>& running);
  bool queue_empty() const { return queue_.empty(); }
  // Puts a task back at the head of the queue (a retry runs before new work).
  void requeue(int task) { queue_.insert(queue_.begin(), task); }
  const std::vector<int>& oversized() const { return oversized_; }
  const Task& task(int i) const { return tasks_[i]; }

 private:
  std::vector<Task> tasks_;
  std::vector<int> queue_;  // indices into tasks_, longest first
  std::vector<int> oversized_;
  int capacity_;
  int max_parallel_;
};

// Runs the scheduler against the tasks' expected durations as if they were exact.
struct Simulation {
  double makespan = 0;
  int peak_devices = 0;
  std::vector<double> start;              // per task; -1 for oversized
  std::vector<std::vector<int>> devices;  // per task
};
Simulation simulate(const std::vector<Task>& tasks, int capacity, int max_parallel = 0);

// max(total device-seconds / capacity, longest task): no schedule beats it.
double makespan_lower_bound(const std::vector<Task>& tasks, int capacity);

// Splits tasks into `shards` groups of near-equal expected duration (LPT); tasks in
// one `group` (a case and its baselines) stay together. Returns each task's shard.
std::vector<int> assign_shards(const std::vector<Task>& tasks, const std::vector<int>& group, int shards);

}  // namespace meshtest
