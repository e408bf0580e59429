#include "report/summary_view.h"

#include <cmath>
#include <limits>

using nlohmann::json;

namespace meshtest {

namespace {

// ---- one lenient accessor per JSON type: absent or mistyped gives the default ----

const json& field(const json& j, const char* key) {
  static const json null_json;
  if (!j.is_object()) return null_json;
  const auto it = j.find(key);
  return it == j.end() ? null_json : *it;
}

std::string text(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

std::optional<double> number(const json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

double number(const json& j, const char* key) { return number(field(j, key)).value_or(0); }

// An integer, or a float that is one within range (a cast of 1e300 would be undefined).
std::optional<long long> integer(const json& v) {
  if (v.is_number_integer()) return v.get<long long>();
  const std::optional<double> d = number(v);
  if (!d || *d != std::floor(*d) || std::fabs(*d) > 9e15) return std::nullopt;
  return static_cast<long long>(*d);
}

int small_integer(const json& j, const char* key, int fallback = 0) {
  const std::optional<long long> v = integer(field(j, key));
  if (!v || *v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) return fallback;
  return static_cast<int>(*v);
}

// true, or any non-zero number (an older writer's 1).
bool flag(const json& j, const char* key, bool fallback = false) {
  const json& v = field(j, key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  return fallback;
}

const json& list(const json& j, const char* key) {
  static const json empty = json::array();
  const json& v = field(j, key);
  return v.is_array() ? v : empty;
}

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  for (const auto& e : list(j, key))
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

// ---- the parts of a summary ----

// Rows [step, a, b, ...]: the value at `column`; rows without a numeric step or without
// that column are left out, a non-finite value stays as a gap.
std::vector<StepValue> column_of(const json& rows, size_t column) {
  std::vector<StepValue> out;
  for (const auto& row : rows) {
    if (!row.is_array() || row.size() <= column || !row[0].is_number()) continue;
    out.push_back({row[0].get<double>(), number(row[column])});
  }
  return out;
}

VerdictView verdict_view(const json& v) {
  VerdictView out;
  out.present = v.is_object();
  out.kind = text(v, "kind");
  out.message = text(v, "message");
  out.check = text(v, "check");
  out.phase = text(v, "phase");
  out.rank = integer(field(v, "rank"));
  out.signal = integer(field(v, "signal"));
  out.exit_code = integer(field(v, "exit_code"));
  out.step = integer(field(v, "step"));
  out.value = number(field(v, "value"));
  out.reference = number(field(v, "reference"));
  out.tolerance = number(field(v, "tolerance"));
  return out;
}

PhaseView phase_view(const json& p) {
  PhaseView out;
  out.name = text(p, "name");
  out.dir = text(p, "dir");
  out.stopped_because = text(p, "stopped_because");
  out.launch_error = text(p, "launch_error");
  out.first_failure = text(field(p, "first_failure"), "what");
  out.nproc = small_integer(p, "nproc", 1);
  out.attempts = small_integer(p, "attempts");
  out.ran = flag(p, "ran");
  out.ok = flag(p, "ok");
  out.timed_out = flag(p, "timed_out");
  out.killed = flag(p, "killed");
  out.duration_s = number(p, "duration_s");
  for (const auto& e : list(p, "exits"))
    out.exits.push_back({integer(field(e, "rank")).value_or(0), integer(field(e, "exit_code")).value_or(0),
                         integer(field(e, "signal")).value_or(0)});
  out.loss = column_of(list(p, "curve"), 1);
  out.grad_norm = column_of(list(p, "curve"), 2);
  return out;
}

CheckView check_view(const json& k) {
  CheckView out;
  out.kind = text(k, "kind");
  out.message = text(k, "message");
  out.details = text(k, "details");
  out.phase = text(k, "phase");
  out.step = integer(field(k, "step"));
  out.passed = flag(k, "passed");
  out.judged = flag(k, "judged", true);
  for (const auto& s : list(k, "series"))
    out.series.push_back({text(s, "role"), text(s, "label"), text(s, "metric"), column_of(list(s, "points"), 1)});
  const json& band = field(k, "band");
  if (band.is_object()) out.band = CheckView::Band{number(band, "rtol"), number(band, "atol")};
  return out;
}

// "dp_shard=4 -> tp=4" into its parts, for summaries written before "phase_meshes".
std::vector<std::string> split_chain(const std::string& chain) {
  std::vector<std::string> out;
  if (chain.empty()) return out;
  for (size_t start = 0;;) {
    const size_t arrow = chain.find(" -> ", start);
    out.push_back(chain.substr(start, arrow == std::string::npos ? std::string::npos : arrow - start));
    if (arrow == std::string::npos) return out;
    start = arrow + 4;
  }
}

CaseView case_view(const json& c) {
  CaseView out;
  out.id = text(c, "id");
  out.suite = text(c, "suite");
  out.name = text(c, "name");
  out.status = text(c, "status");
  out.expect = text(c, "expect");
  out.reason = text(c, "reason");
  out.details = text(c, "details");
  out.model = text(c, "model");
  out.seed = text(c, "seed");
  out.file = text(c, "file");
  out.dir = text(c, "dir");
  out.timestamp = text(c, "timestamp");
  out.repro = text(c, "repro");
  out.failing_log = text(c, "failing_log");
  out.mesh = text(c, "mesh");
  out.meshes = field(c, "phase_meshes").is_array() ? strings(c, "phase_meshes") : split_chain(text(c, "meshes"));
  out.tags = strings(c, "tags");
  for (const auto& d : list(c, "devices"))
    if (const auto device = integer(d)) out.devices.push_back(*device);
  out.ngpu = small_integer(c, "ngpu");
  out.simulated = flag(c, "simulated");
  out.expected_s = number(c, "expected_s");
  out.duration_s = number(c, "duration_s");
  out.met_expectation = flag(c, "met_expectation");
  out.verdict = verdict_view(field(c, "verdict"));
  for (const auto& p : list(c, "phases")) out.phases.push_back(phase_view(p));
  for (const auto& k : list(c, "checks")) out.checks.push_back(check_view(k));
  for (const auto& a : list(c, "earlier_attempts"))
    out.earlier_attempts.push_back({text(a, "reason"), text(a, "details"), text(a, "failing_log"),
                                    number(a, "duration_s"), verdict_view(field(a, "verdict"))});
  out.drift = text(field(c, "drift"), "message");
  for (const auto& h : list(c, "history")) {
    const json loss = field(h, "final_loss");
    out.history.push_back({text(h, "commit"), text(h, "status"), number(h, "time"), number(h, "duration_s"),
                           loss.is_number() ? std::optional<double>(loss.get<double>()) : std::nullopt});
  }
  return out;
}

}  // namespace

RunView summary_view(const json& s) {
  RunView out;
  out.format_version = small_integer(s, "format_version");
  out.backend = text(s, "backend");
  out.launcher = text(s, "launcher");
  out.hostname = text(s, "hostname");
  out.devices = small_integer(s, "devices");
  out.retries = small_integer(s, "retries");
  out.matrices = strings(s, "matrices");
  out.wall_s = number(s, "wall_s");
  out.interrupted_by_signal = small_integer(s, "interrupted_by_signal");
  out.all_met = flag(s, "all_met");
  for (const auto& c : list(s, "cases")) out.cases.push_back(case_view(c));
  out.history_from = text(field(s, "history"), "from_commit");
  out.history_to = text(field(s, "history"), "to_commit");
  return out;
}

std::string mesh_chain(const CaseView& c) {
  std::string out;
  for (const auto& m : c.meshes) out += (out.empty() ? "" : " -> ") + m;
  return out;
}

}  // namespace meshtest
