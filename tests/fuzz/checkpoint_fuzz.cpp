// libFuzzer: meshtrain's own checkpoint format (docs/checkpoint.md) through CheckpointView, the
// torch-free reader behind the checkpoint checks and `meshtest ckpt`. The input is one step
// folder: its `.metadata` (JSON) and its one data file `__0_0.distcp` (the name meshtrain gives
// rank 0's file, which the seeds' chunks refer to), split at the first 0xFF byte, which JSON text
// never holds. The view is opened, and every tensor entry read whole. Only CheckpointError may
// come out (checkpoint_view.h, dcp.h); any other exception, a crash, undefined behaviour, a hang
// or an allocation out of proportion to the input is a finding. A `.metadata` starting with 0x80
// goes to the PyTorch DCP reader instead, which keeps the same promise (pickle_fuzz covers it).
// Seeds: tests/fuzz/corpus/checkpoint_fuzz/, cut from a one-rank `tiny` checkpoint
// (make_checkpoint_seeds.py).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "readers/checkpoint_view.h"

namespace fs = std::filesystem;

namespace {

// One checkpoint folder per process, holding step-1/; rewritten for every input, removed at exit.
class Scratch {
 public:
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "checkpoint-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    root_ = tmpl;
    fs::create_directory(step_dir());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const fs::path& root() const { return root_; }
  fs::path step_dir() const { return root_ / "step-1"; }

 private:
  fs::path root_;
};

void write(const fs::path& file, const uint8_t* data, size_t size) {
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Scratch scratch;
  size_t split = 0;
  while (split < size && data[split] != 0xFF) ++split;
  write(scratch.step_dir() / ".metadata", data, split);
  const size_t rest = split < size ? split + 1 : size;
  write(scratch.step_dir() / "__0_0.distcp", data + rest, size - rest);
  try {
    // The parent folder, so that finding the newest complete step-<N> is fuzzed too.
    const meshtest::CheckpointView view = meshtest::CheckpointView::open(scratch.root().string());
    (void)view.warnings();
    for (const meshtest::CheckpointEntry& e : view.entries()) {
      if (!e.is_tensor) continue;
      // One damaged tensor must not hide the others: each is read on its own.
      try {
        const std::vector<double> values = view.read_tensor(e.key);
        size_t numel = 1;
        for (int64_t d : e.shape) numel *= static_cast<size_t>(d);
        if (values.size() != numel) std::abort();  // a tensor read whole has its shape's elements
      } catch (const meshtest::CheckpointError&) {
      }
    }
  } catch (const meshtest::CheckpointError&) {
  }
  return 0;
}
