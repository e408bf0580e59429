#include "torchtitan/adapter.h"

#include "contract/mesh.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "core/trainer_help.h"
#include "core/yaml_reader.h"

namespace meshtest {

namespace {

// What the adapter sets, by meaning, under each name torchtitan has given it (newest first).
struct FlagNames {
  const char* meaning;
  std::vector<std::string> names;
};
const std::vector<FlagNames>& adapter_flags() {
  static const std::vector<FlagNames> flags = {
      {"dp_replicate", {"parallelism.data_parallel_replicate_degree", "training.data_parallel_replicate_degree"}},
      {"dp_shard", {"parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree"}},
      {"tp", {"parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"}},
      {"pp", {"parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree"}},
      {"cp", {"parallelism.context_parallel_degree", "experimental.context_parallel_degree"}},
      {"dump folder", {"dump_folder", "job.dump_folder"}},
      {"checkpoint folder", {"checkpoint.folder"}},
      {"seed", {"debug.seed", "training.seed"}},
      {"determinism", {"debug.deterministic", "training.deterministic"}},
      {"log frequency", {"metrics.log_freq"}},
      {"training steps", {"training.steps"}},
      {"LR schedule length", {"lr_scheduler.total_steps"}},
      {"last save model only", {"checkpoint.last_save_model_only"}},
  };
  return flags;
}
const FlagNames& flag_names(const std::string& meaning) {
  for (const auto& f : adapter_flags())
    if (f.meaning == meaning) return f;
  throw std::logic_error("no torchtitan flag for " + meaning);
}

// "llama3/llama3_debugmodel" -> {"llama3", "llama3_debugmodel"}.
std::pair<std::string, std::string> module_and_config(const std::string& model) {
  const size_t slash = model.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == model.size() ||
      model.find('/', slash + 1) != std::string::npos)
    throw std::invalid_argument("torchtitan model '" + model +
                                "' is not MODULE/CONFIG (torchtitan's --module and --config, e.g. "
                                "llama3/llama3_debugmodel)");
  return {model.substr(0, slash), model.substr(slash + 1)};
}

// Asks the torchtitan that `python` imports for its --help, kept in the temp folder under the
// package's path and sources' time: Python with torch takes seconds to start, `meshtest list`
// should not. A note on stderr says when it cannot be asked.
std::optional<std::string> ask_torchtitan(const std::string& module, const std::string& config) {
  const std::string python = torchtitan_python();
  std::string why;
  const auto where = program_output({python, "-c",
                                     "import importlib.util as u; s = u.find_spec('torchtitan'); "
                                     "print(s.submodule_search_locations[0] if s else '')"},
                                    30, &why);
  std::string package = where.value_or("");
  while (!package.empty() && std::isspace(static_cast<unsigned char>(package.back()))) package.pop_back();
  if (package.empty()) {
    std::fprintf(stderr, "meshtest: note: %s cannot import torchtitan%s; torchtitan's flag names are not checked\n",
                 python.c_str(), why.empty() ? "" : (" (" + why + ")").c_str());
    return std::nullopt;
  }
  const std::string id = python + "|" + package + "|" +
                         std::to_string(newest_python_source({package, package + "/config", package + "/components"})) +
                         "|" + module + "|" + config;
  auto help = cached_program_output(
      id, {python, "-m", "torchtitan.train", "--module", module, "--config", config, "--help"}, 180, &why);
  if (!help)
    std::fprintf(stderr,
                 "meshtest: note: `%s -m torchtitan.train --module %s --config %s --help` failed (%s); "
                 "torchtitan's flag names are not checked\n",
                 python.c_str(), module.c_str(), config.c_str(), why.c_str());
  return help;
}

const PhaseOption* find_option(const std::vector<PhaseOption>& options, const std::vector<std::string>& names) {
  for (const auto& o : options)
    for (const auto& name : names)
      if (normalized_flag(o.key) == name) return &o;
  return nullptr;
}

class TorchtitanAdapter : public TrainerAdapter {
 public:
  explicit TorchtitanAdapter(TorchtitanHelp help) : help_(std::move(help)) {}

  std::string name() const override { return "torchtitan"; }

  // meshtest starts the ranks itself (RANK, WORLD_SIZE, MASTER_ADDR, ...): the trainer module,
  // not run_train.sh, which would start torchrun.
  std::vector<std::string> default_command() const override {
    return {"{torchtitan_python}", "-m", "torchtitan.train"};
  }

  std::vector<ReservedOption> reserved_options() const override {
    std::vector<ReservedOption> reserved = {{"module", "model"}, {"config", "model"}};
    for (const char* axis : {"dp_replicate", "dp_shard", "tp", "pp", "cp"})
      for (const auto& name : flag_names(axis).names) reserved.push_back({name, "mesh"});
    return reserved;
  }

  std::vector<std::string> phase_args(const PhaseRequest& phase) const override {
    const auto [module, config] = module_and_config(phase.model);
    const std::optional<std::set<std::string>> known = known_flags(module, config);
    auto flag = [&](const std::string& meaning) { return "--" + chosen(meaning, known, module, config); };
    std::vector<std::string> args = {"--module", module, "--config", config};
    for (const char* axis : {"dp_replicate", "dp_shard", "tp", "pp", "cp"})
      args.insert(args.end(), {flag(axis), std::to_string(phase.layout.size(axis))});
    // The adapter's defaults, each unless the case sets it.
    auto unless_set = [&](const std::string& meaning, std::vector<std::string> value) {
      if (find_option(phase.options, flag_names(meaning).names)) return;
      args.push_back(flag(meaning));
      args.insert(args.end(), value.begin(), value.end());
    };
    unless_set("dump folder", {"{phase_dir}"});
    unless_set("checkpoint folder", {"{case_dir}/checkpoint"});
    unless_set("seed", {"42"});
    unless_set("determinism", {});
    unless_set("log frequency", {"1"});

    const PhaseOption* stop = find_option(phase.options, {"stop_at"});
    for (const auto& o : phase.options) {
      const std::string key = normalized_flag(o.key);
      if (key == "stop_at" || (stop && key == "training.steps")) continue;
      if (known && !known->count(key)) {
        std::vector<std::string> names(known->begin(), known->end());
        throw std::invalid_argument("torchtitan (" + phase.model + ") has no flag --" + o.key +
                                    did_you_mean(key, names, "--", ""));
      }
      if (!o.flag) {
        args.insert(args.end(), {"--" + o.key, o.value});
      } else {
        const size_t dot = o.key.rfind('.');
        args.push_back(*o.flag ? "--" + o.key
                               : "--" + o.key.substr(0, dot == std::string::npos ? 0 : dot + 1) + "no_" +
                                     o.key.substr(dot == std::string::npos ? 0 : dot + 1));
      }
    }
    if (stop) append_stop_at(*stop, phase, args, flag);
    return args;
  }

  // The loss is logged where torchtitan's metrics rank is: the first rank of the last pipeline
  // stage (pp is the outermost mesh dimension); other stages log -1.
  Outputs default_outputs(const Layout& layout) const override {
    Outputs o;
    o.metrics.kind = MetricsSource::kTorchtitanLog;
    const int64_t pp = layout.size("pp"), ranks = std::max<int64_t>(1, layout.ranks());
    o.metrics.rank = static_cast<int>((pp - 1) * (ranks / pp));
    o.checkpoint = CheckpointSource{"{case_dir}/checkpoint", -1, "model.", {}};
    o.tokens = "";             // torchtitan's training writes no generated tokens
    o.contract_files = false;  // nor meshtest's rank<R>.json and param_digest.json
    return o;
  }

  bool needs_model() const override { return true; }
  std::optional<std::vector<std::string>> models() const override { return std::nullopt; }
  // torchtitan's mesh order. Expert parallelism borrows ranks from dp_shard x cp (x tp), so it is
  // an option (parallelism.expert_parallel_degree), not an axis of its own.
  std::vector<std::string> layout_axes() const override { return contract::mesh_dim_names(); }
  std::optional<Layout> default_layout(int nproc) const override { return Layout{{{"dp_shard", nproc}}}; }
  std::string layout_problem(const std::string&, const Layout&,
                             const std::function<std::string(const std::string&)>&) const override {
    return "";  // torchtitan checks its model against the degrees when it starts
  }

  std::optional<double> steps(const std::vector<std::string>& argv) const override {
    std::optional<double> steps;
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (normalized_flag(argv[i]) == "training.steps") steps = std::atof(argv[i + 1].c_str());
    return steps;
  }

  std::string how_to_report(const std::string& metric) const override {
    return metric == "validation_loss" ? "--validator.enable --validator.freq N" : "";
  }

  std::vector<std::pair<std::string, std::string>> placeholders() const override {
    return {{"torchtitan_python", torchtitan_python()}};
  }

  // torchtitan's NCCL becomes meshtest_sim; it already puts every rank on the one visible GPU.
  std::optional<SimulatedWorld> simulation() const override { return pytorch_simulation(); }

 private:
  // A save phase that stops early trains the first N steps of the full run: the LR schedule
  // keeps the full length (torchtitan builds it from training.steps), and the last save holds
  // the optimizer too, so the next phase resumes exactly.
  template <typename Flag>
  void append_stop_at(const PhaseOption& stop, const PhaseRequest& phase, std::vector<std::string>& args,
                      const Flag& flag) const {
    const PhaseOption* total = find_option(phase.options, flag_names("LR schedule length").names);
    if (!total) total = find_option(phase.options, flag_names("training steps").names);
    if (!total || total->flag)
      throw std::invalid_argument("stop-at " + stop.value +
                                  " needs the full run's length: set training.steps in the case's options "
                                  "(torchtitan's LR schedule spans training.steps; the save phase keeps it)");
    args.insert(args.end(), {flag("training steps"), stop.value});
    if (!find_option(phase.options, flag_names("LR schedule length").names))
      args.insert(args.end(), {flag("LR schedule length"), total->value});
    if (!find_option(phase.options, flag_names("last save model only").names)) {
      const std::string last = flag("last save model only");
      const size_t dot = last.rfind('.');
      args.push_back(last.substr(0, dot + 1) + "no_" + last.substr(dot + 1));
    }
  }

  // The name this torchtitan gives `meaning`; without its --help, the newest name.
  static std::string chosen(const std::string& meaning, const std::optional<std::set<std::string>>& known,
                            const std::string& module, const std::string& config) {
    const auto& names = flag_names(meaning).names;
    if (!known) return names.front();
    for (const auto& name : names)
      if (known->count(name)) return name;
    std::string looked;
    for (const auto& name : names) looked += (looked.empty() ? "--" : ", --") + name;
    throw std::invalid_argument("torchtitan (--module " + module + " --config " + config + ") has no flag for the " +
                                meaning + " (looked for " + looked +
                                "); is it a torchtitan this meshtest does not know?");
  }

  std::optional<std::set<std::string>> known_flags(const std::string& module, const std::string& config) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = module + "/" + config;
    auto it = asked_.find(key);
    if (it == asked_.end()) {
      const auto help = help_(module, config);
      it = asked_.emplace(key, help ? std::optional<std::set<std::string>>(flags_in_help(*help)) : std::nullopt).first;
    }
    return it->second;
  }

  TorchtitanHelp help_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::optional<std::set<std::string>>> asked_;
};

}  // namespace

std::string torchtitan_python() {
  if (const char* env = std::getenv("MESHTEST_TORCHTITAN_PYTHON"); env && *env) return env;
  return "python3";
}

void register_torchtitan_adapter(AdapterRegistry& registry) {
  registry.add(std::make_unique<TorchtitanAdapter>(ask_torchtitan));
}

void register_torchtitan_adapter(AdapterRegistry& registry, TorchtitanHelp help) {
  registry.add(std::make_unique<TorchtitanAdapter>(std::move(help)));
}

}  // namespace meshtest
