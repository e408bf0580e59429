// `meshtest ckpt inspect|diff`: look inside PyTorch DCP and meshtrain checkpoints without a
// trainer, LibTorch or Python. Both read through CheckpointView (checkpoint_view.h).
#pragma once

#include <cstdio>
#include <string>

namespace meshtest {

struct CkptOptions {
  long long step = -1;       // with a folder of step-<N>: which one (-1: the newest complete)
  bool json = false;         // inspect: one JSON document instead of the table
  std::string model_prefix;  // diff: added to keys outside model./optimizer./... on both sides
  bool values = false;       // diff: also compare common tensors element by element, across dtypes
  double rtol = 1e-5, atol = 1e-8;
};

// Every key with kind, dtype, global shape, chunks and bytes; the format and warnings; for
// meshtrain's format also the step, format version, writer's mesh, key style and bytes per file
// (what `meshtrain ckpt inspect` printed before it moved here). Returns 0.
int ckpt_inspect(const std::string& path, const CkptOptions& options, std::FILE* out);
// Keys only in A or B, dtype and shape differences, and with `values` the largest element
// difference per common tensor. With `values` tensors of another dtype are compared all the
// same (both read as float64, as tensors_match does) and the dtype is a note on their line, not a
// difference. Returns 0 when nothing differs, 1 otherwise.
int ckpt_diff(const std::string& a, const std::string& b, const CkptOptions& options, std::FILE* out);

}  // namespace meshtest
