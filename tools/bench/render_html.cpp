// Renders report.html (and optionally the Markdown summary) from a summary.json, timing the
// render: the bench for harness/html_report.cpp, until `meshtest report DIR --html` exists.
//   render_html SUMMARY_JSON OUT_HTML [OUT_MD]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "html_report.h"
#include "markdown_report.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s SUMMARY_JSON OUT_HTML [OUT_MD]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "render_html: cannot read %s\n", argv[1]);
    return 1;
  }
  const nlohmann::json summary = nlohmann::json::parse(in);
  const auto start = std::chrono::steady_clock::now();
  meshtest::write_html_report(summary, argv[2]);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (argc == 4) std::ofstream(argv[3]) << meshtest::markdown_summary(summary);
  std::printf("render_html: %zu cases, %s written in %.1f ms\n", summary.value("cases", nlohmann::json::array()).size(),
              argv[2], ms);
  return 0;
}
