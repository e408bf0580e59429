// Megatron-LM's console line, TensorBoard tags and checkpoint folders (megatron.h).
#include "readers/megatron.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "readers/checkpoint_error.h"
#include "readers/log_lines.h"
#include "readers/log_metrics.h"

namespace fs = std::filesystem;

namespace meshtest {

namespace {

using log_lines::drop_rank_prefix;
using log_lines::is_digit;
using log_lines::is_not_available;
using log_lines::LineReader;
using log_lines::lower;
using log_lines::open_or_throw;
using log_lines::starts_with;
using log_lines::StepRecorder;
using log_lines::too_long_message;
using log_lines::trim_left;
using log_lines::Warnings;

// ---- the console line --------------------------------------------------------------------

// "elapsed time per iteration (ms)" -> "elapsed_time_per_iteration_ms".
std::string snake_case(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out.push_back(lower(c));
    else if (!out.empty() && out.back() != '_')
      out.push_back('_');
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

// The fields of training_log's line whose names meshtest reads under names of its own.
const std::map<std::string, std::string>& training_field_names() {
  static const std::map<std::string, std::string> names = {
      {"lm loss", "loss"},
      {"grad norm", "grad_norm"},
      {"num zeros", "num_zeros"},
      {"consumed samples", "consumed_samples"},
      {"learning rate", "learning_rate"},
      {"loss scale", "loss_scale"},
      {"params norm", "params_norm"},
      {"global batch size", "global_batch_size"},
      {"number of skipped iterations", "skipped_iterations"},
      {"number of nan iterations", "nan_iterations"},
      {"elapsed time per iteration (ms)", "iteration_time_ms"},
  };
  return names;
}

std::string_view trim(std::string_view text) {
  text = trim_left(text);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Takes a whole number at the front of `text` (after blanks); false when there is none.
bool take_count(std::string_view& text, long long& value) {
  text = trim_left(text);
  std::size_t end = 0;
  while (end < text.size() && is_digit(text[end])) ++end;
  if (end == 0 || end > 15) return false;
  value = std::stoll(std::string(text.substr(0, end)));
  text.remove_prefix(end);
  return true;
}

struct MegatronLine {
  enum Kind { kNone, kTraining, kValidation } kind = kNone;
  long long step = 0;
  std::map<std::string, double> metrics;
  // The fields training_log sums over its logging window (every loss: those printed after
  // `global batch size` and before `loss scale`); the others are the iteration's own.
  std::vector<std::string> summed;
};

// The metric name a field of `kind`'s line goes under ("" for a validation field not read).
std::string metric_name(MegatronLine::Kind kind, std::string_view key) {
  if (kind == MegatronLine::kTraining) {
    const auto& names = training_field_names();
    auto it = names.find(std::string(key));
    return it != names.end() ? it->second : snake_case(key);
  }
  // ` lm loss value: 1.0E+01 | lm loss PPL: 2.2E+04 |`
  for (std::string_view suffix : {std::string_view(" value"), std::string_view(" PPL")}) {
    if (key.size() <= suffix.size() || key.substr(key.size() - suffix.size()) != suffix) continue;
    const std::string name = snake_case(key.substr(0, key.size() - suffix.size()));
    const std::string base = name == "lm_loss" ? "validation_loss" : "validation_" + name;
    return suffix == " value" ? base : base + "_ppl";
  }
  return "";
}

// A training line starts (after an optional `[timestamp]`) with `iteration N/ T |`, a validation
// line with `validation loss at iteration N ... |` (`validation (suffix) loss at ...` too).
MegatronLine read_megatron_line(std::string_view text, long line_number, Warnings& warnings) {
  MegatronLine line;
  if (starts_with(text, "[")) {
    const std::size_t close = text.find(']');
    if (close != std::string_view::npos && close < 48) text = trim_left(text.substr(close + 1));
  }
  std::string_view rest = text;
  if (starts_with(rest, "iteration ")) {
    rest.remove_prefix(10);
    long long total = 0;
    if (!take_count(rest, line.step) || !starts_with(trim_left(rest), "/")) return line;
    rest = trim_left(rest).substr(1);
    if (!take_count(rest, total) || !starts_with(trim_left(rest), "|")) return line;
    line.kind = MegatronLine::kTraining;
  } else if (starts_with(rest, "validation")) {
    const std::size_t at = rest.find(" loss at iteration ");
    if (at == std::string_view::npos || at > 40) return line;
    rest.remove_prefix(at + 19);
    if (!take_count(rest, line.step)) return line;
    const std::size_t bar = rest.find('|');
    if (bar == std::string_view::npos) return line;
    rest.remove_prefix(bar);
    line.kind = MegatronLine::kValidation;
  } else {
    return line;
  }
  bool in_losses = false;
  for (std::size_t start = rest.find('|'); start != std::string_view::npos;) {
    const std::size_t end = rest.find('|', start + 1);
    const std::string_view field =
        trim(rest.substr(start + 1, end == std::string_view::npos ? std::string_view::npos : end - start - 1));
    start = end;
    if (field.empty()) continue;
    const std::size_t colon = field.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      warnings.add(line_number, "iteration " + std::to_string(line.step) + ": '" + std::string(field) +
                                    "' is not a `key: value` field, left out");
      continue;
    }
    const std::string_view key = trim(field.substr(0, colon)), value = trim(field.substr(colon + 1));
    if (key == "loss scale") in_losses = false;
    const bool summed = in_losses;
    if (key == "global batch size") in_losses = true;
    const std::string name = metric_name(line.kind, key);
    if (name.empty() || is_not_available(value)) continue;
    double number = 0;
    if (!log_lines::parse_number(value, number)) {
      warnings.add(line_number, "iteration " + std::to_string(line.step) + ": " + std::string(key) + " '" +
                                    std::string(value) + "' is not a number, left out");
      continue;
    }
    line.metrics[name] = number;
    if (summed && line.kind == MegatronLine::kTraining) line.summed.push_back(name);
  }
  return line;
}

// A Megatron that keeps its first iteration in the next line's sums (megatron.h): with one
// iteration per line, the second line of a launch prints the mean of both, so its own loss is
// twice that less the first's.
class FirstIterationKept {
 public:
  explicit FirstIterationKept(bool kept) : kept_(kept) {}
  void apply(MegatronLine& line) {
    if (!kept_ || line.kind != MegatronLine::kTraining) return;
    if (!first_) {
      first_ = line;
      return;
    }
    if (done_ || line.step == first_->step) return;
    done_ = true;
    if (line.step != first_->step + 1) return;  // a window of several iterations: a mean anyway
    for (const auto& name : line.summed) {
      const auto mine = line.metrics.find(name), theirs = first_->metrics.find(name);
      if (mine != line.metrics.end() && theirs != first_->metrics.end())
        mine->second = 2 * mine->second - theirs->second;
    }
  }

 private:
  bool kept_;
  bool done_ = false;
  std::optional<MegatronLine> first_;
};

// ---- the checkpoint folder ---------------------------------------------------------------

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";

// 4 from "iter_0000004"; none for any other name.
std::optional<long long> iteration_of(const std::string& name) {
  if (name.rfind("iter_", 0) != 0 || name.size() < 12 || name.size() > 20) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::string iteration_folder(long long n) {
  char name[32];
  std::snprintf(name, sizeof(name), "iter_%07lld", n);
  return name;
}

[[noreturn]] void refuse(const std::string& message) { throw CheckpointError(message); }

// Throws unless `dir` is one iteration saved in the torch_dist format.
void check_torch_dist(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind("mp_rank_", 0) == 0)
      refuse(dir.string() +
             ": a Megatron checkpoint in the `torch` format (mp_rank_XX/model_optim_rng.pt, one pickle per model-"
             "parallel rank); meshtest reads `torch_dist`, Megatron's default: drop --ckpt-format torch");
  const fs::path metadata = dir / "metadata.json";
  if (!fs::exists(metadata, ec)) {
    if (fs::exists(dir / ".metadata", ec))
      refuse(dir.string() +
             ": PyTorch DCP without Megatron's metadata.json: a `torch_dcp` or `fsdp_dtensor` checkpoint "
             "(--ckpt-format), whose keys are not Megatron's sharded state dict; meshtest reads `torch_dist`");
    refuse(dir.string() + ": neither metadata.json nor .metadata: not a finished Megatron torch_dist save");
  }
  std::ifstream in(metadata);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) refuse(metadata.string() + ": not JSON");
  const std::string backend = j.value("sharded_backend", std::string());
  if (backend != "torch_dist")
    refuse(metadata.string() + ": sharded_backend is '" + backend + "'; meshtest reads `torch_dist` (PyTorch DCP)");
  if (!fs::exists(dir / ".metadata", ec))
    refuse(dir.string() + ": metadata.json says torch_dist, but there is no .metadata (an unfinished save?)");
}

}  // namespace

// ---- public ----------------------------------------------------------------------------

MetricSeries parse_megatron_log(std::istream& in, const std::string& file, std::vector<std::string>* warnings,
                                bool first_iteration_kept) {
  Warnings warn(warnings, file);
  StepRecorder training(warn);
  FirstIterationKept first(first_iteration_kept);
  MetricSeries validation;  // an iteration's validation lines add up (one per loss or data set)
  LineReader reader(in);
  std::string line;
  std::size_t length = 0;
  while (reader.next(line, length)) {
    if (length > kMaxLogLineBytes) {
      warn.add(reader.number(), too_long_message(length));
      continue;
    }
    const std::string clean = strip_ansi(line);
    long rank = -1;
    const std::string_view text = trim_left(drop_rank_prefix(trim_left(clean), rank));
    MegatronLine read = read_megatron_line(text, reader.number(), warn);
    first.apply(read);
    if (read.kind == MegatronLine::kTraining) training.record(read.step, std::move(read.metrics), reader.number());
    if (read.kind == MegatronLine::kValidation)
      for (auto& [name, value] : read.metrics) validation[read.step][name] = value;
  }
  MetricSeries series = std::move(training.series());
  for (auto& [step, metrics] : validation)
    for (auto& [name, value] : metrics) series[step][name] = value;
  warn.finish();
  return series;
}

MetricSeries read_megatron_log(const std::string& path, std::vector<std::string>* warnings, bool first_iteration_kept) {
  std::ifstream in = open_or_throw(path);
  return parse_megatron_log(in, path, warnings, first_iteration_kept);
}

MegatronStart read_megatron_start(const std::string& rank0_log) {
  MegatronStart start;
  std::ifstream in(rank0_log, std::ios::binary);
  if (!in) return start;
  LineReader reader(in);
  std::string line;
  std::size_t length = 0;
  // Rank 0 prints both before its first iteration, the arguments first (about 1000 lines in all).
  for (int lines = 0; lines < 100000 && reader.next(line, length); ++lines) {
    if (line.find(kMegatronFirstIterationMarker) != std::string::npos) {
      start.keeps_first_iteration = true;
      break;
    }
    std::string_view text = trim_left(line);
    if (!start.seq_length && starts_with(text, "seq_length ")) {
      text.remove_prefix(11);
      while (!text.empty() && (text.front() == '.' || text.front() == ' ')) text.remove_prefix(1);
      long long value = 0;
      if (take_count(text, value) && trim(text).empty() && value > 0) start.seq_length = value;
    }
  }
  return start;
}

const std::map<std::string, std::string>& megatron_tensorboard_tags() {
  static const std::map<std::string, std::string> tags = {
      {"lm loss", "loss"},
      {"grad-norm", "grad_norm"},
      {"num-zeros", "num_zeros"},
      {"lm loss validation", "validation_loss"},
      {"learning-rate", "learning_rate"},
      {"loss-scale", "loss_scale"},
      {"params-norm", "params_norm"},
  };
  return tags;
}

std::string megatron_step_dir(const std::string& path, long long& step) {
  std::error_code ec;
  const fs::path dir(path);
  if (!fs::is_directory(dir, ec)) return path;
  if (const auto n = iteration_of(dir.lexically_normal().filename().string())) {
    if (step >= 0 && step != *n)
      refuse(path + ": is " + iteration_folder(*n) + ", but step " + std::to_string(step) + " was asked for");
    check_torch_dist(dir);
    step = -1;
    return path;
  }
  std::map<long long, std::string> iterations;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (const auto n = iteration_of(entry.path().filename().string()); n && entry.is_directory())
      iterations[*n] = entry.path().filename().string();
  const bool tracked = fs::exists(dir / kTracker, ec);
  if (!tracked && iterations.empty()) return path;  // not Megatron's
  std::string listing;
  for (const auto& [n, name] : iterations) listing += (listing.empty() ? "" : ", ") + name;
  const std::string found = " (found: " + (listing.empty() ? std::string("none") : listing) + ")";
  long long chosen = step;
  if (chosen < 0) {
    if (!tracked) refuse(path + ": no " + kTracker + ", which Megatron writes once a save is finished" + found);
    std::ifstream in(dir / kTracker);
    std::string text;
    std::getline(in, text);
    const std::string_view named = trim(text);
    if (named == "release")
      refuse((dir / kTracker).string() + " names a `release` checkpoint; meshtest reads iter_NNNNNNN saves");
    std::string_view digits = named;
    if (!take_count(digits, chosen) || !digits.empty())
      refuse((dir / kTracker).string() + ": '" + std::string(named) + "' is not an iteration number");
  }
  if (!iterations.count(chosen))
    refuse(path + ": no " + iteration_folder(chosen) + " folder" +
           (step >= 0 ? std::string() : std::string(", which ") + kTracker + " names") + found);
  check_torch_dist(dir / iterations.at(chosen));
  step = -1;
  return (dir / iterations.at(chosen)).string();
}

}  // namespace meshtest
