#include "core/yaml_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace meshtest {

std::string Where::str() const { return file + ":" + std::to_string(line) + ":" + std::to_string(col); }

namespace {
std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A plain (unquoted) scalar; quoted scalars carry the "!" tag in yaml-cpp.
bool is_plain(const YAML::Node& node) { return node.Tag() != "!"; }

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "nothing";
  }
}
}  // namespace

MatrixError::MatrixError(std::vector<std::string> errors)
    : std::runtime_error(join_lines(errors)), errors_(std::move(errors)) {}

void Diagnostics::error(const Where& where, const std::string& message) {
  // A value in `defaults` is checked again for every case that inherits it: say it once.
  std::string line = where.str() + ": " + message;
  if (std::find(errors_.begin(), errors_.end(), line) == errors_.end()) errors_.push_back(std::move(line));
}

void Diagnostics::throw_if_any() const {
  if (!errors_.empty()) throw MatrixError(errors_);
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known, const std::string& open,
                         const std::string& close) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& k : known) {
    const size_t d = edit_distance(word, k);
    if (d < best_distance) best = k, best_distance = d;
  }
  return best.empty() ? "" : "; did you mean " + open + best + close + "?";
}

Where ReadContext::where(const YAML::Node& node) const {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return {file, 0, 0};
  return {file, m.line + 1, m.column + 1};
}

MapReader::MapReader(const ReadContext& ctx, const YAML::Node& node, const std::string& what,
                     const std::vector<std::string>& allowed)
    : node_(node) {
  if (!node.IsMap()) {
    ctx.error(node, what + " must be a mapping, got " + describe(node));
    return;
  }
  ok_ = true;
  std::map<std::string, Where> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      ctx.error(key, "keys of " + what + " must be plain words");
      ok_ = false;
      continue;
    }
    const std::string name = key.Scalar();
    if (auto dup = seen.find(name); dup != seen.end()) {
      ctx.error(key, "duplicate key '" + name + "' in " + what + " (first at " + dup->second.str() + ")");
      ok_ = false;
      continue;
    }
    seen.emplace(name, ctx.where(key));
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      ctx.error(key, "unknown key '" + name + "' in " + what + did_you_mean(name, allowed));
      ok_ = false;
      continue;
    }
    entries_.emplace_back(name, it->second);
  }
}

const YAML::Node* MapReader::get(const std::string& key) const {
  for (const auto& [name, value] : entries_)
    if (name == key) return &value;
  return nullptr;
}

std::string substitute(const ReadContext& ctx, const YAML::Node& node, const std::string& text) {
  if (text.find("${{") == std::string::npos) return text;
  static const std::regex expr(R"(\$\{\{\s*([^}]*?)\s*\}\})");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), expr);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out += text.substr(last, m.position() - last);
    last = m.position() + m.length();
    const std::string ref = m[1].str();
    const std::string prefix = "matrix.";
    std::string axis = ref.rfind(prefix, 0) == 0 ? ref.substr(prefix.size()) : "";
    if (!ctx.vars || axis.empty() || !ctx.vars->count(axis)) {
      std::vector<std::string> names;
      if (ctx.vars)
        for (const auto& [k, v] : *ctx.vars) names.push_back(k);
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      ctx.error(node, "'${{ " + ref + " }}' names no matrix axis" +
                          (known.empty() ? " (this case has no matrix)" : " (axes: " + known + ")"));
      continue;
    }
    out += ctx.vars->at(axis);
  }
  return out + text.substr(last);
}

std::optional<std::string> read_string(const ReadContext& ctx, const YAML::Node& node, const std::string& what) {
  if (!node.IsScalar()) {
    ctx.error(node, what + " must be a string, got " + describe(node));
    return std::nullopt;
  }
  return substitute(ctx, node, node.Scalar());
}

std::optional<long long> read_int(const ReadContext& ctx, const YAML::Node& node, const std::string& what,
                                  long long min_value) {
  auto text = read_string(ctx, node, what);
  if (!text) return std::nullopt;
  // Decimal only: yaml-cpp would read 010 as 8 and 0x10 as 16.
  static const std::regex decimal("-?(0|[1-9][0-9]{0,17})");
  if (!std::regex_match(*text, decimal) || (!is_plain(node) && text == node.Scalar())) {
    ctx.error(node, what + " must be a decimal integer, got '" + *text + "'");
    return std::nullopt;
  }
  const long long value = std::stoll(*text);
  if (value < min_value) {
    ctx.error(node, what + " must be at least " + std::to_string(min_value) + ", got " + *text);
    return std::nullopt;
  }
  return value;
}

std::optional<double> read_number(const ReadContext& ctx, const YAML::Node& node, const std::string& what) {
  auto text = read_string(ctx, node, what);
  if (!text) return std::nullopt;
  static const std::regex number(R"(-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)");
  if (!std::regex_match(*text, number)) {
    ctx.error(node, what + " must be a number, got '" + *text + "'");
    return std::nullopt;
  }
  // std::stod throws on a value beyond a double (1e999) or below its smallest (1e-999): refused
  // here with the key, not rounded to inf or 0 behind the user's back (matrix_fuzz found the throw).
  errno = 0;
  const double value = std::strtod(text->c_str(), nullptr);
  if (errno == ERANGE) {
    ctx.error(node, what + " is out of the range of a double, got '" + *text + "'");
    return std::nullopt;
  }
  return value;
}

std::optional<bool> read_bool(const ReadContext& ctx, const YAML::Node& node, const std::string& what) {
  auto text = read_string(ctx, node, what);
  if (!text) return std::nullopt;
  if (*text == "true" || *text == "True" || *text == "TRUE") return true;
  if (*text == "false" || *text == "False" || *text == "FALSE") return false;
  ctx.error(node, what + " must be true or false, got '" + *text + "'");
  return std::nullopt;
}

std::optional<std::vector<std::string>> read_string_list(const ReadContext& ctx, const YAML::Node& node,
                                                         const std::string& what) {
  if (node.IsScalar()) {
    auto one = read_string(ctx, node, what);
    if (!one) return std::nullopt;
    return std::vector<std::string>{*one};
  }
  if (!node.IsSequence()) {
    ctx.error(node, what + " must be a list of strings, got " + describe(node));
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  for (const auto& item : node) {
    auto s = read_string(ctx, item, what + " item");
    if (s)
      out.push_back(*s);
    else
      ok = false;
  }
  if (!ok) return std::nullopt;
  return out;
}

YAML::Node load_yaml_string(const std::string& text, const std::string& file_name) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const int col = e.mark.is_null() ? 0 : e.mark.column + 1;
    throw MatrixError({Where{file_name, line, col}.str() + ": YAML syntax: " + e.msg});
  }
}

YAML::Node load_yaml_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MatrixError({path + ": cannot read the file"});
  std::stringstream buffer;
  buffer << in.rdbuf();
  return load_yaml_string(buffer.str(), path);
}

}  // namespace meshtest
