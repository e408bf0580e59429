#include "core/matrix_fields.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <stdexcept>

#include "core/check_kinds.h"
#include "core/placeholders.h"
#include "readers/log_metrics.h"

namespace meshtest {

namespace {

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

}  // namespace

// The case's adapter: `adapter:`, else `command` for a case with a command, else the default.
std::string adapter_name(const Fields& f) {
  return f.adapter ? *f.adapter : f.command ? "command" : trainer_adapters().default_name();
}

const TrainerAdapter* adapter_of(const ReadContext& ctx, const Fields& f, const YAML::Node& where_node) {
  const AdapterRegistry& registry = trainer_adapters();
  const std::string name = adapter_name(f);
  if (const TrainerAdapter* adapter = registry.find(name)) return adapter;
  if (f.adapter) {
    ctx.error(f.adapter_node, "unknown adapter '" + name + "'" + did_you_mean(name, registry.names()));
  } else {
    ctx.error(where_node, "case names no command and this meshtest has no default trainer adapter; add command:");
  }
  return nullptr;
}

std::string option_text(const Options& options, const std::string& key) {
  for (const auto& [k, v] : options)
    if (k == key) return v.is_flag ? (v.flag ? "true" : "") : v.text;
  return "";
}

// The layout as the adapter takes it: only its axes, in its order, those the mesh writes (a size
// of 1 too: hf-trainer's `dp_shard: 1` is FSDP over one rank).
// Refused where the mesh is written: an axis the adapter does not know, and then a layout the
// model cannot be split along (the adapter knows the rules).
std::optional<Layout> checked_layout(const ReadContext& ctx, const TrainerAdapter& adapter, const Fields& f) {
  if (!f.mesh) return std::nullopt;
  const std::vector<std::string> axes = adapter.layout_axes();
  Layout layout = *f.mesh;
  bool axes_known = true;
  if (!axes.empty()) {
    if (f.mesh_node.IsMap()) {
      axes_known = MapReader(ctx, f.mesh_node, "mesh", axes).ok();  // reports unknown axes where they are written
    } else {
      for (const auto& [axis, size] : f.mesh->axes)
        if (std::find(axes.begin(), axes.end(), axis) == axes.end()) {
          std::string known;
          for (const auto& a : axes) known += (known.empty() ? "" : ", ") + a;
          ctx.error(f.mesh_node, "mesh '" + f.mesh->to_compact_string() + "': unknown dimension '" + axis +
                                     "' (known: " + known + ")");
          axes_known = false;
        }
    }
    layout.axes.clear();
    for (const auto& axis : axes)
      if (f.mesh->names(axis)) layout.axes.emplace_back(axis, f.mesh->size(axis));
    if (layout.axes.empty()) layout = adapter.default_layout(1).value_or(layout);
  }
  if (f.model && axes_known) {
    const std::string problem =
        adapter.layout_problem(*f.model, layout, [&](const std::string& key) { return option_text(f.options, key); });
    if (!problem.empty())
      ctx.error(f.mesh_node, "mesh " + layout.to_compact_string() + " does not fit the model: " + problem);
  }
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

namespace {

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
    if (text) set_env(into, key, *text), nodes[key].reset(value);
  }
}

std::optional<Expectation> read_expect(const ReadContext& ctx, const YAML::Node& node) {
  Expectation e;
  if (node.IsScalar()) {
    if (node.Scalar() == "pass") return e;
    ctx.error(node,
              "expect must be pass, {xfail: reason}, {skip: reason} or {fail: <check>}, got '" + node.Scalar() + "'");
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
    const std::optional<CheckKind> check = check_kind_named(*text);
    if (!check) {
      ctx.error(value, "expect.fail names no check '" + *text + "'" + did_you_mean(*text, check_kind_names()));
      return std::nullopt;
    }
    e.kind = Expectation::kFail, e.check = *check;
  }
  return e;
}

// loss_matches' `rule`, read into its CurveRule here, once. The rule is the check's one source of
// tolerance: rtol, atol or exact beside it are refused, and their defaults cleared, so `show`
// prints only the rule.
bool read_curve_rule(const ReadContext& ctx, const MapReader& m, const std::string& check, CheckParams& params) {
  if (!params.rule) return true;
  bool ok = true;
  params.curve_rule = curve_rule_named(*params.rule);
  if (!params.curve_rule) {
    const std::vector<std::string> rules = curve_rule_names();
    std::string listed;
    for (const auto& r : rules) listed += (listed.empty() ? "" : ", ") + r;
    ctx.error(*m.get("rule"), "check " + check + ".rule: unknown rule '" + *params.rule + "'; the rules are " + listed +
                                  did_you_mean(*params.rule, rules));
    ok = false;
  }
  for (const char* key : {"rtol", "atol", "exact"})
    if (const YAML::Node* n = m.get(key)) {
      ctx.error(*n, "check " + check + ": " + key + " and rule '" + *params.rule +
                        "' both set the tolerance; the rule sets it alone, so leave out " + key);
      ok = false;
    }
  params.rtol.reset(), params.atol.reset(), params.exact.reset();
  return ok;
}

// A golden path may name the machine it was recorded on, {hardware} (filled when the check
// judges: core/hardware.h); no other placeholder.
bool read_golden_path(const ReadContext& ctx, const MapReader& m, const std::string& check, const CheckParams& params) {
  const YAML::Node* node = m.get("golden");
  if (!node || !params.golden) return true;
  const PlaceholderPlace place{check + ".golden", {}, {"hardware"}, {}, "golden paths take {hardware}"};
  bool ok = true;
  fill_placeholders(*params.golden, place, [&](const std::string& message) { ctx.error(*node, message), ok = false; });
  return ok;
}

// A check as declared: its kind looked up by name (the only time), each parameter read as its
// row's type, and the rest at their defaults.
std::optional<CheckSpec> read_check(const ReadContext& ctx, const YAML::Node& item) {
  std::string name;
  YAML::Node params_node;
  if (item.IsScalar()) {
    name = item.Scalar();
  } else if (item.IsMap() && item.size() == 1) {
    name = item.begin()->first.Scalar();
    params_node = item.begin()->second;
  } else {
    ctx.error(item, "a check is a name or {name: {parameters}}");
    return std::nullopt;
  }
  const std::optional<CheckKind> kind = check_kind_named(name);
  if (!kind) {
    ctx.error(item, "unknown check '" + name + "'" + did_you_mean(name, check_kind_names()));
    return std::nullopt;
  }
  const CheckSignature& sig = check_signature(*kind);
  CheckSpec spec{*kind, sig.defaults(), ctx.where(item)};
  auto needs = [&]() -> std::optional<CheckSpec> {
    if (sig.needs_one_of.empty()) return spec;
    for (const auto& k : sig.needs_one_of)
      if (sig.param(k)->value_in(spec.params)) return spec;
    std::string names;
    for (const auto& k : sig.needs_one_of) names += (names.empty() ? "" : ", ") + k;
    ctx.error(item, "check " + name + " needs " + (sig.needs_one_of.size() > 1 ? "one of " : "") + names);
    return std::nullopt;
  };
  if (!params_node || params_node.IsNull()) return needs();
  std::vector<std::string> allowed;
  for (const auto& p : sig.params) allowed.push_back(p.name);
  MapReader m(ctx, params_node, "check " + name, allowed);
  if (!m.ok()) return std::nullopt;
  bool ok = true;
  for (const auto& p : sig.params) {
    const YAML::Node* v = m.get(p.name);
    if (!v) continue;
    const std::string what = name + "." + p.name;
    switch (p.type()) {
      case ParamType::kString:  // an empty `text` would be found in every log
        if (auto s = read_string(ctx, *v, what); s && !(s->empty() && p.name == "text")) {
          p.set(spec.params, *s);
        } else {
          if (s) ctx.error(*v, what + " is empty: say what the log must contain");
          ok = false;
        }
        break;
      case ParamType::kNumber:  // a tolerance, a factor or a band's width: a negative one fails every value
        if (auto d = read_number(ctx, *v, what); d && *d >= 0) {
          p.set(spec.params, *d);
        } else {
          if (d) ctx.error(*v, what + " must be 0 or more, got '" + v->Scalar() + "'");
          ok = false;
        }
        break;
      case ParamType::kBool:
        if (auto b = read_bool(ctx, *v, what))
          p.set(spec.params, *b);
        else
          ok = false;
        break;
      case ParamType::kInt:
        if (auto i = read_int(ctx, *v, what, 0))
          p.set(spec.params, *i);
        else
          ok = false;
        break;
    }
  }
  const bool rule_ok = read_curve_rule(ctx, m, name, spec.params);  // each says what is wrong with it
  const bool golden_ok = read_golden_path(ctx, m, name, spec.params);
  if (!ok || !rule_ok || !golden_ok) return std::nullopt;
  return needs();
}

// An outputs path: a folder or file name, relative to the phase folder, with only the run-time
// folders as placeholders (checked here, not when a check finally looks for the file).
std::optional<std::string> read_output_path(const ReadContext& ctx, const YAML::Node& node, const std::string& what) {
  auto text = read_string(ctx, node, what);
  if (!text) return std::nullopt;
  const PlaceholderPlace place{
      what, {}, {"case_dir", "phase_dir"}, {}, "outputs paths take {case_dir} and {phase_dir}"};
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
  const std::vector<std::string> names = metrics_source_names();
  std::string listed;
  for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
  if (!from) {
    ctx.error(node, "outputs.metrics needs from: one of " + listed);
    return std::nullopt;
  }
  auto name = read_string(ctx, *from, "outputs.metrics.from");
  if (!name) return std::nullopt;
  MetricsSource src;
  const auto kind = metrics_source_kind(*name);
  if (!kind) {
    ctx.error(*from, "outputs.metrics.from '" + *name + "' is not one of " + listed + did_you_mean(*name, names));
    return std::nullopt;
  }
  src.kind = *kind;
  const bool is_log = src.kind == MetricsSource::kTorchtitanLog || src.kind == MetricsSource::kLogPattern;
  const auto only_for = [&](const char* key, bool allowed, const char* sources) {
    if (m.get(key) && !allowed)
      ctx.error(*m.get(key), std::string("outputs.metrics.") + key + " applies to " + sources);
    return m.get(key) && allowed ? m.get(key) : nullptr;
  };
  const bool megatron = src.kind == MetricsSource::kMegatron;
  if (megatron) src.rank = -1;  // Megatron prints on the last rank
  if (auto* n = only_for("rank", is_log || megatron, "log sources (torchtitan-log, log-pattern, megatron)"))
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
  if (auto* n = only_for("path", !is_log, "tensorboard, metrics-jsonl, hf-trainer-state and megatron")) {
    if (auto p = read_output_path(ctx, *n, "outputs.metrics.path")) src.path = *p;
  } else if (megatron) {
    src.path = "tensorboard";  // the adapter's --tensorboard-dir
  } else if (src.kind == MetricsSource::kTensorboard) {
    src.path = "tb";
  } else if (src.kind == MetricsSource::kHfTrainerState) {
    src.path = ".";  // the phase folder as the Trainer's output_dir
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
  into.node.reset(node);
  for (const char* key : {"path", "step", "model_prefix", "rename"})
    if (auto* n = m.get(key)) into.nodes[key].reset(*n);
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
    if (auto t = read_output_path(ctx, *n, "outputs.tokens")) f.tokens = *t, f.tokens_node.reset(*n);
  if (auto* n = m.get("metrics"))
    if (auto src = read_metrics_source(ctx, *n)) f.metrics = *src, f.metrics_node.reset(*n);
  if (auto* n = m.get("checkpoint")) read_checkpoint_source(ctx, *n, f.checkpoint);
}

// A probe's program or argument: {matrix_dir} filled, any other placeholder refused (a probe
// runs once, before any case has a folder).
std::string fill_matrix_dir(const ReadContext& ctx, const YAML::Node& node, const std::string& text,
                            const std::string& what) {
  const PlaceholderPlace place{what,
                               {{"matrix_dir", std::filesystem::absolute(ctx.file).parent_path().string()}},
                               {},
                               {},
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
    if (r.kind == Requirement::kGpus)
      ctx.error(*n, "requires.timeout goes with a probe that runs, not gpus");
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
  if (a.kind != b.kind) return false;
  for (const auto& p : check_signature(a.kind).params)
    if (!p.strictness && p.value_in(a.params) != p.value_in(b.params)) return false;
  return true;
}

// A case's checks join the ones it inherits, so a case cannot silently lose a default
// comparison; one that differs from an inherited check only in its tolerances replaces it.
std::vector<CheckSpec> with_inherited_checks(std::vector<CheckSpec> inherited, const std::vector<CheckSpec>& own) {
  std::vector<bool> replaced(inherited.size(), false);
  for (const auto& c : own) {
    size_t i = 0;
    while (i < replaced.size() && (replaced[i] || !same_judgement(inherited[i], c))) ++i;
    if (i < replaced.size())
      inherited[i] = c, replaced[i] = true;
    else
      inherited.push_back(c);
  }
  return inherited;
}

}  // namespace

// Reads the keys a case and `defaults` share into `f`, on top of what it holds.
void read_common(const ReadContext& ctx, const MapReader& m, Fields& f) {
  if (auto* n = m.get("adapter")) {
    if (auto s = read_string(ctx, *n, "adapter")) f.adapter = *s, f.adapter_node.reset(*n);
  }
  if (auto* n = m.get("command")) {
    if (auto argv = read_string_list(ctx, *n, "command")) {
      if (argv->empty()) ctx.error(*n, "command must not be empty");
      f.command = *argv, f.command_node.reset(*n);
    }
  }
  if (auto* n = m.get("model")) {
    if (auto s = read_string(ctx, *n, "model")) f.model = *s, f.model_node.reset(*n);
  }
  if (auto* n = m.get("mesh")) {
    if (auto mesh = read_mesh(ctx, *n)) f.mesh = *mesh, f.mesh_node.reset(*n);
  }
  if (auto* n = m.get("ngpu")) {
    if (auto v = read_int(ctx, *n, "ngpu", 1)) f.ngpu = static_cast<int>(*v), f.ngpu_node.reset(*n);
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
      f.simulate = n->Scalar() == "true", f.simulate_node.reset(*n);
  }
  if (auto* n = m.get("drift"))  // the key of meshtest 0.x's drift policy, before drift became a check
    ctx.error(*n,
              "drift is a check now: to fail a case that left the band of its recent green runs, add drift "
              "to its checks (checks: [drift], docs/checks.md); without it, a drift is a note");
}

}  // namespace meshtest
