// Hugging Face safetensors, read natively: one file is an 8-byte little-endian header length,
// a JSON header ({name: {dtype, shape, data_offsets}}, and `__metadata__`), then the raw bytes;
// a sharded save is `model.safetensors.index.json` whose weight_map names the file of each tensor.
// Everything the header and index say is checked against the files before a byte is read: a
// truncated header, a header length past the file's end, offsets outside the data or not matching
// the shape, a shard the index names that is missing, each an error naming the file and the key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "readers/checkpoint_error.h"

namespace meshtest::safetensors {

struct Tensor {
  std::string key;
  std::string dtype;  // meshtest's name ("float32", "bfloat16", ...), as element_to_double reads it
  std::vector<int64_t> shape;
  std::string file;     // the .safetensors file holding it
  uint64_t offset = 0;  // of its first byte in `file` (after the header)
  uint64_t length = 0;  // bytes
};

struct Checkpoint {
  std::string path;                             // what was opened: a file or a folder
  std::vector<Tensor> tensors;                  // sorted by key
  std::map<std::string, std::string> metadata;  // each file's `__metadata__` (string values), merged
  std::vector<std::string> files;               // the .safetensors files read, in order
  // Each file's data region: [first byte after the header, file size).
  std::map<std::string, std::pair<uint64_t, uint64_t>> data_regions;
};

// `path`: a `.safetensors` file, or a folder holding `model.safetensors` or
// `model.safetensors.index.json` with its shards. Throws CheckpointError.
Checkpoint open(const std::string& path);

// Whether `path` is a file or folder open() reads (by name only, nothing is parsed).
bool is_safetensors(const std::string& path);

// The tensor's elements, row-major, as float64. Throws CheckpointError.
std::vector<double> read(const Tensor& tensor);

// Every byte of every file's data region in exactly one tensor (the format allows no holes and
// no sharing): throws CheckpointError naming the file and the bytes no tensor, or two, claim.
void check_data_covered(const Checkpoint& checkpoint);

}  // namespace meshtest::safetensors
