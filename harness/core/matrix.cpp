#include "core/matrix.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <regex>
#include <set>
#include <stdexcept>

#include "core/check_kinds.h"
#include "core/placeholders.h"
#include "readers/log_metrics.h"

namespace meshtest {

namespace {

const std::vector<std::string> kFileKeys = {"suite", "description", "defaults", "cases"};
// Keys a case and `defaults` share; a case adds name, phases and matrix.
const std::vector<std::string> kCommonKeys = {"adapter", "command", "model",  "mesh",   "ngpu",     "options",
                                              "tags",    "timeout", "env",    "expect", "checks",   "duration",
                                              "outputs", "requires", "drift", "simulate"};
const std::vector<std::string> kPhaseKeys = {"name", "action", "command", "mesh", "options", "env", "timeout", "outputs"};
const std::vector<std::string> kLoadTimePlaceholders = {"action", "model", "mesh", "nproc", "phase", "matrix_dir"};
// Filled when a phase runs; each adapter adds the programs it names ({meshtrain}).
std::vector<std::string> run_time_placeholders() {
  std::vector<std::string> names = {"backend", "case_dir", "phase_dir"};
  for (const auto& [name, value] : trainer_adapters().placeholders()) names.push_back(name);
  return names;
}

constexpr double kDefaultTimeoutS = 600;

// outputs.metrics.from, indexed by MetricsSource::Kind.
struct OptionValue {
  bool is_flag = false;  // true/false in YAML: present as `--key` or left out
  bool flag = false;
  std::string text;
  YAML::Node node;  // where it was written, for the adapter's reserved flags
};
using Options = std::vector<std::pair<std::string, OptionValue>>;

void set_option(Options& options, const std::string& key, const OptionValue& value) {
  for (auto& [k, v] : options)
    if (k == key) {
      v = value;
      return;
    }
  options.emplace_back(key, value);
}

void set_env(std::vector<std::pair<std::string, std::string>>& env, const std::string& key, const std::string& value) {
  for (auto& [k, v] : env)
    if (k == key) {
      v = value;
      return;
    }
  env.emplace_back(key, value);
}

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
  std::optional<MetricsSource> metrics;  // outputs.metrics
  YAML::Node metrics_node, tokens_node;  // where they were written, for `show`
  CheckpointOverride checkpoint;               // outputs.checkpoint: the keys written, over the adapter's
  std::optional<std::string> tokens;           // outputs.tokens
  std::vector<Requirement> requirements;       // requires: a case's entries add to the defaults'
  std::optional<bool> drift_fails;             // drift: fail (the run history's drift fails the case)
  std::optional<bool> simulate;                // simulate: true (every rank on one device)
  YAML::Node simulate_node;
};

std::optional<Layout> read_mesh(const ReadContext& ctx, const YAML::Node& node) {
  if (node.IsMap()) {
    MapReader m(ctx, node, "mesh", {});  // which axes exist is the adapter's to say
    if (!m.ok()) return std::nullopt;
    Layout layout;
    for (const auto& [axis, size_node] : m.entries()) {
      auto size = read_int(ctx, size_node, "mesh size " + axis, 1);
      if (!size) return std::nullopt;
      layout.axes.emplace_back(axis, *size);
    }
    return layout;
  }
  auto text = read_string(ctx, node, "mesh");
  if (!text) return std::nullopt;
  try {
    return parse_layout(*text);
  } catch (const std::invalid_argument& e) {
    ctx.error(node, e.what());
    return std::nullopt;
  }
}

// The case's adapter: `adapter:`, else `command` for a case with a command, else the default.
std::string adapter_name(const Fields& f) {
  return f.adapter ? *f.adapter : f.command ? "command" : trainer_adapters().default_name();
}

const TrainerAdapter* adapter_of(const ReadContext& ctx, const Fields& f, const YAML::Node& where_node) {
  const AdapterRegistry& registry = trainer_adapters();
  const std::string name = adapter_name(f);
  if (const TrainerAdapter* adapter = registry.find(name)) return adapter;
  if (f.adapter) {
    const std::string hint = did_you_mean(name, registry.names());
    ctx.error(f.adapter_node, "unknown adapter '" + name + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
  } else {
    ctx.error(where_node, "case names no command and this meshtest has no default trainer adapter; add command:");
  }
  return nullptr;
}

// The layout as the adapter takes it: only its axes, in its order, sizes of 1 left out.
std::optional<Layout> checked_layout(const ReadContext& ctx, const TrainerAdapter& adapter, const Fields& f) {
  if (!f.mesh) return std::nullopt;
  const std::vector<std::string> axes = adapter.layout_axes();
  if (axes.empty()) return f.mesh;
  if (f.mesh_node.IsMap()) {
    MapReader(ctx, f.mesh_node, "mesh", axes);  // reports unknown axes where they are written
  } else {
    for (const auto& [axis, size] : f.mesh->axes)
      if (std::find(axes.begin(), axes.end(), axis) == axes.end()) {
        std::string known;
        for (const auto& a : axes) known += (known.empty() ? "" : ", ") + a;
        ctx.error(f.mesh_node, "mesh '" + f.mesh->to_compact_string() + "': unknown dimension '" + axis + "' (known: " +
                                   known + ")");
      }
  }
  Layout layout;
  for (const auto& axis : axes)
    if (const int64_t size = f.mesh->size(axis); size != 1) layout.axes.emplace_back(axis, size);
  if (layout.axes.empty()) return adapter.default_layout(1).value_or(layout);
  return layout;
}

// Flags the adapter's command sets itself may not come again from `options:`.
void check_reserved_options(const ReadContext& ctx, const TrainerAdapter& adapter, const Options& options) {
  for (const auto& [key, value] : options)
    for (const auto& reserved : adapter.reserved_options())
      if (reserved.option == key)
        ctx.error(value.node, "option '" + key + "' is set by meshtest for " + adapter.name() + "; use the case's '" +
                                  reserved.use_key + "' key");
}

void read_options(const ReadContext& ctx, const YAML::Node& node, Options& into) {
  MapReader m(ctx, node, "options", {});
  static const std::regex key_syntax("[A-Za-z0-9][A-Za-z0-9._-]*");
  for (const auto& [key, value] : m.entries()) {
    if (!std::regex_match(key, key_syntax)) {
      ctx.error(value, "option '" + key + "' is not a flag name (letters, digits, '.', '_', '-')");
      continue;
    }
    OptionValue v;
    v.node = value;
    if (value.IsSequence()) {
      auto items = read_string_list(ctx, value, "option " + key);
      if (!items) continue;
      for (const auto& item : *items) v.text += (v.text.empty() ? "" : ",") + item;
    } else {
      auto text = read_string(ctx, value, "option " + key);
      if (!text) continue;
      static const std::set<std::string> truths = {"true", "True", "TRUE"}, lies = {"false", "False", "FALSE"};
      static const std::set<std::string> ambiguous = {"yes", "no", "on", "off", "y", "n", "Yes", "No", "On", "Off"};
      if (value.Tag() != "!" && (truths.count(*text) || lies.count(*text))) {
        v.is_flag = true;
        v.flag = truths.count(*text) > 0;
      } else if (value.Tag() != "!" && ambiguous.count(*text)) {
        ctx.error(value, "option " + key + ": '" + *text + "' is ambiguous in YAML; write true, false or quote it");
        continue;
      } else {
        v.text = *text;
      }
    }
    set_option(into, key, v);
  }
}

void read_env(const ReadContext& ctx, const YAML::Node& node, std::vector<std::pair<std::string, std::string>>& into,
              std::map<std::string, YAML::Node>& nodes) {
  MapReader m(ctx, node, "env", {});
  for (const auto& [key, value] : m.entries()) {
    auto text = read_string(ctx, value, "env " + key);
    if (text) set_env(into, key, *text), nodes[key] = value;
  }
}

std::optional<Expectation> read_expect(const ReadContext& ctx, const YAML::Node& node) {
  Expectation e;
  if (node.IsScalar()) {
    if (node.Scalar() == "pass") return e;
    ctx.error(node, "expect must be pass, {xfail: reason}, {skip: reason} or {fail: <check>}, got '" +
                        node.Scalar() + "'");
    return std::nullopt;
  }
  MapReader m(ctx, node, "expect", {"xfail", "skip", "fail"});
  if (!m.ok()) return std::nullopt;
  if (m.entries().size() != 1) {
    ctx.error(node, "expect takes exactly one of xfail, skip, fail");
    return std::nullopt;
  }
  const auto& [kind, value] = m.entries().front();
  auto text = read_string(ctx, value, "expect." + kind);
  if (!text) return std::nullopt;
  if (text->empty()) {
    ctx.error(value, "expect." + kind + " needs a " + (kind == "fail" ? "check name" : "reason"));
    return std::nullopt;
  }
  if (kind == "xfail") e.kind = Expectation::kXfail, e.reason = *text;
  if (kind == "skip") e.kind = Expectation::kSkip, e.reason = *text;
  if (kind == "fail") {
    if (!find_check_kind(*text)) {
      const std::string hint = did_you_mean(*text, check_kind_names());
      ctx.error(value, "expect.fail names no check '" + *text + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
      return std::nullopt;
    }
    e.kind = Expectation::kFail, e.check = *text;
  }
  return e;
}

std::optional<CheckSpec> read_check(const ReadContext& ctx, const YAML::Node& item) {
  CheckSpec spec;
  spec.where = ctx.where(item);
  YAML::Node params_node;
  if (item.IsScalar()) {
    spec.kind = item.Scalar();
  } else if (item.IsMap() && item.size() == 1) {
    spec.kind = item.begin()->first.Scalar();
    params_node = item.begin()->second;
  } else {
    ctx.error(item, "a check is a name or {name: {parameters}}");
    return std::nullopt;
  }
  const CheckSignature* kind = find_check_kind(spec.kind);
  if (!kind) {
    const std::string hint = did_you_mean(spec.kind, check_kind_names());
    ctx.error(item, "unknown check '" + spec.kind + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    return std::nullopt;
  }
  auto needs = [&]() -> std::optional<CheckSpec> {
    if (kind->needs_one_of.empty()) return spec;
    for (const auto& k : kind->needs_one_of)
      if (spec.params.contains(k)) return spec;
    std::string names;
    for (const auto& k : kind->needs_one_of) names += (names.empty() ? "" : ", ") + k;
    ctx.error(item, "check " + spec.kind + " needs " + (kind->needs_one_of.size() > 1 ? "one of " : "") + names);
    return std::nullopt;
  };
  if (!params_node || params_node.IsNull()) return needs();
  std::vector<std::string> allowed;
  for (const auto& p : kind->params) allowed.push_back(p.name);
  MapReader m(ctx, params_node, "check " + spec.kind, allowed);
  if (!m.ok()) return std::nullopt;
  bool ok = true;
  for (const auto& p : kind->params) {
    const YAML::Node* v = m.get(p.name);
    if (!v) continue;
    const std::string what = spec.kind + "." + p.name;
    switch (p.type) {
      case ParamType::kString:
        if (auto s = read_string(ctx, *v, what)) spec.params[p.name] = *s; else ok = false;
        break;
      case ParamType::kNumber:
        if (auto d = read_number(ctx, *v, what)) spec.params[p.name] = *d; else ok = false;
        break;
      case ParamType::kBool:
        if (auto b = read_bool(ctx, *v, what)) spec.params[p.name] = *b; else ok = false;
        break;
      case ParamType::kInt:
        if (auto i = read_int(ctx, *v, what, 0)) spec.params[p.name] = *i; else ok = false;
        break;
    }
  }
  if (!ok) return std::nullopt;
  return needs();
}

// An outputs path: a folder or file name, relative to the phase folder, with only the run-time
// folders as placeholders (checked here, not when a check finally looks for the file).
std::optional<std::string> read_output_path(const ReadContext& ctx, const YAML::Node& node, const std::string& what) {
  auto text = read_string(ctx, node, what);
  if (!text) return std::nullopt;
  const PlaceholderPlace place{what, {}, {"case_dir", "phase_dir"}, {}, "outputs paths take {case_dir} and {phase_dir}"};
  bool refused = false;
  fill_placeholders(*text, place, [&](const std::string& message) { ctx.error(node, message), refused = true; });
  if (refused) return std::nullopt;
  if (text->empty()) ctx.error(node, what + " is empty");
  return text;
}

std::optional<MetricsSource> read_metrics_source(const ReadContext& ctx, const YAML::Node& node) {
  MapReader m(ctx, node, "outputs.metrics", {"from", "rank", "pattern", "path", "tags"});
  if (!m.ok()) return std::nullopt;
  const YAML::Node* from = m.get("from");
  if (!from) {
    ctx.error(node, "outputs.metrics needs from: torchtitan-log, log-pattern, tensorboard or metrics-jsonl");
    return std::nullopt;
  }
  auto name = read_string(ctx, *from, "outputs.metrics.from");
  if (!name) return std::nullopt;
  MetricsSource src;
  const auto kind = metrics_source_kind(*name);
  if (!kind) {
    const std::vector<std::string> names = metrics_source_names();
    const std::string hint = did_you_mean(*name, names);
    ctx.error(*from, "outputs.metrics.from '" + *name + "' is not one of torchtitan-log, log-pattern, tensorboard, "
                     "metrics-jsonl" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    return std::nullopt;
  }
  src.kind = *kind;
  const bool is_log = src.kind == MetricsSource::kTorchtitanLog || src.kind == MetricsSource::kLogPattern;
  const auto only_for = [&](const char* key, bool allowed, const char* sources) {
    if (m.get(key) && !allowed) ctx.error(*m.get(key), std::string("outputs.metrics.") + key + " applies to " + sources);
    return m.get(key) && allowed ? m.get(key) : nullptr;
  };
  if (auto* n = only_for("rank", is_log, "log sources (torchtitan-log, log-pattern)"))
    if (auto r = read_int(ctx, *n, "outputs.metrics.rank", 0)) src.rank = static_cast<int>(*r);
  if (auto* n = only_for("pattern", src.kind == MetricsSource::kLogPattern, "from: log-pattern")) {
    if (auto p = read_string(ctx, *n, "outputs.metrics.pattern")) {
      src.pattern = *p;
      try {
        LogPattern check(*p);
      } catch (const std::exception& e) {
        ctx.error(*n, e.what());
      }
    }
  } else if (src.kind == MetricsSource::kLogPattern) {
    ctx.error(node, "outputs.metrics from log-pattern needs a pattern with named groups (?P<step>...) (?P<loss>...)");
  }
  if (auto* n = only_for("path", !is_log, "tensorboard and metrics-jsonl")) {
    if (auto p = read_output_path(ctx, *n, "outputs.metrics.path")) src.path = *p;
  } else if (src.kind == MetricsSource::kTensorboard) {
    src.path = "tb";
  }
  if (auto* n = only_for("tags", src.kind == MetricsSource::kTensorboard, "from: tensorboard")) {
    MapReader tags(ctx, *n, "outputs.metrics.tags", {});
    for (const auto& [metric, tag] : tags.entries())
      if (auto t = read_string(ctx, tag, "outputs.metrics.tags." + metric)) src.tags[metric] = *t;
  }
  return src;
}

// Reads the keys of outputs.checkpoint that are written into `into`, over what it holds.
void read_checkpoint_source(const ReadContext& ctx, const YAML::Node& node, CheckpointOverride& into) {
  MapReader m(ctx, node, "outputs.checkpoint", {"path", "step", "model_prefix", "rename"});
  if (!m.ok()) return;
  into.node = node;
  for (const char* key : {"path", "step", "model_prefix", "rename"})
    if (auto* n = m.get(key)) into.nodes[key] = *n;
  if (auto* n = m.get("path"))
    if (auto p = read_output_path(ctx, *n, "outputs.checkpoint.path")) into.path = *p;
  if (auto* n = m.get("step"))
    if (auto v = read_int(ctx, *n, "outputs.checkpoint.step", 0)) into.step = *v;
  if (auto* n = m.get("model_prefix"))
    if (auto p = read_string(ctx, *n, "outputs.checkpoint.model_prefix")) into.model_prefix = *p;
  if (auto* n = m.get("rename")) {
    into.rename.emplace();
    MapReader r(ctx, *n, "outputs.checkpoint.rename", {});
    for (const auto& [pattern, to] : r.entries()) {
      try {
        std::regex check(pattern);
      } catch (const std::regex_error& e) {
        ctx.error(to, "outputs.checkpoint.rename: '" + pattern + "' is not a regular expression: " + e.what());
        continue;
      }
      if (auto t = read_string(ctx, to, "outputs.checkpoint.rename")) into.rename->emplace_back(pattern, *t);
    }
  }
}

void read_outputs(const ReadContext& ctx, const YAML::Node& node, Fields& f) {
  MapReader m(ctx, node, "outputs", {"metrics", "checkpoint", "tokens"});
  if (!m.ok()) return;
  if (auto* n = m.get("tokens"))
    if (auto t = read_output_path(ctx, *n, "outputs.tokens")) f.tokens = *t, f.tokens_node = *n;
  if (auto* n = m.get("metrics"))
    if (auto src = read_metrics_source(ctx, *n)) f.metrics = *src, f.metrics_node = *n;
  if (auto* n = m.get("checkpoint")) read_checkpoint_source(ctx, *n, f.checkpoint);
}

// A probe's program or argument: {matrix_dir} filled, any other placeholder refused (a probe
// runs once, before any case has a folder).
std::string fill_matrix_dir(const ReadContext& ctx, const YAML::Node& node, const std::string& text,
                            const std::string& what) {
  const PlaceholderPlace place{what, {{"matrix_dir", std::filesystem::absolute(ctx.file).parent_path().string()}}, {}, {},
                               "a probe takes only {matrix_dir} (it runs once, before any case)"};
  return fill_placeholders(text, place, [&](const std::string& message) { ctx.error(node, message); });
}

// "torch>=2.4" or "torch>=2.4,<3": a module, then comparisons of its __version__'s release numbers.
bool parse_version_spec(const std::string& spec, Requirement& r) {
  static const std::regex module_syntax(R"(\s*([A-Za-z_][A-Za-z0-9_.]*)\s*)");
  static const std::regex constraint_syntax(R"(\s*(>=|<=|==|!=|>|<)\s*([0-9]+(\.[0-9]+)*)\s*)");
  const size_t op = spec.find_first_of("<>=!");
  std::smatch m;
  const std::string head = spec.substr(0, op);
  if (op == std::string::npos || !std::regex_match(head, m, module_syntax)) return false;
  r.module = m[1];
  for (size_t at = op; at <= spec.size();) {
    size_t comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(at, comma - at);
    if (!std::regex_match(part, m, constraint_syntax)) return false;
    r.constraints.emplace_back(m[1], m[2]);
    at = comma + 1;
  }
  return true;
}

const std::vector<std::string> kProbeKinds = {"python", "command", "python_version", "gpus"};

// One entry of `requires:` (docs/matrix.md#requirements): exactly one probe, and what goes with it.
std::optional<Requirement> read_requirement(const ReadContext& ctx, const YAML::Node& node) {
  MapReader m(ctx, node, "requires entry",
              {"python", "command", "python_version", "gpus", "interpreter", "reason", "timeout"});
  if (!m.ok()) return std::nullopt;
  Requirement r;
  r.where = ctx.where(node);
  r.dir = std::filesystem::absolute(ctx.file).parent_path().string();
  std::vector<std::string> kinds;
  for (const auto& k : kProbeKinds)
    if (m.get(k)) kinds.push_back(k);
  if (kinds.size() != 1) {
    std::string named;
    for (const auto& k : kinds) named += (named.empty() ? "" : ", ") + k;
    ctx.error(node, "a requirement names exactly one probe (python, command, python_version or gpus)" +
                        (named.empty() ? std::string() : "; this one names " + named));
    return std::nullopt;
  }
  const size_t errors_before = ctx.diag->size();
  const std::string& kind = kinds.front();
  const YAML::Node& value = *m.get(kind);
  if (kind == "python") {
    r.kind = Requirement::kPython;
    if (auto t = read_string(ctx, value, "requires.python")) {
      if (t->empty()) ctx.error(value, "requires.python needs Python code, e.g. \"import torch\"");
      r.text = *t;
    }
  } else if (kind == "command") {
    r.kind = Requirement::kCommand;
    if (auto argv = read_string_list(ctx, value, "requires.command")) {
      if (argv->empty() || argv->front().empty()) ctx.error(value, "requires.command must name a program");
      for (const auto& a : *argv) r.argv.push_back(fill_matrix_dir(ctx, value, a, "requires.command"));
      for (const auto& a : *argv) r.text += (r.text.empty() ? "" : " ") + a;
    }
  } else if (kind == "python_version") {
    r.kind = Requirement::kPythonVersion;
    if (auto t = read_string(ctx, value, "requires.python_version")) {
      r.text = *t;
      if (!parse_version_spec(*t, r))
        ctx.error(value, "requires.python_version '" + *t +
                             "' must be <module><op><version>[,<op><version>...] with op one of >= > <= < == != "
                             "(e.g. torch>=2.4)");
    }
  } else {
    r.kind = Requirement::kGpus;
    if (auto n = read_int(ctx, value, "requires.gpus", 1)) r.gpus = static_cast<int>(*n);
  }
  if (const YAML::Node* n = m.get("interpreter")) {
    if (r.kind != Requirement::kPython && r.kind != Requirement::kPythonVersion)
      ctx.error(*n, "requires.interpreter goes with python or python_version, not " + kind);
    else if (auto t = read_string(ctx, *n, "requires.interpreter")) {
      if (t->empty()) ctx.error(*n, "requires.interpreter must name a program");
      r.interpreter = fill_matrix_dir(ctx, *n, *t, "requires.interpreter");
    }
  }
  if (const YAML::Node* n = m.get("timeout")) {
    if (r.kind == Requirement::kGpus) ctx.error(*n, "requires.timeout goes with a probe that runs, not gpus");
    else if (auto t = read_number(ctx, *n, "requires.timeout")) {
      if (!(*t > 0)) ctx.error(*n, "requires.timeout must be positive seconds");
      r.timeout_s = *t;
    }
  }
  if (const YAML::Node* n = m.get("reason"))
    if (auto t = read_string(ctx, *n, "requires.reason")) {
      if (t->empty()) ctx.error(*n, "requires.reason must not be empty (leave it out for the default)");
      r.reason = *t;
    }
  if (ctx.diag->size() != errors_before) return std::nullopt;
  return r;
}

void read_requirements(const ReadContext& ctx, const YAML::Node& node, Fields& f) {
  if (!node.IsSequence()) {
    ctx.error(node, "requires must be a list of probes, e.g. [{python: \"import torch\"}]");
    return;
  }
  for (const auto& item : node)
    if (auto r = read_requirement(ctx, item)) f.requirements.push_back(*r);
}

// Two checks judge the same thing when they differ at most in how strict they are.
bool same_judgement(const CheckSpec& a, const CheckSpec& b) {
  // Compared as JSON values, not as text: a parameter may hold bytes that are not UTF-8.
  auto what = [](const CheckSpec& c) {
    nlohmann::json p = c.params;
    for (const char* strictness : {"rtol", "atol", "exact", "factor"}) p.erase(strictness);
    if (!p.contains("metric")) p["metric"] = "loss";
    return p;
  };
  return a.kind == b.kind && what(a) == what(b);
}

// A case's checks join the ones it inherits, so a case cannot silently lose a default
// comparison; one that differs from an inherited check only in its tolerances replaces it.
std::vector<CheckSpec> with_inherited_checks(std::vector<CheckSpec> inherited, const std::vector<CheckSpec>& own) {
  std::vector<bool> replaced(inherited.size(), false);
  for (const auto& c : own) {
    size_t i = 0;
    while (i < replaced.size() && (replaced[i] || !same_judgement(inherited[i], c))) ++i;
    if (i < replaced.size()) inherited[i] = c, replaced[i] = true;
    else inherited.push_back(c);
  }
  return inherited;
}

// Reads the keys a case and `defaults` share into `f`, on top of what it holds.
void read_common(const ReadContext& ctx, const MapReader& m, Fields& f) {
  if (auto* n = m.get("adapter")) {
    if (auto s = read_string(ctx, *n, "adapter")) f.adapter = *s, f.adapter_node = *n;
  }
  if (auto* n = m.get("command")) {
    if (auto argv = read_string_list(ctx, *n, "command")) {
      if (argv->empty()) ctx.error(*n, "command must not be empty");
      f.command = *argv, f.command_node = *n;
    }
  }
  if (auto* n = m.get("model")) {
    if (auto s = read_string(ctx, *n, "model")) f.model = *s, f.model_node = *n;
  }
  if (auto* n = m.get("mesh")) {
    if (auto mesh = read_mesh(ctx, *n)) f.mesh = *mesh, f.mesh_node = *n;
  }
  if (auto* n = m.get("ngpu")) {
    if (auto v = read_int(ctx, *n, "ngpu", 1)) f.ngpu = static_cast<int>(*v), f.ngpu_node = *n;
  }
  if (auto* n = m.get("options")) read_options(ctx, *n, f.options);
  if (auto* n = m.get("tags")) {
    if (auto t = read_string_list(ctx, *n, "tags")) f.tags = *t;
  }
  if (auto* n = m.get("timeout")) {
    if (auto t = read_number(ctx, *n, "timeout")) {
      if (*t <= 0) ctx.error(*n, "timeout must be positive seconds");
      f.timeout = *t;
    }
  }
  if (auto* n = m.get("env")) read_env(ctx, *n, f.env, f.env_nodes);
  if (auto* n = m.get("expect")) {
    if (auto e = read_expect(ctx, *n)) f.expect = *e;
  }
  if (auto* n = m.get("checks")) {
    if (!n->IsSequence()) {
      ctx.error(*n, "checks must be a list");
    } else {
      std::vector<CheckSpec> checks;
      for (const auto& item : *n)
        if (auto c = read_check(ctx, item)) checks.push_back(*c);
      f.checks = with_inherited_checks(f.checks.value_or(std::vector<CheckSpec>{}), checks);
    }
  }
  if (auto* n = m.get("duration")) {
    if (auto d = read_number(ctx, *n, "duration")) f.duration = *d;
  }
  if (auto* n = m.get("outputs")) read_outputs(ctx, *n, f);
  if (auto* n = m.get("requires")) read_requirements(ctx, *n, f);
  if (auto* n = m.get("simulate")) {
    if (!n->IsScalar() || (n->Scalar() != "true" && n->Scalar() != "false"))
      ctx.error(*n, "simulate must be true (every rank of the case on one device, docs/simulation.md) or false");
    else
      f.simulate = n->Scalar() == "true", f.simulate_node = *n;
  }
  if (auto* n = m.get("drift")) {
    const auto policy = read_string(ctx, *n, "drift");
    if (policy && *policy != "note" && *policy != "fail")
      ctx.error(*n, "drift must be note (the default: a drift is reported) or fail (a drift fails the case), got '" +
                        *policy + "'");
    else if (policy)
      f.drift_fails = *policy == "fail";
  }
}

std::string option_text(const Options& options, const std::string& key) {
  for (const auto& [k, v] : options)
    if (k == key) return v.is_flag ? (v.flag ? "true" : "") : v.text;
  return "";
}

// Fills the load-time placeholders this phase has, keeps the run-time ones, reports the others.
std::vector<std::string> fill_command(const ReadContext& ctx, const YAML::Node& where_node,
                                      const std::vector<std::string>& command,
                                      const std::map<std::string, std::string>& values,
                                      const std::string& what = "command") {
  PlaceholderPlace place{what, values, run_time_placeholders(), {}, ""};
  for (const auto& name : kLoadTimePlaceholders)
    if (!values.count(name)) place.lacking[name] = "this phase has no " + name;
  std::vector<std::string> out;
  for (const auto& arg : command)
    out.push_back(fill_placeholders(arg, place, [&](const std::string& message) { ctx.error(where_node, message); }));
  return out;
}

Phase build_phase(const ReadContext& ctx, const YAML::Node& where_node, const std::string& name,
                  const std::string& action, const Fields& f, const std::string& file) {
  Phase p;
  p.name = name;
  p.where = ctx.where(where_node);
  p.where.file = file;
  p.timeout_s = f.timeout.value_or(kDefaultTimeoutS);
  p.env = f.env;
  const TrainerAdapter* adapter = adapter_of(ctx, f, where_node);
  if (!adapter) return p;
  p.mesh = checked_layout(ctx, *adapter, f);
  const Layout layout = p.mesh ? *p.mesh : adapter->default_layout(f.ngpu.value_or(1)).value_or(Layout{});
  p.outputs = adapter->default_outputs(layout);
  // Where each output setting comes from, for `meshtest show`: the matrix (file:line:col) or the adapter.
  const std::string from_adapter = "adapter " + adapter->name();
  auto from = [&](const YAML::Node& node) { return ctx.where(node).str(); };
  p.outputs_from = {{"metrics", f.metrics ? from(f.metrics_node) : from_adapter},
                    {"tokens", f.tokens ? from(f.tokens_node) : from_adapter}};
  if (p.outputs.checkpoint || f.checkpoint.any())
    for (const char* key : {"path", "step", "model_prefix", "rename"}) {
      const auto it = f.checkpoint.nodes.find(key);
      p.outputs_from.emplace_back(std::string("checkpoint.") + key,
                                  it != f.checkpoint.nodes.end() ? from(it->second) : from_adapter);
    }
  if (f.metrics) p.outputs.metrics = *f.metrics;
  if (f.checkpoint.any()) {
    CheckpointSource merged = p.outputs.checkpoint.value_or(CheckpointSource{});
    f.checkpoint.apply_to(merged);
    if (merged.path.empty())
      ctx.error(f.checkpoint.node, "outputs.checkpoint needs a path (a step folder or a folder of step-<N>): adapter '" +
                                       adapter->name() + "' names no checkpoint of its own");
    p.outputs.checkpoint = merged;
  }
  if (f.tokens) p.outputs.tokens = *f.tokens;
  if (p.mesh) {
    p.nproc = static_cast<int>(p.mesh->ranks());
    if (f.ngpu && *f.ngpu != p.nproc)
      ctx.error(f.ngpu_node, "ngpu " + std::to_string(*f.ngpu) + " disagrees with mesh " +
                                 p.mesh->to_compact_string() + " (" + std::to_string(p.nproc) + " ranks)");
  } else {
    p.nproc = f.ngpu.value_or(1);
  }
  if (adapter->needs_model() && !f.model)
    ctx.error(where_node, "case runs " + adapter->name() + " (no command) but names no model; add model: " +
                              (adapter->models() && !adapter->models()->empty() ? adapter->models()->front() : "NAME") +
                              " (or a command)");
  check_reserved_options(ctx, *adapter, f.options);
  // {matrix_dir}: the matrix file's folder, so a matrix can name files kept beside it.
  std::map<std::string, std::string> values = {{"action", action}, {"nproc", std::to_string(p.nproc)}, {"phase", name},
                                               {"matrix_dir", std::filesystem::absolute(file).parent_path().string()}};
  if (f.model) values["model"] = *f.model;
  if (const auto layout = p.mesh ? p.mesh : adapter->default_layout(p.nproc)) values["mesh"] = layout->to_compact_string();
  // env values take the same placeholders as the command: load-time ones now, run-time ones
  // ({case_dir}, {phase_dir}, {backend}, programs) when the phase runs (resolve_argv).
  for (auto& [key, value] : p.env) {
    auto node = f.env_nodes.find(key);
    value = fill_command(ctx, node != f.env_nodes.end() ? node->second : where_node, {value}, values, "env " + key).front();
  }
  const YAML::Node& command_node = f.command ? f.command_node : where_node;
  p.argv = fill_command(ctx, command_node, f.command.value_or(adapter->default_command()), values);
  if (p.argv.empty()) ctx.error(where_node, "adapter '" + adapter->name() + "' has no default command; add command:");
  PhaseRequest request{f.model.value_or(""), layout, {}};
  // An option's value is part of the command line: {matrix_dir} and the other load-time
  // placeholders are filled there too, run-time ones ({case_dir}) when the phase runs.
  for (const auto& [key, v] : f.options)
    request.options.push_back({key, v.is_flag ? std::optional<bool>(v.flag) : std::nullopt,
                               v.is_flag ? v.text : fill_command(ctx, v.node, {v.text}, values).front()});
  try {
    const auto args = adapter->phase_args(request);
    p.argv.insert(p.argv.end(), args.begin(), args.end());
  } catch (const std::invalid_argument& e) {
    ctx.error(where_node, e.what());
  }
  return p;
}

// Rejects meshes the model cannot be split along (the adapter knows the rules).
void check_mesh_fits(const ReadContext& ctx, const Fields& f, const YAML::Node& mesh_node) {
  if (!f.model || !f.mesh) return;
  Diagnostics quiet;  // an unknown adapter or axis is reported where the phase is built
  const ReadContext silent{ctx.file, &quiet, ctx.vars};
  const TrainerAdapter* adapter = adapter_of(silent, f, mesh_node);
  if (!adapter) return;
  const auto layout = checked_layout(silent, *adapter, f);
  if (!layout || !quiet.empty()) return;
  const std::string problem = adapter->layout_problem(
      *f.model, *layout, [&](const std::string& key) { return option_text(f.options, key); });
  if (!problem.empty())
    ctx.error(mesh_node, "mesh " + layout->to_compact_string() + " does not fit the model: " + problem);
}

// A case's `phases:` list: each phase starts from the case's fields `f`.
std::vector<Phase> read_phases(const ReadContext& ctx, const YAML::Node& phases, const Fields& f) {
  std::vector<Phase> out;
  std::map<std::string, Where> seen;
  for (const auto& pnode : phases) {
    MapReader pm(ctx, pnode, "phase", kPhaseKeys);
    if (!pm.ok()) continue;
    const YAML::Node* pname = pm.get("name");
    if (!pname) {
      ctx.error(pnode, "phase needs a name");
      continue;
    }
    auto phase_name = read_string(ctx, *pname, "phase name");
    if (!phase_name) continue;
    static const std::regex phase_syntax("[A-Za-z0-9_.-]+");
    if (!std::regex_match(*phase_name, phase_syntax) || *phase_name == "." || *phase_name == "..") {
      ctx.error(*pname, "phase name '" + *phase_name + "' is a folder name: letters, digits, _ . - only");
      continue;
    }
    if (auto dup = seen.find(*phase_name); dup != seen.end()) {
      ctx.error(*pname, "duplicate phase '" + *phase_name + "' (first at " + dup->second.str() + ")");
      continue;
    }
    seen.emplace(*phase_name, ctx.where(*pname));
    Fields pf = f;
    read_common(ctx, pm, pf);  // pm allows only the phase keys, so this reads command/mesh/options/env/timeout
    std::string action = "train";
    if (auto* a = pm.get("action")) {
      if (auto s = read_string(ctx, *a, "action")) action = *s;
    }
    if (pm.get("mesh")) check_mesh_fits(ctx, pf, *pm.get("mesh"));
    out.push_back(build_phase(ctx, pnode, *phase_name, action, pf, ctx.file));
  }
  return out;
}

std::string combination_label(const Combination& combo) {
  std::string out;
  for (const auto& [k, v] : combo) out += (out.empty() ? "" : "-") + v;
  return out;
}

// Builds one case from its YAML with the matrix values `combo` (empty without a matrix).
// A check's `phase` and `against` must name phases of its case, and each phase it reads (those,
// or the last) must supply what the check reads (core/check_kinds.h): a check that cannot apply
// is refused here, not failed (or passed) after the run.
void check_reads_phases(const ReadContext& ctx, const Case& c, const CheckSpec& check) {
  std::vector<const Phase*> read = {&c.phases.back()};
  for (const char* key : {"phase", "against"}) {
    if (!check.params.contains(key)) continue;
    const std::string phase = check.params[key];
    std::vector<std::string> names;
    const Phase* named = nullptr;
    for (const auto& p : c.phases) names.push_back(p.name), named = p.name == phase ? &p : named;
    if (!named) {
      const std::string hint = did_you_mean(phase, names);
      ctx.diag->error(check.where, "check " + check.kind + ": " + key + " '" + phase + "' is not a phase of " + c.id +
                                       (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
      return;
    }
    if (std::string(key) == "phase") read.front() = named;
    else read.push_back(named);
  }
  const CheckSignature* kind = find_check_kind(check.kind);
  if (!kind) return;
  for (const Phase* p : read)
    if (const std::string why = input_problem(kind->reads, p->outputs, c.adapter); !why.empty()) {
      ctx.diag->error(check.where, "check " + check.kind + " cannot judge " + c.id + (c.phases.size() > 1 ? " phase " + p->name : "") +
                                       ": " + why);
      return;
    }
}

std::optional<Case> build_case(const ReadContext& ctx, const YAML::Node& node, const Fields& defaults,
                               const std::string& suite, const Combination& combo) {
  std::vector<std::string> keys = kCommonKeys;
  keys.insert(keys.end(), {"name", "phases", "matrix", "default_checks"});
  MapReader m(ctx, node, "case", keys);
  if (!m.ok()) return std::nullopt;
  const size_t errors_before = ctx.diag->size();
  Case c;
  c.suite = suite;
  c.file = ctx.file;
  c.where = ctx.where(node);
  c.matrix_values = combo;
  const YAML::Node* name_node = m.get("name");
  if (!name_node) {
    ctx.error(node, "case needs a name");
    return std::nullopt;
  }
  auto name = read_string(ctx, *name_node, "name");
  if (!name) return std::nullopt;
  c.name = *name;
  if (!combo.empty() && name_node->Scalar().find("${{") == std::string::npos)
    c.name += "[" + combination_label(combo) + "]";
  static const std::regex name_syntax(R"([A-Za-z0-9_.,=+\-\[\]/]+)");
  if (!std::regex_match(c.name, name_syntax))
    ctx.error(*name_node, "case name '" + c.name + "' may hold only letters, digits and _ . , = + - [ ] /");
  // The case's folder is <out>/<suite>/<name with '/' as '_'>: '.' and '..' would be the suite's or --out.
  if (c.name == "." || c.name == "..")
    ctx.error(*name_node, "case name '" + c.name + "' would name a folder above the case's (<out>/<suite>/" + c.name + ")");
  c.id = suite + "/" + c.name;

  Fields f = defaults;
  // `default_checks: false`: the case says, in the matrix, that it judges by its own checks only.
  if (const YAML::Node* n = m.get("default_checks"))
    if (auto keep = read_bool(ctx, *n, "default_checks"); keep && !*keep) f.checks.reset();
  read_common(ctx, m, f);
  c.model = f.model.value_or("");
  c.seed = option_text(f.options, "seed");
  c.tags = f.tags.value_or(std::vector<std::string>{});
  c.expect = f.expect.value_or(Expectation{});
  c.checks = f.checks.value_or(std::vector<CheckSpec>{});
  c.requirements = f.requirements;
  c.duration_hint_s = f.duration.value_or(0);
  c.drift_fails = f.drift_fails.value_or(false);
  c.adapter = adapter_name(f);
  const TrainerAdapter* adapter = trainer_adapters().find(c.adapter);
  c.simulated = f.simulate.value_or(false);
  if (c.simulated && adapter && adapter->simulated_backend().empty())
    ctx.error(f.simulate_node, "adapter '" + c.adapter + "' cannot simulate a world (simulate: true needs a trainer "
                               "whose ranks can share one device: meshtrain)");
  if (f.model && adapter) {
    const auto known = adapter->models();
    if (known && std::find(known->begin(), known->end(), *f.model) == known->end()) {
      const std::string hint = did_you_mean(*f.model, *known);
      ctx.error(f.model_node, "unknown model '" + *f.model + "'" +
                                  (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    }
  }

  if (m.get("mesh")) check_mesh_fits(ctx, f, *m.get("mesh"));
  if (const YAML::Node* phases = m.get("phases")) {
    if (!phases->IsSequence() || phases->size() == 0) {
      ctx.error(*phases, "phases must be a non-empty list");
      return std::nullopt;
    }
    c.phases = read_phases(ctx, *phases, f);
  } else {
    c.phases.push_back(build_phase(ctx, node, "train", "train", f, ctx.file));
  }
  c.ngpu = 1;
  for (const auto& p : c.phases) c.ngpu = std::max(c.ngpu, p.nproc);

  for (const auto& check : c.checks) check_reads_phases(ctx, c, check);
  if (c.expect.kind == Expectation::kFail && c.expect.check != "exit") {
    bool declared = false;
    for (const auto& check : c.checks) declared |= check.kind == c.expect.check;
    if (!declared)
      ctx.error(m.get("expect") ? *m.get("expect") : node,
                "canary expects check '" + c.expect.check + "' to fail, but the case does not declare it");
  }
  if (ctx.diag->size() != errors_before) return std::nullopt;
  return c;
}

std::vector<Combination> read_combinations(const ReadContext& ctx, const YAML::Node& node, const std::string& what) {
  std::vector<Combination> out;
  if (!node.IsSequence()) {
    ctx.error(node, what + " must be a list of mappings");
    return out;
  }
  for (const auto& entry : node) {
    MapReader m(ctx, entry, what + " entry", {});
    Combination combo;
    for (const auto& [k, v] : m.entries())
      if (auto s = read_string(ctx, v, what + "." + k)) combo.emplace_back(k, *s);
    out.push_back(combo);
  }
  return out;
}

std::vector<Case> expand_case(const ReadContext& ctx, const YAML::Node& node, const Fields& defaults,
                              const std::string& suite) {
  std::vector<Case> out;
  const YAML::Node* matrix = nullptr;
  YAML::Node matrix_value;
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == "matrix") matrix_value = it->second, matrix = &matrix_value;
  }
  if (!matrix) {
    if (auto c = build_case(ctx, node, defaults, suite, {})) out.push_back(*c);
    return out;
  }
  MapReader m(ctx, *matrix, "matrix", {});
  if (!m.ok()) return out;
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  std::vector<Combination> include, exclude;
  for (const auto& [key, value] : m.entries()) {
    if (key == "include") include = read_combinations(ctx, value, "include");
    else if (key == "exclude") exclude = read_combinations(ctx, value, "exclude");
    else if (!value.IsSequence() || value.size() == 0)
      ctx.error(value, "matrix axis '" + key + "' must be a non-empty list of values");
    else if (auto values = read_string_list(ctx, value, "matrix axis " + key))
      axes.emplace_back(key, *values);
  }
  for (const auto& e : exclude)
    for (const auto& [k, v] : e) {
      bool known = false;
      for (const auto& a : axes) known |= a.first == k;
      if (!known) ctx.error(*matrix, "exclude names '" + k + "', which is not an axis");
    }
  for (const auto& combo : expand_axes(axes, include, exclude)) {
    std::map<std::string, std::string> vars(combo.begin(), combo.end());
    ReadContext with_vars = ctx;
    with_vars.vars = &vars;
    if (auto c = build_case(with_vars, node, defaults, suite, combo)) out.push_back(*c);
  }
  return out;
}

Suite load_suite(const YAML::Node& root, const std::string& file) {
  Diagnostics diag;
  ReadContext ctx{file, &diag, nullptr};
  Suite suite;
  suite.file = file;
  MapReader top(ctx, root, "the matrix file", kFileKeys);
  if (!top.ok()) diag.throw_if_any();
  if (auto* n = top.get("suite")) {
    if (auto s = read_string(ctx, *n, "suite")) suite.name = *s;
    static const std::regex suite_syntax("[A-Za-z0-9_.-]+");
    if (!std::regex_match(suite.name, suite_syntax)) ctx.error(*n, "suite must be a word (letters, digits, _ . -)");
    else if (suite.name == "." || suite.name == "..")
      ctx.error(*n, "suite '" + suite.name + "' would name a folder above --out's suites (<out>/" + suite.name + ")");
  } else {
    ctx.error(root, "the matrix file needs a 'suite' name");
  }
  if (auto* n = top.get("description")) {
    if (auto s = read_string(ctx, *n, "description")) suite.description = *s;
  }
  Fields defaults;
  if (auto* n = top.get("defaults")) {
    MapReader dm(ctx, *n, "defaults", kCommonKeys);
    if (dm.ok()) read_common(ctx, dm, defaults);
  }
  const YAML::Node* cases = top.get("cases");
  if (!cases || !cases->IsSequence()) {
    ctx.error(cases ? *cases : root, "the matrix file needs a list of 'cases'");
    diag.throw_if_any();
  }
  std::map<std::string, Where> ids;
  for (const auto& node : *cases) {
    for (auto& c : expand_case(ctx, node, defaults, suite.name)) {
      if (auto dup = ids.find(c.id); dup != ids.end()) {
        diag.error(c.where, "duplicate case id '" + c.id + "' (first at " + dup->second.str() + ")");
        continue;
      }
      ids.emplace(c.id, c.where);
      suite.cases.push_back(std::move(c));
    }
  }
  // Baselines written as a bare name mean a case of this suite.
  for (auto& c : suite.cases)
    for (auto& check : c.checks) {
      if (!check.params.contains("baseline")) continue;
      std::string target = check.params["baseline"];
      if (target.find('/') != std::string::npos) continue;
      target = suite.name + "/" + target;
      if (!ids.count(target)) {
        std::vector<std::string> names;
        for (const auto& other : suite.cases) names.push_back(other.name);
        const std::string hint = did_you_mean(check.params["baseline"], names);
        diag.error(check.where, "check " + check.kind + ": unknown baseline '" +
                                    check.params["baseline"].get<std::string>() + "' (no case of that name in suite " +
                                    suite.name + ")" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
      }
      check.params["baseline"] = target;
    }
  diag.throw_if_any();
  return suite;
}

}  // namespace

std::string Expectation::str() const {
  switch (kind) {
    case kPass: return "pass";
    case kXfail: return "xfail: " + reason;
    case kSkip: return "skip: " + reason;
    case kFail: return "fail: " + check;
  }
  return "?";
}

std::vector<std::string> Case::baselines() const {
  std::vector<std::string> out;
  for (const auto& check : checks)
    if (check.params.contains("baseline")) {
      const std::string id = check.params["baseline"];
      if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    }
  return out;
}

nlohmann::json Case::to_json() const {
  nlohmann::json j;
  j["id"] = id;
  j["suite"] = suite;
  j["name"] = name;
  j["where"] = where.str();
  j["adapter"] = adapter;
  j["model"] = model;
  j["ngpu"] = ngpu;
  j["tags"] = tags;
  j["expect"] = expect.str();
  if (drift_fails) j["drift"] = "fail";
  if (simulated) j["simulated"] = true;
  j["matrix"] = nlohmann::json::object();
  for (const auto& [k, v] : matrix_values) j["matrix"][k] = v;
  j["phases"] = nlohmann::json::array();
  for (const auto& p : phases) {
    nlohmann::json jp = {{"name", p.name}, {"nproc", p.nproc}, {"argv", p.argv}, {"timeout_s", p.timeout_s}};
    if (p.mesh) jp["mesh"] = p.mesh->to_compact_string();
    for (const auto& [k, v] : p.env) jp["env"][k] = v;
    jp["outputs"] = outputs_to_json(p.outputs);
    for (const auto& [key, where] : p.outputs_from) jp["outputs_from"][key] = where;
    j["phases"].push_back(jp);
  }
  j["checks"] = nlohmann::json::array();
  for (const auto& c : checks) j["checks"].push_back({{"kind", c.kind}, {"params", c.params}, {"where", c.where.str()}});
  j["requires"] = nlohmann::json::array();
  for (const auto& r : requirements) j["requires"].push_back(r.to_json());
  return j;
}

namespace {
const char* const kRequirementKindNames[] = {"python", "command", "python_version", "gpus"};  // by Requirement::Kind

// Long or multi-line probe text on one line, for a reason: each run of white space one space.
std::string one_line(const std::string& text, size_t max_chars = 80) {
  std::string out;
  for (char ch : text) {
    const bool space = ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
    if (!space) out += ch;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.size() > max_chars ? out.substr(0, max_chars - 3) + "..." : out;
}
}  // namespace

std::string Requirement::describe() const {
  const std::string name = kRequirementKindNames[kind];
  if (kind == kGpus) return name + " " + std::to_string(gpus);
  return name + " '" + one_line(text) + "'";
}

nlohmann::json Requirement::to_json() const {
  nlohmann::json j = {{"kind", kRequirementKindNames[kind]}, {"probe", describe()}, {"where", where.str()}};
  if (kind == kGpus) j["gpus"] = gpus;
  if (kind == kCommand) j["argv"] = argv;
  if (kind == kPython || kind == kPythonVersion) j["text"] = text, j["interpreter"] = interpreter;
  if (kind != kGpus) j["timeout_s"] = timeout_s;
  if (!reason.empty()) j["reason"] = reason;
  return j;
}

std::vector<Combination> expand_axes(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes,
                                     const std::vector<Combination>& include, const std::vector<Combination>& exclude) {
  std::vector<Combination> combos;
  if (!axes.empty()) {
    combos.push_back({});
    for (const auto& [key, values] : axes) {  // first axis outermost, like Actions
      std::vector<Combination> next;
      for (const auto& partial : combos)
        for (const auto& v : values) {
          Combination c = partial;
          c.emplace_back(key, v);
          next.push_back(std::move(c));
        }
      combos = std::move(next);
    }
  }
  auto value_of = [](const Combination& c, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : c)
      if (k == key) return &v;
    return nullptr;
  };
  // exclude: an entry removes every combination it partially matches.
  combos.erase(std::remove_if(combos.begin(), combos.end(),
                              [&](const Combination& c) {
                                for (const auto& e : exclude) {
                                  bool all = true;
                                  for (const auto& [k, v] : e) {
                                    const std::string* have = value_of(c, k);
                                    all &= have && *have == v;
                                  }
                                  if (all && !e.empty()) return true;
                                }
                                return false;
                              }),
               combos.end());
  // include: extend every original combination none of whose original values it would
  // overwrite (values an earlier include added may be overwritten); else a new one.
  const size_t originals = combos.size();
  std::vector<std::set<std::string>> original_keys(originals);
  for (size_t i = 0; i < originals; ++i)
    for (const auto& [k, v] : combos[i]) original_keys[i].insert(k);
  for (const auto& inc : include) {
    bool added = false;
    for (size_t i = 0; i < originals; ++i) {
      bool fits = true;
      for (const auto& [k, v] : inc)
        if (original_keys[i].count(k) && *value_of(combos[i], k) != v) fits = false;
      if (!fits) continue;
      added = true;
      for (const auto& [k, v] : inc) {
        bool replaced = false;
        for (auto& [ck, cv] : combos[i])
          if (ck == k) cv = v, replaced = true;
        if (!replaced) combos[i].emplace_back(k, v);
      }
    }
    if (!added) combos.push_back(inc);
  }
  return combos;
}

Suite load_suite_file(const std::string& path) { return load_suite(load_yaml_file(path), path); }

namespace {

// The baseline a check reads must supply what the check reads, as the case's own phase must.
void check_baseline_supplies(Diagnostics& diag, const CheckSpec& check, const Case& baseline) {
  const CheckSignature* kind = find_check_kind(check.kind);
  if (!kind || baseline.phases.empty()) return;
  const Phase* read = &baseline.phases.back();
  const std::string named = check.params.value("baseline_phase", "");
  for (const auto& p : baseline.phases)
    if (p.name == named) read = &p;
  if (const std::string why = input_problem(kind->reads, read->outputs, baseline.adapter); !why.empty())
    diag.error(check.where, "check " + check.kind + " cannot read its baseline " + baseline.id + ": " + why);
}

}  // namespace

Suite load_suite_text(const std::string& yaml, const std::string& file_name) {
  return load_suite(load_yaml_string(yaml, file_name), file_name);
}

void validate_suites(const std::vector<Suite>& suites) {
  Diagnostics diag;
  std::map<std::string, Where> ids;
  for (const auto& s : suites)
    for (const auto& c : s.cases) {
      if (auto dup = ids.find(c.id); dup != ids.end())
        diag.error(c.where, "duplicate case id '" + c.id + "' (first at " + dup->second.str() + ")");
      else
        ids.emplace(c.id, c.where);
    }
  std::map<std::string, const Case*> by_id;
  for (const auto& s : suites)
    for (const auto& c : s.cases) by_id.emplace(c.id, &c);
  for (const auto& s : suites)
    for (const auto& c : s.cases)
      for (const auto& check : c.checks) {
        if (!check.params.contains("baseline")) continue;
        const auto baseline = by_id.find(check.params["baseline"]);
        if (baseline == by_id.end())
          diag.error(check.where, "check " + check.kind + ": unknown baseline '" +
                                      check.params["baseline"].get<std::string>() + "'");
        else
          check_baseline_supplies(diag, check, *baseline->second);
      }
  diag.throw_if_any();
}

std::vector<std::string> resolve_argv(const std::vector<std::string>& argv, const RunPaths& paths) {
  std::map<std::string, std::string> values = {
      {"backend", paths.backend}, {"case_dir", paths.case_dir}, {"phase_dir", paths.phase_dir}};
  for (const auto& [name, value] : paths.programs) values.emplace(name, value);
  std::vector<std::string> out;
  for (const auto& arg : argv) out.push_back(fill_run_time(arg, values));
  return out;
}

std::string resolve_path(const std::string& text, const RunPaths& paths) {
  const std::string resolved = resolve_argv({text}, paths).front();
  if (resolved.empty() || resolved.front() == '/') return resolved;
  return paths.phase_dir + "/" + resolved;
}

}  // namespace meshtest
