// Everything `meshtrain train` and `meshtrain generate` are told, one section per component:
// each section is its component's own config struct, declared with its options in the
// component's files; add_options below assembles them into one command line (docs/meshtrain.md
// lists the flags). A section is read where its component is set up, never copied.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/faults.h"
#include "components/checkpoint.h"
#include "components/data.h"
#include "components/generate.h"
#include "components/optim.h"
#include "components/profile.h"
#include "components/validation.h"
#include "distributed/comm.h"
#include "distributed/parallelize.h"
#include "distributed/pipeline.h"
#include "model/float8.h"

namespace CLI {
class App;
}

namespace meshtrain {

// --model, --steps, --stop-at, --seed, the batch and the sequence: what the loop runs.
struct TrainingConfig {
  std::string model = "tiny";
  int64_t steps = 10;
  int64_t stop_at = -1;  // end the run after this step (the schedule still spans `steps`); -1: at `steps`
  uint64_t seed = 42;
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;  // -1: local batch x data-parallel degree (no accumulation)
  int64_t seq_len = 64;
};

// This process: the collective backend, where outputs go, threads, timeouts, the console and
// planted faults.
struct JobConfig {
  Backend backend = Backend::kGloo;  // add_options makes it nccl in the CUDA build
  std::string dump_folder = "./outputs";
  int threads = 0;  // 0: 1, or with cpu_offload the host's cores shared among its ranks (train.cpp)
  double timeout_s = 300;
  bool deterministic = false;  // deterministic kernels on CUDA (CPU kernels already are)
  bool quiet = false;
  Fault inject_fault = Fault::kNone;  // test-only: plant a known bug (faults.h)
};

struct TrainConfig {
  TrainingConfig training;
  OptimizerConfig optimizer;    // components/optim.h
  ParallelConfig parallel;      // distributed/parallelize.h
  pp::PipelineConfig pipeline;  // distributed/pipeline.h
  float8::Float8Config float8;  // model/float8.h
  CheckpointConfig checkpoint;  // components/checkpoint.h
  DataConfig data;              // components/data.h
  ValidationConfig validation;  // components/validation.h
  ProfilingConfig profiling;    // components/profile.h
  JobConfig job;
  std::optional<GenerateConfig> generate;  // `meshtrain generate`: decode instead of training
};

// The options of `train` (and of `generate`, which adds its own), in --help's order.
void add_options(CLI::App& cmd, TrainConfig& config);

}  // namespace meshtrain
