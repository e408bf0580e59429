// How a rank finds its peers (the torchrun environment) and talks to them
// (a c10d backend: Gloo on CPU, NCCL on CUDA). Version differences stay in compat.h.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

namespace meshtrain {

// What torchrun tells a rank. With no RANK / WORLD_SIZE set, a single rank.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Throws std::invalid_argument on malformed or inconsistent values.
  static LaunchEnv from_environment();
};

enum class Backend { kGloo, kNccl };
// "gloo" | "nccl"; throws std::invalid_argument for anything else.
Backend parse_backend(const std::string& name);

// A group of ranks and the collectives meshtrain needs. Every call blocks until
// done; a peer that stops answering raises an error after `timeout`.
class Comm {
 public:
  // Joins the job described by `env`. World size 1 needs no rendezvous.
  static std::shared_ptr<Comm> create(const LaunchEnv& env, Backend backend,
                                      std::chrono::milliseconds timeout);
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual torch::Device device() const = 0;
  // In place: every rank ends with the element-wise sum.
  virtual void all_reduce_sum(torch::Tensor& t) = 0;
  // In place: every rank ends with the element-wise mean.
  void all_reduce_mean(torch::Tensor& t);
  virtual void barrier() = 0;
};

}  // namespace meshtrain
