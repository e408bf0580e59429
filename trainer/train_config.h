// Everything `meshtrain train` and `meshtrain generate` are told (trainer/main.cpp fills it
// from the command line; docs/meshtrain.md lists the flags).
#pragma once

#include <cstdint>
#include <string>

#include "components/data.h"
#include "distributed/pipeline.h"

namespace meshtrain {

struct TrainConfig {
  std::string model = "tiny";
  int64_t steps = 10;
  int64_t stop_at = -1;  // end the run after this step (the schedule still spans `steps`); -1: at `steps`
  uint64_t seed = 42;
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;  // -1: local batch x data-parallel degree (no accumulation)
  int64_t seq_len = 64;
  double lr = 8e-4;
  int64_t warmup_steps = 2;
  double max_norm = 1.0;  // <= 0: no clipping
  bool early_step_in_backward = false;  // the optimizer in backward (needs max_norm <= 0)
  std::string mesh = "dp_shard=-1";  // torchtitan's default: FSDP over the whole world
  std::string reshard_after_forward = "default";
  std::string ac = "none";
  std::string param_dtype = "float32";
  std::string reduce_dtype = "float32";
  std::string float8 = "off";  // float8.h: off | scaled_mm | emulate
  bool loss_parallel = false;
  bool sequence_parallel = false;
  std::string cp_rotate = "allgather";
  int64_t ep = 1;  // expert parallel: MoE experts split over this many dp_shard ranks
  std::string fsdp_bucketing = "block";  // none | block | auto (parallelize.h: Bucketing)
  double fsdp_bucket_mb = 64;             // auto: the size a bucket grows to
  bool cpu_offload = false;               // parallelize.h: ParallelConfig::cpu_offload
  pp::PipelineConfig pp;           // --pp.*
  bool checkpoint_enable = false;
  std::string checkpoint_folder;  // empty: <dump-folder>/checkpoint
  int64_t checkpoint_interval = 0;
  int64_t checkpoint_keep_latest_k = 0;
  int64_t checkpoint_load_step = -1;
  std::string checkpoint_exclude;
  std::string checkpoint_key_style = "canonical";
  std::string checkpoint_key_map = "none";
  bool checkpoint_last_save_model_only = false;
  std::string checkpoint_export_dtype = "float32";
  bool checkpoint_last_save_in_hf = false;
  std::string checkpoint_initial_load_path;
  bool checkpoint_initial_load_in_hf = false;
#ifdef MESHTEST_CUDA
  std::string backend = "nccl";
#else
  std::string backend = "gloo";
#endif
  std::string dump_folder = "./outputs";
  std::string corpus = shipped_corpus_path();
  int64_t validation_freq = 0;   // validate after every N steps (0: never)
  int64_t validation_steps = 4;  // global batches of held-out text per validation (-1: all of it)
  std::string validation_corpus = shipped_validation_corpus_path();
  int threads = 0;  // 0: 1, or with cpu_offload the host's cores shared among its ranks (train.cpp)
  double timeout_s = 300;
  bool deterministic = false;  // deterministic kernels on CUDA (CPU kernels already are)
  bool quiet = false;
  int64_t profile_step = -1;  // a step to trace with Kineto (profile.h), written to the dump folder
  std::string inject_fault = "none";  // test-only: plant a known bug (faults.h)
  // `meshtrain generate`: load the checkpoint, greedy-decode, write generate.json, no training.
  bool generate = false;
  std::string prompt = "In the beginning";
  int64_t max_new_tokens = 32;
};

}  // namespace meshtrain
