// meshtrain's checkpoint format (docs/checkpoint.md), the one definition both sides use:
// meshtrain writes and loads it (trainer/components/checkpoint.cpp), meshtest reads it without LibTorch
// (harness/readers/checkpoint_view.cpp). It covers what a step folder is called, the `.metadata`
// JSON schema, the chunks' leaf checksums and the two key styles. Reading and writing the
// data files is each side's business; what the bytes mean is decided here.
//
// Promises: parse_metadata accepts only what to_json could have written (integers where the
// writer writes integers, chunks inside their tensor, files inside the step folder), and every
// error it throws names the metadata file and, where there is one, the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace contract {

// 1: FNV-1a per 4 KiB block, in the metadata (refused). 2: leaf checksums after each chunk.
constexpr int kCheckpointFormatVersion = 2;

// Thrown for metadata that is not format 2; the message names the file and, where known, the key.
class CheckpointFormatError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- step folders -----------------------------------------------------------------------------

// The file inside a step folder that makes it complete; written last.
constexpr std::string_view kMetadataFile = ".metadata";

// "step-<N>": a saved step.
std::string step_folder_name(int64_t step);
// N for "step-<N>" (N decimal digits only, at most 18 of them); nullopt for any other name.
std::optional<int64_t> parse_step_folder_name(std::string_view name);
// ".tmp-step-<N>": a save in progress, or one that died; never loaded.
std::string temp_step_folder_name(int64_t step);
// The data file rank R writes its chunks to: "__<R>_0.distcp".
std::string data_file_name(int rank);

// The step-<N> folders of a checkpoint folder: step -> complete (has .metadata). Empty when
// the folder does not exist.
std::map<int64_t, bool> list_step_folders(const std::string& folder);
// The newest complete step of a checkpoint folder, if any.
std::optional<int64_t> latest_complete_step(const std::string& folder);

// ---- chunk data and its checksums ---------------------------------------------------------------

constexpr int64_t kMinLeafBytes = 64, kMaxLeafBytes = 4096;
constexpr int64_t kChecksumBytes = 8;  // one little-endian uint64 per leaf

// Checksum granularity of a chunk: an eighth of its innermost row, so a reshard that splits
// rows over up to 8 ranks reads whole leaves; a power of two from 64 bytes (the 1/8 overhead of
// small models) to 4 KiB (1/512 for wide rows).
int64_t leaf_bytes_for(const std::vector<int64_t>& chunk_sizes, int64_t element_bytes);
// How many leaves `length` bytes have (the last may be short). Never overflows, so a damaged
// leaf_bytes near 2^64 cannot make it 0 and skip the checksums.
uint64_t leaf_count(uint64_t length, uint64_t leaf_bytes);
// The checksum of one leaf: mix64 (contract/hash.h).
uint64_t leaf_checksum(const void* data, size_t size);

// Bytes per element of a stored dtype: 4 for "float32", 2 for "bfloat16" (a model-only
// export), 0 for anything else.
int64_t dtype_bytes(std::string_view dtype);
constexpr std::string_view kKnownDtypes = "float32, bfloat16";

// ---- the .metadata document -----------------------------------------------------------------------

// Where one chunk of a tensor sits in the global tensor and in the step folder.
struct SavedChunk {
  std::vector<int64_t> offsets, sizes;  // in the global tensor
  std::string file;                     // relative to the step folder
  uint64_t byte_offset = 0, byte_length = 0;
  // The chunk's leaf checksums start at hash_offset in `file`. Format 2 always writes them;
  // a reader that meets a chunk without them reads it unchecked.
  bool has_checksums = false;
  uint64_t leaf_bytes = 0, hash_offset = 0;
};

// One state-dict key: a tensor stored in chunks, or a small JSON object (train_state,
// lr_scheduler, dataloader.dp_rank_<i>).
struct SavedKey {
  std::string kind;  // "tensor", "object", or a kind a newer writer added (listed, not read)
  // kind "tensor":
  std::string dtype;  // "float32" or "bfloat16"; a reader refuses others when it reads the data
  std::vector<int64_t> shape;
  std::vector<SavedChunk> chunks;
  // kind "object":
  nlohmann::json value;

  bool is_tensor() const { return kind == "tensor"; }
  bool is_object() const { return kind == "object"; }
  uint64_t stored_bytes() const;  // byte_length over all chunks
};

struct CheckpointMetadata {
  int format_version = kCheckpointFormatVersion;
  int64_t step = -1;        // -1: not recorded
  std::string writer_mesh;  // the mesh that saved it, e.g. "pp=1,dp_replicate=1,dp_shard=4,cp=1,tp=1"
  std::string key_style = "canonical";
  std::map<std::string, SavedKey> keys;
};

// `text` is the content of the file `path` (named in every error). Throws CheckpointFormatError.
CheckpointMetadata parse_metadata(std::string_view text, const std::string& path);
// The same for a document already parsed as JSON.
CheckpointMetadata metadata_from_json(const nlohmann::json& doc, const std::string& path);
nlohmann::json to_json(const CheckpointMetadata& metadata);

// A chunk as a writer's per-rank plan holds it (the .metadata fields of one chunk), and back.
nlohmann::json to_json(const SavedChunk& chunk);
// `where` names the file and key in errors.
SavedChunk parse_chunk(const nlohmann::json& chunk, const std::string& where);

// "[258, 64]": shapes and offsets in messages.
std::string dims_text(const std::vector<int64_t>& dims);
// "key '<key>'", cut at 200 characters: keys are short in practice, a damaged file's may not be.
std::string key_label(const std::string& key);

// ---- state-dict keys --------------------------------------------------------------------------------

// The namespaces a trainer's state-dict keys start with (torchtitan's flattened paths):
// model.<fqn>, optimizer.state.<fqn>.exp_avg(_sq), lr_scheduler, dataloader.dp_rank_<i>, train_state.
bool has_state_namespace(std::string_view key);

// --checkpoint.key-style parametrize: torch.nn.utils.parametrize renames a wrapped weight of
// module m to m.parametrizations.weight.original, as SimpleFSDP's checkpoints were named before
// torchtitan #1273. Keys without ".weight" are unchanged.
std::string parametrize_key(const std::string& canonical);
// The inverse (--checkpoint.key-map parametrize-to-canonical); canonical keys are unchanged.
std::string canonical_key(const std::string& key);

}  // namespace contract
