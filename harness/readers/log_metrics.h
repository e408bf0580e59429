// Per-step metrics from a run's console log: torchtitan's metrics line, or any line format the
// user describes with a regular expression. Both readers promise:
// - ANSI escape sequences (colours, incl. 24-bit `\033[38;2;r;g;b m`) are removed before a line is
//   looked at; a trailing '\r' is ignored;
// - numbers may carry `,` thousands separators; `nan`, `inf`, `-inf` are values; `N/A` is "absent";
// - a step logged twice: the LATER line wins, whole (a run that resumed in the same log re-logs
//   steps, and the later values are the ones it continued from); a warning names both lines;
// - missing steps are fine (log_freq > 1);
// - a line longer than kMaxLogLineBytes is skipped with a warning, and never held in memory whole;
// - nothing in the input, binary garbage included, makes them crash; they throw MetricsError
//   only for a file that cannot be read (or, for LogPattern, a bad pattern).
// `warnings` (may be null) collects "<file>:<line>: what was skipped and why", at most
// kMaxLogWarnings of them plus one line counting the rest.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "readers/log_lines.h"  // kMaxLogLineBytes, kMaxLogWarnings
#include "readers/metric_series.h"

namespace meshtest {

// torchtitan's per-step line (torchtitan/components/metrics.py), with or without the
// `[rankN]:` (torchrun --tee) and `[titan] <asctime> - <name> - INFO - ` prefixes:
//   step: 14  loss:  3.24405  grad_norm:  0.8319  memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%
// Metric names: "loss", "grad_norm", "memory_gib" and "memory_pct" (from `memory: X GiB(Y%)`),
// "tps", "tflops", "mfu_pct" (`mfu: N/A` -> absent); any other `key: number` field under its key.
// Lines without grad_norm (torchtitan before mid-2025) and 7.4f losses are read the same.
// Validation lines (`validate step: N  loss: ...`) are not training steps: their fields go under
// step N with a "validation_" prefix ("validation_loss", "validation_memory_gib", ...), next to
// (never replacing) the training metrics of step N. "validation_loss" is the name every source
// gives the validation loss (TensorBoard's validation_metrics/loss, metrics.jsonl's field).
// A console of several ranks (torchrun --local-ranks-filter 0,1,...) prints every step once per
// rank: `rank` >= 0 keeps only the lines prefixed `[rank<rank>]:` (and lines without a prefix).
// Under pipeline parallelism pick the first rank of the last stage (where torchtitan's TensorBoard
// writer runs): other stages log a loss of -1. With `rank` -1 every line counts.
// The fields are taken apart by hand, not with std::regex (which recurses per character).
MetricSeries parse_torchtitan_log(std::istream& in, const std::string& file, std::vector<std::string>* warnings,
                                  int rank = -1);
// The same for a file; throws MetricsError("cannot read <path>") when it cannot be opened.
MetricSeries read_torchtitan_log(const std::string& path, std::vector<std::string>* warnings, int rank = -1);

// A user pattern (ECMAScript syntax, as std::regex reads it) with Python- or JS-style named
// groups `(?P<name>...)` / `(?<name>...)`. `step` is required (an integer, `,` separators
// allowed); every other named group is a metric under its name ("loss", "grad_norm", ...).
// Named back-references `(?P=name)` and `\k<name>` work too; a leading `(?i)` ignores case.
// The pattern is SEARCHED for in each line, colours stripped (like Python's re.search): anchor
// it with ^ when needed. A named group that did not take part in the match, or matched `N/A`,
// leaves its metric absent; one that matched something else than a number is left out with a
// warning (so a group used only for a back-reference costs a warning per line: use a plain group).
// Throws MetricsError, quoting the pattern, when it is not a valid regular expression, lacks a
// `step` group, or names a group twice or badly.
class LogPattern {
 public:
  explicit LogPattern(const std::string& pattern);

  const std::string& pattern() const { return pattern_; }
  // Group names in the order they open in the pattern, `step` included.
  std::vector<std::string> names() const;
  // The std::regex the pattern became (named groups turned into plain ones); for messages.
  const std::string& translated() const { return translated_; }

  // Searches one (already cleaned) line; on a match, fills name -> matched text for the
  // named groups that took part. It runs on the caller's stack, and std::regex may take over
  // 1 KiB of it per character: keep such lines short (the parse functions run it on a thread
  // with a 512 MiB stack).
  bool match(const std::string& line, std::vector<std::pair<std::string, std::string>>& groups) const;

 private:
  std::string pattern_;
  std::string translated_;
  std::vector<std::pair<std::string, std::size_t>> groups_;  // name, capture index
  std::regex regex_;
};

MetricSeries parse_log_with_pattern(std::istream& in, const std::string& file, const LogPattern& pattern,
                                    std::vector<std::string>* warnings);
// The same for a file; throws MetricsError("cannot read <path>") when it cannot be opened.
MetricSeries read_log_with_pattern(const std::string& path, const LogPattern& pattern,
                                   std::vector<std::string>* warnings);

// Building blocks, public for the tests.
// `line` without its ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL`, `ESC (B`-style).
std::string strip_ansi(const std::string& line);
// A whole token as a number: [+-] digits with optional `,` thousands groups, fraction, exponent;
// or nan / inf / infinity (any case, signed). False for anything else (`N/A` included).
bool parse_log_number(const std::string& token, double& value);

}  // namespace meshtest
