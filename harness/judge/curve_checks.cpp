#include "judge/curve_checks.h"

#include "core/adapters.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "contract/dump_files.h"
#include "core/hardware.h"
#include "history/drift.h"
#include "judge/curve_rules.h"
#include "readers/golden_curve.h"
#include "readers/log_metrics.h"
#include "readers/megatron.h"
#include "readers/rank_files.h"
#include "readers/tensorboard.h"
#include "readers/trainer_state.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

namespace {

// ---- reading a curve -------------------------------------------------------------

struct StepMetrics {
  double loss = 0;
  double grad_norm = 0;
  bool has_grad_norm = true;              // a trainer may report only the loss
  std::optional<double> validation_loss;  // only on the steps a run validated
  std::optional<double> num_zeros;        // zeros in the gradient (Megatron's num-zeros), where reported
  std::optional<double> tokens_seen;      // tokens trained on so far, where reported
};
using StepCurve = std::map<long long, StepMetrics>;

const std::vector<std::string> kCurveMetrics = {"loss", "grad_norm", "validation_loss", "num_zeros", "tokens_seen"};

// metrics.jsonl's fields for num_zeros and tokens_seen: meshtrain writes neither, another
// trainer's file may.
constexpr char kNumZerosField[] = "num_zeros";
constexpr char kTokensSeenField[] = "tokens_seen";

void check_metric_name(const std::string& metric) {
  if (std::find(kCurveMetrics.begin(), kCurveMetrics.end(), metric) == kCurveMetrics.end())
    throw Failure{"metric must be loss, grad_norm, validation_loss, num_zeros or tokens_seen, got " + metric, ""};
}

// A step's value of `metric`; none where the step has no validation loss, num_zeros or tokens_seen.
std::optional<double> metric_value(const StepMetrics& m, const std::string& metric) {
  if (metric == "validation_loss") return m.validation_loss;
  if (metric == "num_zeros") return m.num_zeros;
  if (metric == "tokens_seen") return m.tokens_seen;
  return metric == "grad_norm" ? m.grad_norm : m.loss;
}

StepCurve read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Failure{"cannot read " + path, ""};
  StepCurve curve;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    try {
      const json j = json::parse(line);
      StepMetrics m;
      // NaN and inf are written as null by JSON encoders; keep them as NaN.
      namespace f = contract::dump_files::metrics;  // field names shared with meshtrain
      m.loss = j.at(f::kLoss).is_null() ? NAN : j.at(f::kLoss).get<double>();
      m.has_grad_norm = j.contains(f::kGradNorm);
      m.grad_norm = m.has_grad_norm && !j.at(f::kGradNorm).is_null() ? j.at(f::kGradNorm).get<double>() : NAN;
      if (j.contains(f::kValidationLoss))
        m.validation_loss = j.at(f::kValidationLoss).is_null() ? NAN : j.at(f::kValidationLoss).get<double>();
      if (j.contains(kNumZerosField))
        m.num_zeros = j.at(kNumZerosField).is_null() ? NAN : j.at(kNumZerosField).get<double>();
      if (j.contains(kTokensSeenField))
        m.tokens_seen = j.at(kTokensSeenField).is_null() ? NAN : j.at(kTokensSeenField).get<double>();
      curve[j.at(f::kStep).get<long long>()] = m;
    } catch (const std::exception& e) {
      throw Failure{path + ":" + std::to_string(number) + ": not a metrics line: " + e.what(), ""};
    }
  }
  if (curve.empty()) throw Failure{path + " has no steps", ""};
  return curve;
}

// The highest rank that left a log in `dir` (0 when none did): Megatron's last rank, which
// prints its iteration line and writes its TensorBoard events.
int last_rank_with_log(const std::string& dir) {
  int last = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 9 || name.rfind("rank", 0) != 0 || name.substr(name.size() - 4) != ".log") continue;
    const std::string digits = name.substr(4, name.size() - 8);
    if (!digits.empty() && digits.size() < 7 && digits.find_first_not_of("0123456789") == std::string::npos)
      last = std::max(last, std::stoi(digits));
  }
  return last;
}

bool has_loss(const MetricSeries& s) {
  return std::any_of(s.begin(), s.end(), [](const auto& step) { return step.second.count("loss") > 0; });
}

// Megatron's TensorBoard scalars, when its folder has a loss; else none, and `why_not` says why.
std::optional<MetricSeries> megatron_tensorboard(const MetricsSource& source, const RunPaths& paths,
                                                 const std::optional<TimeWindow>& window,
                                                 std::vector<std::string>* warnings, std::string& why_not) {
  const std::string tensorboard = resolve_path(source.path, paths);
  try {
    MetricSeries series = read_tensorboard_scalars(tensorboard, megatron_tensorboard_tags(), warnings, window);
    if (has_loss(series)) return series;
    why_not = "no `lm loss` scalars in " + tensorboard_run_folder(tensorboard, window);
  } catch (const MetricsError& e) {
    why_not = e.what();
  }
  return std::nullopt;
}

// Megatron's tokens seen at each step of `series` that its line logged: consumed samples times
// the sequence length rank 0 printed among its arguments.
void add_megatron_tokens_seen(MetricSeries& series, const MetricSeries& line, const MegatronStart& start) {
  if (!start.seq_length) return;
  for (auto& [step, metrics] : series)
    if (auto it = line.find(step); it != line.end())
      if (auto samples = it->second.find("consumed_samples"); samples != it->second.end())
        metrics["tokens_seen"] = samples->second * static_cast<double>(*start.seq_length);
}

// Megatron's TensorBoard scalars when its folder has a loss (the last rank writes them), else its
// console line in that rank's log. When neither has one, `warnings` say what each held, and
// whether Megatron said it could not write TensorBoard. Tokens seen join either (rank 0 says the
// sequence length).
MetricSeries read_megatron_curve(const MetricsSource& source, const RunPaths& paths,
                                 const std::optional<TimeWindow>& window, std::vector<std::string>& warnings,
                                 std::string& where) {
  const MegatronStart start = read_megatron_start(rank_log_path(paths.phase_dir, 0));
  const std::string line_log =
      rank_log_path(paths.phase_dir, source.rank >= 0 ? source.rank : last_rank_with_log(paths.phase_dir));
  std::string why_not_tensorboard;
  if (auto series = megatron_tensorboard(source, paths, window, &warnings, why_not_tensorboard)) {
    where = resolve_path(source.path, paths);
    if (start.seq_length) try {
        add_megatron_tokens_seen(*series, read_megatron_log(line_log, nullptr, start.keeps_first_iteration), start);
      } catch (const MetricsError&) {  // no line to read: no tokens_seen, which a check of it says
      }
    return *series;
  }
  where = line_log;
  MetricSeries series = read_megatron_log(where, &warnings, start.keeps_first_iteration);
  add_megatron_tokens_seen(series, series, start);
  if (!has_loss(series)) {
    warnings.insert(warnings.begin(), "TensorBoard: " + why_not_tensorboard);
    if (tail_of_file(where, 1 << 20, 4 << 20).find(kMegatronNoTensorboard) != std::string::npos)
      warnings.insert(warnings.begin(), std::string("Megatron said: ") + kMegatronNoTensorboard +
                                            " (its Python lacks the tensorboard package), so it wrote no events");
  }
  return series;
}

// The loss curve from wherever `source` says: metrics.jsonl, a rank's log, TensorBoard.
// `window`: when the phase ran. Of TensorBoard's events only those written then count (a resumed
// launch shares torchtitan's run folder with the first when both start within one minute); a
// rank's log is the phase's own (its folder, truncated at launch); metrics.jsonl lines carry no
// time and are read whole.
StepCurve read_curve(const MetricsSource& source, const RunPaths& paths, const std::optional<TimeWindow>& window) {
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
      series = read_tensorboard_scalars(where, tag_to_metric, &warnings, window);
      if (std::none_of(series.begin(), series.end(), [](const auto& step) { return step.second.count("loss"); })) {
        // Say which tags were there: a renamed tag is the usual reason for "no loss values".
        std::set<std::string> seen;
        for (const auto& [step, values] : read_tensorboard_scalars(where, {}, nullptr, window))
          for (const auto& [tag, value] : values) seen.insert(tag);
        std::string tags;
        for (const auto& tag : seen) tags += (tags.empty() ? "" : ", ") + tag;
        warnings.push_back("scalar tags in " + tensorboard_run_folder(where, window) + ": " +
                           (tags.empty() ? "none" : tags));
      }
    } else if (source.kind == MetricsSource::kHfTrainerState) {
      where = resolve_path(source.path, paths);
      series = read_trainer_state(where);
    } else if (source.kind == MetricsSource::kMegatron) {
      series = read_megatron_curve(source, paths, window, warnings, where);
    } else {
      where = rank_log_path(paths.phase_dir, source.rank);
      series = source.kind == MetricsSource::kTorchtitanLog
                   ? read_torchtitan_log(where, &warnings)
                   : read_log_with_pattern(where, LogPattern(source.pattern), &warnings);
    }
  } catch (const MetricsError& e) {
    throw Failure{e.what(), ""};
  }
  StepCurve curve;
  for (const auto& [step, values] : series) {
    auto loss = values.find("loss");
    if (loss == values.end()) continue;
    StepMetrics m;
    m.loss = loss->second;
    auto grad_norm = values.find("grad_norm");
    m.has_grad_norm = grad_norm != values.end();
    m.grad_norm = m.has_grad_norm ? grad_norm->second : NAN;
    if (auto v = values.find("validation_loss"); v != values.end()) m.validation_loss = v->second;
    if (auto v = values.find("num_zeros"); v != values.end()) m.num_zeros = v->second;
    if (auto v = values.find("tokens_seen"); v != values.end()) m.tokens_seen = v->second;
    curve[step] = m;
  }
  if (curve.empty()) {
    std::string details;
    for (size_t i = 0; i < warnings.size() && i < 10; ++i) details += warnings[i] + "\n";
    throw Failure{"no loss values in " + source.describe() + " (" + where + ")", details};
  }
  return curve;
}

// A Hugging Face Trainer phase that resumed (--resume_from_checkpoint PATH in its command) keeps
// the log history of that checkpoint: its own steps are those after the checkpoint's global_step.
std::optional<long long> hf_resumed_from(const Target& t) {
  if (!t.spec || t.spec->outputs.metrics.kind != MetricsSource::kHfTrainerState) return std::nullopt;
  const std::vector<std::string>& argv = t.spec->argv;
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "--resume_from_checkpoint") {
      try {
        return trainer_state_global_step(resolve_path(argv[i + 1], t.paths()));
      } catch (const MetricsError& e) {
        throw Failure{t.label + " resumed from " + argv[i + 1] + ", whose step cannot be read: " + e.what(), ""};
      }
    }
  return std::nullopt;
}

StepCurve read_metrics(const Target& t) {
  const MetricsSource source = t.spec ? t.spec->outputs.metrics : MetricsSource{};
  if (const auto resumed = hf_resumed_from(t)) {
    StepCurve curve = read_curve(source, t.paths(), t.window);
    curve.erase(curve.begin(), curve.upper_bound(*resumed));
    if (curve.empty())
      throw Failure{t.label + " logged no step after step " + std::to_string(*resumed) + ", where it resumed", ""};
    return curve;
  }
  const bool from_log = source.kind == MetricsSource::kTorchtitanLog || source.kind == MetricsSource::kLogPattern ||
                        source.kind == MetricsSource::kMegatron;
  if (from_log && source.rank >= t.phase->nproc)
    throw Failure{t.label + " has " + std::to_string(t.phase->nproc) + " ranks; outputs.metrics.rank is " +
                      std::to_string(source.rank),
                  ""};
  return read_curve(source, t.paths(), t.window);
}

// ---- comparing curves ------------------------------------------------------------

// How the case's trainer is asked to report `metric`, for the message that says it reported none:
// " (meshtrain: --validation.freq)", or "" when its adapter cannot tell.
std::string report_hint(const CaseOutcome& o, const std::string& metric) {
  const TrainerAdapter* adapter = o.spec ? o.spec->trainer_adapter : nullptr;
  const std::string how = adapter ? adapter->how_to_report(metric) : "";
  return how.empty() ? "" : " (" + adapter->name() + ": " + how + ")";
}

std::vector<std::pair<long long, double>> points(const StepCurve& c, const std::string& metric) {
  std::vector<std::pair<long long, double>> out;
  for (const auto& [step, m] : c)
    if (auto v = metric_value(m, metric)) out.emplace_back(step, *v);
  return out;
}

// How finely a curve was logged (0: full floats), and where, for the message that says a failing
// tolerance finer than that judged the rounding.
struct LoggedResolution {
  double value = 0;
  std::string where;
};
LoggedResolution coarser(const LoggedResolution& a, const LoggedResolution& b) { return a.value >= b.value ? a : b; }

// How finely a phase's curve `c` logged `metric`. The Hugging Face Trainer before transformers 5
// rounded the loss in trainer_state.json to 4 decimals (5.17 writes full floats, measured): a
// curve from there whose every loss is a multiple of 1e-4 was rounded. Megatron's iteration line,
// read when its TensorBoard folder has no loss, prints the loss to 7 significant digits and the
// grad norm to 3 decimals.
LoggedResolution logged_resolution(const Target& t, const StepCurve& c, const std::string& metric) {
  if (!t.spec) return {};
  const MetricsSource& source = t.spec->outputs.metrics;
  if (source.kind == MetricsSource::kHfTrainerState && metric == "loss") {
    for (const auto& [step, m] : c) {
      const double scaled = m.loss / kTrainerStateLossResolution;
      if (std::isfinite(scaled) && std::fabs(scaled - std::round(scaled)) > 1e-3) return {};
    }
    return {kTrainerStateLossResolution, "trainer_state.json"};
  }
  std::string why_not;
  if (source.kind != MetricsSource::kMegatron || megatron_tensorboard(source, t.paths(), t.window, nullptr, why_not))
    return {};
  // Megatron's iteration line: `lm loss: %.6E` (7 significant digits), `grad norm: %.3f`.
  if (metric == "grad_norm") return {1e-3, "Megatron's iteration line, 3 decimals"};
  double largest = 0;
  for (const auto& [step, m] : c)
    if (const auto v = metric_value(m, metric); v && std::isfinite(*v)) largest = std::max(largest, std::fabs(*v));
  return {largest * 1e-6, "Megatron's iteration line, 7 significant digits"};
}

// What a curve is compared with: another phase's curve (each step one value), or a golden file
// (each step one value, or a band over several runs).
struct Reference {
  std::string label;
  std::map<long long, GoldenBand> values;  // the steps with the metric
  std::set<long long> steps;               // every step it has, with the metric or without
  bool band = false;                       // some step's min differs from its max
};

Reference reference_of(const StepCurve& c, const std::string& metric, const std::string& label) {
  Reference r{label, {}, {}, false};
  for (const auto& [step, m] : c) {
    r.steps.insert(step);
    if (const auto v = metric_value(m, metric); v && (metric != "grad_norm" || m.has_grad_norm))
      r.values[step] = {*v, *v};
  }
  return r;
}

// `path` as the check's golden; `written` is the path as the matrix wrote it (with {hardware}).
Reference golden_reference(const std::string& path, const std::string& written) {
  std::error_code ec;
  if (written.find("{hardware}") != std::string::npos && !fs::exists(path, ec))
    throw Failure{"no golden file for this hardware (" + this_hardware().name +
                      ", {hardware} = " + this_hardware().slug + "): " + path +
                      " does not exist; meshtest golden regen records one (docs/matrix.md)",
                  ""};
  try {
    const GoldenCurve golden = read_golden_curve(path);
    Reference r{"golden " + path, golden.steps, {}, false};
    for (const auto& [step, b] : golden.steps) r.steps.insert(step), r.band = r.band || b.min != b.max;
    return r;
  } catch (const MetricsError& e) {
    throw Failure{e.what(), ""};
  }
}

// One step's comparison with the reference's value or band: the distance outside it (0 inside)
// and the tolerance at the end it is nearer, atol + rtol x |end|. A non-finite value or reference
// never matches, except exactly.
struct StepComparison {
  double edge = 0, diff = 0, tolerance = 0;
  bool ok = false;
};

StepComparison compare_step(double a, const GoldenBand& b, double rtol, double atol, bool exact) {
  StepComparison c;
  c.edge = a < b.min ? b.min : a > b.max ? b.max : (b.min == b.max ? b.min : a);
  c.diff = b.min == b.max ? std::fabs(a - b.min) : a < b.min ? b.min - a : a > b.max ? a - b.max : 0;
  if (std::isnan(a)) c.diff = NAN, c.edge = b.min;
  c.tolerance = exact ? 0.0 : atol + rtol * std::fabs(c.edge);
  c.ok = exact ? (b.min == b.max ? a == b.min : b.min <= a && a <= b.max)
               : std::isfinite(a) && std::isfinite(c.edge) && c.diff <= c.tolerance;
  return c;
}

// The first mismatch's message: "step 3: loss 4.01 in phase train vs 4 in baseline ...: |diff| ..."
Finding mismatch(long long step, double a, const GoldenBand& b, const StepComparison& c, const std::string& metric,
                 const std::string& got_label, const Reference& want, double rtol, double atol, bool exact) {
  const bool band = b.min != b.max;
  std::string m = "step " + std::to_string(step) + ": " + metric + " " + num(a) + " in " + got_label + " vs ";
  m += band ? "band [" + num(b.min) + ", " + num(b.max) + "] of " + want.label + ": " + sci(c.diff) + " outside it"
            : num(b.min) + " in " + want.label + ": |diff| " + sci(c.diff);
  m += exact ? (band ? " (exact: inside the band required)" : " (exact match required)")
             : " > " + tolerance_text(atol, rtol, c.edge);
  Finding f{m, ""};
  f.step = step, f.value = a, f.reference = c.edge, f.tolerance = c.tolerance;
  return f;
}

// A step of the subject the reference lacks, or has without `metric`: no matter of tolerance.
[[noreturn]] void missing_in_reference(long long step, const std::string& metric, const std::string& got_label,
                                       const Reference& want) {
  if (want.steps.count(step))
    throw Finding{
        got_label + " has " + metric + " at step " + std::to_string(step) + " but " + want.label + " has none there",
        ""};
  throw Finding{got_label + " has step " + std::to_string(step) + " but " + want.label + " has steps " +
                    std::to_string(*want.steps.begin()) + "-" + std::to_string(*want.steps.rbegin()),
                ""};
}

// Compares a curve with its reference step by step over the subject's steps. Both curves and the
// band go into `result`, so a report can draw what was judged. `hint` ends the message when the
// subject reports no `metric` at all. `resolution`: how finely either curve was logged; a
// failure whose tolerance is finer says it judged the rounding.
void compare_curves(const StepCurve& got, const Reference& want, const std::string& metric,
                    const std::string& got_label, double rtol, double atol, bool exact, const std::string& hint,
                    const LoggedResolution& resolution, CheckResult& result) {
  std::vector<std::pair<long long, double>> lo, hi;
  for (const auto& [step, b] : want.values) lo.emplace_back(step, b.min), hi.emplace_back(step, b.max);
  result.series = {{"subject", got_label, metric, points(got, metric)}, {"reference", want.label, metric, lo}};
  if (want.band) result.series.push_back({"reference-max", want.label + " (max)", metric, hi});
  result.band = std::make_pair(exact ? 0.0 : rtol, exact ? 0.0 : atol);
  std::string table;
  std::optional<Finding> first;
  int mismatches = 0, compared = 0;
  for (const auto& [step, m] : got) {
    const auto value = metric_value(m, metric);
    if (!value) continue;  // a step without validation
    ++compared;
    const auto it = want.values.find(step);
    if (it == want.values.end()) {
      result.margin.reset();  // a missing step is no matter of tolerance
      missing_in_reference(step, metric, got_label, want);
    }
    const double a = *value;
    const StepComparison c = compare_step(a, it->second, rtol, atol, exact);
    if (!exact) widen_margin(result, std::isfinite(a) ? c.diff : NAN, c.tolerance);
    char row[200];
    if (want.band)
      std::snprintf(row, sizeof(row), "%6lld  %14.8g  [%.8g, %.8g]  %10.3e%s\n", step, a, it->second.min,
                    it->second.max, c.diff, c.ok ? "" : "  <-");
    else
      std::snprintf(row, sizeof(row), "%6lld  %14.8g  %14.8g  %10.3e%s\n", step, a, it->second.min, c.diff,
                    c.ok ? "" : "  <-");
    table += row;
    if (c.ok) continue;
    ++mismatches;
    if (!first) first = mismatch(step, a, it->second, c, metric, got_label, want, rtol, atol, exact);
  }
  if (compared == 0) {
    result.margin.reset();
    throw Failure{got_label + " reports no " + metric + hint, ""};
  }
  // A step the reference has inside the subject's own span, which the subject skipped (a
  // lost log line, a step that never ran) is no match: the comparison above saw only the rest.
  // Steps before or after the span are the subject's choice (a resumed run, a --stop-at).
  const long long from = got.begin()->first, to = got.rbegin()->first;
  for (const auto& [step, b] : want.values) {
    if (step < from || step > to) continue;
    auto it = got.find(step);
    if (it == got.end() || !metric_value(it->second, metric)) {
      result.margin.reset();  // a missing step is no matter of tolerance
      throw Finding{want.label + " has " + metric + " at step " + std::to_string(step) + " but " + got_label +
                        " skipped it (it has steps " + std::to_string(from) + "-" + std::to_string(to) + ")",
                    ""};
    }
  }
  if (first) {
    first->message += " (" + std::to_string(mismatches) + " of " + std::to_string(compared) + " steps differ)";
    if (resolution.value > 0 && first->tolerance.value_or(0) < resolution.value)
      first->message += "; " + metric + " is logged rounded to " + sci(resolution.value) + " (" + resolution.where +
                        "), so a tolerance under that judges the rounding, not the run";
    first->details = "  step  " + got_label + "  |  " + want.label + "  |  |diff|\n" + table;
    throw *first;
  }
}

// The steps that reported `metric` (a trainer that reports only the loss has no grad_norm step).
std::map<long long, double> values_of(const StepCurve& c, const std::string& metric) {
  std::map<long long, double> out;
  for (const auto& [step, m] : c)
    if (const auto v = metric_value(m, metric); v && (metric != "grad_norm" || m.has_grad_norm)) out[step] = *v;
  return out;
}

}  // namespace

// ---- the checks ------------------------------------------------------------------

void check_loss_finite(const CaseOutcome& o, const CheckSpec& spec, const CheckSources&, CheckResult&) {
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

void check_loss_decreases(const CaseOutcome& o, const CheckSpec& spec, const CheckSources&, CheckResult& result) {
  const Target t = subject(o, spec);
  const StepCurve c = read_metrics(t);
  const double factor = spec.params.factor.value();
  const double first = c.begin()->second.loss, last = c.rbegin()->second.loss;
  // The margin here: the drop required over the drop seen.
  const double required = (1 - factor) * std::fabs(first), seen = first - last;
  result.margin = seen > 0 ? required / seen : INFINITY;
  if (!(last <= factor * first)) {
    Finding f{t.label + ": loss went " + num(first) + " (step " + std::to_string(c.begin()->first) + ") -> " +
                  num(last) + " (step " + std::to_string(c.rbegin()->first) + "); expected <= " + num(factor) + " x " +
                  num(first) + " = " + num(factor * first),
              ""};
    f.step = c.rbegin()->first, f.value = last, f.reference = factor * first;
    throw f;
  }
}

void check_loss_matches(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result) {
  const Target t = subject(o, spec);
  const StepCurve got = read_metrics(t);
  const std::string metric = spec.params.metric.value();
  check_metric_name(metric);
  Reference want;
  LoggedResolution resolution;
  if (spec.params.golden) {
    want = golden_reference(golden_path(o, spec), *spec.params.golden);
  } else {
    const auto ref = reference(o, spec, from);
    if (!ref) throw Failure{"loss_matches needs baseline, against or golden", ""};
    const StepCurve curve = read_metrics(*ref);
    want = reference_of(curve, metric, ref->label);
    resolution = logged_resolution(*ref, curve, metric);
  }
  if (spec.params.curve_rule) {
    judge_by_rule(*spec.params.curve_rule,
                  {values_of(got, metric), want.values, metric, t.label, want.label, report_hint(o, metric)}, result);
    return;
  }
  compare_curves(got, want, metric, t.label, spec.params.rtol.value(), spec.params.atol.value(),
                 spec.params.exact.value(), report_hint(o, metric),
                 coarser(resolution, logged_resolution(t, got, metric)), result);
}

void check_resume_matches(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result) {
  const Target t = subject(o, spec);
  const auto ref = reference(o, spec, from);
  if (!ref) throw Failure{"resume_matches needs baseline (the uninterrupted run) or against", ""};
  const StepCurve got = read_metrics(t);
  if (got.begin()->first <= 1)
    throw Finding{
        t.label + " started at step " + std::to_string(got.begin()->first) + ": it did not resume from a checkpoint",
        ""};
  const std::string metric = spec.params.metric.value();
  check_metric_name(metric);
  const StepCurve want = read_metrics(*ref);
  compare_curves(got, reference_of(want, metric, ref->label + " (uninterrupted)"), metric, t.label + " (resumed)",
                 spec.params.rtol.value(), spec.params.atol.value(), spec.params.exact.value(), report_hint(o, metric),
                 coarser(logged_resolution(t, got, metric), logged_resolution(*ref, want, metric)), result);
}

void check_drift(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result) {
  const DriftRule rule = drift_rule(spec.params);
  if (rule.min_runs < 1 || rule.window < rule.min_runs)
    throw Failure{"drift needs 1 <= min_runs <= window, got min_runs " + std::to_string(rule.min_runs) + ", window " +
                      std::to_string(rule.window),
                  ""};
  if (!from.history.runs) {
    result.judged = false;
    result.message = "not judged: this run has no history (--history or MESHTEST_HISTORY)";
    return;
  }
  // This run as the history will hold it, judged on its loss curves alone: the other checks
  // say whether it passed.
  CaseRun run;
  run.commit = from.history.commit;
  run.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  run.status = "passed", run.met = true;
  for (const auto& p : o.phases) {
    if (!p.ran) continue;
    for (const auto& [step, m] : read_metrics(target_of(o, p, "phase " + p.name)))
      if (std::isfinite(m.loss)) run.curves[p.name + "/loss"].emplace_back(step, m.loss);
  }
  const std::vector<CaseRun> earlier = from.history.runs(o.spec->id, 2 * rule.window + 8);
  const auto references = drift_references(run, earlier, rule);
  if (static_cast<int>(references.size()) < rule.min_runs) {
    result.judged = false;
    result.message = "not judged: " + std::to_string(references.size()) + " green run" +
                     (references.size() == 1 ? "" : "s") + " of this case at other commits in the history, " +
                     std::to_string(rule.min_runs) + " needed";
    return;
  }
  // A curve the references lack (a renamed phase) has no band: that is no pass.
  auto has_band = [&](const auto& curve) {
    int having = 0;
    for (const CaseRun* r : references) having += r->curves.count(curve.first) ? 1 : 0;
    return having >= rule.min_runs;
  };
  if (std::none_of(run.curves.begin(), run.curves.end(), has_band)) {
    std::string names;
    for (const auto& [name, curve] : run.curves) names += (names.empty() ? "" : ", ") + name;
    throw Failure{"no loss curve of this run (" + (names.empty() ? std::string("none") : names) + ") is in " +
                      std::to_string(rule.min_runs) + " of its " + std::to_string(references.size()) +
                      " green runs at other commits: nothing to judge drift by",
                  ""};
  }
  const std::optional<DriftFinding> drift = find_drift(run, earlier, rule);
  if (!drift) {
    result.message = "inside the band of its last " + std::to_string(references.size()) + " green runs";
    return;
  }
  widen_margin(result, std::fabs(drift->value - drift->center), drift->half_width);
  Finding f{"drifted: " + drift->describe(), ""};
  f.step = drift->step, f.value = drift->value, f.reference = drift->center, f.tolerance = drift->half_width;
  throw f;
}

// ---- what `meshtest diff`, `golden export` and the reports read ------------------

std::map<long long, double> read_loss_curve(const std::string& phase_dir, const Outputs& outputs,
                                            const std::string& metric, const std::optional<TimeWindow>& window) {
  try {
    check_metric_name(metric);
    std::map<long long, double> out;
    const RunPaths paths{"", fs::path(phase_dir).parent_path().string(), phase_dir, {}};
    for (const auto& [step, m] : read_curve(outputs.metrics, paths, window)) {
      if (metric == "grad_norm" && !m.has_grad_norm) throw std::runtime_error(phase_dir + " reports no grad_norm");
      if (auto v = metric_value(m, metric)) out[step] = *v;
    }
    if (out.empty()) throw std::runtime_error(phase_dir + " reports no " + metric);
    return out;
  } catch (const Failure& f) {
    throw std::runtime_error(f.message);
  }
}

std::map<std::string, std::map<long long, double>> read_phase_curves(const std::string& phase_dir,
                                                                     const Outputs& outputs,
                                                                     const std::optional<TimeWindow>& window) {
  try {
    const RunPaths paths{"", fs::path(phase_dir).parent_path().string(), phase_dir, {}};
    const StepCurve curve = read_curve(outputs.metrics, paths, window);
    std::map<std::string, std::map<long long, double>> out;
    for (const auto& metric : kCurveMetrics)
      for (const auto& [step, m] : curve) {
        if (metric == "grad_norm" && !m.has_grad_norm) continue;  // a trainer that reports only the loss
        if (const auto v = metric_value(m, metric)) out[metric][step] = *v;
      }
    return out;
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

}  // namespace meshtest
