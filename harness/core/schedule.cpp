#include "core/schedule.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

namespace meshtest {

DevicePool::DevicePool(int size) : busy_(static_cast<size_t>(std::max(size, 0)), false) {}

int DevicePool::free() const { return static_cast<int>(std::count(busy_.begin(), busy_.end(), false)); }

std::vector<int> DevicePool::acquire(int count) {
  if (count > free()) throw std::logic_error("DevicePool: asked for more devices than are free");
  std::vector<int> ids;
  for (int start = 0; start + count <= size() && ids.empty(); ++start) {
    bool block_free = true;
    for (int i = start; i < start + count; ++i) block_free &= !busy_[i];
    if (block_free)
      for (int i = start; i < start + count; ++i) ids.push_back(i);
  }
  if (ids.empty())
    for (int i = 0; i < size() && static_cast<int>(ids.size()) < count; ++i)
      if (!busy_[i]) ids.push_back(i);
  for (int id : ids) busy_[id] = true;
  return ids;
}

void DevicePool::release(const std::vector<int>& ids) {
  for (int id : ids) {
    if (id < 0 || id >= size() || !busy_[id]) throw std::logic_error("DevicePool: releasing a device not held");
    busy_[id] = false;
  }
}

Scheduler::Scheduler(std::vector<Task> tasks, int capacity, int max_parallel)
    : tasks_(std::move(tasks)), capacity_(capacity), max_parallel_(max_parallel) {
  for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) {
    if (tasks_[i].ngpu > capacity_)
      oversized_.push_back(i);
    else
      queue_.push_back(i);
  }
  // Longest first; among equals the wider one, then by id so every runner agrees.
  std::stable_sort(queue_.begin(), queue_.end(), [&](int a, int b) {
    const Task& x = tasks_[a];
    const Task& y = tasks_[b];
    if (x.baseline != y.baseline) return x.baseline;
    if (x.expected_s != y.expected_s) return x.expected_s > y.expected_s;
    if (x.ngpu != y.ngpu) return x.ngpu > y.ngpu;
    return x.id < y.id;
  });
}

std::vector<int> Scheduler::pick(double now, int free_devices, const std::vector<Running>& running) {
  std::vector<int> picked;
  std::vector<Running> busy = running;
  auto slots_left = [&] { return max_parallel_ <= 0 || static_cast<int>(busy.size()) < max_parallel_; };
  // Start queue heads while they fit.
  while (!queue_.empty() && slots_left() && tasks_[queue_.front()].ngpu <= free_devices) {
    const int t = queue_.front();
    queue_.erase(queue_.begin());
    free_devices -= tasks_[t].ngpu;
    busy.push_back({t, now + tasks_[t].expected_s});
    picked.push_back(t);
  }
  if (queue_.empty() || !slots_left()) return picked;
  // The head is blocked: reserve the earliest time enough devices are free for it.
  const Task& head = tasks_[queue_.front()];
  std::vector<Running> by_end = busy;
  std::sort(by_end.begin(), by_end.end(),
            [](const Running& a, const Running& b) { return a.expected_end < b.expected_end; });
  int available = free_devices;
  double shadow = now;
  for (const auto& r : by_end) {
    if (available >= head.ngpu) break;
    available += tasks_[r.task].ngpu;
    shadow = std::max(now, r.expected_end);
  }
  int spare_at_shadow = available - head.ngpu;  // devices the head will not need then
  // Backfill: later tasks that fit now and do not delay the head.
  for (size_t q = 1; q < queue_.size() && slots_left();) {
    const int t = queue_[q];
    const Task& task = tasks_[t];
    const bool fits = task.ngpu <= free_devices;
    const bool ends_in_time = now + task.expected_s <= shadow;
    const bool uses_spare = task.ngpu <= spare_at_shadow;
    if (fits && (ends_in_time || uses_spare)) {
      if (!ends_in_time) spare_at_shadow -= task.ngpu;
      free_devices -= task.ngpu;
      busy.push_back({t, now + task.expected_s});
      picked.push_back(t);
      queue_.erase(queue_.begin() + static_cast<long>(q));
    } else {
      ++q;
    }
  }
  return picked;
}

Simulation simulate(const std::vector<Task>& tasks, int capacity, int max_parallel) {
  Simulation sim;
  sim.start.assign(tasks.size(), -1);
  sim.devices.assign(tasks.size(), {});
  Scheduler scheduler(tasks, capacity, max_parallel);
  DevicePool pool(capacity);
  std::vector<Scheduler::Running> running;
  double now = 0;
  while (!scheduler.queue_empty() || !running.empty()) {
    for (int t : scheduler.pick(now, pool.free(), running)) {
      sim.start[t] = now;
      sim.devices[t] = pool.acquire(tasks[t].ngpu);
      running.push_back({t, now + tasks[t].expected_s});
    }
    sim.peak_devices = std::max(sim.peak_devices, capacity - pool.free());
    if (running.empty()) break;  // nothing runs and nothing fits: only oversized left
    // Advance to the next completion.
    auto next = std::min_element(running.begin(), running.end(),
                                 [](const auto& a, const auto& b) { return a.expected_end < b.expected_end; });
    now = next->expected_end;
    for (auto it = running.begin(); it != running.end();) {
      if (it->expected_end <= now) {
        pool.release(sim.devices[it->task]);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    sim.makespan = now;
  }
  return sim;
}

double makespan_lower_bound(const std::vector<Task>& tasks, int capacity) {
  double area = 0, longest = 0;
  for (const auto& t : tasks) {
    if (t.ngpu > capacity) continue;
    area += t.ngpu * t.expected_s;
    longest = std::max(longest, t.expected_s);
  }
  return std::max(capacity > 0 ? area / capacity : 0.0, longest);
}

std::vector<int> assign_shards(const std::vector<Task>& tasks, const std::vector<int>& group, int shards) {
  std::map<int, double> group_seconds;
  std::map<int, std::string> group_key;  // smallest id in the group, for a stable order
  for (size_t i = 0; i < tasks.size(); ++i) {
    group_seconds[group[i]] += tasks[i].expected_s * tasks[i].ngpu;
    auto [it, inserted] = group_key.emplace(group[i], tasks[i].id);
    if (!inserted && tasks[i].id < it->second) it->second = tasks[i].id;
  }
  std::vector<int> groups;
  for (const auto& [g, s] : group_seconds) groups.push_back(g);
  std::sort(groups.begin(), groups.end(), [&](int a, int b) {
    if (group_seconds[a] != group_seconds[b]) return group_seconds[a] > group_seconds[b];
    return group_key[a] < group_key[b];
  });
  std::vector<double> load(static_cast<size_t>(std::max(shards, 1)), 0.0);
  std::map<int, int> shard_of_group;
  for (int g : groups) {
    const size_t lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    shard_of_group[g] = static_cast<int>(lightest);
    load[lightest] += group_seconds[g];
  }
  std::vector<int> out(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) out[i] = shard_of_group[group[i]];
  return out;
}

}  // namespace meshtest
