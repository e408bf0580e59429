// Reading per-step metrics out of console logs (log_metrics.h says what is promised).
#include "readers/log_metrics.h"

#include "readers/log_lines.h"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <istream>
#include <limits>
#include <map>
#include <string>
#include <string_view>

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

// ---- torchtitan's line -------------------------------------------------------------

// The logged message of a line, after the `[rankN]:` and `[titan] <asctime> - <name> - INFO - `
// prefixes; empty for a torchtitan line of another level (metrics are logged at INFO).
std::string_view message_of(std::string_view line, long& rank) {
  std::string_view text = trim_left(drop_rank_prefix(trim_left(line), rank));
  if (!starts_with(text, "[titan]")) return text;
  std::size_t at = text.find(" - INFO - ");
  if (at == std::string_view::npos) return {};
  return trim_left(text.substr(at + 10));
}

// One `key: value` field of the line.
struct Field {
  std::string_view key;
  std::string_view value;
};

// Splits "k1: v1  k2: v2 ..." into fields (a value never holds a space). False when text is
// left that does not have that shape; the fields before it are kept.
bool split_fields(std::string_view text, std::vector<Field>& fields) {
  fields.clear();
  for (text = trim_left(text); !text.empty(); text = trim_left(text)) {
    std::size_t colon = text.find(':');
    if (colon == 0 || colon == std::string_view::npos) return false;
    std::string_view key = text.substr(0, colon);
    if (key.find_first_of(" \t") != std::string_view::npos) return false;
    text = trim_left(text.substr(colon + 1));
    std::size_t end = std::min(text.find(' '), text.find('\t'));
    std::string_view value = text.substr(0, end);
    if (value.empty()) return false;
    fields.push_back({key, value});
    text = end == std::string_view::npos ? std::string_view() : text.substr(end);
  }
  return true;
}

// Adds one field's metrics to `metrics`; false when its value is not a number.
// `memory: 9.46GiB(64.99%)` gives memory_gib and memory_pct; `x: 0.17%` gives x_pct.
bool add_field(const Field& field, std::map<std::string, double>& metrics) {
  std::string key(field.key);
  std::string_view value = field.value;
  if (is_not_available(value)) return true;
  double number = 0;
  if (key == "memory") {
    std::size_t unit = value.find("GiB");
    if (unit == std::string_view::npos || !log_lines::parse_number(value.substr(0, unit), number)) return false;
    metrics["memory_gib"] = number;
    std::string_view share = value.substr(unit + 3);
    if (share.empty()) return true;
    if (share.size() < 3 || share.front() != '(' || share.substr(share.size() - 2) != "%)" ||
        !log_lines::parse_number(share.substr(1, share.size() - 3), number))
      return false;
    metrics["memory_pct"] = number;
    return true;
  }
  if (!value.empty() && value.back() == '%') {
    value.remove_suffix(1);
    key += "_pct";
  }
  if (!log_lines::parse_number(value, number)) return false;
  metrics[key] = number;
  return true;
}

// What one torchtitan line held; `kind` is kNone for every other line.
struct TitanLine {
  enum Kind { kNone, kTraining, kValidation } kind = kNone;
  long long step = 0;
  std::map<std::string, double> metrics;
};

TitanLine read_titan_line(std::string_view message, long line_number, Warnings& warnings) {
  TitanLine line;
  std::string_view rest = message;
  if (starts_with(rest, "validate step:")) {
    line.kind = TitanLine::kValidation;
    rest.remove_prefix(9);  // "validate "
  } else if (starts_with(rest, "step:")) {
    line.kind = TitanLine::kTraining;
  } else {
    return line;
  }
  std::vector<Field> fields;
  bool whole = split_fields(rest, fields);
  if (fields.empty() || !log_lines::parse_step(fields.front().value, line.step)) {
    warnings.add(line_number, "a step line without a readable step number, skipped");
    line.kind = TitanLine::kNone;
    return line;
  }
  if (!whole)
    warnings.add(line_number, "step " + std::to_string(line.step) + ": text after the last `key: value` field ignored");
  for (std::size_t i = 1; i < fields.size(); ++i) {
    if (!add_field(fields[i], line.metrics))
      warnings.add(line_number, "step " + std::to_string(line.step) + ": " + std::string(fields[i].key) + " '" +
                                    std::string(fields[i].value) + "' is not a number, left out");
  }
  return line;
}

// ---- the user's pattern --------------------------------------------------------------

bool valid_group_name(const std::string& name) {
  if (name.empty() || is_digit(name[0])) return false;
  for (char c : name)
    if (!(is_digit(c) || c == '_' || (lower(c) >= 'a' && lower(c) <= 'z'))) return false;
  return true;
}

// Turns `(?P<name>` / `(?<name>` into plain groups for std::regex, counting every capturing
// group on the way so that each name gets the index std::regex will give it. Escaped
// characters, bracket classes (where `(` is literal) and `(?:`, `(?=`, `(?!` are not counted.
class GroupTranslator {
 public:
  // Translates `pattern` from `start` on (past a leading flag group the caller took).
  GroupTranslator(const std::string& pattern, std::size_t start) : in_(pattern), i_(start) {}

  void run() {
    while (i_ < in_.size()) {
      char c = in_[i_];
      if (c == '\\')
        escape();
      else if (c == '[')
        bracket_class();
      else if (c == '(')
        open_paren();
      else
        out_.push_back(in_[i_++]);
    }
  }
  const std::string& translated() const { return out_; }
  const std::vector<std::pair<std::string, std::size_t>>& groups() const { return groups_; }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw MetricsError("log pattern '" + in_ + "': " + why); }

  void escape() {
    if (in_.compare(i_, 3, "\\k<") == 0) {
      i_ += 3;
      back_reference('>');
      return;
    }
    out_.append(in_, i_, 2);  // `\` and what it escapes (or only `\` at the end: std::regex says no)
    i_ += 2;
  }

  // `[...]`: copied as is. `]` right after `[` or `[^` ends the class, as ECMAScript has it;
  // `[:alpha:]`-style names inside are skipped whole.
  void bracket_class() {
    std::size_t j = i_ + 1;
    if (j < in_.size() && in_[j] == '^') ++j;
    while (j < in_.size() && in_[j] != ']') {
      if (in_[j] == '\\') {
        j += 2;
      } else if (in_[j] == '[' && j + 1 < in_.size() && (in_[j + 1] == ':' || in_[j + 1] == '.' || in_[j + 1] == '=')) {
        std::size_t close = in_.find(std::string{in_[j + 1], ']'}, j + 2);
        j = close == std::string::npos ? in_.size() : close + 2;
      } else {
        ++j;
      }
    }
    j = std::min(j + 1, in_.size());
    out_.append(in_, i_, j - i_);
    i_ = j;
  }

  void open_paren() {
    if (in_.compare(i_, 4, "(?P<") == 0) return named_group(4);
    if (in_.compare(i_, 4, "(?P=") == 0) {
      i_ += 4;
      return back_reference(')');
    }
    if (in_.compare(i_, 3, "(?<") == 0 && in_.compare(i_, 4, "(?<=") != 0 && in_.compare(i_, 4, "(?<!") != 0)
      return named_group(3);
    if (in_.compare(i_, 2, "(?") == 0) {  // (?: (?= (?! : not capturing; anything else std::regex judges
      out_.append("(?");
      i_ += 2;
      return;
    }
    ++captures_;
    out_.push_back('(');
    ++i_;
  }

  std::string name_until(char end) {
    std::size_t close = in_.find(end, i_);
    if (close == std::string::npos) fail("unterminated group name");
    std::string name = in_.substr(i_, close - i_);
    if (!valid_group_name(name)) fail("bad group name '" + name + "'");
    i_ = close + 1;
    return name;
  }

  void named_group(std::size_t prefix) {
    i_ += prefix;
    std::string name = name_until('>');
    for (const auto& group : groups_)
      if (group.first == name) fail("group '" + name + "' named twice");
    groups_.emplace_back(name, ++captures_);
    out_.push_back('(');
  }

  // `(?P=name)` or `\k<name>`: a back-reference by number, wrapped so a digit after it stays a digit.
  void back_reference(char end) {
    std::string name = name_until(end);
    for (const auto& group : groups_)
      if (group.first == name) {
        out_ += "(?:\\" + std::to_string(group.second) + ")";
        return;
      }
    fail("back-reference to '" + name + "' before (or without) its group");
  }

  const std::string& in_;
  std::size_t i_;
  std::string out_;
  std::size_t captures_ = 0;
  std::vector<std::pair<std::string, std::size_t>> groups_;
};

// libstdc++'s std::regex recurses once or more per character matched: a 64 KiB line needs tens
// of MiB of stack (hundreds under ASan). The pattern reader therefore runs on a thread of its
// own with a stack this big (address space; only pages touched are used).
constexpr std::size_t kRegexStackBytes = std::size_t{512} << 20;
// Without such a thread (pthread_create refused), lines are bounded to what 8 MiB survives.
constexpr std::size_t kMaxLineOnCallerStack = 1024;

// Runs `work` on a thread with a stack of `stack_bytes`; false when no such thread could be made.
// What `work` throws is thrown here.
bool run_on_big_stack(const std::function<void()>& work, std::size_t stack_bytes) {
  struct Job {
    const std::function<void()>* work;
    std::exception_ptr error;
  } job{&work, nullptr};
  auto body = [](void* arg) -> void* {
    Job* j = static_cast<Job*>(arg);
    try {
      (*j->work)();
    } catch (...) {
      j->error = std::current_exception();
    }
    return nullptr;
  };
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_t thread;
  bool started = pthread_attr_setstacksize(&attr, stack_bytes) == 0 && pthread_create(&thread, &attr, body, &job) == 0;
  pthread_attr_destroy(&attr);
  if (!started) return false;
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
  return true;
}

// The metrics of one matched line; false (with a warning) when its step is unreadable.
bool read_pattern_match(const std::vector<std::pair<std::string, std::string>>& groups, long line_number,
                        Warnings& warnings, long long& step, std::map<std::string, double>& metrics) {
  bool have_step = false;
  for (const auto& [name, text] : groups) {
    if (name == "step") {
      have_step = log_lines::parse_step(text, step);
      continue;
    }
    double value = 0;
    if (is_not_available(text)) continue;
    if (log_lines::parse_number(text, value))
      metrics[name] = value;
    else
      warnings.add(line_number, name + " '" + text.substr(0, 80) + "' is not a number, left out");
  }
  if (!have_step) warnings.add(line_number, "the pattern matched but the step is not a whole number; skipped");
  return have_step;
}

MetricSeries parse_pattern_lines(std::istream& in, const LogPattern& pattern, Warnings& warnings,
                                 std::size_t max_line) {
  StepRecorder steps(warnings);
  LineReader reader(in);
  std::string line;
  std::size_t length = 0;
  std::vector<std::pair<std::string, std::string>> groups;
  while (reader.next(line, length)) {
    if (length > max_line) {
      warnings.add(reader.number(), "line of " + std::to_string(length) + " bytes skipped (longer than " +
                                        std::to_string(max_line) + ")");
      continue;
    }
    if (!pattern.match(strip_ansi(line), groups)) continue;
    long long step = 0;
    std::map<std::string, double> metrics;
    if (read_pattern_match(groups, reader.number(), warnings, step, metrics))
      steps.record(step, std::move(metrics), reader.number());
  }
  return std::move(steps.series());
}

// The index after the escape sequence at `at` (an ESC); a sequence cut by the line's end ends it.
std::size_t skip_escape(const std::string& line, std::size_t at) {
  auto in = [](char c, int low, int high) { return c >= low && c <= high; };
  std::size_t i = at + 1;
  if (i < line.size() && line[i] == '[') {  // CSI: parameters, intermediates, one final byte 0x40-0x7E
    for (++i; i < line.size() && !in(line[i], 0x40, 0x7e); ++i) {
    }
    return i + 1;
  }
  if (i < line.size() && line[i] == ']') {  // OSC: up to BEL or ESC backslash
    for (++i; i < line.size(); ++i) {
      if (line[i] == '\x07') return i + 1;
      if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '\\') return i + 2;
    }
    return i;
  }
  while (i < line.size() && in(line[i], 0x20, 0x2f)) ++i;  // ESC, intermediates, one final byte
  return i + 1;
}

}  // namespace

// ---- public --------------------------------------------------------------------------

std::string strip_ansi(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] != '\x1b') {
      out.push_back(line[i++]);
      continue;
    }
    i = skip_escape(line, i);
  }
  return out;
}

bool parse_log_number(const std::string& token, double& value) { return log_lines::parse_number(token, value); }

MetricSeries parse_torchtitan_log(std::istream& in, const std::string& file, std::vector<std::string>* warnings,
                                  int rank) {
  Warnings warn(warnings, file);
  StepRecorder training(warn);
  StepRecorder validation(warn);
  LineReader reader(in);
  std::string line;
  std::size_t length = 0;
  while (reader.next(line, length)) {
    if (length > kMaxLogLineBytes) {
      warn.add(reader.number(), too_long_message(length));
      continue;
    }
    std::string clean = strip_ansi(line);
    long line_rank = -1;
    std::string_view message = message_of(clean, line_rank);
    if (rank >= 0 && line_rank >= 0 && line_rank != rank) continue;
    TitanLine titan = read_titan_line(message, reader.number(), warn);
    if (titan.kind == TitanLine::kTraining) training.record(titan.step, std::move(titan.metrics), reader.number());
    if (titan.kind == TitanLine::kValidation) validation.record(titan.step, std::move(titan.metrics), reader.number());
  }
  MetricSeries series = std::move(training.series());
  for (auto& [step, metrics] : validation.series()) {
    auto& into = series[step];
    for (auto& [name, value] : metrics)
      into["validation_" + name] = value;  // "validation_loss", as TensorBoard's and metrics.jsonl's
  }
  warn.finish();
  return series;
}

MetricSeries read_torchtitan_log(const std::string& path, std::vector<std::string>* warnings, int rank) {
  std::ifstream in = open_or_throw(path);
  return parse_torchtitan_log(in, path, warnings, rank);
}

LogPattern::LogPattern(const std::string& pattern) : pattern_(pattern) {
  bool ignore_case = pattern.compare(0, 4, "(?i)") == 0;  // Python's inline flag; std::regex has a flag
  GroupTranslator translator(pattern, ignore_case ? 4 : 0);
  translator.run();
  translated_ = translator.translated();
  groups_ = translator.groups();
  bool has_step = false;
  for (const auto& group : groups_) has_step = has_step || group.first == "step";
  if (!has_step) throw MetricsError("log pattern '" + pattern + "' has no (?P<step>...) group");
  try {
    regex_ = std::regex(translated_, ignore_case ? std::regex::ECMAScript | std::regex::icase : std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw MetricsError("log pattern '" + pattern + "' is not a valid regular expression: " + e.what());
  }
}

std::vector<std::string> LogPattern::names() const {
  std::vector<std::string> names;
  for (const auto& group : groups_) names.push_back(group.first);
  return names;
}

bool LogPattern::match(const std::string& line, std::vector<std::pair<std::string, std::string>>& groups) const {
  groups.clear();
  std::smatch match;
  if (!std::regex_search(line, match, regex_)) return false;
  for (const auto& [name, index] : groups_)
    if (match[index].matched) groups.emplace_back(name, match[index].str());
  return true;
}

MetricSeries parse_log_with_pattern(std::istream& in, const std::string& file, const LogPattern& pattern,
                                    std::vector<std::string>* warnings) {
  Warnings warn(warnings, file);
  MetricSeries series;
  auto parse = [&] { series = parse_pattern_lines(in, pattern, warn, kMaxLogLineBytes); };
  if (!run_on_big_stack(parse, kRegexStackBytes)) {
    warn.add(0, "no thread with a big stack for std::regex; lines over " + std::to_string(kMaxLineOnCallerStack) +
                    " bytes skipped");
    series = parse_pattern_lines(in, pattern, warn, kMaxLineOnCallerStack);
  }
  warn.finish();
  return series;
}

MetricSeries read_log_with_pattern(const std::string& path, const LogPattern& pattern,
                                   std::vector<std::string>* warnings) {
  std::ifstream in = open_or_throw(path);
  return parse_log_with_pattern(in, path, pattern, warnings);
}

}  // namespace meshtest
