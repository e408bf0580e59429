// One read-only view over a sharded checkpoint step, whatever wrote it: PyTorch DCP
// (`.metadata` is a pickle; read natively, never executed, see dcp.h), meshtrain's own format
// (`.metadata` is JSON, docs/checkpoint.md), or Hugging Face safetensors (safetensors.h). It lists every key with its kind, dtype, global
// shape and storage, and reassembles a whole tensor from its chunks, refusing gaps and overlaps.
//
// Copies share the parsed metadata, so pointers into entries() stay valid across copies and moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "readers/checkpoint_error.h"

namespace meshtest {

struct CheckpointEntry {
  std::string key;
  bool is_tensor = false;      // false: a bytes/object item
  std::string dtype;           // "float32", "bfloat16", ... ("" for non-tensors)
  std::vector<int64_t> shape;  // global shape
  size_t chunks = 0;
  uint64_t bytes = 0;  // stored bytes over all chunks/records
};

class CheckpointView {
 public:
  // `path`: a step folder (holds .metadata) or a folder of step-<N> folders (the newest complete
  // one, i.e. with .metadata, is chosen; `step` >= 0 picks step-<step>). Format detected from
  // .metadata: a pickle (0x80) is PyTorch DCP, JSON is meshtrain's format. Or safetensors: a
  // `.safetensors` file, or a folder with model.safetensors or model.safetensors.index.json. A
  // folder of the Hugging Face Trainer's checkpoint-<N> folders is read at its newest complete one
  // (with trainer_state.json; `step` picks checkpoint-<step>): its safetensors, else FSDP's DCP
  // in pytorch_model_fsdp_0/.
  static CheckpointView open(const std::string& path, long long step = -1);

  const std::string& step_dir() const;
  const std::string& format() const;                    // "pytorch-dcp", "meshtrain" or "safetensors"
  const std::vector<CheckpointEntry>& entries() const;  // sorted by key
  const CheckpointEntry* find(const std::string& key) const;
  // The whole global tensor reassembled from its chunks, row-major, as float64. Throws when a
  // chunk is missing or overlapping (coverage must be exact), a record lies outside its file, etc.
  std::vector<double> read_tensor(const std::string& key) const;
  // Every tensor element stored once: each tensor's chunks cover it exactly (no gap, no
  // overlap), and, for PyTorch DCP, every byte of the data files lies in exactly one record
  // (no byte of a .distcp file outside a record, none twice). Throws CheckpointError naming the key or the file.
  void check_stored_once() const;
  std::vector<std::string> warnings() const;  // e.g. unknown pickle globals
  // What the writer recorded about the save, one line; meshtrain's format records the step,
  // format version, writer's mesh and key style. "" when the format records none (PyTorch DCP).
  const std::string& about() const;
  // Stored tensor bytes per data file of the step folder (meshtrain's format; empty for DCP).
  const std::map<std::string, uint64_t>& files() const;

  struct Impl;

 private:
  explicit CheckpointView(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// `key` with `prefix` added unless it already starts with a namespace of a trainer's state
// (model., optimizer., lr_scheduler, dataloader, train_state): torchtitan saves its model keys
// unprefixed, meshtrain as model.<fqn>; with prefix "model." the two compare key for key.
std::string with_model_prefix(const std::string& key, const std::string& prefix);

// ---- comparing two tensors' values ------------------------------------------------------

// torch.allclose's rule: |a - b| <= atol + rtol x |b|, b the reference.
struct ValueTolerance {
  double rtol = 1e-5, atol = 1e-8;
};

// An element of A not exactly equal to B's (equal infinities are equal; NaN never is).
struct UnequalElement {
  size_t index;  // row-major, in the global tensor
  double a, b;
  double diff, bound;  // |a - b| and atol + rtol x |b|
  bool within;         // diff <= bound; false for NaN
};

struct TensorComparison {
  size_t elements = 0;  // compared
  size_t outside = 0;   // beyond the tolerance
  double max_diff = 0;  // the largest |a - b|; infinity where a NaN differs
};

// Tensor `key_a` of `a` against `key_b` of `b` (the reference), element by element. Both are read
// as float64 (read_tensor), so the dtypes may differ: a bfloat16 export compares with the float32
// weights it came from, the dtype being how values are stored, not what they are. The one
// comparison of values behind tensors_match and `meshtest ckpt diff --values`. `on_unequal`, when
// given, sees every element that is not exactly equal, in order. Throws CheckpointError as
// read_tensor does, and when the shapes differ (callers say how, in their own words, first).
TensorComparison compare_tensors(const CheckpointView& a, const std::string& key_a, const CheckpointView& b,
                                 const std::string& key_b, const ValueTolerance& tolerance,
                                 const std::function<void(const UnequalElement&)>& on_unequal = nullptr);

}  // namespace meshtest
