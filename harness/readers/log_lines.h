// The building blocks every console-log reader shares (log_metrics.cpp, megatron_log.cpp):
// lines read without ever holding more than kMaxLogLineBytes of one, warnings counted and
// capped, steps recorded with the later line winning, and numbers as logs print them. Internal
// to readers/; log_metrics.h says what the readers built from them promise.
#pragma once

#include <cstddef>
#include <fstream>
#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "readers/metric_series.h"

namespace meshtest {

constexpr std::size_t kMaxLogLineBytes = 64 * 1024;  // a longer line is skipped with a warning
constexpr std::size_t kMaxLogWarnings = 50;          // then one line counts the rest

namespace log_lines {

// ---- lines and warnings ----------------------------------------------------------

// Hands out a stream's lines one at a time, never holding more than kMaxLogLineBytes of one:
// a file of binary garbage without a newline must not be read into memory whole.
class LineReader {
 public:
  explicit LineReader(std::istream& in) : buf_(in.rdbuf()) {}

  // The next line without its '\n' (and a trailing '\r'); `length` is its full length, which
  // is more than line.size() when it was cut at kMaxLogLineBytes. False at the end.
  bool next(std::string& line, std::size_t& length) {
    using traits = std::char_traits<char>;
    line.clear();
    length = 0;
    if (buf_ == nullptr) return false;
    int c = buf_->sbumpc();
    if (traits::eq_int_type(c, traits::eof())) return false;
    while (!traits::eq_int_type(c, traits::eof()) && c != '\n') {
      if (line.size() < kMaxLogLineBytes) line.push_back(static_cast<char>(c));
      ++length;
      c = buf_->sbumpc();
    }
    if (length == line.size() && !line.empty() && line.back() == '\r') {
      line.pop_back();
      --length;
    }
    ++number_;
    return true;
  }
  long number() const { return number_; }  // of the line last returned, from 1

 private:
  std::streambuf* buf_;
  long number_ = 0;
};

// Collects "<file>:<line>: message", at most kMaxLogWarnings, then counts the rest.
class Warnings {
 public:
  Warnings(std::vector<std::string>* out, const std::string& file) : out_(out), file_(file) {}
  void add(long line, const std::string& message) {
    if (out_ == nullptr) return;
    if (added_ < kMaxLogWarnings)
      out_->push_back(file_ + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + message);
    else
      ++dropped_;
    ++added_;
  }
  void finish() {
    if (out_ != nullptr && dropped_ > 0)
      out_->push_back(file_ + ": " + std::to_string(dropped_) + " more warnings not shown");
  }

 private:
  std::vector<std::string>* out_;
  std::string file_;
  std::size_t added_ = 0;
  std::size_t dropped_ = 0;
};

class StepRecorder {
 public:
  explicit StepRecorder(Warnings& warnings) : warnings_(warnings) {}
  void record(long long step, std::map<std::string, double> metrics, long line) {
    auto [it, fresh] = first_line_.emplace(step, line);
    if (!fresh) {
      warnings_.add(line, "step " + std::to_string(step) + " logged again (before at line " +
                              std::to_string(it->second) + "); this later line wins");
      it->second = line;
    }
    series_[step] = std::move(metrics);
  }
  MetricSeries& series() { return series_; }

 private:
  Warnings& warnings_;
  MetricSeries series_;
  std::map<long long, long> first_line_;
};

// ---- numbers -----------------------------------------------------------------------
// "line of N bytes skipped (longer than ...)".
std::string too_long_message(std::size_t length);

// ---- numbers and text ----------------------------------------------------------------

bool is_digit(char c);
char lower(char c);  // ASCII
// A whole token as a number (log_metrics.h's parse_log_number).
bool parse_number(std::string_view token, double& value);
// A step: a whole number that a long long holds exactly (through a double, so below 2^53).
bool parse_step(std::string_view token, long long& step);
bool is_not_available(std::string_view token);  // "N/A"
std::string_view trim_left(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);
// Removes torchrun's `[rankN]:` (from --tee) when present, setting `rank` (else -1).
std::string_view drop_rank_prefix(std::string_view text, long& rank);
// Opens `path` for reading; throws MetricsError("cannot read <path>").
std::ifstream open_or_throw(const std::string& path);

}  // namespace log_lines
}  // namespace meshtest
