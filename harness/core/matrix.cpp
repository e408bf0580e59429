#include "core/matrix.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <regex>
#include <set>
#include <stdexcept>

#include "core/check_kinds.h"
#include "core/matrix_fields.h"
#include "core/placeholders.h"
#include "readers/log_metrics.h"

namespace meshtest {

namespace {

const std::vector<std::string> kFileKeys = {"suite", "description", "defaults", "cases"};
// Keys a case and `defaults` share; a case adds name, phases and matrix.
const std::vector<std::string> kCommonKeys = {"adapter", "command",  "model", "mesh",    "ngpu",   "options",
                                              "tags",    "timeout",  "env",   "expect",  "checks", "duration",
                                              "outputs", "requires", "drift", "simulate"};
const std::vector<std::string> kPhaseKeys = {"name",    "action", "command", "mesh",
                                             "options", "env",    "timeout", "outputs"};
const std::vector<std::string> kLoadTimePlaceholders = {"action", "model", "mesh", "nproc", "phase", "matrix_dir"};
// Filled when a phase runs; each adapter adds the programs it names ({meshtrain}).
std::vector<std::string> run_time_placeholders() {
  std::vector<std::string> names = {"backend", "case_dir", "phase_dir"};
  for (const auto& [name, value] : trainer_adapters().placeholders()) names.push_back(name);
  return names;
}

constexpr double kDefaultTimeoutS = 600;

// Fills the load-time placeholders this phase has, keeps the run-time ones, reports the others.
std::vector<std::string> fill_command(const ReadContext& ctx, const YAML::Node& where_node,
                                      const std::vector<std::string>& command,
                                      const std::map<std::string, std::string>& values,
                                      const std::string& what = "command") {
  PlaceholderPlace place{what, values, *ctx.run_time_placeholders, {}, ""};
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
  for (const auto& variable : adapter->environment())
    if (std::none_of(p.env.begin(), p.env.end(), [&](const auto& kv) { return kv.first == variable.first; }))
      p.env.push_back(variable);
  // The layout, resolved once: the mesh as the adapter takes it, else the adapter's default for
  // the ranks (none for a trainer without layouts).
  p.mesh = checked_layout(ctx, *adapter, f);
  const std::optional<Layout> resolved = p.mesh ? p.mesh : adapter->default_layout(f.ngpu.value_or(1));
  const Layout layout = resolved.value_or(Layout{});
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
      ctx.error(f.checkpoint.node,
                "outputs.checkpoint needs a path (a step folder or a folder of step-<N>): adapter '" + adapter->name() +
                    "' names no checkpoint of its own");
    p.outputs.checkpoint = merged;
  }
  if (f.tokens) p.outputs.tokens = *f.tokens;
  if (p.mesh) {
    p.nproc = static_cast<int>(p.mesh->ranks());
    if (f.ngpu && *f.ngpu != p.nproc)
      ctx.error(f.ngpu_node, "ngpu " + std::to_string(*f.ngpu) + " disagrees with mesh " + p.mesh->to_compact_string() +
                                 " (" + std::to_string(p.nproc) + " ranks)");
  } else {
    p.nproc = f.ngpu.value_or(1);
  }
  if (adapter->needs_model() && !f.model)
    ctx.error(where_node, "case runs " + adapter->name() + " (no command) but names no model; add model: " +
                              (adapter->models() && !adapter->models()->empty() ? adapter->models()->front() : "NAME") +
                              " (or a command)");
  check_reserved_options(ctx, *adapter, f.options);
  // {matrix_dir}: the matrix file's folder, so a matrix can name files kept beside it.
  std::map<std::string, std::string> values = {{"action", action},
                                               {"nproc", std::to_string(p.nproc)},
                                               {"phase", name},
                                               {"matrix_dir", std::filesystem::absolute(file).parent_path().string()}};
  if (f.model) values["model"] = *f.model;
  if (resolved) values["mesh"] = resolved->to_compact_string();
  // env values take the same placeholders as the command: load-time ones now, run-time ones
  // ({case_dir}, {phase_dir}, {backend}, programs) when the phase runs (resolve_argv).
  for (auto& [key, value] : p.env) {
    auto node = f.env_nodes.find(key);
    value =
        fill_command(ctx, node != f.env_nodes.end() ? node->second : where_node, {value}, values, "env " + key).front();
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
  if (c.phases.empty()) return;  // its phases were refused already (matrix_fuzz found this)
  const std::string kind = check_kind_name(check.kind);
  std::vector<const Phase*> read = {&c.phases.back()};
  for (const auto& [key, phase] :
       {std::pair{"phase", check.params.phase}, std::pair{"against", check.params.against}}) {
    if (!phase) continue;
    std::vector<std::string> names;
    const Phase* named = nullptr;
    for (const auto& p : c.phases) names.push_back(p.name), named = p.name == *phase ? &p : named;
    if (!named) {
      ctx.diag->error(check.where, "check " + kind + ": " + key + " '" + *phase + "' is not a phase of " + c.id +
                                       did_you_mean(*phase, names));
      return;
    }
    if (std::string(key) == "phase")
      read.front() = named;
    else
      read.push_back(named);
  }
  for (const Phase* p : read)
    if (const std::string why = input_problem(check_signature(check.kind).reads, p->outputs, c.adapter); !why.empty()) {
      ctx.diag->error(check.where, "check " + kind + " cannot judge " + c.id +
                                       (c.phases.size() > 1 ? " phase " + p->name : "") + ": " + why);
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
    ctx.error(*name_node,
              "case name '" + c.name + "' would name a folder above the case's (<out>/<suite>/" + c.name + ")");
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
  c.adapter = adapter_name(f);
  c.trainer_adapter = trainer_adapters().find(c.adapter);
  const TrainerAdapter* adapter = c.trainer_adapter;
  c.simulated = f.simulate.value_or(false);
  if (c.simulated && adapter && !adapter->simulation())
    ctx.error(f.simulate_node,
              "adapter '" + c.adapter +
                  "' cannot simulate a world (simulate: true needs a trainer "
                  "whose ranks can share one device: meshtrain, or a PyTorch trainer through meshtest_sim, "
                  "whose sim/ folder this meshtest cannot find: set $MESHTEST_SIM_DIR to a checkout's sim/)");
  if (f.model && adapter) {
    const auto known = adapter->models();
    if (known && std::find(known->begin(), known->end(), *f.model) == known->end())
      ctx.error(f.model_node, "unknown model '" + *f.model + "'" + did_you_mean(*f.model, *known));
  }

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
  if (c.expect.kind == Expectation::kFail && c.expect.check != CheckKind::kExit) {
    bool declared = false;
    for (const auto& check : c.checks) declared |= check.kind == c.expect.check;
    if (!declared)
      ctx.error(m.get("expect") ? *m.get("expect") : node, std::string("canary expects check '") +
                                                               check_kind_name(c.expect.check) +
                                                               "' to fail, but the case does not declare it");
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
    if (key == "include")
      include = read_combinations(ctx, value, "include");
    else if (key == "exclude")
      exclude = read_combinations(ctx, value, "exclude");
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

// A baseline as written names a case by its id, or by its bare name in the suite of the case `c`
// that declares it.
std::string baseline_id(const Case& c, const std::string& written) {
  return written.find('/') == std::string::npos ? c.suite + "/" + written : written;
}

// The baseline a check reads must supply what the check reads, as the case's own phase must.
void check_baseline_supplies(Diagnostics& diag, const CheckSpec& check, const Case& baseline) {
  if (baseline.phases.empty()) return;
  const Phase* read = &baseline.phases.back();
  for (const auto& p : baseline.phases)
    if (p.name == check.params.baseline_phase) read = &p;
  const CheckInput reads = check_signature(check.kind).reads;
  if (const std::string why = input_problem(reads, read->outputs, baseline.adapter); !why.empty())
    diag.error(check.where, std::string("check ") + check_kind_name(check.kind) + " cannot read its baseline " +
                                baseline.id + ": " + why);
}

// Which cases a validation sees: one matrix file's, as it is loaded, or every file's of a run.
enum class Reach { kOneFile, kEveryFile };

// The one validation of case ids and baselines, over the cases of `suites` in their order. A
// case whose id an earlier one has is refused at its place; a check whose baseline names no
// case, at the check's. A bare name means a case of the check's own suite, and is told the
// names there it may have meant. A full id may name a case of another file, so only kEveryFile
// refuses one, and then asks the case it names to supply what the check reads.
void validate_ids_and_baselines(Diagnostics& diag, const std::vector<const Suite*>& suites, Reach reach) {
  std::vector<const Case*> cases;
  for (const Suite* s : suites)
    for (const auto& c : s->cases) cases.push_back(&c);
  std::map<std::string, const Case*> by_id;
  for (const Case* c : cases)
    if (auto first = by_id.find(c->id); first != by_id.end())
      diag.error(c->where, "duplicate case id '" + c->id + "' (first at " + first->second->where.str() + ")");
    else
      by_id.emplace(c->id, c);
  for (const Case* c : cases)
    for (const auto& check : c->checks) {
      if (!check.params.baseline) continue;
      const std::string& written = *check.params.baseline;
      const bool bare = written.find('/') == std::string::npos;
      if (!bare && reach == Reach::kOneFile) continue;
      const auto baseline = by_id.find(baseline_id(*c, written));
      if (baseline != by_id.end()) {
        if (reach == Reach::kEveryFile) check_baseline_supplies(diag, check, *baseline->second);
        continue;
      }
      std::string message =
          std::string("check ") + check_kind_name(check.kind) + ": unknown baseline '" + written + "'";
      if (bare) {
        std::vector<std::string> names;
        for (const Case* other : cases)
          if (other->suite == c->suite) names.push_back(other->name);
        message += " (no case of that name in suite " + c->suite + ")" + did_you_mean(written, names);
      }
      diag.error(check.where, message);
    }
}

Suite load_suite(const YAML::Node& root, const std::string& file) {
  Diagnostics diag;
  const std::vector<std::string> run_time = run_time_placeholders();
  ReadContext ctx{file, &diag, nullptr, &run_time};
  Suite suite;
  suite.file = file;
  MapReader top(ctx, root, "the matrix file", kFileKeys);
  if (!top.ok()) diag.throw_if_any();
  if (auto* n = top.get("suite")) {
    if (auto s = read_string(ctx, *n, "suite")) suite.name = *s;
    static const std::regex suite_syntax("[A-Za-z0-9_.-]+");
    if (!std::regex_match(suite.name, suite_syntax))
      ctx.error(*n, "suite must be a word (letters, digits, _ . -)");
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
  for (const auto& node : *cases)
    for (auto& c : expand_case(ctx, node, defaults, suite.name)) suite.cases.push_back(std::move(c));
  validate_ids_and_baselines(diag, {&suite}, Reach::kOneFile);
  diag.throw_if_any();
  for (auto& c : suite.cases)
    for (auto& check : c.checks)
      if (auto& baseline = check.params.baseline) *baseline = baseline_id(c, *baseline);
  return suite;
}

}  // namespace

std::vector<std::string> Case::baselines() const {
  std::vector<std::string> out;
  for (const auto& check : checks)
    if (const auto& id = check.params.baseline; id && std::find(out.begin(), out.end(), *id) == out.end())
      out.push_back(*id);
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
  for (const auto& c : checks) j["checks"].push_back(c.to_json());
  j["requires"] = nlohmann::json::array();
  for (const auto& r : requirements) j["requires"].push_back(r.to_json());
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

Suite load_suite_text(const std::string& yaml, const std::string& file_name) {
  return load_suite(load_yaml_string(yaml, file_name), file_name);
}

void validate_suites(const std::vector<Suite>& suites) {
  std::vector<const Suite*> all;
  for (const auto& s : suites) all.push_back(&s);
  Diagnostics diag;
  validate_ids_and_baselines(diag, all, Reach::kEveryFile);
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
