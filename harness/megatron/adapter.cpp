#include "megatron/adapter.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "core/trainer_help.h"
#include "core/yaml_reader.h"

namespace meshtest {

namespace {

namespace fs = std::filesystem;

// A mesh axis and the Megatron flag that sets its size.
struct AxisFlag {
  const char* axis;
  const char* flag;
};
const AxisFlag kAxisFlags[] = {
    {"tp", "tensor-model-parallel-size"},
    {"pp", "pipeline-model-parallel-size"},
    {"cp", "context-parallel-size"},
    {"ep", "expert-model-parallel-size"},
};

// What the adapter writes itself, and the matrix key that says the same instead.
const std::vector<ReservedOption> kReserved = {
    {"tensor-model-parallel-size", "mesh (tp)"},
    {"pipeline-model-parallel-size", "mesh (pp)"},
    {"context-parallel-size", "mesh (cp)"},
    {"expert-model-parallel-size", "mesh (ep)"},
    {"use-distributed-optimizer", "mesh (dp_shard: N shards the optimizer state over data parallel)"},
    {"log-interval", "nothing: every iteration is logged (the adapter sets 1)"},
    {"tensorboard-dir", "nothing: the adapter writes TensorBoard into the phase folder"},
    {"tensorboard-log-interval", "nothing: the adapter sets 1"},
    {"ckpt-format", "nothing: meshtest reads torch_dist (the adapter sets it)"},
    {"save", "nothing: the adapter saves into {case_dir}/checkpoint"},
    {"load", "nothing: the adapter loads from {case_dir}/checkpoint"},
    {"exit-interval", "options' stop-at"},
    {"deterministic-mode", "nothing: the adapter sets it"},
};

// The Megatron flag `key` means, without its dashes, as --help lists it: "train_iters".
std::string flag_key(const std::string& key) { return normalized_flag(key); }

const PhaseOption* find_option(const std::vector<PhaseOption>& options, const std::string& key) {
  for (const auto& o : options)
    if (flag_key(o.key) == flag_key(key)) return &o;
  return nullptr;
}

// Runs `script --help` with argparse's help text replaced by its option strings, one per line:
// Megatron's own help text does not always format (d98e8a6: "unsupported format character 'm'"),
// while the parser it builds, extra arguments included, is what its flags are checked against.
const char* const kListFlags =
    "import argparse, os, runpy, sys\n"
    "argparse.ArgumentParser.format_help = lambda parser: ''.join(\n"
    "    flag + '\\n' for action in parser._actions for flag in action.option_strings)\n"
    "script = sys.argv[1]\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(script)))\n"
    "sys.argv = [script, '--help']\n"
    "runpy.run_path(script, run_name='__main__')\n";

// Asks the Megatron that runs `script` for its flags, kept under the checkout's path and the
// time of its argument sources.
std::optional<std::string> ask_megatron(const std::string& script) {
  const std::string python = megatron_python();
  const fs::path checkout = fs::path(script).parent_path();
  const std::string id = python + "|flags|" + script + "|" +
                         std::to_string(newest_python_source({checkout, checkout / "megatron" / "training"}));
  std::string why;
  auto help = cached_program_output(id, {python, "-c", kListFlags, script}, 300, &why);
  if (!help)
    std::fprintf(stderr, "meshtest: note: `%s %s --help` failed (%s); Megatron's flag names are not checked\n",
                 python.c_str(), script.c_str(), why.c_str());
  return help;
}

class MegatronAdapter : public TrainerAdapter {
 public:
  explicit MegatronAdapter(MegatronHelp help) : help_(std::move(help)) {}

  std::string name() const override { return "megatron"; }

  // meshtest starts the ranks itself (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR): the script, not torchrun.
  std::vector<std::string> default_command() const override {
    return {"{megatron_python}", "{megatron_lm}/pretrain_gpt.py"};
  }
  std::vector<ReservedOption> reserved_options() const override { return kReserved; }

  std::vector<std::string> phase_args(const PhaseRequest& phase) const override {
    const std::optional<std::set<std::string>> known = known_flags();
    std::vector<std::string> args;
    auto add = [&](const std::string& flag, std::vector<std::string> values = {}) {
      if (known && !known->count(flag_key(flag)))
        throw std::invalid_argument("this Megatron (" + script() + " --help) has no flag --" + flag +
                                    ", which the adapter needs; is it a Megatron this meshtest does not know?");
      args.push_back("--" + flag);
      args.insert(args.end(), values.begin(), values.end());
    };
    for (const auto& [axis, flag] : kAxisFlags) add(flag, {std::to_string(phase.layout.size(axis))});
    if (phase.layout.size("dp_shard") > 1 && phase.layout.size("dp_replicate") > 1)
      throw std::invalid_argument(
          "megatron: dp_replicate and dp_shard both over 1 is not supported yet (Megatron's distributed optimizer "
          "shards over the whole data-parallel group); use dp_shard (distributed optimizer) or dp_replicate");
    if (phase.layout.size("dp_shard") > 1) add("use-distributed-optimizer");
    add("log-interval", {"1"});
    add("tensorboard-dir", {"{phase_dir}/tensorboard"});
    add("tensorboard-log-interval", {"1"});
    if (!find_option(phase.options, "log-num-zeros-in-grad")) add("log-num-zeros-in-grad");
    add("ckpt-format", {"torch_dist"});
    add("save", {"{case_dir}/checkpoint"});
    add("load", {"{case_dir}/checkpoint"});
    add("deterministic-mode");
    const PhaseOption* stop = find_option(phase.options, "stop-at");
    if (stop) {
      const PhaseOption* iterations = find_option(phase.options, "train-iters");
      if (!iterations || iterations->flag)
        throw std::invalid_argument("stop-at " + stop->value +
                                    " needs the full run's length: set train-iters in the case's options (Megatron's "
                                    "LR schedule spans train-iters; the save phase keeps it and exits early)");
      add("exit-interval", {stop->value});
    }
    for (const auto& o : phase.options) {
      if (&o == stop) continue;
      if (known && !known->count(flag_key(o.key))) {
        std::vector<std::string> names;  // as Megatron spells them, with dashes
        for (std::string name : *known) names.push_back((std::replace(name.begin(), name.end(), '_', '-'), name));
        throw std::invalid_argument("this Megatron (" + script() + " --help) has no flag --" + o.key +
                                    did_you_mean(o.key, names, "--", ""));
      }
    }
    const std::vector<std::string> options = TrainerAdapter::phase_args(without(phase, stop));
    args.insert(args.end(), options.begin(), options.end());
    return args;
  }

  // Megatron's last rank prints the iteration line and writes TensorBoard (rank -1: the last).
  Outputs default_outputs(const Layout&) const override {
    Outputs o;
    o.metrics.kind = MetricsSource::kMegatron;
    o.metrics.path = "tensorboard";
    o.metrics.rank = -1;
    o.checkpoint = CheckpointSource{"{case_dir}/checkpoint", -1, "", {}};
    o.tokens = "";
    o.contract_files = false;
    return o;
  }

  bool needs_model() const override { return false; }  // the model is Megatron's flags
  std::optional<std::vector<std::string>> models() const override { return std::nullopt; }
  // Outermost first, as Megatron orders its groups (tp-cp-ep-dp-pp, innermost first).
  std::vector<std::string> layout_axes() const override { return {"pp", "dp_replicate", "dp_shard", "ep", "cp", "tp"}; }
  std::optional<Layout> default_layout(int nproc) const override { return Layout{{{"dp_replicate", nproc}}}; }
  std::string layout_problem(const std::string&, const Layout&,
                             const std::function<std::string(const std::string&)>&) const override {
    return "";  // Megatron checks its model against the sizes when it starts
  }

  std::optional<double> steps(const std::vector<std::string>& argv) const override {
    std::optional<double> iterations, exit;
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--train-iters") iterations = std::atof(argv[i + 1].c_str());
      if (argv[i] == "--exit-interval") exit = std::atof(argv[i + 1].c_str());
    }
    return exit ? exit : iterations;
  }

  std::string how_to_report(const std::string& metric) const override {
    if (metric == "validation_loss") return "--eval-interval N --eval-iters K";
    if (metric == "grad_norm") return "grad norm is logged unless the run has no gradient clipping stats";
    return "";
  }

  std::vector<std::pair<std::string, std::string>> placeholders() const override {
    return {{"megatron_python", megatron_python()}, {"megatron_lm", megatron_lm_dir()}};
  }

  std::string program_problem() const override {
    if (megatron_lm_dir().empty())
      return "needs Megatron-LM: set MESHTEST_MEGATRON_LM to a checkout (the folder of its pretrain_gpt.py)";
    std::error_code ec;
    if (!fs::exists(script(), ec))
      return "needs Megatron-LM, which is not at " + megatron_lm_dir() +
             " (MESHTEST_MEGATRON_LM): it has no pretrain_gpt.py";
    return "";
  }

  // The switches Megatron's functional tests run with (tests/functional_tests/test_cases/*/model_config.yaml).
  std::vector<std::pair<std::string, std::string>> environment() const override {
    return {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
            {"NCCL_ALGO", "Ring"},
            {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
            {"NVTE_ALLOW_NONDETERMINISTIC_ALGO", "0"}};
  }

  std::optional<SimulatedWorld> simulation() const override { return pytorch_simulation(); }

 private:
  static std::string script() { return megatron_lm_dir() + "/pretrain_gpt.py"; }

  static PhaseRequest without(const PhaseRequest& phase, const PhaseOption* skip) {
    PhaseRequest rest = phase;
    rest.options.clear();
    for (const auto& o : phase.options)
      if (&o != skip) rest.options.push_back(o);
    return rest;
  }

  std::optional<std::set<std::string>> known_flags() const {
    if (megatron_lm_dir().empty()) return std::nullopt;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!asked_) {
      const auto help = help_(script());
      known_ = help ? std::optional<std::set<std::string>>(flags_in_help(*help)) : std::nullopt;
      asked_ = true;
    }
    return known_;
  }

  MegatronHelp help_;
  mutable std::mutex mutex_;
  mutable bool asked_ = false;
  mutable std::optional<std::set<std::string>> known_;
};

}  // namespace

std::string megatron_python() {
  if (const char* env = std::getenv("MESHTEST_MEGATRON_PYTHON"); env && *env) return env;
  return "python3";
}

std::string megatron_lm_dir() {
  const char* env = std::getenv("MESHTEST_MEGATRON_LM");
  if (!env || !*env) return "";
  std::string dir = fs::absolute(env).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

void register_megatron_adapter(AdapterRegistry& registry) {
  registry.add(std::make_unique<MegatronAdapter>(ask_megatron));
}

void register_megatron_adapter(AdapterRegistry& registry, MegatronHelp help) {
  registry.add(std::make_unique<MegatronAdapter>(std::move(help)));
}

}  // namespace meshtest
