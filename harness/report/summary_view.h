// summary.json as every report reads it (JUnit, Surefire, the terminal table, HTML,
// Markdown): plain structs filled once from the JSON. Reading is lenient, because a report
// must render whatever a summary holds (an old format, a hand-edited file, a fuzzer's):
// a missing or mistyped field becomes its default and nothing here throws. Which fields
// mean what is in docs/matrix.md ("summary.json").
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace meshtest {

// One point of a curve; `value` is empty where the summary holds no finite number (a gap).
struct StepValue {
  double step = 0;
  std::optional<double> value;
};

// A case's verdict (summary.json "verdict"). `kind` is kept as written, known or not: the
// HTML colours an unknown kind as "other", JUnit refuses it (verdict_kind_from_name).
struct VerdictView {
  bool present = false;  // false: no verdict object (summary format 1 had none)
  std::string kind, message, check, phase;
  std::optional<long long> rank, signal, exit_code, step;
  std::optional<double> value, reference, tolerance;
};

struct ExitView {
  long long rank = 0, exit_code = 0, signal = 0;
};

struct PhaseView {
  std::string name, dir, stopped_because, launch_error;
  std::string first_failure;  // first_failure.what: "rank 1 exited with code 3"
  int nproc = 1;
  int attempts = 0;
  bool ran = false, ok = false, timed_out = false, killed = false;
  double duration_s = 0;
  std::vector<ExitView> exits;
  std::vector<StepValue> loss, grad_norm;  // the phase's curve, in the order written
};

// A series a check compared: role "subject", "reference" or anything else.
struct SeriesView {
  std::string role, label, metric;
  std::vector<StepValue> points;
};

struct CheckView {
  std::string kind, message, details;
  std::string phase;              // where a failed check failed
  std::optional<long long> step;  // the first step outside tolerance
  bool passed = false;
  bool judged = true;  // absent in summaries that predate not_judged
  std::vector<SeriesView> series;
  struct Band {
    double rtol = 0, atol = 0;
  };
  std::optional<Band> band;
};

// An attempt of a case that failed before --retries ran it again.
struct AttemptView {
  std::string reason, details, failing_log;
  double duration_s = 0;
  VerdictView verdict;
};

// One of a case's recent runs from the run history (summary.json "history", docs/history.md).
struct HistoryPointView {
  std::string commit, status;
  double time = 0, duration_s = 0;
  std::optional<double> final_loss;
};

struct CaseView {
  std::string id, suite, name, status, expect, reason, details;
  std::string model, seed, file, dir, timestamp, repro, failing_log;
  std::string mesh;                 // the first phase's mesh, "" without one
  std::vector<std::string> meshes;  // one per phase, "4 ranks" for a phase without a mesh
  std::vector<std::string> tags;
  std::vector<long long> devices;
  int ngpu = 0;
  bool simulated = false;  // every rank on one device (`simulate: true`): numerics, not the real transport
  double expected_s = 0, duration_s = 0;
  bool met_expectation = false;
  VerdictView verdict;
  std::vector<PhaseView> phases;
  std::vector<CheckView> checks;
  std::vector<AttemptView> earlier_attempts;
  std::string drift;                      // "drifted: ..." when it passed but left its history's band
  std::vector<HistoryPointView> history;  // its last runs in the history, oldest first (this one last)
};

// A whole run: what `meshtest run` (or `merge`) wrote into one summary.json.
struct RunView {
  int format_version = 0;
  std::string backend, launcher, hostname;
  int devices = 0, retries = 0;
  std::vector<std::string> matrices;
  double wall_s = 0;
  int interrupted_by_signal = 0;
  bool all_met = false;
  std::vector<CaseView> cases;           // one per element of "cases", objects or not
  std::string history_from, history_to;  // the commits the cases' history strips span
};

// Reads `summary` (any JSON value) into a RunView; never throws on content.
RunView summary_view(const nlohmann::json& summary);

// The phases' meshes as summary.json's older "meshes" string has them: "dp_shard=4 -> tp=4".
std::string mesh_chain(const CaseView& c);

}  // namespace meshtest
