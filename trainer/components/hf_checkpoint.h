// Hugging Face transformers' LlamaForCausalLM layout of meshtrain's model: parameter names,
// the row order of wq and wk (transformers rotates the two halves of each head, meshtrain
// adjacent pairs), config.json, and safetensors files. `ckpt consolidate --hf` and the
// final save of `--checkpoint.last-save-in-hf` write it; `--checkpoint.initial-load-in-hf`
// reads it back, each rank only the rows of its own pieces.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "components/checkpoint.h"
#include "model/flavors.h"

namespace meshtrain::hf {

// transformers' name for a meshtrain parameter ("layers.0.attention.wq.weight" ->
// "model.layers.0.self_attn.q_proj.weight"); throws for a parameter it has no name for.
std::string name_of(std::string fqn);

// Whether the parameter is attention's wq or wk, whose rows rotary embedding pairs differently
// in meshtrain (interleaved, as torchtitan) and in transformers (half split).
bool is_rope_rotated(const std::string& fqn);
// Row `row` of meshtrain's wq or wk holds what row rope_row(row, head_dim) of transformers'
// holds: within each head, pair i's two rows 2i and 2i+1 go to i and i + head_dim/2.
int64_t rope_row(int64_t row, int64_t head_dim);
// A whole wq or wk reordered for transformers.
torch::Tensor to_half_split_rope(const torch::Tensor& w, int64_t head_dim);

nlohmann::json config_json(const ModelArgs& args, torch::ScalarType dtype);

// One safetensors file: u64 little-endian header length, the JSON header, the raw data.
// Tensors are written in their own dtype (float32 or bfloat16). Written to a temporary
// name and renamed, so a reader never sees half a file.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const nlohmann::json& metadata);

// Fills each tensor's local chunk (keys "model.<fqn>") from a Hugging Face checkpoint: a
// folder with model.safetensors or with model.safetensors.index.json and its shards, or one
// .safetensors file. Reads only the rows this rank's chunks cover and returns the bytes read.
// Throws naming the file and the key for anything missing, misshapen or out of its file.
int64_t load(const std::string& path, const ModelArgs& args, const std::vector<CheckpointTensor>& tensors);

}  // namespace meshtrain::hf
