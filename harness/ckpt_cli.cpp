#include "ckpt_cli.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "readers/checkpoint_view.h"

namespace meshtest {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) { return nlohmann::json(shape).dump(); }

// Keys as compared: with the model prefix; two keys that become one are refused, as in checks.
std::map<std::string, const CheckpointEntry*> by_mapped_key(const CheckpointView& v, const std::string& prefix) {
  std::map<std::string, const CheckpointEntry*> out;
  for (const auto& e : v.entries()) {
    auto [it, fresh] = out.emplace(with_model_prefix(e.key, prefix), &e);
    if (!fresh)
      throw CheckpointError(v.step_dir() + ": --model-prefix maps both '" + it->second->key + "' and '" + e.key +
                            "' to '" + it->first + "'");
  }
  return out;
}

}  // namespace

int ckpt_inspect(const std::string& path, const CkptOptions& options, std::FILE* out) {
  const CheckpointView v = CheckpointView::open(path, options.step);
  if (options.json) {
    nlohmann::json j = {{"step_dir", v.step_dir()}, {"format", v.format()}, {"warnings", v.warnings()}};
    if (!v.about().empty()) j["about"] = v.about(), j["files"] = v.files();
    j["keys"] = nlohmann::json::object();
    for (const auto& e : v.entries()) {
      nlohmann::json k = {{"kind", e.is_tensor ? "tensor" : "bytes"}, {"chunks", e.chunks}, {"bytes", e.bytes}};
      if (e.is_tensor) k["dtype"] = e.dtype, k["shape"] = e.shape;
      j["keys"][e.key] = k;
    }
    std::fprintf(out, "%s\n", j.dump(2).c_str());
    return 0;
  }
  std::fprintf(out, "%s (%s)\n", v.step_dir().c_str(), v.format().c_str());
  if (!v.about().empty()) std::fprintf(out, "  %s\n", v.about().c_str());
  uint64_t total = 0;
  for (const auto& e : v.entries()) {
    total += e.bytes;
    if (e.is_tensor)
      std::fprintf(out, "  %-60s %-9s %-16s %3zu chunk%s %10llu B\n", e.key.c_str(), e.dtype.c_str(),
                   shape_text(e.shape).c_str(), e.chunks, e.chunks == 1 ? " " : "s",
                   static_cast<unsigned long long>(e.bytes));
    else
      std::fprintf(out, "  %-60s bytes %37llu B\n", e.key.c_str(), static_cast<unsigned long long>(e.bytes));
  }
  if (!v.files().empty()) {
    std::fprintf(out, "files:");
    for (const auto& [file, bytes] : v.files())
      std::fprintf(out, " %s (%llu bytes)", file.c_str(), static_cast<unsigned long long>(bytes));
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "%zu keys, %llu bytes\n", v.entries().size(), static_cast<unsigned long long>(total));
  for (const auto& w : v.warnings()) std::fprintf(out, "warning: %s\n", w.c_str());
  return 0;
}

int ckpt_diff(const std::string& a, const std::string& b, const CkptOptions& options, std::FILE* out) {
  const CheckpointView va = CheckpointView::open(a, options.step), vb = CheckpointView::open(b, options.step);
  const auto ka = by_mapped_key(va, options.model_prefix), kb = by_mapped_key(vb, options.model_prefix);
  std::fprintf(out, "A = %s (%s)\nB = %s (%s)\n", va.step_dir().c_str(), va.format().c_str(), vb.step_dir().c_str(),
               vb.format().c_str());
  int differ = 0;
  for (const auto& [key, e] : ka)
    if (!kb.count(key)) std::fprintf(out, "only in A: %s %s\n", key.c_str(), shape_text(e->shape).c_str()), ++differ;
  for (const auto& [key, e] : kb)
    if (!ka.count(key)) std::fprintf(out, "only in B: %s %s\n", key.c_str(), shape_text(e->shape).c_str()), ++differ;
  for (const auto& [key, ea] : ka) {
    auto it = kb.find(key);
    if (it == kb.end()) continue;
    const CheckpointEntry* eb = it->second;
    if (ea->is_tensor != eb->is_tensor || ea->shape != eb->shape || ea->dtype != eb->dtype) {
      std::fprintf(out, "differs: %s %s %s vs %s %s\n", key.c_str(), ea->dtype.c_str(), shape_text(ea->shape).c_str(),
                   eb->dtype.c_str(), shape_text(eb->shape).c_str());
      ++differ;
      continue;
    }
    if (!options.values || !ea->is_tensor) continue;
    const auto xa = va.read_tensor(ea->key), xb = vb.read_tensor(eb->key);
    double max_diff = 0;
    size_t bad = 0;
    for (size_t i = 0; i < xa.size(); ++i) {
      if (xa[i] == xb[i]) continue;  // equal infinities too
      const double d = std::fabs(xa[i] - xb[i]);
      max_diff = std::max(max_diff, std::isnan(d) ? INFINITY : d);
      bad += !(d <= options.atol + options.rtol * std::fabs(xb[i]));
    }
    if (bad) ++differ;
    std::fprintf(out, "%s %s: max |A-B| %.3e%s\n", bad ? "values" : "same  ", key.c_str(), max_diff,
                 bad ? (", " + std::to_string(bad) + " of " + std::to_string(xa.size()) + " outside tolerance").c_str()
                     : "");
  }
  std::fprintf(out, "%s\n", differ ? (std::to_string(differ) + " differences").c_str() : "no differences");
  return differ ? 1 : 0;
}

}  // namespace meshtest
