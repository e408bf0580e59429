#include "ckpt_tools.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "flavors.h"

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

namespace {

// Hugging Face transformers' LlamaForCausalLM name for a meshtrain model parameter.
std::string hf_name(std::string fqn) {
  const std::string wrapped = ".parametrizations.weight.original";  // parametrize-style keys
  if (auto at = fqn.find(wrapped); at != std::string::npos) fqn.replace(at, wrapped.size(), ".weight");
  static const std::vector<std::pair<std::string, std::string>> parts = {
      {"attention.wq.", "self_attn.q_proj."},     {"attention.wk.", "self_attn.k_proj."},
      {"attention.wv.", "self_attn.v_proj."},     {"attention.wo.", "self_attn.o_proj."},
      {"feed_forward.w1.", "mlp.gate_proj."},     {"feed_forward.w2.", "mlp.down_proj."},
      {"feed_forward.w3.", "mlp.up_proj."},       {"attention_norm.", "input_layernorm."},
      {"ffn_norm.", "post_attention_layernorm."}};
  if (fqn == "tok_embeddings.weight") return "model.embed_tokens.weight";
  if (fqn == "norm.weight") return "model.norm.weight";
  if (fqn == "output.weight") return "lm_head.weight";
  for (const auto& [from, to] : parts)
    if (auto at = fqn.find(from); at != std::string::npos && fqn.rfind("layers.", 0) == 0)
      return "model." + fqn.replace(at, from.size(), to);
  throw std::runtime_error("ckpt: no Hugging Face name for parameter '" + fqn + "'");
}

// meshtrain (like Meta's Llama and torchtitan) rotates adjacent pairs (x[2i], x[2i+1]);
// transformers rotates the two halves of each head. Reordering the rows of wq and wk
// per head, as transformers' convert_llama_weights_to_hf.py does, makes them agree.
torch::Tensor to_half_split_rope(const torch::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.size(1);
  return w.view({heads, rows / heads / 2, 2, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}

}  // namespace

void ckpt_consolidate(const std::string& step_dir, const std::string& out_path, const std::string& hf_model) {
  const json m = read_metadata(step_dir);
  const fs::path dir = fs::absolute(step_dir);
  const std::string name = dir.filename().string();
  if (name.rfind("step-", 0) != 0) throw std::runtime_error("ckpt: '" + step_dir + "' is not a step-<N> folder");
  const int64_t step = std::stoll(name.substr(5));

  // Load every tensor whole, through the same reader a job uses (checksums included).
  CheckpointConfig config;
  config.folder = dir.parent_path().string();
  MeshGroups single;  // one rank, no groups: load() needs no collective
  Checkpointer reader(config, single, 0);
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

  if (!hf_model.empty()) {
    // Model weights only, named and laid out for transformers, with its config.json beside them.
    const ModelArgs a = model_flavor(hf_model);
    std::vector<CheckpointTensor> hf;
    for (auto& t : tensors) {
      if (t.key.rfind("model.", 0) != 0) continue;
      const std::string fqn = t.key.substr(6);
      auto w = t.local;
      if (fqn.find("attention.wq.") != std::string::npos) w = to_half_split_rope(w, a.n_heads);
      if (fqn.find("attention.wk.") != std::string::npos) w = to_half_split_rope(w, a.n_kv_heads);
      hf.push_back({hf_name(fqn), t.layout, w});
    }
    tensors = std::move(hf);
    const json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                         {"hidden_size", a.dim}, {"intermediate_size", a.ffn_hidden_dim()},
                         {"num_hidden_layers", a.n_layers}, {"num_attention_heads", a.n_heads},
                         {"num_key_value_heads", a.n_kv_heads}, {"head_dim", a.head_dim()},
                         {"vocab_size", a.vocab_size}, {"rms_norm_eps", a.norm_eps}, {"rope_theta", a.rope_theta},
                         {"max_position_embeddings", 8192}, {"tie_word_embeddings", false},
                         {"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false},
                         {"torch_dtype", "float32"}};
    std::ofstream(fs::path(out_path).parent_path() / "config.json") << config.dump(2) << "\n";
  }

  // safetensors: u64 little-endian header length, JSON header, then the raw data.
  json header = json::object();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t bytes = static_cast<int64_t>(t.local.nbytes());
    header[t.key] = {{"dtype", "F32"}, {"shape", t.layout->global_shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}, {"source", step_dir}, {"step", std::to_string(step)}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("ckpt: cannot write '" + out_path + "'");
  uint64_t n = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out << text;
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.local.data_ptr()), static_cast<std::streamsize>(t.local.nbytes()));
  if (!out) throw std::runtime_error("ckpt: writing '" + out_path + "' failed");
}

}  // namespace meshtrain
