// libFuzzer: arbitrary bytes in every string a report takes from a run (suite, case id,
// reason, details, the failing log's content, an earlier attempt's reason) through the
// JUnit and Surefire writers. The files must stay well-formed XML that holds the case.
// And the input as JSON (where it parses) through the typed reader and the Markdown
// report: a summary of any shape renders, nothing throws.
#include <pugixml.hpp>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "report/markdown_report.h"
#include "report/report.h"
#include "report/summary_view.h"

namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  static const fs::path dir = [] {
    std::string tmpl = (fs::temp_directory_path() / "report-fuzz-XXXXXX").string();
    return fs::path(::mkdtemp(tmpl.data()));
  }();
  return dir;
}

void expect_well_formed(const fs::path& file) {
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_file(file.c_str());
  if (!parsed || !doc.select_node("//testcase")) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json any = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!any.is_discarded()) {
    const meshtest::RunView run = meshtest::summary_view(any);
    if (meshtest::markdown_summary(run).empty()) std::abort();
  }
  // Six fields from the input, split at 0xFF bytes (which valid UTF-8 never holds).
  std::string field[6];
  size_t f = 0;
  for (size_t i = 0; i < size && f < 6; ++i) {
    if (data[i] == 0xFF)
      ++f;
    else
      field[f] += static_cast<char>(data[i]);
  }
  static const char* const kinds[] = {"check_failed", "crashed", "exit_code", "timed_out",
                                      "skipped",      "xfailed", "passed",    "cancelled"};
  const std::string kind = kinds[size ? data[0] % 8 : 0];
  const fs::path log = scratch() / "rank0.log";
  std::ofstream(log, std::ios::binary) << field[4];
  const nlohmann::json c = {
      {"id", field[0] + "/" + field[1]},
      {"suite", field[0]},
      {"name", field[1]},
      {"status", "failed"},
      {"met_expectation", false},
      {"expect", "pass"},
      {"reason", field[2]},
      {"details", field[3]},
      {"verdict", {{"kind", kind}, {"message", field[2]}, {"check", field[5]}, {"phase", field[1]}}},
      {"failing_log", log.string()},
      {"duration_s", 1.5},
      {"timestamp", "2026-01-01T00:00:00"},
      {"earlier_attempts",
       {{{"reason", field[5]},
         {"verdict", {{"kind", "exit_code"}, {"message", field[5]}}},
         {"failing_log", log.string()},
         {"duration_s", 1.0}}}},
      {"phases", nlohmann::json::array()},
      {"checks", nlohmann::json::array()},
      {"tags", {field[5]}}};
  const nlohmann::json summary = {{"format_version", 2},  {"cases", {c}},      {"wall_s", 2.0},
                                  {"hostname", field[5]}, {"backend", "gloo"}, {"all_met", false}};
  meshtest::write_junit(meshtest::summary_view(summary), (scratch() / "junit.xml").string());
  fs::remove_all(scratch() / "surefire");
  meshtest::write_surefire(meshtest::summary_view(summary), (scratch() / "surefire").string());
  expect_well_formed(scratch() / "junit.xml");
  // One file per suite, whatever its name holds: nothing beside it, nothing outside surefire/.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(scratch() / "surefire")) {
    if (!e.is_regular_file()) std::abort();
    expect_well_formed(e.path());
    ++files;
  }
  if (files != 1) std::abort();
  return 0;
}
