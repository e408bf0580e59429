#include "ckpt_cli.h"

#include <nlohmann/json.hpp>

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

// Whether diff lists a common key as differing before any value is read. With --values a dtype
// is no difference by itself: the values are compared across it (a bfloat16 export against the
// float32 weights it came from), as tensors_match does. Without, the listing is all diff compares.
bool listed_alike(const CheckpointEntry& a, const CheckpointEntry& b, bool values) {
  return a.is_tensor == b.is_tensor && a.shape == b.shape && (values || a.dtype == b.dtype);
}

// " (dtype bfloat16 vs float32)" on a values line whose tensors are stored differently.
std::string dtype_note(const CheckpointEntry& a, const CheckpointEntry& b) {
  return a.dtype == b.dtype ? "" : " (dtype " + a.dtype + " vs " + b.dtype + ")";
}

// One common tensor's values line, by compare_tensors (tensors_match's comparison, B the
// reference). Returns whether an element is outside the tolerance.
bool diff_values(const CheckpointView& va, const CheckpointEntry& ea, const CheckpointView& vb,
                 const CheckpointEntry& eb, const std::string& key, const CkptOptions& options, std::FILE* out) {
  const TensorComparison c = compare_tensors(va, ea.key, vb, eb.key, {options.rtol, options.atol});
  const std::string outside =
      c.outside ? ", " + std::to_string(c.outside) + " of " + std::to_string(c.elements) + " outside tolerance" : "";
  std::fprintf(out, "%s %s: max |A-B| %.3e%s%s\n", c.outside ? "values" : "same  ", key.c_str(), c.max_diff,
               outside.c_str(), dtype_note(ea, eb).c_str());
  return c.outside > 0;
}

// The last line: the count, then the tensors whose values matched across a dtype (not counted,
// but named, so that "no differences" is not read as "the same bytes").
std::string diff_summary(int differ, int dtype_only) {
  std::string line = differ ? std::to_string(differ) + " differences" : "no differences";
  if (dtype_only) line += "; " + std::to_string(dtype_only) + " tensors differ in dtype only";
  return line;
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
  int differ = 0, dtype_only = 0;
  for (const auto& [key, e] : ka)
    if (!kb.count(key)) std::fprintf(out, "only in A: %s %s\n", key.c_str(), shape_text(e->shape).c_str()), ++differ;
  for (const auto& [key, e] : kb)
    if (!ka.count(key)) std::fprintf(out, "only in B: %s %s\n", key.c_str(), shape_text(e->shape).c_str()), ++differ;
  for (const auto& [key, ea] : ka) {
    auto it = kb.find(key);
    if (it == kb.end()) continue;
    const CheckpointEntry* eb = it->second;
    if (!listed_alike(*ea, *eb, options.values)) {
      std::fprintf(out, "differs: %s %s %s vs %s %s\n", key.c_str(), ea->dtype.c_str(), shape_text(ea->shape).c_str(),
                   eb->dtype.c_str(), shape_text(eb->shape).c_str());
      ++differ;
      continue;
    }
    if (!options.values || !ea->is_tensor) continue;
    if (diff_values(va, *ea, vb, *eb, key, options, out))
      ++differ;
    else if (ea->dtype != eb->dtype)
      ++dtype_only;
  }
  std::fprintf(out, "%s\n", diff_summary(differ, dtype_only).c_str());
  return differ ? 1 : 0;
}

}  // namespace meshtest
