// Reading YAML the strict way: every value is checked for its type, every mapping
// for unknown and duplicate keys, and every complaint carries file:line:col.
// yaml-cpp accepts duplicate keys silently, decodes "010" as octal and "on" as a
// boolean; these readers refuse all three (see reference/junit-launch-matrix.md §11).
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtest {

// A position in a YAML file, 1-based.
struct Where {
  std::string file;
  int line = 0;
  int col = 0;
  std::string str() const;  // "file:line:col"
};

// Every error found in one file, so a user fixes them in one pass.
class MatrixError : public std::runtime_error {
 public:
  explicit MatrixError(std::vector<std::string> errors);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

class Diagnostics {
 public:
  void error(const Where& where, const std::string& message);
  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  void throw_if_any() const;

 private:
  std::vector<std::string> errors_;
};

// "; did you mean 'load'?" when one of `known` is plausibly what the typo `word` meant, else
// "": the one way a message suggests a name. `open` and `close` spell the name as the message
// does: quoted by default, {name} for a placeholder, --name for a flag.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known, const std::string& open = "'",
                         const std::string& close = "'");

// What every reader needs: the file name for positions, where errors go, and the
// values of `${{ matrix.<axis> }}` substituted into every string read.
struct ReadContext {
  std::string file;
  Diagnostics* diag = nullptr;
  const std::map<std::string, std::string>* vars = nullptr;
  // The placeholders filled when a phase runs ({backend}, {case_dir}, the adapters' programs):
  // asked of the adapters once per file, not once per command (an adapter may search PATH).
  const std::vector<std::string>* run_time_placeholders = nullptr;

  Where where(const YAML::Node& node) const;
  void error(const YAML::Node& node, const std::string& message) const { diag->error(where(node), message); }
};

// A mapping whose keys must come from `allowed`. Reports a non-map, duplicate and
// unknown keys (with a did-you-mean) when constructed; get() returns the value or
// nullptr when the key is absent.
class MapReader {
 public:
  MapReader(const ReadContext& ctx, const YAML::Node& node, const std::string& what,
            const std::vector<std::string>& allowed);
  bool ok() const { return ok_; }
  const YAML::Node* get(const std::string& key) const;
  const YAML::Node& node() const { return node_; }
  // Keys in file order (for maps whose keys are data, e.g. options and env).
  const std::vector<std::pair<std::string, YAML::Node>>& entries() const { return entries_; }

 private:
  YAML::Node node_;
  bool ok_ = false;
  std::vector<std::pair<std::string, YAML::Node>> entries_;
};

// Scalar readers: report a type error and return nullopt on a bad value.
std::optional<std::string> read_string(const ReadContext& ctx, const YAML::Node& node, const std::string& what);
std::optional<long long> read_int(const ReadContext& ctx, const YAML::Node& node, const std::string& what,
                                  long long min_value);
std::optional<double> read_number(const ReadContext& ctx, const YAML::Node& node, const std::string& what);
std::optional<bool> read_bool(const ReadContext& ctx, const YAML::Node& node, const std::string& what);
std::optional<std::vector<std::string>> read_string_list(const ReadContext& ctx, const YAML::Node& node,
                                                         const std::string& what);

// Substitutes `${{ matrix.<name> }}`; an unknown name is reported at `node`.
std::string substitute(const ReadContext& ctx, const YAML::Node& node, const std::string& text);

// Loads a file; a syntax error becomes a MatrixError with file:line:col.
YAML::Node load_yaml_file(const std::string& path);
YAML::Node load_yaml_string(const std::string& text, const std::string& file_name);

}  // namespace meshtest
