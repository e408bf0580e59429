#include "components/ckpt_tools.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "components/checkpoint.h"
#include "contract/checkpoint_format.h"
#include "contract/state_keys.h"
#include "model/flavors.h"
#include "components/hf_checkpoint.h"

namespace meshtrain {

namespace fs = std::filesystem;

namespace {

contract::CheckpointMetadata read_metadata(const std::string& step_dir) {
  const std::string path = step_dir + "/" + std::string(contract::kMetadataFile);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("ckpt: no checkpoint at '" + step_dir + "' (cannot read " + path + ")");
  std::stringstream text;
  text << in.rdbuf();
  return contract::parse_metadata(text.str(), path);
}

}  // namespace

void ckpt_consolidate(const std::string& step_dir, const std::string& out_path, const std::string& hf_model) {
  const contract::CheckpointMetadata m = read_metadata(step_dir);
  const fs::path dir = fs::absolute(step_dir).lexically_normal();
  const auto step = contract::parse_step_folder_name(dir.filename().string());
  if (!step) throw std::runtime_error("ckpt: '" + step_dir + "' is not a step-<N> folder");

  // Load every tensor whole, through the same reader a job uses (checksums included).
  CheckpointConfig config;
  config.folder = dir.parent_path().string();
  CheckpointReader reader(config);
  std::vector<ParamLayout> layouts;
  std::vector<std::string> keys;
  for (const auto& [key, k] : m.keys) {
    if (!k.is_tensor()) continue;
    ParamLayout l;
    l.name = key;
    l.global_shape = k.shape;
    l.chunk = local_chunk(l.global_shape, {});
    layouts.push_back(l);
    keys.push_back(key);
  }
  std::vector<CheckpointTensor> tensors;
  for (size_t i = 0; i < layouts.size(); ++i)
    tensors.push_back({keys[i], &layouts[i], torch::zeros(layouts[i].global_shape, torch::kFloat32)});
  reader.load(*step, tensors);

  // Each tensor goes out in the dtype it was saved in (an export may be bfloat16).
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto stored = [&](const CheckpointTensor& t) {
    return t.local.to(m.keys.at(t.key).dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
  };
  if (hf_model.empty()) {
    for (const auto& t : tensors) out.emplace_back(t.key, stored(t));
  } else {
    // Model weights only, named and laid out for transformers, with its config.json beside them.
    const ModelArgs a = model_flavor(hf_model);
    torch::ScalarType dtype = torch::kFloat32;
    for (const auto& t : tensors) {
      const auto model_fqn = contract::state_keys::model_fqn(t.key);
      if (!model_fqn) continue;
      const std::string& fqn = *model_fqn;
      auto w = stored(t);
      dtype = w.scalar_type();
      if (hf::is_rope_rotated(fqn)) w = hf::to_half_split_rope(w, a.head_dim());
      out.emplace_back(hf::name_of(fqn), w);
    }
    std::ofstream(fs::path(out_path).parent_path() / "config.json") << hf::config_json(a, dtype).dump(2) << "\n";
  }
  hf::write_safetensors(out_path, out, {{"format", "pt"}, {"source", step_dir}, {"step", std::to_string(*step)}});
}

}  // namespace meshtrain
