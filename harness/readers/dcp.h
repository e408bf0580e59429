// PyTorch Distributed Checkpoint (DCP) step folders, read without Python or LibTorch.
//
// `.metadata` is a pickle of torch.distributed.checkpoint.metadata.Metadata; it is parsed by
// pickle.h (nothing executed) and interpreted here by class name, whatever the module path (torch
// moved TensorProperties between releases). Globals this file does not know are reported as
// warnings. Each tensor chunk's record in a `.distcp` file is a complete torch.save zip (STORED
// entries, ZIP64 aware) whose `data.pkl` names the storage, offset, size and strides.
//
// Promises: every failure is a CheckpointError naming the file and, where known, the key; files
// are read with 64-bit pread at the needed ranges only; nothing is allocated before the length
// behind it has been checked against the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "readers/checkpoint_error.h"
#include "readers/stored_bytes.h"
#include "readers/pickle.h"

namespace meshtest::dcp {

// "[4, 2]", for messages about shapes and chunk boxes.
std::string dims_text(const std::vector<int64_t>& dims);
// The element count of a shape whose product was already checked against overflow.
int64_t numel_of(const std::vector<int64_t>& dims);

// Where one record's bytes lie in the step folder.
struct Record {
  std::string file;  // relative_path
  uint64_t offset = 0, length = 0;
  std::string transforms;  // transform_descriptors, when the writer applied any (unsupported)
};

// One chunk of a tensor: its box in the global tensor and the record that stores it.
struct Chunk {
  std::vector<int64_t> offsets, sizes;
  bool has_record = false;
  Record record;
};

struct Item {
  std::string key;
  bool is_tensor = false;
  std::string dtype;  // "float32", "bfloat16", ...; "" for bytes items
  std::vector<int64_t> shape;
  std::vector<Chunk> chunks;    // tensors
  std::vector<Record> records;  // bytes items: the torch.save'd objects
};

struct Metadata {
  std::string version;      // Metadata.version ("1.0.0"), "" when absent
  std::vector<Item> items;  // sorted by key
  std::vector<std::string> warnings;
};

// Interprets a parsed `.metadata`. `file_label` names it in errors and warnings.
Metadata interpret_metadata(const pickle::Pickle& metadata, const std::string& file_label);
// Reads, parses and interprets `<step_dir>/.metadata`.
Metadata read_metadata(const std::string& step_dir);

// Checks, before anything large is allocated, that every chunk of a tensor item has a record,
// that the record lies inside its file and is long enough for the chunk's elements.
void check_chunk_records(const std::string& step_dir, const Item& item);
// Refuses a record's relative_path that leaves the step folder (absolute, or through "..").
void check_record_path(const std::string& step_dir, const std::string& file);
// One chunk's values as float64 in the chunk's own row-major order (its `sizes`), from the
// torch.save zip of its record.
std::vector<double> read_chunk(const std::string& step_dir, const Item& item, const Chunk& chunk);

}  // namespace meshtest::dcp
