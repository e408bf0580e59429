#include "judge/rank_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "contract/checkpoint_format.h"
#include "contract/dump_files.h"
#include "judge/checkpoint_checks.h"
#include "readers/checkpoint_view.h"
#include "readers/dcp.h"
#include "readers/stored_bytes.h"

namespace fs = std::filesystem;
using nlohmann::json;
// The names in meshtrain's dump-folder files (rank<R>.json, param_digest.json, ...), shared with meshtrain.
namespace files = contract::dump_files;
namespace rank_file_fields = contract::dump_files::rank_file;

namespace meshtest {

namespace {

// ---- the contract's rank files (docs/contracts.md) ---------------------------------

// Where rank R of a phase leaves its rank<R>.json.
std::string rank_file_path(const std::string& phase_dir, int rank) {
  return phase_dir + "/" + files::rank_file_name(rank);
}

// The parameter pieces a rank holds, as its rank<R>.json lists them under `local_params`:
// ("<key> offsets [..] sizes [..]", its fnv1a64 hash).
std::vector<std::pair<std::string, std::string>> pieces_in_rank_file(const json& rank_file) {
  std::vector<std::pair<std::string, std::string>> out;
  namespace f = rank_file_fields;
  for (const auto& [key, p] : rank_file.at(f::kLocalParams).items()) {
    const std::string piece =
        key + " offsets " + p.at(f::kPieceOffsets).dump() + " sizes " + p.at(f::kPieceSizes).dump();
    out.emplace_back(piece, p.at(f::kPieceFnv1a64).dump());
  }
  return out;
}

// The tensor bytes a rank's checkpoint writes came to (`checkpoint_tensor_bytes_written`);
// a Failure when its rank<R>.json lacks any field saved_once reads.
uint64_t tensor_bytes_written(const json& rank_file, const std::string& path) {
  namespace f = rank_file_fields;
  for (const char* key : {f::kCheckpointTensorBytesWritten, f::kCheckpointStepsSaved, f::kCheckpointFolder})
    if (!rank_file.contains(key))
      throw Failure{path + " has no " + key + " (saved_once reads the rank files of docs/contracts.md)", ""};
  return rank_file[f::kCheckpointTensorBytesWritten].get<uint64_t>();
}

// The steps rank 0 says the phase saved, and the folder holding their step-<N> folders.
std::vector<long long> checkpoint_steps_saved(const json& rank0) {
  return rank0[rank_file_fields::kCheckpointStepsSaved].get<std::vector<long long>>();
}
std::string checkpoint_folder(const json& rank0) {
  return rank0[rank_file_fields::kCheckpointFolder].get<std::string>();
}
std::string checkpoint_step_dir(const std::string& folder, long long step) {
  return folder + "/" + contract::step_folder_name(step);
}

// The digest of every parameter (l2 and sum per key) a phase leaves at its end.
std::string param_digest_path(const std::string& phase_dir) { return phase_dir + "/" + files::kParamDigestFile; }

// ---- reading them ----------------------------------------------------------------

// A phase's parameter digest: the param_digest.json it left (meshtrain, or any trainer that writes
// the contract files), else one read from the checkpoint its outputs name (a DCP trainer's).
json param_digest_of(const Target& t) {
  if (fs::exists(param_digest_path(t.dir)) || !t.spec || !t.spec->outputs.checkpoint)
    return read_json(param_digest_path(t.dir));
  return checkpoint_param_digest(t);
}

// Every rank's rank<R>.json, in rank order; a phase must leave one per rank.
std::vector<json> read_rank_files(const Target& t) {
  std::vector<json> out;
  for (int r = 0; fs::exists(rank_file_path(t.dir, r)); ++r) out.push_back(read_json(rank_file_path(t.dir, r)));
  if (out.empty()) throw Failure{t.label + " left no rank<R>.json files in " + t.dir, ""};
  if (static_cast<int>(out.size()) != t.phase->nproc)
    throw Failure{t.label + " has " + std::to_string(t.phase->nproc) + " ranks but left " + std::to_string(out.size()) +
                      " rank<R>.json files in " + t.dir,
                  ""};
  return out;
}

// The bytes a checkpoint step's tensors hold: global elements x element size, from its metadata.
uint64_t state_bytes(const std::string& step_dir, const std::string& label) {
  try {
    const CheckpointView view = CheckpointView::open(step_dir);  // entries() lives as long as the view
    uint64_t bytes = 0;
    for (const auto& e : view.entries()) {
      if (!e.is_tensor) continue;
      const size_t size = element_size(e.dtype);
      if (size == 0)
        throw Failure{label + ": " + e.key + " in " + step_dir + " has dtype '" + e.dtype + "', of unknown size", ""};
      uint64_t numel = 1;
      for (auto d : e.shape) numel *= static_cast<uint64_t>(d);
      bytes += numel * size;
    }
    return bytes;
  } catch (const CheckpointError& e) {
    throw Failure{label + ": " + e.what(), ""};
  }
}

std::string tokens_file(const Target& t) {
  return resolve_path(t.spec ? t.spec->outputs.tokens : Outputs{}.tokens, t.paths());
}

}  // namespace

// ---- the checks ------------------------------------------------------------------

void check_replicas_equal(const CaseOutcome& o, const CheckSpec& spec, const CheckSources&, CheckResult&) {
  const Target t = subject(o, spec);
  // (key, offsets, sizes) -> the ranks holding that piece and their hashes
  std::map<std::string, std::vector<std::pair<int, std::string>>> pieces;
  const std::vector<json> ranks = read_rank_files(t);
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const auto& [piece, hash] : pieces_in_rank_file(ranks[r]))
      pieces[piece].emplace_back(static_cast<int>(r), hash);
  for (const auto& [piece, holders] : pieces)
    for (const auto& [rank, hash] : holders)
      if (hash != holders.front().second)
        throw Finding{t.label + ": replicas of " + piece + " differ: rank " + std::to_string(holders.front().first) +
                          " has " + holders.front().second + ", rank " + std::to_string(rank) + " has " + hash,
                      ""};
}

void check_params_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result) {
  const Target t = subject(o, spec);
  std::optional<Target> ref;
  std::string golden, want_label;
  if (spec.params.golden) {
    golden = golden_path(o, spec);
    want_label = "golden " + golden;
  } else {
    ref = reference(o, spec, from);
    if (!ref) throw Failure{"params_match needs against, baseline or golden", ""};
    want_label = ref->label;
  }
  namespace digest = files::param_digest;
  const json a = param_digest_of(t).at(digest::kParams);
  const json b = (ref ? param_digest_of(*ref) : read_json(golden)).at(digest::kParams);
  const double rtol = spec.params.rtol.value(), atol = spec.params.atol.value();
  for (const auto& [key, want] : b.items()) {
    if (!a.contains(key)) {
      result.margin.reset();  // a missing key is no matter of tolerance
      throw Finding{key + " is in " + want_label + " but not in " + t.label, ""};
    }
  }
  // A non-finite number is written as null (JSON has no NaN): it is read as NaN, which no
  // tolerance accepts, so a broken weight fails with its key instead of passing.
  auto number = [](const json& v) { return v.is_null() ? std::nan("") : v.get<double>(); };
  std::optional<Finding> first;  // every key is compared, so the margin covers them all
  for (const auto& [key, want] : b.items()) {
    const double l2 = number(want.at(digest::kL2));
    for (const char* field : {digest::kL2, digest::kSum}) {
      const double x = number(a[key].at(field)), y = number(want.at(field));
      // A trained weight's sum can be near zero: both fields are judged against the norm.
      widen_margin(result, std::fabs(x - y), atol + rtol * std::fabs(l2));
      if (!first && !(std::fabs(x - y) <= atol + rtol * std::fabs(l2)))
        first = Finding{key + ": " + field + " " + num(x) + " in " + t.label + " vs " + num(y) + " in " + want_label +
                            ": |diff| " + sci(std::fabs(x - y)) + " > " + tolerance_text(atol, rtol, l2),
                        ""};
    }
  }
  if (first) throw *first;
}

// Every tensor element of the checkpoint steps this phase saved was written once: the
// ranks' payload bytes equal the tensors' global sizes (the steps' metadata), both from
// The rank<R>.json files (docs/contracts.md) (checkpoint_tensor_bytes_written, checkpoint_steps_saved,
// checkpoint_folder). A replicated chunk written by more than one replica, or a chunk
// nobody wrote, shows here; loading cannot see the first and reports the second far later.
// A trainer without rank files (a DCP trainer) is judged on the checkpoint its outputs name.
void check_saved_once(const CaseOutcome& o, const CheckSpec& spec, const CheckSources&, CheckResult&) {
  const Target t = subject(o, spec);
  if (!fs::exists(rank_file_path(t.dir, 0)) && t.spec && t.spec->outputs.checkpoint)
    return check_checkpoint_stored_once(t);
  const std::vector<json> ranks = read_rank_files(t);
  uint64_t written = 0;
  std::string per_rank;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto bytes = tensor_bytes_written(ranks[r], rank_file_path(t.dir, static_cast<int>(r)));
    written += bytes;
    per_rank += "rank " + std::to_string(r) + ": " + std::to_string(bytes) + " tensor bytes written\n";
  }
  const auto saved = checkpoint_steps_saved(ranks[0]);
  const std::string folder = checkpoint_folder(ranks[0]);
  if (saved.empty()) throw Failure{t.label + " saved no checkpoint (checkpoint_steps_saved is empty)", ""};
  uint64_t state = 0;
  std::string steps;
  for (long long step : saved) {
    const std::string dir = checkpoint_step_dir(folder, step);
    const std::string name = contract::step_folder_name(step);
    if (!fs::exists(fs::path(dir) / contract::kMetadataFile))
      throw Failure{t.label + " saved " + name + " but " + dir +
                        " is gone (removed by --checkpoint.keep-latest-k or a later phase)",
                    ""};
    state += state_bytes(dir, t.label);
    steps += (steps.empty() ? "" : ", ") + name;
  }
  if (written == state) return;
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.3gx", state ? static_cast<double>(written) / static_cast<double>(state) : 0.0);
  throw Finding{
      t.label + ": its " + std::to_string(ranks.size()) + " ranks wrote " + std::to_string(written) +
          " tensor bytes for " + steps + ", whose tensors hold " + std::to_string(state) + " (" + ratio +
          "): " + (written > state ? "some chunk was written by more than one rank" : "some chunk was not written"),
      per_rank};
}

void check_tokens_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult&) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, from);
  if (!ref) throw Failure{"tokens_match needs against or baseline", ""};
  const json a = read_json(tokens_file(t)), b = read_json(tokens_file(*ref));
  const auto got = a.at("generated_ids").get<std::vector<long long>>();
  const auto want = b.at("generated_ids").get<std::vector<long long>>();
  if (a.value("prompt", "") != b.value("prompt", ""))
    throw Finding{"prompts differ: '" + a.value("prompt", "") + "' vs '" + b.value("prompt", "") + "'", ""};
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i])
      throw Finding{"generated token " + std::to_string(i) + " is " + std::to_string(got[i]) + " in " + t.label +
                        " vs " + std::to_string(want[i]) + " in " + ref->label + " (prompt '" + a.value("prompt", "") +
                        "')",
                    "got:  " + a.value("text", "") + "\nwant: " + b.value("text", "")};
  if (got.size() != want.size())
    throw Finding{t.label + " generated " + std::to_string(got.size()) + " tokens, " + ref->label + " " +
                      std::to_string(want.size()),
                  ""};
}

}  // namespace meshtest
