// The run history at CI scale (docs/history.md, "Measured"): 1,000 runs x 100 cases, each case
// with a 10-step loss and grad_norm curve and two checks. Prints the database's size, the time to
// append one run, and `history CASE` / `--flaky` / `--slowest` / drift query times, against the
// peer a history-less setup has: the same questions answered by reading the runs' summary.json
// files (what a dashboard over kept artifacts does), measured in the same run.
// Usage: history_bench [DIR] [RUNS] [CASES]
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "history/drift.h"
#include "history/history.h"

namespace fs = std::filesystem;
using namespace meshtest;
using nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json run_summary(int run, int cases) {
  json s = {{"format_version", 4}, {"hostname", "bench"}, {"launcher", "local"}, {"cases", json::array()}};
  for (int c = 0; c < cases; ++c) {
    json curve = json::array();
    for (int step = 1; step <= 10; ++step)
      curve.push_back({step, 6.0 - 0.3 * step + 1e-7 * ((run * 7 + c) % 5), 1.0 / step});
    const bool fails = c == 3 && run % 4 == 0;  // one flaky case
    s["cases"].push_back(
        {{"id", "bench/case-" + std::to_string(c)},
         {"status", fails ? "failed" : "passed"},
         {"met_expectation", !fails},
         {"duration_s", 2.0 + c % 17},
         {"earlier_attempts", json::array()},
         {"phases", json::array({{{"name", "train"}, {"ran", true}, {"duration_s", 2.0}, {"curve", curve}}})},
         {"checks", json::array({{{"kind", "loss_finite"}, {"passed", true}},
                                 {{"kind", "loss_matches"}, {"passed", !fails}, {"margin", 0.1}}})}});
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? argv[1] : fs::temp_directory_path() / "meshtest-history-bench";
  const int runs = argc > 2 ? std::atoi(argv[2]) : 1000, cases = argc > 3 ? std::atoi(argv[3]) : 100;
  fs::remove_all(dir);
  fs::create_directories(dir / "summaries");
  const std::string db = (dir / "history.db").string();

  History history(db);
  double append_total = 0, append_last = 0;
  for (int r = 0; r < runs; ++r) {
    const json s = run_summary(r, cases);
    std::ofstream(dir / "summaries" / ("run-" + std::to_string(r) + ".json")) << s.dump();
    RunIdentity id;
    id.run_id = "run-" + std::to_string(r), id.commit = "commit-" + std::to_string(r / 2), id.time = r;
    const auto t0 = std::chrono::steady_clock::now();
    history.record(s, id);
    append_last = seconds_since(t0);
    append_total += append_last;
  }
  const double db_mb = static_cast<double>(fs::file_size(db)) / 1e6;
  std::uintmax_t json_bytes = 0;
  for (const auto& f : fs::directory_iterator(dir / "summaries")) json_bytes += f.file_size();

  auto timed = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return seconds_since(t0);
  };
  const double q_case = timed([&] { history.case_runs("bench/case-42", 20); });
  const double q_flaky = timed([&] { history.flaky(20); });
  const double q_slowest = timed([&] { history.slowest(20, 20); });
  const double q_drift = timed([&] { drifted_cases(history, DriftRule{}, 20); });

  // The peer: the same "last 20 runs of one case" and "flaky in the last 20 runs" from the files.
  const double p_case = timed([&] {
    int found = 0;
    for (int r = runs - 1; r >= 0 && found < 20; --r) {
      std::ifstream in(dir / "summaries" / ("run-" + std::to_string(r) + ".json"));
      for (const auto& c : json::parse(in)["cases"])
        if (c["id"] == "bench/case-42") ++found;
    }
  });
  const double p_flaky = timed([&] {
    std::map<std::string, int> failed;
    for (int r = std::max(0, runs - 20); r < runs; ++r) {
      std::ifstream in(dir / "summaries" / ("run-" + std::to_string(r) + ".json"));
      for (const auto& c : json::parse(in)["cases"]) failed[c["id"]] += !c["met_expectation"].get<bool>();
    }
  });

  std::printf("history_bench: %d runs x %d cases (10-step curves, 2 checks each)\n", runs, cases);
  std::printf("  database          %8.1f MB   (summary.json files: %.1f MB)\n", db_mb, json_bytes / 1e6);
  std::printf("  append one run    %8.1f ms   mean %.1f ms over %d runs (target < 100 ms)\n", 1e3 * append_last,
              1e3 * append_total / runs, runs);
  std::printf("  history CASE      %8.1f ms   peer (summary.json files) %.1f ms   ratio %.1fx\n", 1e3 * q_case,
              1e3 * p_case, p_case / q_case);
  std::printf("  --flaky           %8.1f ms   peer (summary.json files) %.1f ms   ratio %.1fx (target < 200 ms)\n",
              1e3 * q_flaky, 1e3 * p_flaky, p_flaky / q_flaky);
  std::printf("  --slowest         %8.1f ms\n", 1e3 * q_slowest);
  std::printf("  --drift (20 runs) %8.1f ms\n", 1e3 * q_drift);
  return 0;
}
