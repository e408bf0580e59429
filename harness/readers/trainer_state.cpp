#include "readers/trainer_state.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <map>
#include <sstream>

namespace meshtest {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad_state(const std::string& message) { throw MetricsError(message); }

// Python's json writes NaN, Infinity and -Infinity bare; JSON has no such words. Outside
// strings they become the strings "NaN", "Infinity" and "-Infinity", read back as numbers below.
std::string quote_non_finite(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"NaN", "Infinity", "-Infinity"}) {
      const size_t n = std::char_traits<char>::length(word);
      if (text.compare(i, n, word) == 0) {
        out += std::string("\"") + word + "\"";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

std::optional<double> number(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v == "NaN") return NAN;
  if (v == "Infinity") return INFINITY;
  if (v == "-Infinity") return -INFINITY;
  return std::nullopt;
}

}  // namespace

std::string trainer_state_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  if (fs::exists(fs::path(path) / "trainer_state.json", ec)) return (fs::path(path) / "trainer_state.json").string();
  long long newest = -1;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0 || name.size() == 11 || name.size() > 26 ||
        name.find_first_not_of("0123456789", 11) != std::string::npos ||
        !fs::exists(entry.path() / "trainer_state.json", ec))
      continue;
    newest = std::max(newest, std::stoll(name.substr(11)));
  }
  if (newest < 0) bad_state(path + ": holds no trainer_state.json, nor a checkpoint-<N> folder with one");
  return (fs::path(path) / ("checkpoint-" + std::to_string(newest)) / "trainer_state.json").string();
}

// The parsed trainer_state.json `path` names, and that file's name.
static json parsed_state(const std::string& path, std::string& file) {
  file = trainer_state_file(path);
  std::ifstream in(file);
  if (!in) bad_state("cannot read " + file);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(quote_non_finite(text.str()));
  } catch (const json::exception& e) {
    bad_state(file + ": not JSON (" + e.what() + ")");
  }
}

long long trainer_state_global_step(const std::string& path) {
  std::string file;
  const json state = parsed_state(path, file);
  if (!state.is_object() || !state.contains("global_step") || !state["global_step"].is_number_integer())
    bad_state(file + ": has no integer global_step");
  return state["global_step"].get<long long>();
}

MetricSeries read_trainer_state(const std::string& path) {
  std::string file;
  const json state = parsed_state(path, file);
  if (!state.is_object() || !state.contains("log_history") || !state["log_history"].is_array())
    bad_state(file + ": has no log_history list (is it a Hugging Face Trainer's trainer_state.json?)");
  static const std::map<std::string, std::string> kNames = {{"loss", "loss"},
                                                            {"grad_norm", "grad_norm"},
                                                            {"eval_loss", "validation_loss"},
                                                            {"learning_rate", "lr"},
                                                            {"num_input_tokens_seen", "tokens_seen"}};
  MetricSeries series;
  size_t index = 0;
  for (const auto& entry : state["log_history"]) {
    const std::string where = file + ": log_history[" + std::to_string(index++) + "]";
    if (!entry.is_object()) bad_state(where + " is not an object");
    if (entry.contains("train_runtime")) continue;  // the closing summary: train_loss is an average
    if (!entry.contains("step") || !entry["step"].is_number_integer()) bad_state(where + " has no integer step");
    const long long step = entry["step"].get<long long>();
    for (const auto& [key, name] : kNames)
      if (entry.contains(key)) {
        const auto v = number(entry[key]);
        if (!v) bad_state(where + ": " + key + " is " + entry[key].dump() + ", not a number");
        series[step][name] = *v;
      }
  }
  return series;
}

}  // namespace meshtest
