#include "meshtrain/adapter.h"

#include "contract/dump_files.h"
#include "contract/mesh.h"

#include <boost/process.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <stdexcept>

namespace meshtest {

namespace {

namespace bp = boost::process;
namespace fs = std::filesystem;

// The describe document, if it is one this meshtest understands: format 1, and every flavor
// with its tp rules as [name, value] pairs.
bool understood(const nlohmann::json& d) {
  if (!d.is_object() || d.value("format_version", 0) != 1 || !d.contains("flavors") || !d["flavors"].is_object())
    return false;
  for (const auto& [name, flavor] : d["flavors"].items()) {
    if (!flavor.is_object() || !flavor.contains("tp_must_divide") || !flavor["tp_must_divide"].is_array()) return false;
    for (const auto& rule : flavor["tp_must_divide"])
      if (!rule.is_array() || rule.size() != 2 || !rule[0].is_string() || !rule[1].is_number_integer() ||
          rule[1].get<long long>() <= 0)
        return false;
  }
  return true;
}

// `meshtrain describe --json`, or null when the binary is absent, hangs (10 s), fails, or says
// something this meshtest does not understand.
nlohmann::json ask_meshtrain(const std::string& binary) {
  std::error_code ec;
  if (!fs::exists(binary, ec)) return nullptr;
  char tmpl[] = "/tmp/meshtest-describe-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return nullptr;
  ::close(fd);
  nlohmann::json d;
  try {
    bp::child child(bp::exe = binary, bp::args = {"describe", "--json"}, bp::std_out > std::string(tmpl),
                    bp::std_err > bp::null, bp::std_in < bp::null);
    if (!child.wait_for(std::chrono::seconds(10))) {
      child.terminate();
    } else if (child.exit_code() == 0) {
      std::ifstream in(tmpl);
      d = nlohmann::json::parse(in, nullptr, false);
    }
  } catch (const std::exception&) {
  }
  fs::remove(tmpl, ec);
  return understood(d) ? d : nullptr;
}

// Loading LibTorch makes `describe` take a second or more; `meshtest list` should not. The answer
// is kept in the temp folder under the binary's path, size and modification time, so a rebuilt
// binary is asked again.
nlohmann::json cached_description(const std::string& binary) {
  std::error_code ec;
  const auto size = fs::file_size(binary, ec);
  const auto mtime = fs::last_write_time(binary, ec).time_since_epoch().count();
  if (ec) return ask_meshtrain(binary);
  const std::string id = binary + "|" + std::to_string(size) + "|" + std::to_string(mtime);
  const fs::path cache =
      fs::temp_directory_path(ec) / ("meshtest-describe-" + std::to_string(std::hash<std::string>{}(id)) + ".json");
  if (std::ifstream in(cache); in) {
    nlohmann::json d = nlohmann::json::parse(in, nullptr, false);
    if (d.is_object() && d.value("binary_id", "") == id && understood(d)) return d;
  }
  nlohmann::json d = ask_meshtrain(binary);
  if (d.is_null()) return d;
  d["binary_id"] = id;
  const fs::path tmp = cache.string() + "." + std::to_string(::getpid());
  if (std::ofstream out(tmp); out << d.dump()) fs::rename(tmp, cache, ec);
  fs::remove(tmp, ec);
  return d;
}

class MeshtrainAdapter : public TrainerAdapter {
 public:
  // `description`: what `meshtrain describe --json` says, asked lazily; tests pass one instead.
  explicit MeshtrainAdapter(std::function<nlohmann::json()> describe) : describe_(std::move(describe)) {}

  std::string name() const override { return "meshtrain"; }

  std::vector<std::string> default_command() const override {
    return {"{meshtrain}",
            "{action}",
            "--model",
            "{model}",
            "--mesh",
            "{mesh}",
            "--backend",
            "{backend}",
            "--dump-folder",
            "{phase_dir}",
            "--checkpoint.folder",
            "{case_dir}/checkpoint"};
  }

  std::vector<ReservedOption> reserved_options() const override {
    return {{"mesh", "mesh"}, {"backend", "command"}, {"dump-folder", "command"}, {"model", "model"}};
  }

  // meshtrain writes meshtest's contract files in the phase folder (docs/contracts.md).
  Outputs default_outputs(const Layout&) const override {
    Outputs o;
    o.metrics.kind = MetricsSource::kJsonl;
    o.metrics.path = contract::dump_files::kMetricsFile;
    o.tokens = contract::dump_files::kGenerateFile;
    return o;
  }

  bool needs_model() const override { return true; }

  std::optional<std::vector<std::string>> models() const override {
    const nlohmann::json& d = description();
    if (d.is_null()) return std::nullopt;
    std::vector<std::string> names;
    for (const auto& [name, flavor] : d.at("flavors").items()) names.push_back(name);
    return names;
  }

  // contract/mesh.h's axes, torchtitan's order.
  std::vector<std::string> layout_axes() const override { return contract::mesh_dim_names(); }

  // All ranks shard the data and the weights (FSDP), as torchtitan's default.
  std::optional<Layout> default_layout(int nproc) const override { return Layout{{{"dp_shard", nproc}}}; }

  std::string layout_problem(const std::string& model, const Layout& layout,
                             const std::function<std::string(const std::string&)>& option) const override {
    const nlohmann::json& d = description();
    if (d.is_null() || !d.at("flavors").contains(model)) return "";
    const long long tp = layout.size("tp");
    const std::string prefix = "tp=" + std::to_string(tp) + ": ";
    for (const auto& rule : d["flavors"][model].at("tp_must_divide")) {
      const std::string what = rule.at(0);
      const long long value = rule.at(1).get<long long>();
      if (value % tp != 0)
        return prefix + what + " " + std::to_string(value) + " of model '" + model + "' is not divisible by tp " +
               std::to_string(tp);
    }
    const std::string seq = option("seq-len");
    if (option("sequence-parallel") == "true" && !seq.empty() &&
        d.value("sequence_parallel_needs_seq_len_divisible_by_tp", false)) {
      char* end = nullptr;
      const long long seq_len = std::strtoll(seq.c_str(), &end, 10);
      if (end && *end == '\0' && seq_len % tp != 0)
        return prefix + "--sequence-parallel needs seq_len divisible by tp, got seq_len " + seq;
    }
    return "";
  }

  // meshtrain trains `--steps` steps (10 when the flag is absent).
  std::optional<double> steps(const std::vector<std::string>& argv) const override {
    double steps = 10;
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--steps") steps = std::atof(argv[i + 1].c_str());
    return steps;
  }

  // meshtrain reports a validation loss only when asked.
  std::string how_to_report(const std::string& metric) const override {
    return metric == "validation_loss" ? "--validation.freq" : "";
  }

  std::vector<std::pair<std::string, std::string>> placeholders() const override {
    return {{"meshtrain", meshtrain_binary()}};
  }

  // A meshtrain that says it serves forks (describe's "fork_server"), when argv runs that meshtrain.
  std::string fork_server(const std::vector<std::string>& argv) const override {
    const nlohmann::json& d = description();
    if (argv.empty() || !d.is_object() || !d.contains("fork_server") || !d["fork_server"].is_string()) return "";
    std::error_code ec;
    const auto resolve = [](const std::string& p) {
      return p.find('/') != std::string::npos ? fs::path(p) : fs::path(bp::search_path(p).string());
    };
    return fs::equivalent(resolve(argv.front()), resolve(meshtrain_binary()), ec) && !ec
               ? d["fork_server"].get<std::string>()
               : "";
  }

  // meshtrain's shared-memory backend: any number of ranks per device (trainer/distributed/shm_comm.h).
  std::optional<SimulatedWorld> simulation() const override { return SimulatedWorld{"shm", {}, ""}; }

  // Per rank: a CUDA context, the whole model in float32 (every rank builds it before keeping
  // its part, trainer/train.cpp's build_model), and at most all of its weights, gradients and
  // two AdamW moments in float32 spread over the ranks. Activations come on top; a tiny or
  // debug model's are small next to the context.
  std::optional<double> simulated_world_bytes(const std::string& model, int nproc) const override {
    const nlohmann::json& d = description();
    if (d.is_null() || !d.at("flavors").contains(model) || !d["flavors"][model].contains("num_parameters"))
      return std::nullopt;
    const double params = d["flavors"][model]["num_parameters"].get<double>();
    constexpr double kContextBytes = 0.5 * (1u << 30);
    return nproc * (kContextBytes + 4 * params) + 16 * params;
  }

  std::string program_problem() const override {
    const std::string binary = meshtrain_binary();
    std::error_code ec;
    if (binary.find('/') != std::string::npos ? fs::exists(binary, ec) : !bp::search_path(binary).empty()) return "";
    const char* named = std::getenv("MESHTEST_MESHTRAIN");  // --meshtrain sets it too
    if (named && *named)
      return "needs meshtrain, which is not at " + binary +
             " (named by --meshtrain or $MESHTEST_MESHTRAIN): correct that path, or drop it to use the meshtrain "
             "beside meshtest or on PATH";
    return "needs meshtrain, which is not at " + binary +
           " (a meshtest built or installed without it): pass --meshtrain PATH, set $MESHTEST_MESHTRAIN, or put "
           "meshtrain on PATH";
  }

 private:
  const nlohmann::json& description() const {
    std::call_once(asked_, [this] { description_ = describe_(); });
    return description_;
  }
  std::function<nlohmann::json()> describe_;
  mutable std::once_flag asked_;
  mutable nlohmann::json description_;
};

}  // namespace

std::string meshtrain_binary() {
  if (const char* env = std::getenv("MESHTEST_MESHTRAIN"); env && *env) return env;
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path beside = (ec ? fs::path(".") : exe.parent_path()) / "meshtrain";
  if (fs::exists(beside, ec)) return beside.string();
  // A meshtest installed on its own finds a meshtrain installed elsewhere on PATH.
  const auto on_path = bp::search_path("meshtrain");
  return on_path.empty() ? beside.string() : on_path.string();
}

void use_meshtrain_binary(const std::string& path) {
  if (path.empty()) return;
  const std::string binary =
      path.find('/') == std::string::npos ? path : fs::absolute(path).lexically_normal().string();
  ::setenv("MESHTEST_MESHTRAIN", binary.c_str(), 1);
}

void register_meshtrain_adapter(AdapterRegistry& registry) {
  registry.add(std::make_unique<MeshtrainAdapter>([] {
    const std::string binary = meshtrain_binary();
    nlohmann::json d = cached_description(binary);
    if (d.is_null())
      std::fprintf(stderr,
                   "meshtest: note: could not ask %s describe --json; model names and meshes are not "
                   "checked before launch\n",
                   binary.c_str());
    return d;
  }));
  registry.set_default("meshtrain");
}

void register_meshtrain_adapter(AdapterRegistry& registry, const nlohmann::json& description) {
  if (!understood(description)) throw std::invalid_argument("not a meshtrain describe document");
  registry.add(std::make_unique<MeshtrainAdapter>([description] { return description; }));
  registry.set_default("meshtrain");
}

}  // namespace meshtest
