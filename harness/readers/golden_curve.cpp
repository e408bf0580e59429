#include "readers/golden_curve.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "readers/metric_series.h"

namespace meshtest {

namespace {

// The whole of `word` as a number; false for anything else ("6.0abc", "").
bool parse_number(const std::string& word, double& out) {
  if (word.empty()) return false;
  char* end = nullptr;
  out = std::strtod(word.c_str(), &end);
  return end == word.c_str() + word.size();
}

bool parse_step(const std::string& word, long long& out) {
  if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos || word.size() > 18) return false;
  out = std::stoll(word);
  return true;
}

}  // namespace

std::string golden_number(double v) {
  if (std::isnan(v)) return "nan";
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof(text), v);
  return ec == std::errc() ? std::string(text, end) : std::to_string(v);
}

std::string GoldenCurve::text() const {
  std::string out;
  for (const auto& c : comments) out += "# " + c + "\n";
  for (const auto& [step, b] : steps) {
    out += std::to_string(step) + " " + golden_number(b.min);
    if (band) out += " " + golden_number(b.max);
    out += "\n";
  }
  return out;
}

GoldenCurve read_golden_curve(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw MetricsError("cannot read golden file " + path);
  return parse_golden_curve(in, path);
}

GoldenCurve parse_golden_curve(std::istream& in, const std::string& path) {
  GoldenCurve curve;
  std::map<long long, int> line_of;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (line[first] == '#') {
      const size_t text = line.find_first_not_of(" \t", first + 1);
      curve.comments.push_back(
          text == std::string::npos ? "" : line.substr(text, line.find_last_not_of(" \t\r") - text + 1));
      continue;
    }
    std::istringstream s(line);
    std::vector<std::string> words;
    for (std::string w; s >> w;) words.push_back(w);
    long long step = 0;
    GoldenBand b;
    const bool ok = (words.size() == 2 || words.size() == 3) && parse_step(words[0], step) &&
                    parse_number(words[1], b.min) && parse_number(words.back(), b.max);
    if (!ok) throw MetricsError(where + "expected '<step> <value>' or '<step> <min> <max>', got '" + line + "'");
    if (std::isnan(b.min) != std::isnan(b.max) || b.min > b.max)
      throw MetricsError(where + "a band's min must not be above its max, got min " + words[1] + ", max " + words[2]);
    if (auto [it, fresh] = line_of.emplace(step, number); !fresh)
      throw MetricsError(where + "step " + std::to_string(step) + " again (first on line " +
                         std::to_string(it->second) + ")");
    curve.band = curve.band || words.size() == 3;
    curve.steps[step] = b;
  }
  if (curve.steps.empty()) throw MetricsError("golden file " + path + " has no steps");
  return curve;
}

}  // namespace meshtest
