#include "components/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "contract/checkpoint_format.h"
#include "contract/model_names.h"
#include "contract/state_keys.h"
#include "base/faults.h"

namespace meshtrain::hf {

namespace fs = std::filesystem;
namespace names = contract::model_names;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
};
const std::vector<DtypeInfo>& safetensors_dtypes() {
  static const std::vector<DtypeInfo> table = {
      {"F32", torch::kFloat32}, {"BF16", torch::kBFloat16}, {"F16", torch::kFloat16}};
  return table;
}

// One opened safetensors file: its header, and reads of byte ranges of its data.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("initial load: cannot open '" + path_ + "': " + std::strerror(errno));
    unsigned char le[8];
    read_at(0, 8, reinterpret_cast<char*>(le), "the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | le[i];
    const auto file_size = static_cast<uint64_t>(fs::file_size(path_));
    if (n > file_size - 8)
      fail("initial load: '" + path_ + "' is not a safetensors file (header length " + std::to_string(n) + ")");
    std::string text(n, '\0');
    read_at(8, static_cast<int64_t>(n), text.data(), "the header");
    header_ = json::parse(text, nullptr, false);
    if (!header_.is_object()) fail("initial load: '" + path_ + "': the safetensors header is not a JSON object");
    data_start_ = 8 + static_cast<int64_t>(n);
    data_size_ = static_cast<int64_t>(file_size) - data_start_;
  }
  ~SafetensorsFile() { ::close(fd_); }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const json& header() const { return header_; }
  int64_t data_size() const { return data_size_; }

  // `bytes` bytes at `offset` within the data section.
  void read_data(int64_t offset, int64_t bytes, char* out, const std::string& key) {
    read_at(data_start_ + offset, bytes, out, "key '" + key + "'");
    bytes_read_ += bytes;
  }
  int64_t bytes_read() const { return bytes_read_; }

 private:
  void read_at(int64_t offset, int64_t bytes, char* out, const std::string& what) {
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_, out, static_cast<size_t>(bytes), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("initial load: '" + path_ + "' is truncated (reading " + what + ")");
      out += n, offset += n, bytes -= n;
    }
  }

  std::string path_;
  int fd_ = -1;
  json header_;
  int64_t data_start_ = 0, data_size_ = 0;
  int64_t bytes_read_ = 0;
};

// Which file holds each tensor name: one model.safetensors, or the shards an index names.
std::map<std::string, std::string> files_of(const std::string& path) {
  std::map<std::string, std::string> where;  // name -> file; "" key: the one file for all
  const fs::path p(path);
  if (!fs::is_directory(p)) {
    if (!fs::exists(p)) fail("initial load: no Hugging Face checkpoint at '" + path + "'");
    where[""] = path;
    return where;
  }
  const fs::path index = p / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    const json j = json::parse(in, nullptr, false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("initial load: '" + index.string() + "' has no weight_map object");
    for (const auto& [name, file] : j["weight_map"].items()) where[name] = (p / file.get<std::string>()).string();
    return where;
  }
  if (!fs::exists(p / "model.safetensors"))
    fail("initial load: '" + path + "' holds neither model.safetensors nor model.safetensors.index.json");
  where[""] = (p / "model.safetensors").string();
  return where;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string name_of(std::string fqn) {
  fqn = contract::canonical_key(fqn);  // parametrize-style keys name the same weights
  using names::path;
  // meshtrain's module paths and transformers' (LlamaForCausalLM): the model's ends, a layer's parts.
  static const std::vector<std::pair<std::string, std::string>> ends = {
      {path({names::kEmbedding, names::kWeight}), "model.embed_tokens.weight"},
      {path({names::kNorm, names::kWeight}), "model.norm.weight"},
      {path({names::kOutput, names::kWeight}), "lm_head.weight"}};
  static const std::vector<std::pair<std::string, std::string>> parts = {
      {path({names::kAttention, names::kWq}), "self_attn.q_proj"},
      {path({names::kAttention, names::kWk}), "self_attn.k_proj"},
      {path({names::kAttention, names::kWv}), "self_attn.v_proj"},
      {path({names::kAttention, names::kWo}), "self_attn.o_proj"},
      {path({names::kFeedForward, names::kW1}), "mlp.gate_proj"},
      {path({names::kFeedForward, names::kW2}), "mlp.down_proj"},
      {path({names::kFeedForward, names::kW3}), "mlp.up_proj"},
      {names::kAttentionNorm, "input_layernorm"},
      {names::kFfnNorm, "post_attention_layernorm"}};
  for (const auto& [from, to] : ends)
    if (fqn == from) return to;
  if (fqn.rfind(std::string(names::kLayers) + ".", 0) == 0)
    for (const auto& [from, to] : parts)
      if (auto at = fqn.find("." + from + "."); at != std::string::npos)
        return "model." + fqn.replace(at + 1, from.size(), to);
  fail("no Hugging Face name for parameter '" + fqn + "'");
}

bool is_rope_rotated(const std::string& fqn) {
  return names::goes_through(fqn, names::path({names::kAttention, names::kWq})) ||
         names::goes_through(fqn, names::path({names::kAttention, names::kWk}));
}

int64_t rope_row(int64_t row, int64_t head_dim) {
  if (injected(Fault::kHfRowsNotReordered)) return row;
  const int64_t head = row / head_dim, within = row % head_dim;
  return head * head_dim + (within % 2) * (head_dim / 2) + within / 2;
}

torch::Tensor to_half_split_rope(const torch::Tensor& w, int64_t head_dim) {
  const int64_t rows = w.size(0), cols = w.size(1);
  return w.view({rows / head_dim, head_dim / 2, 2, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}

json config_json(const ModelArgs& a, torch::ScalarType dtype) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", a.dim},
          {"intermediate_size", a.ffn_hidden_dim()},
          {"num_hidden_layers", a.n_layers},
          {"num_attention_heads", a.n_heads},
          {"num_key_value_heads", a.n_kv_heads},
          {"head_dim", a.head_dim()},
          {"vocab_size", a.vocab_size},
          {"rms_norm_eps", a.norm_eps},
          {"rope_theta", a.rope_theta},
          {"max_position_embeddings", 8192},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"torch_dtype", dtype == torch::kBFloat16 ? "bfloat16" : "float32"}};
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const json& metadata) {
  json header = json::object();
  int64_t offset = 0;
  std::vector<torch::Tensor> data;
  for (const auto& [name, t] : tensors) {
    const char* dtype = nullptr;
    for (const auto& d : safetensors_dtypes())
      if (d.type == t.scalar_type()) dtype = d.name;
    if (dtype == nullptr) fail("safetensors: no dtype name for " + std::string(c10::toString(t.scalar_type())));
    data.push_back(t.detach().to(torch::kCPU).contiguous());
    const int64_t bytes = static_cast<int64_t>(data.back().nbytes());
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("safetensors: cannot write '" + tmp + "'");
    const uint64_t n = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out << text;
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    out.flush();
    if (!out) fail("safetensors: writing '" + tmp + "' failed");
  }
  fs::rename(tmp, path);
}

int64_t load(const std::string& path, const ModelArgs& args, const std::vector<CheckpointTensor>& tensors) {
  const auto files = files_of(path);
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open;
  auto file_for = [&](const std::string& name) -> SafetensorsFile& {
    auto it = files.find(files.count("") ? std::string() : name);
    if (it == files.end()) fail("initial load: '" + path + "': the index names no file for '" + name + "'");
    auto& f = open[it->second];
    if (!f) f = std::make_unique<SafetensorsFile>(it->second);
    return *f;
  };
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    const std::string fqn = contract::state_keys::model_fqn(t.key).value_or(t.key);
    const std::string name = name_of(fqn);
    SafetensorsFile& file = file_for(name);
    const json& h = file.header();
    if (!h.contains(name)) fail("initial load: '" + file.path() + "' has no tensor '" + name + "' (for " + t.key + ")");
    const json& e = h[name];
    const std::string dtype = e.value("dtype", "");
    const DtypeInfo* info = nullptr;
    for (const auto& d : safetensors_dtypes())
      if (d.name == dtype) info = &d;
    if (info == nullptr)
      fail("initial load: '" + file.path() + "': '" + name + "' has dtype " + dtype + " (known: F32, BF16, F16)");
    const auto shape = e.at("shape").get<std::vector<int64_t>>();
    if (shape != t.layout->global_shape)
      fail("initial load: '" + file.path() + "': '" + name + "' has shape " + shape_text(shape) + ", meshtrain's " +
           t.key + " is " + shape_text(t.layout->global_shape) + " (a different model flavor?)");
    const int64_t elem = static_cast<int64_t>(c10::elementSize(info->type));
    const int64_t begin = e.at("data_offsets").at(0).get<int64_t>(), end = e.at("data_offsets").at(1).get<int64_t>();
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    if (begin < 0 || end - begin != numel * elem || end > file.data_size())
      fail("initial load: '" + file.path() + "': '" + name + "' has data_offsets [" + std::to_string(begin) + ", " +
           std::to_string(end) + "] that do not fit its shape or the file");

    // This rank's rows, one read per row (a row's columns are contiguous in the file).
    const Chunk& want = t.layout->chunk;
    auto local = torch::empty(want.sizes, info->type);
    auto* out = static_cast<char*>(local.data_ptr());
    if (shape.size() == 1) {
      file.read_data(begin + want.offsets[0] * elem, want.sizes[0] * elem, out, name);
    } else if (shape.size() == 2) {
      const bool reordered = is_rope_rotated(fqn);
      const int64_t cols = shape[1], row_bytes = want.sizes[1] * elem;
      for (int64_t i = 0; i < want.sizes[0]; ++i) {
        const int64_t row = want.offsets[0] + i;
        const int64_t src = reordered ? rope_row(row, args.head_dim()) : row;
        file.read_data(begin + (src * cols + want.offsets[1]) * elem, row_bytes, out + i * row_bytes, name);
      }
    } else {
      fail("initial load: '" + name + "' has " + std::to_string(shape.size()) + " dimensions; meshtrain's have 1 or 2");
    }
    t.local.copy_(local.view(t.local.sizes()));
  }
  int64_t bytes = 0;
  for (const auto& [p, f] : open) bytes += f->bytes_read();
  return bytes;
}

}  // namespace meshtrain::hf
