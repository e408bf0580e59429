#include "outputs.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "hash.h"

namespace meshtrain {

namespace fs = std::filesystem;

void prepare_dump_folder(const std::string& folder) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw std::runtime_error("cannot create dump folder '" + folder + "': " + ec.message());
  const auto probe = fs::path(folder) / ".meshtrain-write-probe";
  std::ofstream out(probe);
  if (!out) throw std::runtime_error("dump folder '" + folder + "' is not writable: " + std::strerror(errno));
  out.close();
  fs::remove(probe, ec);
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::json& row) {
  out_ << row.dump() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error("write to '" + path_ + "' failed: " + std::strerror(errno));
}

void write_json(const std::string& path, const nlohmann::json& value) {
  // Write then rename, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << value.dump(2) << '\n';
    if (!out) throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(errno));
  }
  fs::rename(tmp, path);
}

void write_state_dict_keys(const std::string& path, const std::vector<KeyInfo>& tensors,
                           const std::vector<std::string>& objects) {
  nlohmann::json keys = nlohmann::json::object();
  for (const auto& t : tensors) keys[t.key] = {{"kind", "tensor"}, {"shape", t.shape}, {"dtype", t.dtype}};
  for (const auto& o : objects) keys[o] = {{"kind", "object"}};
  write_json(path, {{"format_version", kOutputsFormatVersion}, {"keys", keys}});
}

Digest digest_of(const std::string& key, const torch::Tensor& global) {
  auto t = global.detach().to(torch::kCPU, torch::kFloat64);
  return Digest{key, t.sum().item<double>(), t.norm().item<double>(), t.numel()};
}

nlohmann::json local_digest(const torch::Tensor& piece, const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& sizes) {
  auto t = piece.detach().to(torch::kCPU).contiguous();
  const uint64_t h = fnv1a64(t.data_ptr(), t.nbytes());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  auto d = t.to(torch::kFloat64);
  return {{"offsets", offsets}, {"sizes", sizes}, {"sum", d.sum().item<double>()},
          {"l2", d.norm().item<double>()}, {"fnv1a64", hex}};
}

void write_param_digest(const std::string& path, int64_t step, const std::vector<Digest>& digests) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& d : digests) params[d.key] = {{"sum", d.sum}, {"l2", d.l2}, {"numel", d.numel}};
  write_json(path, {{"format_version", kOutputsFormatVersion}, {"step", step}, {"params", params}});
}

std::string dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kInt64: return "int64";
    case torch::kInt32: return "int32";
    default: return c10::toString(t);
  }
}

int64_t host_peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace meshtrain
