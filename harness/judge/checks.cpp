#include "judge/checks.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "contract/checkpoint_format.h"
#include "contract/dump_files.h"
#include "readers/checkpoint_view.h"
#include "readers/rank_files.h"
#include "readers/dcp.h"
#include "readers/log_metrics.h"
#include "readers/tensorboard.h"

namespace fs = std::filesystem;
using nlohmann::json;
// The names in meshtrain's dump-folder files (metrics.jsonl, rank<R>.json, ...), shared with meshtrain.
namespace files = contract::dump_files;
namespace rank_file = contract::dump_files::rank_file;

namespace meshtest {

namespace {

// ---- reading what a phase left ------------------------------------------------

// A check that could not judge (a file missing, a baseline that did not run)...
struct Failure {
  std::string message;
  std::string details;
  bool judged = false;
  // A number check's first disagreement: where, and what it compared.
  std::optional<long long> step;
  std::optional<double> value, reference, tolerance;
};
// ... and one that judged and disagreed: only this kind catches a canary.
struct Finding : Failure {
  Finding(std::string m, std::string d) : Failure{std::move(m), std::move(d), true} {}
};

std::string num(double v) {
  std::ostringstream s;
  s.precision(7);
  s << v;
  return s.str();
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Failure{"cannot read " + path, ""};
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw Failure{path + " is not valid JSON: " + e.what(), ""};
  }
}

struct StepMetrics {
  double loss = 0;
  double grad_norm = 0;
  bool has_grad_norm = true;  // a trainer may report only the loss
  std::optional<double> validation_loss;  // only on the steps a run validated
};
using Curve = std::map<long long, StepMetrics>;

const std::vector<std::string> kCurveMetrics = {"loss", "grad_norm", "validation_loss"};

void check_metric_name(const std::string& metric) {
  if (std::find(kCurveMetrics.begin(), kCurveMetrics.end(), metric) == kCurveMetrics.end())
    throw Failure{"metric must be loss, grad_norm or validation_loss, got " + metric, ""};
}

// A step's value of `metric`; none where the step has no validation loss.
std::optional<double> metric_value(const StepMetrics& m, const std::string& metric) {
  if (metric == "validation_loss") return m.validation_loss;
  return metric == "grad_norm" ? m.grad_norm : m.loss;
}

Curve read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Failure{"cannot read " + path, ""};
  Curve curve;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    try {
      const json j = json::parse(line);
      StepMetrics m;
      // NaN and inf are written as null by JSON encoders; keep them as NaN.
      namespace f = files::metrics;
      m.loss = j.at(f::kLoss).is_null() ? NAN : j.at(f::kLoss).get<double>();
      m.has_grad_norm = j.contains(f::kGradNorm);
      m.grad_norm = m.has_grad_norm && !j.at(f::kGradNorm).is_null() ? j.at(f::kGradNorm).get<double>() : NAN;
      if (j.contains(f::kValidationLoss))
        m.validation_loss = j.at(f::kValidationLoss).is_null() ? NAN : j.at(f::kValidationLoss).get<double>();
      curve[j.at(f::kStep).get<long long>()] = m;
    } catch (const std::exception& e) {
      throw Failure{path + ":" + std::to_string(number) + ": not a metrics line: " + e.what(), ""};
    }
  }
  if (curve.empty()) throw Failure{path + " has no steps", ""};
  return curve;
}

Curve read_metrics(const std::string& dir) { return read_metrics_jsonl(dir + "/" + files::kMetricsFile); }

// "<step> <value>" per line, torchtitan's tests/assets/losses/*.txt format.
Curve read_golden(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Failure{"cannot read golden file " + path, ""};
  Curve curve;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    std::istringstream s(line);
    long long step = 0;
    double value = 0;
    if (!(s >> step >> value)) throw Failure{path + ":" + std::to_string(number) + ": expected '<step> <loss>'", ""};
    curve[step].loss = value;
    curve[step].grad_norm = value;
  }
  if (curve.empty()) throw Failure{"golden file " + path + " has no steps", ""};
  return curve;
}

// The phase a check looks at, and another phase or case to compare with.
struct Target {
  std::string dir;
  std::string label;  // "phase load" or "baseline s/fsdp (phase train)"
  const PhaseOutcome* phase = nullptr;
  const Phase* spec = nullptr;  // where its outputs are (outputs: in the matrix)
  std::string case_dir;
  RunPaths paths() const { return {"", case_dir, dir, {}}; }
};

const Phase* phase_spec(const CaseOutcome& o, const std::string& name) {
  for (const auto& p : o.spec->phases)
    if (p.name == name) return &p;
  return nullptr;
}

Target target_of(const CaseOutcome& o, const PhaseOutcome& p, std::string label) {
  return {p.dir, std::move(label), &p, phase_spec(o, p.name), o.dir};
}

const PhaseOutcome& phase_named(const CaseOutcome& o, const std::string& name) {
  for (const auto& p : o.phases)
    if (p.name == name) return p;
  throw Failure{o.spec->id + " has no phase '" + name + "'", ""};
}

const PhaseOutcome& phase_of(const CaseOutcome& o, const json& params, const char* key) {
  if (params.contains(key)) return phase_named(o, params[key].get<std::string>());
  return o.phases.back();
}

Target subject(const CaseOutcome& o, const CheckSpec& spec) {
  const PhaseOutcome& p = phase_of(o, spec.params, "phase");
  if (!p.ran) throw Failure{"phase " + p.name + " did not run (an earlier phase failed)", ""};
  return target_of(o, p, "phase " + p.name);
}

// The reference: `against` (a phase of this case) or `baseline` (another case).
std::optional<Target> reference(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find) {
  if (spec.params.contains("against")) {
    const PhaseOutcome& p = phase_named(o, spec.params["against"].get<std::string>());
    if (!p.ran) throw Failure{"phase " + p.name + " (the reference) did not run", ""};
    return target_of(o, p, "phase " + p.name);
  }
  if (spec.params.contains("baseline")) {
    const std::string id = spec.params["baseline"];
    const CaseOutcome* base = find(id);
    if (!base) throw Failure{"baseline " + id + " was not part of this run", ""};
    if (!base->finished) throw Failure{"baseline " + id + " did not run", ""};
    if (base->status() == Status::kSkipped || base->status() == Status::kCancelled)
      throw Failure{"baseline " + id + " did not run (" + status_name(base->status()) + ": " + base->reason() + ")", ""};
    const PhaseOutcome& p = phase_of(*base, spec.params, "baseline_phase");
    if (!p.ran) throw Failure{"baseline " + id + " did not reach phase " + p.name, ""};
    return target_of(*base, p, "baseline " + id + " (phase " + p.name + ")");
  }
  return std::nullopt;
}

// The loss curve from wherever `source` says: metrics.jsonl, a rank's log, TensorBoard.
Curve read_curve(const MetricsSource& source, const RunPaths& paths) {
  if (source.kind == MetricsSource::kJsonl) return read_metrics_jsonl(resolve_path(source.path, paths));
  MetricSeries series;
  std::string where;
  std::vector<std::string> warnings;  // shown when no loss could be read
  try {
    if (source.kind == MetricsSource::kTensorboard) {
      where = resolve_path(source.path, paths);
      std::map<std::string, std::string> tag_to_metric = default_tensorboard_tags();
      for (const auto& [metric, tag] : source.tags) {
        for (auto it = tag_to_metric.begin(); it != tag_to_metric.end();)
          it = it->second == metric ? tag_to_metric.erase(it) : std::next(it);
        tag_to_metric[tag] = metric;
      }
      series = read_tensorboard_scalars(where, tag_to_metric, &warnings);
      if (std::none_of(series.begin(), series.end(), [](const auto& step) { return step.second.count("loss"); })) {
        // Say which tags were there: a renamed tag is the usual reason for "no loss values".
        std::set<std::string> seen;
        for (const auto& [step, values] : read_tensorboard_scalars(where, {}, nullptr))
          for (const auto& [tag, value] : values) seen.insert(tag);
        std::string tags;
        for (const auto& tag : seen) tags += (tags.empty() ? "" : ", ") + tag;
        warnings.push_back("scalar tags in " + tensorboard_run_folder(where) + ": " + (tags.empty() ? "none" : tags));
      }
    } else {
      where = rank_log_path(paths.phase_dir, source.rank);
      series = source.kind == MetricsSource::kTorchtitanLog
                   ? read_torchtitan_log(where, &warnings)
                   : read_log_with_pattern(where, LogPattern(source.pattern), &warnings);
    }
  } catch (const MetricsError& e) {
    throw Failure{e.what(), ""};
  }
  Curve curve;
  for (const auto& [step, values] : series) {
    auto loss = values.find("loss");
    if (loss == values.end()) continue;
    StepMetrics m;
    m.loss = loss->second;
    auto grad_norm = values.find("grad_norm");
    m.has_grad_norm = grad_norm != values.end();
    m.grad_norm = m.has_grad_norm ? grad_norm->second : NAN;
    if (auto v = values.find("validation_loss"); v != values.end()) m.validation_loss = v->second;
    curve[step] = m;
  }
  if (curve.empty()) {
    std::string details;
    for (size_t i = 0; i < warnings.size() && i < 10; ++i) details += warnings[i] + "\n";
    throw Failure{"no loss values in " + source.describe() + " (" + where + ")", details};
  }
  return curve;
}

Curve read_metrics(const Target& t) {
  const MetricsSource source = t.spec ? t.spec->outputs.metrics : MetricsSource{};
  const bool from_log = source.kind == MetricsSource::kTorchtitanLog || source.kind == MetricsSource::kLogPattern;
  if (from_log && source.rank >= t.phase->nproc)
    throw Failure{t.label + " has " + std::to_string(t.phase->nproc) + " ranks; outputs.metrics.rank is " +
                      std::to_string(source.rank), ""};
  return read_curve(source, t.paths());
}

double param_or(const CheckSpec& spec, const char* key, double fallback) {
  return spec.params.contains(key) ? spec.params[key].get<double>() : fallback;
}

std::string tolerance_text(double atol, double rtol, double ref) {
  return "atol " + num(atol) + " + rtol " + num(rtol) + " x |" + num(ref) + "| = " + sci(atol + rtol * std::fabs(ref));
}

// Widens `r.margin` to |diff| / tolerance: NaN, or any difference against a zero tolerance, is infinite.
void widen_margin(CheckResult& r, double diff, double tolerance) {
  double ratio = std::isnan(diff) ? INFINITY : tolerance > 0 ? diff / tolerance : diff > 0 ? INFINITY : 0;
  if (std::isnan(ratio)) ratio = INFINITY;  // an infinite difference over an infinite bound
  r.margin = std::max(r.margin.value_or(0), ratio);
}

std::vector<std::pair<long long, double>> points(const Curve& c, const std::string& metric) {
  std::vector<std::pair<long long, double>> out;
  for (const auto& [step, m] : c)
    if (auto v = metric_value(m, metric)) out.emplace_back(step, *v);
  return out;
}

// Compares two curves step by step over the subject's steps. Both curves and the band
// go into `result`, so a report can draw what was judged.
void compare_curves(const Curve& got, const Curve& want, const std::string& metric, const std::string& got_label,
                    const std::string& want_label, double rtol, double atol, bool exact, CheckResult& result) {
  result.series = {{"subject", got_label, metric, points(got, metric)},
                   {"reference", want_label, metric, points(want, metric)}};
  result.band = std::make_pair(exact ? 0.0 : rtol, exact ? 0.0 : atol);
  std::string table;
  std::optional<Failure> first;
  int mismatches = 0, compared = 0;
  for (const auto& [step, m] : got) {
    const auto value = metric_value(m, metric);
    if (!value) continue;  // a step without validation
    ++compared;
    auto it = want.find(step);
    if (it != want.end() && !metric_value(it->second, metric)) {
      result.margin.reset();
      throw Finding{got_label + " has " + metric + " at step " + std::to_string(step) + " but " + want_label +
                        " has none there", ""};
    }
    if (it == want.end()) {
      result.margin.reset();  // a missing step is no matter of tolerance
      throw Finding{got_label + " has step " + std::to_string(step) + " but " + want_label + " has steps " +
                        std::to_string(want.begin()->first) + "-" + std::to_string(want.rbegin()->first),
                    ""};
    }
    const double a = *value, b = *metric_value(it->second, metric);
    const double diff = std::fabs(a - b);
    const bool ok = exact ? a == b : std::isfinite(a) && diff <= atol + rtol * std::fabs(b);
    if (!exact) widen_margin(result, std::isfinite(a) ? diff : NAN, atol + rtol * std::fabs(b));
    char row[160];
    std::snprintf(row, sizeof(row), "%6lld  %14.8g  %14.8g  %10.3e%s\n", step, a, b, diff, ok ? "" : "  <-");
    table += row;
    if (ok) continue;
    ++mismatches;
    if (!first)
      first = Finding{"step " + std::to_string(step) + ": " + metric + " " + num(a) + " in " + got_label + " vs " +
                          num(b) + " in " + want_label + ": |diff| " + sci(diff) +
                          (exact ? " (exact match required)" : " > " + tolerance_text(atol, rtol, b)),
                      ""};
    if (!first->step) {
      first->step = step, first->value = a, first->reference = b;
      first->tolerance = exact ? 0.0 : atol + rtol * std::fabs(b);
    }
  }
  if (compared == 0) {
    result.margin.reset();
    throw Failure{got_label + " reports no " + metric + (metric == "validation_loss" ? " (meshtrain: --validation.freq)" : ""), ""};
  }
  if (first) {
    first->message += " (" + std::to_string(mismatches) + " of " + std::to_string(compared) + " steps differ)";
    first->details = "  step  " + got_label + "  |  " + want_label + "  |  |diff|\n" + table;
    throw *first;
  }
}

// ---- the checks ----------------------------------------------------------------

void check_loss_finite(const CaseOutcome& o, const CheckSpec& spec, const FindCase&, CheckResult&) {
  const Target t = subject(o, spec);
  for (const auto& [step, m] : read_metrics(t)) {
    const bool loss_bad = !std::isfinite(m.loss), grad_norm_bad = m.has_grad_norm && !std::isfinite(m.grad_norm);
    if (!loss_bad && !grad_norm_bad) continue;
    Finding f{t.label + ": " + (loss_bad ? "loss" : "grad_norm") + " is " + num(loss_bad ? m.loss : m.grad_norm) +
                  " at step " + std::to_string(step),
              ""};
    f.step = step, f.value = loss_bad ? m.loss : m.grad_norm;
    throw f;
  }
}

void check_loss_decreases(const CaseOutcome& o, const CheckSpec& spec, const FindCase&, CheckResult& result) {
  const Target t = subject(o, spec);
  const Curve c = read_metrics(t);
  const double factor = param_or(spec, "factor", 0.9);
  const double first = c.begin()->second.loss, last = c.rbegin()->second.loss;
  // The margin here: the drop required over the drop seen.
  const double required = (1 - factor) * std::fabs(first), seen = first - last;
  result.margin = seen > 0 ? required / seen : INFINITY;
  if (!(last <= factor * first)) {
    Finding f{t.label + ": loss went " + num(first) + " (step " + std::to_string(c.begin()->first) + ") -> " +
                      num(last) + " (step " + std::to_string(c.rbegin()->first) + "); expected <= " + num(factor) +
                      " x " + num(first) + " = " + num(factor * first),
              ""};
    f.step = c.rbegin()->first, f.value = last, f.reference = factor * first;
    throw f;
  }
}

// `golden`, relative to the matrix file's folder.
std::string golden_path(const CaseOutcome& o, const CheckSpec& spec) {
  fs::path golden = spec.params["golden"].get<std::string>();
  if (golden.is_relative()) golden = fs::path(o.spec->file).parent_path() / golden;
  return golden.string();
}

void check_loss_matches(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result) {
  const Target t = subject(o, spec);
  const Curve got = read_metrics(t);
  const std::string metric = spec.params.value("metric", std::string("loss"));
  check_metric_name(metric);
  Curve want;
  std::string want_label;
  if (spec.params.contains("golden")) {
    const std::string golden = golden_path(o, spec);
    want = read_golden(golden);
    want_label = "golden " + golden;
  } else {
    const auto ref = reference(o, spec, find);
    if (!ref) throw Failure{"loss_matches needs baseline, against or golden", ""};
    want = read_metrics(*ref);
    want_label = ref->label;
  }
  compare_curves(got, want, metric, t.label, want_label, param_or(spec, "rtol", 1e-5),
                 param_or(spec, "atol", 0), spec.params.value("exact", false), result);
}

void check_resume_matches(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, find);
  if (!ref) throw Failure{"resume_matches needs baseline (the uninterrupted run) or against", ""};
  const Curve got = read_metrics(t);
  if (got.begin()->first <= 1)
    throw Finding{t.label + " started at step " + std::to_string(got.begin()->first) +
                      ": it did not resume from a checkpoint",
                  ""};
  compare_curves(got, read_metrics(*ref), "loss", t.label + " (resumed)", ref->label + " (uninterrupted)",
                 param_or(spec, "rtol", 1e-5), param_or(spec, "atol", 0), spec.params.value("exact", false), result);
}

using KeyShapes = std::map<std::string, std::string>;  // tensor key -> "[258, 64]"

KeyShapes read_keys(const std::string& dir);

// A checkpoint key as the matrix says to compare it: `rename` rules in order, then the model
// prefix (with_model_prefix). Keys longer than 4 KiB are refused: libstdc++'s regex recurses per
// character, and a hostile checkpoint must not crash the harness.
std::string mapped_key(const std::vector<std::pair<std::regex, std::string>>& rename, const std::string& prefix,
                       std::string key, const std::string& where) {
  if (!rename.empty() && key.size() > 4096)
    throw Failure{where + ": a key of " + std::to_string(key.size()) + " bytes is too long to rename: " +
                      key.substr(0, 80) + "...", ""};
  for (const auto& [pattern, to] : rename) key = std::regex_replace(key, pattern, to);
  return with_model_prefix(key, prefix);
}

// A phase's checkpoint with its tensor keys mapped: mapped key -> the entry.
struct MappedCheckpoint {
  CheckpointView view;
  std::map<std::string, const CheckpointEntry*> tensors;
};

// Where a phase's checkpoint is: outputs.checkpoint, or else the last step meshtrain's
// rank0.json says the phase saved.
CheckpointSource checkpoint_source(const Target& t, const char* check) {
  if (t.spec && t.spec->outputs.checkpoint) return *t.spec->outputs.checkpoint;
  std::ifstream in(t.dir + "/" + files::rank_file_name(0));
  const json rank0 = json::parse(in, nullptr, false);
  if (!rank0.is_object() || !rank0.contains(rank_file::kCheckpointFolder))
    throw Failure{std::string(check) + " needs outputs.checkpoint on " + t.label + " (where its checkpoint is)", ""};
  const auto saved = rank0.value(rank_file::kCheckpointStepsSaved, std::vector<long long>());
  if (saved.empty())
    throw Failure{t.label + " saved no checkpoint (" + rank_file::kCheckpointStepsSaved + " is empty)", ""};
  CheckpointSource source;
  source.path = rank0[rank_file::kCheckpointFolder].get<std::string>();
  source.step = saved.back();
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
                          key + "' in " + out.view.step_dir(), ""};
    }
    return out;
  } catch (const CheckpointError& e) {
    throw Failure{t.label + ": " + e.what(), ""};
  }
}

KeyShapes read_keys(const Target& t) {
  if (t.spec && t.spec->outputs.checkpoint) {
    KeyShapes out;
    for (const auto& [key, entry] : open_checkpoint(t, "keys_match").tensors) out[key] = json(entry->shape).dump();
    return out;
  }
  try {
    return read_keys(t.dir);
  } catch (const Failure& f) {
    throw Failure{f.message + " (a trainer other than meshtrain: say where its checkpoint is with outputs.checkpoint)",
                  f.details};
  }
}

KeyShapes read_keys(const std::string& dir) {
  namespace f = files::state_dict_keys;
  const json j = read_json(dir + "/" + files::kStateDictKeysFile);
  KeyShapes out;
  // Object keys (dataloader.dp_rank_<i>, ...) follow the data-parallel degree; tensors are compared.
  for (const auto& [key, info] : j.at(f::kKeys).items())
    if (info.value(f::kKind, "") == f::kTensor) out[key] = info.contains(f::kShape) ? info[f::kShape].dump() : "";
  return out;
}

void check_keys_match(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult&) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, find);
  if (!ref) throw Failure{"keys_match needs against or baseline", ""};
  KeyShapes got = read_keys(t), want = read_keys(*ref);
  // `prefix`: only the keys both trainers save (e.g. model.* when one keeps AdamW's step per tensor).
  const std::string prefix = spec.params.value("prefix", std::string());
  for (KeyShapes* keys : {&got, &want})
    for (auto it = keys->begin(); it != keys->end();) it = it->first.rfind(prefix, 0) == 0 ? std::next(it) : keys->erase(it);
  std::vector<std::string> missing, unexpected, reshaped;
  for (const auto& [k, shape] : want)
    if (!got.count(k)) missing.push_back(k);
  for (const auto& [k, shape] : got) {
    if (!want.count(k)) unexpected.push_back(k);
    else if (spec.params.value("shapes", true) && want.at(k) != shape)
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
  if (!unexpected.empty()) msg += " unexpected " + std::to_string(unexpected.size()) + " (" + list(unexpected, 3) + ");";
  if (!reshaped.empty()) msg += " shape differs for " + std::to_string(reshaped.size()) + " (" + list(reshaped, 2) + ");";
  msg.pop_back();
  std::string details = "missing (in " + ref->label + ", not in " + t.label + "):\n";
  for (const auto& k : missing) details += "  " + k + "\n";
  details += "unexpected (in " + t.label + ", not in " + ref->label + "):\n";
  for (const auto& k : unexpected) details += "  " + k + "\n";
  for (const auto& k : reshaped) details += "shape: " + k + "\n";
  throw Finding{msg, details};
}

std::string tokens_file(const Target& t) {
  return resolve_path(t.spec ? t.spec->outputs.tokens : Outputs{}.tokens, t.paths());
}

void check_tokens_match(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult&) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, find);
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
                        " vs " + std::to_string(want[i]) + " in " + ref->label + " (prompt '" + a.value("prompt", "") + "')",
                    "got:  " + a.value("text", "") + "\nwant: " + b.value("text", "")};
  if (got.size() != want.size())
    throw Finding{t.label + " generated " + std::to_string(got.size()) + " tokens, " + ref->label + " " +
                      std::to_string(want.size()),
                  ""};
}

// Every rank's rank<R>.json, in rank order; a phase must leave one per rank.
std::vector<json> read_rank_files(const Target& t) {
  std::vector<json> out;
  for (int r = 0; fs::exists(t.dir + "/" + files::rank_file_name(r)); ++r)
    out.push_back(read_json(t.dir + "/" + files::rank_file_name(r)));
  if (out.empty()) throw Failure{t.label + " left no rank<R>.json files in " + t.dir, ""};
  if (static_cast<int>(out.size()) != t.phase->nproc)
    throw Failure{t.label + " has " + std::to_string(t.phase->nproc) + " ranks but left " + std::to_string(out.size()) +
                      " rank<R>.json files in " + t.dir, ""};
  return out;
}

void check_replicas_equal(const CaseOutcome& o, const CheckSpec& spec, const FindCase&, CheckResult&) {
  const Target t = subject(o, spec);
  // (key, offsets, sizes) -> the ranks holding that piece and their hashes
  std::map<std::string, std::vector<std::pair<int, std::string>>> pieces;
  const std::vector<json> ranks = read_rank_files(t);
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& [key, p] : ranks[r].at(rank_file::kLocalParams).items()) {
      const std::string piece =
          key + " offsets " + p.at(rank_file::kPieceOffsets).dump() + " sizes " + p.at(rank_file::kPieceSizes).dump();
      pieces[piece].emplace_back(static_cast<int>(r), p.at(rank_file::kPieceFnv1a64).dump());
    }
  }
  for (const auto& [piece, holders] : pieces)
    for (const auto& [rank, hash] : holders)
      if (hash != holders.front().second)
        throw Finding{t.label + ": replicas of " + piece + " differ: rank " + std::to_string(holders.front().first) +
                          " has " + holders.front().second + ", rank " + std::to_string(rank) + " has " + hash,
                      ""};
}

void check_params_match(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result) {
  const Target t = subject(o, spec);
  std::string want_path, want_label;
  if (spec.params.contains("golden")) {
    want_path = golden_path(o, spec);
    want_label = "golden " + want_path;
  } else {
    const auto ref = reference(o, spec, find);
    if (!ref) throw Failure{"params_match needs against, baseline or golden", ""};
    want_path = ref->dir + "/" + files::kParamDigestFile;
    want_label = ref->label;
  }
  namespace digest = files::param_digest;
  const json a = read_json(t.dir + "/" + files::kParamDigestFile).at(digest::kParams);
  const json b = read_json(want_path).at(digest::kParams);
  const double rtol = param_or(spec, "rtol", 1e-5), atol = param_or(spec, "atol", 0);
  for (const auto& [key, want] : b.items()) {
    if (!a.contains(key)) {
      result.margin.reset();  // a missing key is no matter of tolerance
      throw Finding{key + " is in " + want_label + " but not in " + t.label, ""};
    }
  }
  std::optional<Finding> first;  // every key is compared, so the margin covers them all
  for (const auto& [key, want] : b.items()) {
    const double l2 = want.at(digest::kL2).get<double>();
    for (const char* field : {digest::kL2, digest::kSum}) {
      const double x = a[key].at(field).get<double>(), y = want.at(field).get<double>();
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

// The bytes a checkpoint step's tensors hold: global elements x element size, from its metadata.
uint64_t state_bytes(const std::string& step_dir, const std::string& label) {
  try {
    const CheckpointView view = CheckpointView::open(step_dir);  // entries() lives as long as the view
    uint64_t bytes = 0;
    for (const auto& e : view.entries()) {
      if (!e.is_tensor) continue;
      const size_t size = dcp::element_size(e.dtype);
      if (size == 0) throw Failure{label + ": " + e.key + " in " + step_dir + " has dtype '" + e.dtype + "', of unknown size", ""};
      uint64_t numel = 1;
      for (auto d : e.shape) numel *= static_cast<uint64_t>(d);
      bytes += numel * size;
    }
    return bytes;
  } catch (const CheckpointError& e) {
    throw Failure{label + ": " + e.what(), ""};
  }
}

// Every tensor element of the checkpoint steps this phase saved was written once: the
// ranks' payload bytes equal the tensors' global sizes (the steps' metadata), both from
// meshtrain's rank<R>.json (checkpoint_tensor_bytes_written, checkpoint_steps_saved,
// checkpoint_folder). A replicated chunk written by more than one replica, or a chunk
// nobody wrote, shows here; loading cannot see the first and reports the second far later.
void check_saved_once(const CaseOutcome& o, const CheckSpec& spec, const FindCase&, CheckResult&) {
  const Target t = subject(o, spec);
  const std::vector<json> ranks = read_rank_files(t);
  uint64_t written = 0;
  std::string per_rank;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const char* key : {rank_file::kCheckpointTensorBytesWritten, rank_file::kCheckpointStepsSaved, rank_file::kCheckpointFolder})
      if (!ranks[r].contains(key))
        throw Failure{t.dir + "/" + files::rank_file_name(static_cast<int>(r)) + " has no " + key +
                          " (saved_once reads meshtrain's rank files)",
                      ""};
    const auto bytes = ranks[r][rank_file::kCheckpointTensorBytesWritten].get<uint64_t>();
    written += bytes;
    per_rank += "rank " + std::to_string(r) + ": " + std::to_string(bytes) + " tensor bytes written\n";
  }
  const auto saved = ranks[0][rank_file::kCheckpointStepsSaved].get<std::vector<long long>>();
  const std::string folder = ranks[0][rank_file::kCheckpointFolder].get<std::string>();
  if (saved.empty())
    throw Failure{t.label + " saved no checkpoint (" + rank_file::kCheckpointStepsSaved + " is empty)", ""};
  uint64_t state = 0;
  std::string steps;
  for (long long step : saved) {
    const std::string name = contract::step_folder_name(step), dir = folder + "/" + name;
    if (!fs::exists(fs::path(dir) / contract::kMetadataFile))
      throw Failure{t.label + " saved " + name + " but " + dir +
                        " is gone (removed by --checkpoint.keep-latest-k or a later phase)", ""};
    state += state_bytes(dir, t.label);
    steps += (steps.empty() ? "" : ", ") + name;
  }
  if (written == state) return;
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.3gx", state ? static_cast<double>(written) / static_cast<double>(state) : 0.0);
  throw Finding{t.label + ": its " + std::to_string(ranks.size()) + " ranks wrote " + std::to_string(written) +
                    " tensor bytes for " + steps + ", whose tensors hold " + std::to_string(state) + " (" + ratio + "): " +
                    (written > state ? "some chunk was written by more than one rank" : "some chunk was not written"),
                per_rank};
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

// Two checkpoints' tensors element by element (torch.allclose's rule: |a - b| <= atol + rtol x |b|,
// b the reference), over the reference's tensor keys after each side's key mapping.
void check_tensors_match(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, find);
  if (!ref) throw Failure{"tensors_match needs against or baseline", ""};
  const MappedCheckpoint got = open_checkpoint(t, "tensors_match"), want = open_checkpoint(*ref, "tensors_match");
  const double rtol = param_or(spec, "rtol", 1e-5), atol = param_or(spec, "atol", 1e-8);
  const std::string prefix = spec.params.value("prefix", std::string());
  std::optional<Finding> worst;
  double worst_excess = -1;
  size_t tensors = 0, tensors_differing = 0, elements_differing = 0;
  std::string table;
  for (const auto& [key, want_entry] : want.tensors) {
    if (key.rfind(prefix, 0) != 0) continue;
    ++tensors;
    auto it = got.tensors.find(key);
    if (it == got.tensors.end())
      throw Finding{key + " is in " + ref->label + " (" + want.view.step_dir() + ") but not in " + t.label + " (" +
                        got.view.step_dir() + ")", ""};
    if (it->second->shape != want_entry->shape)
      throw Finding{key + ": shape " + json(it->second->shape).dump() + " in " + t.label + " vs " +
                        json(want_entry->shape).dump() + " in " + ref->label, ""};
    std::vector<double> a, b;
    try {
      a = got.view.read_tensor(it->second->key);
      b = want.view.read_tensor(want_entry->key);
    } catch (const CheckpointError& e) {
      throw Failure{e.what(), ""};
    }
    size_t differing = 0;
    double max_diff = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i] == b[i]) continue;  // equal infinities too
      const double diff = std::fabs(a[i] - b[i]), bound = atol + rtol * std::fabs(b[i]);
      max_diff = std::max(max_diff, std::isnan(diff) ? INFINITY : diff);
      widen_margin(result, diff, bound);
      if (diff <= bound) continue;
      ++differing;
      const double excess = std::isnan(diff) ? INFINITY : diff - bound;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = Finding{key + coordinates(i, want_entry->shape) + ": " + num(a[i]) + " in " + t.label + " vs " +
                            num(b[i]) + " in " + ref->label + ": |diff| " + sci(diff) + " > " +
                            tolerance_text(atol, rtol, b[i]), ""};
        worst->value = a[i], worst->reference = b[i], worst->tolerance = bound;
      }
    }
    if (differing) ++tensors_differing, elements_differing += differing;
    char row[256];
    std::snprintf(row, sizeof(row), "  %-56s max |diff| %.3e%s\n", key.c_str(), max_diff,
                  differing ? ("  " + std::to_string(differing) + " of " + std::to_string(b.size()) + " differ").c_str() : "");
    table += row;
  }
  if (tensors == 0) throw Failure{ref->label + " has no tensor keys" + (prefix.empty() ? "" : " starting with '" + prefix + "'"), ""};
  if (!worst) return;
  worst->message += " (" + std::to_string(elements_differing) + " elements in " + std::to_string(tensors_differing) +
                    " of " + std::to_string(tensors) + " tensors differ)";
  worst->details = t.label + ": " + got.view.step_dir() + "\n" + ref->label + ": " + want.view.step_dir() + "\n" + table;
  throw *worst;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void check_log_contains(const CaseOutcome& o, const CheckSpec& spec, const FindCase&, CheckResult&) {
  const Target t = subject(o, spec);
  const std::string text = spec.params.value("text", std::string());
  if (text.empty()) throw Failure{"log_contains needs text", ""};
  const int only = spec.params.contains("rank") ? spec.params["rank"].get<int>() : -1;
  for (int r = 0; r < t.phase->nproc; ++r)
    if ((only < 0 || only == r) && read_file(t.phase->log_path(r)).find(text) != std::string::npos) return;
  throw Finding{"no log of " + t.label + (only >= 0 ? " rank " + std::to_string(only) : "") + " contains '" + text + "'",
                ""};
}

void check_error_matches(const CaseOutcome& o, const CheckSpec& spec, const FindCase&, CheckResult&) {
  const Target t = subject(o, spec);
  const std::string text = spec.params.value("text", std::string());
  if (text.empty()) throw Failure{"error_matches needs text", ""};
  const auto& r = t.phase->result;
  if (t.phase->ok()) throw Finding{t.label + " exited 0 on every rank; expected it to fail with '" + text + "'", ""};
  const int rank = r.first_failure.rank >= 0 ? r.first_failure.rank : 0;
  const std::string log = read_file(t.phase->log_path(rank));
  if (log.find(text) != std::string::npos) return;
  std::string last = tail_of_file(t.phase->log_path(rank), 1);
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  throw Finding{t.label + ": rank " + std::to_string(rank) + " failed (" + r.first_failure.describe() +
                    ") but not with '" + text + "'; its last line: " + last,
                ""};
}

// Which rank to read first in a timed-out phase: the first still running when time ran out.
int hung_rank(const LaunchResult& res) {
  for (const auto& e : res.exits)
    if (e.signal == SIGTERM || e.signal == SIGKILL) return e.rank;
  return -1;
}

CheckResult check_exit(const CaseOutcome& o) {
  CheckResult r{"exit", true, "", "", true};
  for (const auto& p : o.phases) {
    if (!p.ran || p.ok()) continue;
    r.passed = false;
    Verdict& v = r.finding;
    v.check = "exit";
    v.phase = p.name;
    if (!p.launch_error.empty()) {
      v.kind = VerdictKind::kLaunchError;
      r.message = "phase " + p.name + ": " + p.launch_error;
      return r;
    }
    const auto& res = p.result;
    if (res.timed_out) {
      std::string alive;
      for (const auto& e : res.exits)
        if (e.signal == SIGTERM || e.signal == SIGKILL) alive += (alive.empty() ? "" : ",") + std::to_string(e.rank);
      v.kind = VerdictKind::kTimedOut;
      v.rank = hung_rank(res);
      r.message = "phase " + p.name + " " + res.stopped_because + " (ranks still running: " +
                  (alive.empty() ? "none" : alive) + ")" + (res.killed ? "; SIGKILL after the grace period" : "");
      int behind = -1;
      const std::string late = ranks_not_arrived(p.dir, static_cast<int>(res.exits.size()), &behind);
      if (!late.empty()) r.message += "; " + late, v.rank = behind;
    } else if (res.first_failure.rank >= 0) {
      v.kind = res.first_failure.signal != 0 ? VerdictKind::kCrashed : VerdictKind::kExitCode;
      v.rank = res.first_failure.rank;
      v.signal = res.first_failure.signal;
      v.exit_code = res.first_failure.exit_code;
      r.message = "phase " + p.name + ": rank " + std::to_string(res.first_failure.rank) + " failed first with " +
                  res.first_failure.describe();
      const std::string error = rank_error_message(p.dir, res.first_failure.rank);
      if (!error.empty()) r.message += ": " + error.substr(0, error.find('\n'));
    } else {
      // Stopped from outside with no rank failing first (meshtest's own stop): no rank to blame.
      v.kind = VerdictKind::kCrashed;
      r.message = "phase " + p.name + " stopped: " + res.stopped_because;
    }
    for (const auto& e : res.exits) r.details += "rank " + std::to_string(e.rank) + ": " + e.describe() + "\n";
    return r;
  }
  return r;
}

using CheckFn = void (*)(const CaseOutcome&, const CheckSpec&, const FindCase&, CheckResult&);
const std::map<std::string, CheckFn>& implementations() {
  static const std::map<std::string, CheckFn> fns = {
      {"loss_finite", check_loss_finite},   {"loss_decreases", check_loss_decreases},
      {"loss_matches", check_loss_matches}, {"resume_matches", check_resume_matches},
      {"keys_match", check_keys_match},     {"tokens_match", check_tokens_match},
      {"replicas_equal", check_replicas_equal}, {"params_match", check_params_match},
      {"tensors_match", check_tensors_match},     {"saved_once", check_saved_once},
      {"log_contains", check_log_contains}, {"error_matches", check_error_matches},
  };
  return fns;
}

// Orders the results of one kind: a judged failure, then any failure, then a pass.
int verdict_rank(const CheckResult& c) { return c.passed ? 0 : c.judged ? 2 : 1; }

// " (margin 34x)": how far past its tolerance a canary's check went.
std::string margin_text(const std::optional<double>& margin) {
  if (!margin) return "";
  if (!std::isfinite(*margin)) return " (margin inf)";
  char buf[48];
  std::snprintf(buf, sizeof(buf), *margin < 100 ? " (margin %.3gx)" : *margin < 1e6 ? " (margin %.0fx)" : " (margin %.2gx)",
                *margin);
  return buf;
}

// Message checks confirm *why* an expected failure happened.
bool is_message_check(const std::string& kind) { return kind == "log_contains" || kind == "error_matches"; }

}  // namespace

std::vector<CheckResult> run_checks(const CaseOutcome& o, const FindCase& find) {
  std::vector<CheckResult> out;
  out.push_back(check_exit(o));
  for (const auto& spec : o.spec->checks) {
    if (spec.kind == "exit") continue;
    CheckResult r{spec.kind, true, "", ""};
    try {
      implementations().at(spec.kind)(o, spec, find, r);
    } catch (const Failure& f) {
      r.passed = false;
      r.judged = f.judged;
      r.message = f.message;
      r.details = f.details;
      r.finding.step = f.step;
      r.finding.value = f.value;
      r.finding.reference = f.reference;
      r.finding.tolerance = f.tolerance;
      r.finding.margin = r.margin;
    } catch (const std::exception& e) {
      r.passed = false;
      r.judged = false;
      r.message = std::string("malformed output: ") + e.what();
    }
    if (!r.passed) {
      r.finding.kind = r.judged ? VerdictKind::kCheckFailed : VerdictKind::kNotJudged;
      r.finding.check = spec.kind;
      r.finding.phase = spec.params.value("phase", o.phases.empty() ? std::string() : o.phases.back().name);
    }
    out.push_back(r);
  }
  return out;
}

std::map<long long, double> read_loss_curve(const std::string& phase_dir, const Outputs& outputs,
                                            const std::string& metric) {
  try {
    check_metric_name(metric);
    std::map<long long, double> out;
    const RunPaths paths{"", fs::path(phase_dir).parent_path().string(), phase_dir, {}};
    for (const auto& [step, m] : read_curve(outputs.metrics, paths)) {
      if (metric == "grad_norm" && !m.has_grad_norm) throw std::runtime_error(phase_dir + " reports no grad_norm");
      if (auto v = metric_value(m, metric)) out[step] = *v;
    }
    if (out.empty()) throw std::runtime_error(phase_dir + " reports no " + metric);
    return out;
  } catch (const Failure& f) {
    throw std::runtime_error(f.message);
  }
}

std::map<std::string, std::string> read_tensor_keys(const std::string& phase_dir, const Outputs& outputs) {
  try {
    if (!outputs.checkpoint) return read_keys(phase_dir);
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

void record_curves(CaseOutcome& o) {
  for (auto& p : o.phases) {
    p.curve.clear();
    if (!p.ran) continue;
    try {
      for (const auto& [step, m] : read_metrics(target_of(o, p, "phase " + p.name)))
        p.curve.push_back({step, m.loss, m.has_grad_norm ? m.grad_norm : NAN});
    } catch (const std::exception&) {
      // No curve to draw; a check that needed one has said why.
    } catch (const Failure&) {
    }
  }
}

void judge(CaseOutcome& o) {
  const Expectation& e = o.spec->expect;
  const CheckResult* first_failed = nullptr;
  const CheckResult* failed_message_check = nullptr;
  const CheckResult* first_failed_other = nullptr;  // a judged failure, preferably not `exit`
  const CheckResult* unjudged = nullptr;            // a check that could not look
  const CheckResult* expected = nullptr;
  for (const auto& c : o.checks) {
    if (!c.passed && !first_failed) first_failed = &c;
    if (!c.passed && is_message_check(c.kind) && !failed_message_check) failed_message_check = &c;
    // The most telling failure: a disagreeing check says more than "exit code 1".
    if (!c.passed && !is_message_check(c.kind) && c.judged &&
        (!first_failed_other || first_failed_other->kind == "exit"))
      first_failed_other = &c;
    if (!c.passed && !c.judged && !unjudged) unjudged = &c;
    // A canary is caught when a check of the named kind judged and failed.
    // Of several checks of that kind, the clearest catch counts.
    if (e.kind == Expectation::kFail && c.kind == e.check &&
        (!expected || verdict_rank(c) > verdict_rank(*expected) ||
         (verdict_rank(c) == verdict_rank(*expected) && c.margin.value_or(0) > expected->margin.value_or(0))))
      expected = &c;
  }
  o.details.clear();
  for (const auto& c : o.checks)
    if (!c.passed) o.details += c.kind + ": " + c.message + "\n" + c.details;
  // A verdict decided by check `c`: its finding, with a message that says which check.
  auto decided_by = [](const CheckResult& c, VerdictKind kind, std::string message) {
    Verdict v = c.finding;
    v.kind = kind;
    v.message = std::move(message);
    return v;
  };
  switch (e.kind) {
    case Expectation::kSkip:
      o.verdict = Verdict::skipped(e.reason);
      return;
    case Expectation::kPass:
      if (!first_failed) o.verdict = {VerdictKind::kPassed, ""};
      else o.verdict = decided_by(*first_failed, first_failed->finding.kind, first_failed->kind + ": " + first_failed->message);
      return;
    case Expectation::kXfail:
      // It must fail, and for the declared reason when log_contains / error_matches say which.
      if (failed_message_check) {
        o.verdict = decided_by(*failed_message_check, VerdictKind::kXfailedDifferently,
                               "xfail (" + e.reason + ") failed differently: " + failed_message_check->kind + ": " +
                                   failed_message_check->message);
      } else if (unjudged && !first_failed_other) {
        // The run ended well and a check could not look: that proves nothing about the known bug.
        o.verdict = decided_by(*unjudged, VerdictKind::kXfailedDifferently,
                               "xfail (" + e.reason + ") could not be judged: " + unjudged->kind + ": " + unjudged->message);
      } else if (first_failed_other) {
        o.verdict = decided_by(*first_failed_other, VerdictKind::kXfailed,
                               e.reason + " (" + first_failed_other->kind + ": " + first_failed_other->message + ")");
      } else {
        o.verdict = {VerdictKind::kXpassed, "XPASS: expected to fail (" + e.reason + ") but every check passed"};
      }
      return;
    case Expectation::kFail: {
      const CheckResult& exit = o.checks.front();
      // A canary for a number check must run to the end; one for a message check must fail.
      if (e.check != "exit" && !is_message_check(e.check) && !exit.passed) {
        o.verdict = decided_by(exit, VerdictKind::kCanaryCrashed, "canary for " + e.check + " crashed instead: " + exit.message);
      } else if (expected && !expected->passed && !expected->judged) {
        o.verdict = decided_by(*expected, VerdictKind::kCanaryCrashed,
                               "canary for " + e.check + " could not be judged: " + expected->message);
      } else if (expected && !expected->passed) {
        o.verdict = decided_by(*expected, VerdictKind::kCanaryCaught,
                               "canary caught by " + e.check + margin_text(expected->margin) + ": " + expected->message);
      } else {
        o.verdict = {VerdictKind::kCanaryNotCaught, "canary not caught: check " + e.check + " passed on a known-bad run"};
        o.verdict.check = e.check;
      }
      return;
    }
  }
}

}  // namespace meshtest
