// meshtest's golden curve files, what loss_matches' `golden:` reads: `<step> <value>` per line
// (torchtitan's tests/assets/losses/*.txt format, what `meshtest golden export` prints), or
// `<step> <min> <max>` for a band recorded over several runs (`meshtest golden regen`); lines
// starting with `#` say where the file came from. Values are read as strtod does, so `nan` and
// `inf` too: Megatron's golden values keep "nan" where a step logged none (`meshtest golden
// import megatron`). docs/matrix.md#golden-files.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <vector>

namespace meshtest {

// One step of a golden curve: min == max for a `<step> <value>` line.
struct GoldenBand {
  double min = 0;
  double max = 0;
};

struct GoldenCurve {
  std::map<long long, GoldenBand> steps;
  std::vector<std::string> comments;  // the `#` lines, without the `#` and the space after it
  bool band = false;                  // some line had three columns

  // `<step> <min> <max>` lines when `band`, else `<step> <value>`, after the comments.
  std::string text() const;
};

// Throws MetricsError naming the file and line: a line that is not `<step> <value>` or `<step>
// <min> <max>`, a min above its max, a step written twice, a file without steps.
GoldenCurve read_golden_curve(const std::string& path);
GoldenCurve parse_golden_curve(std::istream& in, const std::string& path);  // `path` for messages

// The shortest text strtod reads back as `v` exactly ("6.02834034", "1655", "nan", "-inf").
std::string golden_number(double v);

}  // namespace meshtest
