// Megatron-LM's golden values (tests/functional_tests/test_cases/<model>/<test>/
// golden_values_<env>_<platform>.json): a JSON object of metric name -> {"start_step",
// "end_step", "step_interval", "values": {"<step>": number or "nan"}} (its
// python_test_utils/common.py, GoldenValueMetric). Megatron samples the steps {start_step} and
// every multiple of step_interval after it up to end_step, and writes "nan" where a step logged
// no value (the first half of a resumed run, num-zeros on skipped iterations). Read strictly:
// every error names the file and the metric, and a step of the grid without a value is named.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace meshtest {

struct GoldenValuesMetric {
  long long start_step = 0, end_step = 0, step_interval = 1;
  std::map<long long, double> values;  // "nan" as NaN
};

// Metric name ("lm loss") -> its steps, in the file's order.
using GoldenValues = std::vector<std::pair<std::string, GoldenValuesMetric>>;

// Throws MetricsError "FILE: ...": not JSON, not an object of metrics, an entry without
// start_step, end_step, step_interval or values, a step or value of the wrong kind, steps of the
// grid without a value or steps off it.
GoldenValues parse_golden_values(const std::string& text, const std::string& file);
GoldenValues read_golden_values(const std::string& path);

// Megatron's _infer_step_interval: the gcd of the gaps between `steps` other than `start`;
// with fewer than two of those, the gap from `start` to the one there is, else 1.
long long infer_step_interval(const std::vector<long long>& steps, long long start);

// Megatron's document for `metrics` (name -> step -> value, in the order given): start_step and
// end_step the first and last step, step_interval inferred as Megatron does, a non-finite value
// written as "nan" (JSON has no NaN; Megatron reads any string as inf), indented as Megatron's
// get_test_results_from_tensorboard_logs.py writes it.
nlohmann::ordered_json golden_values_json(
    const std::vector<std::pair<std::string, std::map<long long, double>>>& metrics);

}  // namespace meshtest
