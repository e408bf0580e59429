// The half of the matrix loader that reads YAML into Fields: what `defaults`, a case or a
// phase may say, each key checked where it is written (file:line:col). matrix.cpp builds the
// cases and their phases from Fields; nothing else includes this header.
// Every *_node says where its value was written, for errors. The reader sets one with reset(),
// never =: a YAML::Node's = writes through to every copy of the node, and a case's Fields start
// as a copy of the defaults', so an = would move the defaults' (and every later case's) place to
// where this case wrote its own.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters.h"
#include "core/case_parts.h"
#include "core/outputs.h"
#include "core/yaml_reader.h"

namespace meshtest {

struct OptionValue {
  bool is_flag = false;  // true/false in YAML: present as `--key` or left out
  bool flag = false;
  std::string text;
  YAML::Node node;  // where it was written, for the adapter's reserved flags
};
using Options = std::vector<std::pair<std::string, OptionValue>>;

// outputs.checkpoint as written: each key set here overrides that key of what the defaults
// said, and those the adapter's default outputs, so `{step: 5}` alone keeps the path and the
// model_prefix the adapter knows.
struct CheckpointOverride {
  std::optional<std::string> path;
  std::optional<long long> step;
  std::optional<std::string> model_prefix;
  std::optional<std::vector<std::pair<std::string, std::string>>> rename;
  YAML::Node node;                          // where it was last written
  std::map<std::string, YAML::Node> nodes;  // where each key was written
  bool any() const { return path || step || model_prefix || rename; }
  void apply_to(CheckpointSource& src) const {
    if (path) src.path = *path;
    if (step) src.step = *step;
    if (model_prefix) src.model_prefix = *model_prefix;
    if (rename) src.rename = *rename;
  }
};

// What `defaults`, a case and (in part) a phase may say. Unset fields inherit.
struct Fields {
  std::optional<std::string> adapter;
  YAML::Node adapter_node;
  std::optional<std::vector<std::string>> command;
  YAML::Node command_node;
  std::optional<std::string> model;
  YAML::Node model_node;
  std::optional<Layout> mesh;  // as written; the adapter validates it (checked_layout)
  YAML::Node mesh_node;
  std::optional<int> ngpu;
  YAML::Node ngpu_node;
  Options options;
  std::optional<std::vector<std::string>> tags;
  std::optional<double> timeout;
  std::vector<std::pair<std::string, std::string>> env;
  std::map<std::string, YAML::Node> env_nodes;  // where each env value was written
  std::optional<Expectation> expect;
  std::optional<std::vector<CheckSpec>> checks;
  std::optional<double> duration;
  std::optional<MetricsSource> metrics;   // outputs.metrics
  YAML::Node metrics_node, tokens_node;   // where they were written, for `show`
  CheckpointOverride checkpoint;          // outputs.checkpoint: the keys written, over the adapter's
  std::optional<std::string> tokens;      // outputs.tokens
  std::vector<Requirement> requirements;  // requires: a case's entries add to the defaults'
  std::optional<bool> simulate;           // simulate: true (every rank on one device)
  YAML::Node simulate_node;
};

// The case's adapter: `adapter:`, else `command` for a case with a command, else the default.
std::string adapter_name(const Fields& f);
// The case's adapter, or nullptr after reporting why there is none where it was written.
const TrainerAdapter* adapter_of(const ReadContext& ctx, const Fields& f, const YAML::Node& where_node);
// An option's value as the command line gets it: "true" or "" for a flag; "" when not set.
std::string option_text(const Options& options, const std::string& key);
// The layout as the adapter takes it: only its axes, in its order, sizes of 1 left out.
// Refused where the mesh is written: an axis the adapter does not know, and then a layout the
// model cannot be split along.
std::optional<Layout> checked_layout(const ReadContext& ctx, const TrainerAdapter& adapter, const Fields& f);
// Flags the adapter's command sets itself may not come again from `options:`.
void check_reserved_options(const ReadContext& ctx, const TrainerAdapter& adapter, const Options& options);
// Reads the keys a case and `defaults` share into `f`, on top of what it holds.
void read_common(const ReadContext& ctx, const MapReader& m, Fields& f);

}  // namespace meshtest
