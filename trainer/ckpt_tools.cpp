#include "ckpt_tools.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "flavors.h"
#include "hf_checkpoint.h"

namespace meshtrain {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_metadata(const std::string& step_dir) {
  const std::string path = step_dir + "/.metadata";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("ckpt: no checkpoint at '" + step_dir + "' (cannot read " + path + ")");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error("ckpt: '" + path + "' is not valid metadata: " + e.what());
  }
}

std::string shape_str(const json& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i].get<int64_t>());
  return s + "]";
}

}  // namespace

void ckpt_inspect(const std::string& step_dir, std::ostream& out) {
  const json m = read_metadata(step_dir);
  out << "checkpoint " << step_dir << ": step " << m.value("step", -1) << ", format " << m.value("format_version", 0)
      << ", written under " << m.value("writer_mesh", std::string("?")) << ", key style "
      << m.value("key_style", std::string("canonical")) << "\n";
  int64_t total = 0, tensors = 0;
  std::map<std::string, int64_t> files;
  std::vector<std::string> objects;
  for (const auto& [key, k] : m.at("keys").items()) {
    if (k.value("kind", "") != "tensor") {
      objects.push_back(key);
      continue;
    }
    int64_t bytes = 0;
    for (const auto& c : k.at("chunks")) {
      bytes += c.at("byte_length").get<int64_t>();
      files[c.at("file").get<std::string>()] += c.at("byte_length").get<int64_t>();
    }
    out << "  " << key << "  " << k.value("dtype", "?") << " " << shape_str(k.at("shape")) << "  "
        << k.at("chunks").size() << " chunks  " << bytes << " bytes\n";
    total += bytes, ++tensors;
  }
  out << "objects:";
  for (const auto& o : objects) out << " " << o;
  out << "\nfiles:";
  for (const auto& [f, b] : files) out << " " << f << " (" << b << " bytes)";
  out << "\ntotal: " << tensors << " tensors, " << total << " bytes\n";
}

int ckpt_diff(const std::string& a, const std::string& b, std::ostream& out) {
  const json ka = read_metadata(a).at("keys"), kb = read_metadata(b).at("keys");
  int differences = 0;
  for (const auto& [key, v] : ka.items()) {
    if (!kb.contains(key)) {
      out << "only in " << a << ": " << key << "\n", ++differences;
    } else if (v.value("kind", "") == "tensor" && v.at("shape") != kb[key].at("shape")) {
      out << "shape differs: " << key << " " << shape_str(v.at("shape")) << " vs " << shape_str(kb[key].at("shape")) << "\n";
      ++differences;
    }
  }
  for (const auto& [key, v] : kb.items())
    if (!ka.contains(key)) out << "only in " << b << ": " << key << "\n", ++differences;
  out << (differences ? std::to_string(differences) + " differences\n" : "same keys and shapes\n");
  return differences ? 1 : 0;
}

void ckpt_consolidate(const std::string& step_dir, const std::string& out_path, const std::string& hf_model) {
  const json m = read_metadata(step_dir);
  const fs::path dir = fs::absolute(step_dir);
  const std::string name = dir.filename().string();
  if (name.rfind("step-", 0) != 0) throw std::runtime_error("ckpt: '" + step_dir + "' is not a step-<N> folder");
  const int64_t step = std::stoll(name.substr(5));

  // Load every tensor whole, through the same reader a job uses (checksums included).
  CheckpointConfig config;
  config.folder = dir.parent_path().string();
  CheckpointReader reader(config);
  std::vector<ParamLayout> layouts;
  std::vector<std::string> keys;
  for (const auto& [key, k] : m.at("keys").items()) {
    if (k.value("kind", "") != "tensor") continue;
    ParamLayout l;
    l.name = key;
    l.global_shape = k.at("shape").get<std::vector<int64_t>>();
    l.chunk = local_chunk(l.global_shape, {});
    layouts.push_back(l);
    keys.push_back(key);
  }
  std::vector<CheckpointTensor> tensors;
  for (size_t i = 0; i < layouts.size(); ++i)
    tensors.push_back({keys[i], &layouts[i], torch::zeros(layouts[i].global_shape, torch::kFloat32)});
  reader.load(step, tensors);

  // Each tensor goes out in the dtype it was saved in (an export may be bfloat16).
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto stored = [&](const CheckpointTensor& t) {
    return t.local.to(m.at("keys").at(t.key).value("dtype", "float32") == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
  };
  if (hf_model.empty()) {
    for (const auto& t : tensors) out.emplace_back(t.key, stored(t));
  } else {
    // Model weights only, named and laid out for transformers, with its config.json beside them.
    const ModelArgs a = model_flavor(hf_model);
    torch::ScalarType dtype = torch::kFloat32;
    for (const auto& t : tensors) {
      if (t.key.rfind("model.", 0) != 0) continue;
      const std::string fqn = t.key.substr(6);
      auto w = stored(t);
      dtype = w.scalar_type();
      if (fqn.find("attention.wq.") != std::string::npos || fqn.find("attention.wk.") != std::string::npos)
        w = hf::to_half_split_rope(w, a.head_dim());
      out.emplace_back(hf::name_of(fqn), w);
    }
    std::ofstream(fs::path(out_path).parent_path() / "config.json") << hf::config_json(a, dtype).dump(2) << "\n";
  }
  hf::write_safetensors(out_path, out, {{"format", "pt"}, {"source", step_dir}, {"step", std::to_string(step)}});
}

}  // namespace meshtrain
