// The per-step metrics a training run reported, whatever wrote them (meshtrain's metrics.jsonl,
// a torchtitan console log, a user-patterned log, TensorBoard event files), and the one error
// every reader of such a source throws.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

namespace meshtest {

// Per step, the metrics a run reported: "loss", "grad_norm", and any others by name.
using MetricSeries = std::map<long long, std::map<std::string, double>>;

// A span of wall-clock time, in seconds since the epoch (both ends included): when one launch
// ran. A reader of a source that several launches write into (a TensorBoard folder two phases
// share) keeps what was written inside it.
struct TimeWindow {
  double from = 0;
  double to = 0;
  bool holds(double t) const { return from <= t && t <= to; }
};

// Thrown when a metrics source cannot be read; the message names the file (and record/line).
class MetricsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace meshtest
