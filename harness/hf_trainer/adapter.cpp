#include "hf_trainer/adapter.h"

#include <cstdlib>
#include <stdexcept>

namespace meshtest {

namespace {

// The flags the adapter writes, and the matrix key that says the same instead.
const std::vector<ReservedOption> kHfTrainerReserved = {
    {"output_dir", "the phase folder ({phase_dir}, set by the adapter)"},
    {"logging_steps", "nothing: every step is logged (the adapter sets 1)"},
    {"logging_strategy", "nothing: every step is logged"},
    {"full_determinism", "nothing: the adapter sets it"},
    {"fsdp", "mesh (dp_shard: N is FSDP 2, N = 1 too)"},
    {"fsdp_config", "mesh (dp_shard: N is FSDP 2, N = 1 too)"},
    {"deepspeed", "mesh (DeepSpeed through the Trainer is not supported yet)"},
    {"report_to", "nothing: the curves come from trainer_state.json"},
    {"local_rank", "nothing: meshtest starts the ranks"},
};

// FSDP 2 where the mesh names dp_shard without replicas, `dp_shard: 1` too: FSDP over one rank is
// how the Trainer loads a sharded (DCP) checkpoint at one rank; without FSDP it reads only
// model.safetensors and optimizer.pt.
bool uses_fsdp(const Layout& layout) { return layout.names("dp_shard") && layout.size("dp_replicate") == 1; }

class HfTrainerAdapter : public TrainerAdapter {
 public:
  std::string name() const override { return "hf-trainer"; }
  std::vector<std::string> default_command() const override { return {}; }  // the user's script
  std::vector<ReservedOption> reserved_options() const override { return kHfTrainerReserved; }

  std::vector<std::string> phase_args(const PhaseRequest& phase) const override {
    std::vector<std::string> args = {"--output_dir", "{phase_dir}", "--logging_steps", "1", "--full_determinism",
                                     "--report_to",  "none"};
    bool seed = false, save_steps = false, save_strategy = false;
    for (const auto& o : phase.options) {
      seed = seed || o.key == "seed";
      save_steps = save_steps || o.key == "save_steps";
      save_strategy = save_strategy || o.key == "save_strategy";
    }
    if (!seed) args.insert(args.end(), {"--seed", "42"});
    if (save_steps && !save_strategy) args.insert(args.end(), {"--save_strategy", "steps"});
    if (phase.layout.size("dp_shard") > 1 && phase.layout.size("dp_replicate") > 1)
      throw std::invalid_argument(
          "hf-trainer: HSDP (dp_replicate and dp_shard both over 1) is not supported yet; use dp_shard (FSDP) or "
          "dp_replicate (DDP) alone");
    if (uses_fsdp(phase.layout))
      args.insert(args.end(),
                  {"--fsdp", "full_shard auto_wrap", "--fsdp_config",
                   R"({"fsdp_version": 2, "reshard_after_forward": true, "state_dict_type": "SHARDED_STATE_DICT"})"});
    const std::vector<std::string> options = TrainerAdapter::phase_args(phase);
    args.insert(args.end(), options.begin(), options.end());
    return args;
  }

  Outputs default_outputs(const Layout& layout) const override {
    Outputs o;
    o.metrics.kind = MetricsSource::kHfTrainerState;
    o.metrics.path = ".";
    o.checkpoint = CheckpointSource{".", -1, "", {}};  // the newest complete checkpoint-<N>
    // Under FSDP the Trainer saves DCP through Accelerate as {"model": state_dict}: its keys read
    // as the model's own (model.embed_tokens.weight), as the safetensors of a run without FSDP.
    if (uses_fsdp(layout)) o.checkpoint->rename = {{"^model\\.", ""}};
    o.tokens = "";
    o.contract_files = false;
    return o;
  }

  bool needs_model() const override { return false; }  // the script builds its model
  std::optional<std::vector<std::string>> models() const override { return std::nullopt; }
  std::vector<std::string> layout_axes() const override { return {"dp_replicate", "dp_shard"}; }
  std::optional<Layout> default_layout(int nproc) const override {
    return nproc > 1 ? std::optional<Layout>(Layout{{{"dp_replicate", nproc}}}) : std::nullopt;
  }
  std::string layout_problem(const std::string&, const Layout&,
                             const std::function<std::string(const std::string&)>&) const override {
    return "";  // the script builds its model: nothing to split by; HSDP is refused in phase_args
  }
  std::optional<double> steps(const std::vector<std::string>& argv) const override {
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--max_steps") return std::strtod(argv[i + 1].c_str(), nullptr);
    return std::nullopt;
  }
  std::string how_to_report(const std::string& metric) const override {
    if (metric == "grad_norm") return "the Trainer logs grad_norm when max_grad_norm > 0";
    if (metric == "validation_loss") return "eval_strategy steps and eval_steps, with an eval_dataset";
    return "";
  }
  std::vector<std::pair<std::string, std::string>> placeholders() const override { return {}; }
  std::optional<SimulatedWorld> simulation() const override { return pytorch_simulation(); }
};

}  // namespace

void register_hf_trainer_adapter(AdapterRegistry& registry) { registry.add(std::make_unique<HfTrainerAdapter>()); }

}  // namespace meshtest
