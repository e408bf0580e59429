#include "judge/checkpoint_checks.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "contract/dump_files.h"
#include "readers/checkpoint_view.h"

namespace fs = std::filesystem;
using nlohmann::json;
// The names in meshtrain's dump-folder files (rank0.json, state_dict_keys.json), shared with meshtrain.
namespace files = contract::dump_files;

namespace meshtest {

namespace {

using KeyShapes = std::map<std::string, std::string>;  // tensor key -> "[258, 64]"

// ---- the contract's files a trainer writes in its phase folder (docs/contracts.md) ----

// The checkpoints a phase's rank0.json says it saved: the folder and the steps.
struct SavedCheckpoints {
  std::vector<long long> steps;
  std::string folder;
};

// rank0.json's `checkpoint_steps_saved` and `checkpoint_folder`; none when the phase left
// no rank0.json that names a folder (a trainer that does not write it).
std::optional<SavedCheckpoints> checkpoints_in_rank0(const std::string& phase_dir) {
  namespace f = files::rank_file;
  std::ifstream in(phase_dir + "/" + files::rank_file_name(0));
  const json rank0 = json::parse(in, nullptr, false);
  if (!rank0.is_object() || !rank0.contains(f::kCheckpointFolder)) return std::nullopt;
  SavedCheckpoints saved;
  saved.steps = rank0.value(f::kCheckpointStepsSaved, std::vector<long long>());
  saved.folder = rank0[f::kCheckpointFolder].get<std::string>();
  return saved;
}

// The tensor keys and shapes a phase's state_dict_keys.json lists.
KeyShapes keys_in_state_dict_keys_json(const std::string& phase_dir) {
  namespace f = files::state_dict_keys;
  const json j = read_json(phase_dir + "/" + files::kStateDictKeysFile);
  KeyShapes out;
  // Object keys (dataloader.dp_rank_<i>, ...) follow the data-parallel degree; tensors are compared.
  for (const auto& [key, info] : j.at(f::kKeys).items())
    if (info.value(f::kKind, "") == f::kTensor) out[key] = info.contains(f::kShape) ? info[f::kShape].dump() : "";
  return out;
}

// ---- opening a phase's checkpoint ------------------------------------------------

// A checkpoint key as the matrix says to compare it: `rename` rules in order, then the model
// prefix (with_model_prefix). Keys longer than 4 KiB are refused: libstdc++'s regex recurses per
// character, and a hostile checkpoint must not crash the harness.
std::string mapped_key(const std::vector<std::pair<std::regex, std::string>>& rename, const std::string& prefix,
                       std::string key, const std::string& where) {
  if (!rename.empty() && key.size() > 4096)
    throw Failure{where + ": a key of " + std::to_string(key.size()) +
                      " bytes is too long to rename: " + key.substr(0, 80) + "...",
                  ""};
  for (const auto& [pattern, to] : rename) key = std::regex_replace(key, pattern, to);
  return with_model_prefix(key, prefix);
}

// A phase's checkpoint with its tensor keys mapped: mapped key -> the entry.
struct MappedCheckpoint {
  CheckpointView view;
  std::map<std::string, const CheckpointEntry*> tensors;
};
// Where a phase's checkpoint is: outputs.checkpoint, or else the last step the contract's
// rank0.json says the phase saved.
CheckpointSource checkpoint_source(const Target& t, const char* check) {
  if (t.spec && t.spec->outputs.checkpoint) return *t.spec->outputs.checkpoint;
  const std::optional<SavedCheckpoints> saved = checkpoints_in_rank0(t.dir);
  if (!saved)
    throw Failure{std::string(check) + " needs outputs.checkpoint on " + t.label + " (where its checkpoint is)", ""};
  if (saved->steps.empty()) throw Failure{t.label + " saved no checkpoint (checkpoint_steps_saved is empty)", ""};
  CheckpointSource source;
  source.path = saved->folder;
  source.step = saved->steps.back();
  return source;
}

MappedCheckpoint open_checkpoint(const Target& t, const char* check) {
  const CheckpointSource source = checkpoint_source(t, check);
  const std::string path = resolve_path(source.path, t.paths());
  try {
    MappedCheckpoint out{CheckpointView::open(path, source.step), {}};
    std::vector<std::pair<std::regex, std::string>> rename;
    for (const auto& [pattern, to] : source.rename) rename.emplace_back(std::regex(pattern), to);
    for (const auto& e : out.view.entries()) {
      if (!e.is_tensor) continue;
      const std::string key = mapped_key(rename, source.model_prefix, e.key, t.label);
      auto [it, fresh] = out.tensors.emplace(key, &e);
      if (!fresh)
        throw Failure{t.label + ": outputs.checkpoint maps both '" + it->second->key + "' and '" + e.key + "' to '" +
                          key + "' in " + out.view.step_dir(),
                      ""};
    }
    return out;
  } catch (const CheckpointError& e) {
    throw Failure{t.label + ": " + e.what(), ""};
  }
}

}  // namespace

json checkpoint_param_digest(const Target& t) {
  MappedCheckpoint ck = open_checkpoint(t, "params_match");
  json params = json::object();
  for (const auto& [key, entry] : ck.tensors) {
    if (key.rfind("model.", 0) != 0) continue;  // optimizer state and the rest are not parameters
    std::vector<double> values;
    try {
      values = ck.view.read_tensor(entry->key);
    } catch (const CheckpointError& e) {
      throw Failure{t.label + ": " + e.what(), ""};
    }
    double squares = 0, sum = 0;
    for (double v : values) squares += v * v, sum += v;
    // A non-finite value makes a non-finite digest, written as null as param_digest.json does.
    const double l2 = std::sqrt(squares);
    namespace digest = files::param_digest;
    params[key] = {{digest::kL2, std::isfinite(l2) ? json(l2) : json()},
                   {digest::kSum, std::isfinite(sum) ? json(sum) : json()},
                   {digest::kNumel, values.size()}};
  }
  if (params.empty())
    throw Failure{t.label + ": its checkpoint " + ck.view.step_dir() +
                      " holds no tensor under model. (outputs.checkpoint's "
                      "model_prefix maps a trainer's own keys there)",
                  ""};
  return {{files::param_digest::kParams, params}};
}

void check_checkpoint_stored_once(const Target& t) {
  const MappedCheckpoint ck = open_checkpoint(t, "saved_once");
  try {
    ck.view.check_stored_once();
  } catch (const CheckpointError& e) {
    throw Finding{t.label + ": some element was not stored exactly once: " + e.what(), ""};
  }
}

namespace {

// A phase's tensor keys and shapes: from its checkpoint where outputs.checkpoint says, else
// from the phase's state_dict_keys.json.
KeyShapes read_keys(const Target& t) {
  if (t.spec && t.spec->outputs.checkpoint) {
    KeyShapes out;
    for (const auto& [key, entry] : open_checkpoint(t, "keys_match").tensors) out[key] = json(entry->shape).dump();
    return out;
  }
  try {
    return keys_in_state_dict_keys_json(t.dir);
  } catch (const Failure& f) {
    throw Failure{
        f.message + " (a trainer that writes no rank0.json: say where its checkpoint is with outputs.checkpoint)",
        f.details};
  }
}

// "[3, 17]": the coordinates of flat element `index` in a row-major tensor of `shape`.
std::string coordinates(size_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<size_t>(std::max<int64_t>(shape[d], 1));
    at[d] = static_cast<int64_t>(index % extent);
    index /= extent;
  }
  std::string out;
  for (auto v : at) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return "[" + out + "]";
}

// The element furthest beyond its bound over all of tensors_match's tensors: the one its message names.
struct WorstElement {
  std::optional<Finding> finding;
  double excess = -1;

  void consider(const std::string& key, const std::vector<int64_t>& shape, const UnequalElement& e,
                const std::string& got_label, const std::string& want_label, double atol, double rtol) {
    const double over = std::isnan(e.diff) ? INFINITY : e.diff - e.bound;
    if (over <= excess) return;
    excess = over;
    finding = Finding{key + coordinates(e.index, shape) + ": " + num(e.a) + " in " + got_label + " vs " + num(e.b) +
                          " in " + want_label + ": |diff| " + sci(e.diff) + " > " + tolerance_text(atol, rtol, e.b),
                      ""};
    finding->value = e.a, finding->reference = e.b, finding->tolerance = e.bound;
  }
};

}  // namespace

// ---- the checks ------------------------------------------------------------------

void check_keys_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult&) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, from);
  if (!ref) throw Failure{"keys_match needs against or baseline", ""};
  KeyShapes got = read_keys(t), want = read_keys(*ref);
  // `prefix`: only the keys both trainers save (e.g. model.* when one keeps AdamW's step per tensor).
  const std::string prefix = spec.params.prefix.value();
  for (KeyShapes* keys : {&got, &want})
    for (auto it = keys->begin(); it != keys->end();)
      it = it->first.rfind(prefix, 0) == 0 ? std::next(it) : keys->erase(it);
  std::vector<std::string> missing, unexpected, reshaped;
  for (const auto& [k, shape] : want)
    if (!got.count(k)) missing.push_back(k);
  for (const auto& [k, shape] : got) {
    if (!want.count(k))
      unexpected.push_back(k);
    else if (spec.params.shapes.value() && want.at(k) != shape)
      reshaped.push_back(k + " " + shape + " vs " + want.at(k));
  }
  if (missing.empty() && unexpected.empty() && reshaped.empty()) return;
  auto list = [](const std::vector<std::string>& keys, size_t at_most) {
    std::string s;
    for (size_t i = 0; i < keys.size() && i < at_most; ++i) s += (s.empty() ? "" : ", ") + keys[i];
    if (keys.size() > at_most) s += ", ... (" + std::to_string(keys.size() - at_most) + " more)";
    return s;
  };
  std::string msg = "state-dict keys of " + t.label + " differ from " + ref->label + ":";
  if (!missing.empty()) msg += " missing " + std::to_string(missing.size()) + " (" + list(missing, 3) + ");";
  if (!unexpected.empty())
    msg += " unexpected " + std::to_string(unexpected.size()) + " (" + list(unexpected, 3) + ");";
  if (!reshaped.empty())
    msg += " shape differs for " + std::to_string(reshaped.size()) + " (" + list(reshaped, 2) + ");";
  msg.pop_back();
  std::string details = "missing (in " + ref->label + ", not in " + t.label + "):\n";
  for (const auto& k : missing) details += "  " + k + "\n";
  details += "unexpected (in " + t.label + ", not in " + ref->label + "):\n";
  for (const auto& k : unexpected) details += "  " + k + "\n";
  for (const auto& k : reshaped) details += "shape: " + k + "\n";
  throw Finding{msg, details};
}

// Two checkpoints' tensors element by element (torch.allclose's rule: |a - b| <= atol + rtol x |b|,
// b the reference), over the reference's tensor keys after each side's key mapping.
void check_tensors_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, from);
  if (!ref) throw Failure{"tensors_match needs against or baseline", ""};
  const MappedCheckpoint got = open_checkpoint(t, "tensors_match"), want = open_checkpoint(*ref, "tensors_match");
  const double rtol = spec.params.rtol.value(), atol = spec.params.atol.value();
  const std::string prefix = spec.params.prefix.value();
  WorstElement worst;
  size_t tensors = 0, tensors_differing = 0, elements_differing = 0;
  std::string table;
  for (const auto& [key, want_entry] : want.tensors) {
    if (key.rfind(prefix, 0) != 0) continue;
    ++tensors;
    auto it = got.tensors.find(key);
    if (it == got.tensors.end())
      throw Finding{key + " is in " + ref->label + " (" + want.view.step_dir() + ") but not in " + t.label + " (" +
                        got.view.step_dir() + ")",
                    ""};
    if (it->second->shape != want_entry->shape)
      throw Finding{key + ": shape " + json(it->second->shape).dump() + " in " + t.label + " vs " +
                        json(want_entry->shape).dump() + " in " + ref->label,
                    ""};
    const auto on_unequal = [&](const UnequalElement& e) {
      widen_margin(result, e.diff, e.bound);
      if (!e.within) worst.consider(key, want_entry->shape, e, t.label, ref->label, atol, rtol);
    };
    // The values, whatever dtype each side stores (compare_tensors reads both as float64).
    TensorComparison compared;
    try {
      compared = compare_tensors(got.view, it->second->key, want.view, want_entry->key, {rtol, atol}, on_unequal);
    } catch (const CheckpointError& e) {
      throw Failure{e.what(), ""};
    }
    const size_t differing = compared.outside;
    if (differing) ++tensors_differing, elements_differing += differing;
    const std::string counted =
        differing ? "  " + std::to_string(differing) + " of " + std::to_string(compared.elements) + " differ" : "";
    char row[256];
    std::snprintf(row, sizeof(row), "  %-56s max |diff| %.3e%s\n", key.c_str(), compared.max_diff, counted.c_str());
    table += row;
  }
  if (tensors == 0)
    throw Failure{ref->label + " has no tensor keys" + (prefix.empty() ? "" : " starting with '" + prefix + "'"), ""};
  if (!worst.finding) return;
  worst.finding->message += " (" + std::to_string(elements_differing) + " elements in " +
                            std::to_string(tensors_differing) + " of " + std::to_string(tensors) + " tensors differ)";
  worst.finding->details =
      t.label + ": " + got.view.step_dir() + "\n" + ref->label + ": " + want.view.step_dir() + "\n" + table;
  throw *worst.finding;
}

std::map<std::string, std::string> read_tensor_keys(const std::string& phase_dir, const Outputs& outputs) {
  try {
    if (!outputs.checkpoint) return keys_in_state_dict_keys_json(phase_dir);
    Phase spec;
    spec.outputs = outputs;
    PhaseOutcome phase;
    phase.dir = phase_dir;
    const Target t{phase_dir, "phase " + fs::path(phase_dir).filename().string(), &phase, &spec,
                   fs::path(phase_dir).parent_path().string()};
    return read_keys(t);
  } catch (const Failure& f) {
    throw std::runtime_error(f.message);
  }
}

}  // namespace meshtest
