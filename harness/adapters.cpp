#include "adapters.h"

#include <boost/process.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace meshtest {

namespace {

namespace bp = boost::process;
namespace fs = std::filesystem;

std::string meshtrain_binary() {
  if (const char* env = std::getenv("MESHTEST_MESHTRAIN"); env && *env) return env;
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ((ec ? fs::path(".") : exe.parent_path()) / "meshtrain").string();
}

// `meshtrain describe --json`, or null when the binary is absent or says nothing usable.
nlohmann::json ask_meshtrain(const std::string& binary) {
  std::error_code ec;
  if (!fs::exists(binary, ec)) return nullptr;
  try {
    bp::ipstream out;
    bp::child child(bp::exe = binary, bp::args = {"describe", "--json"}, bp::std_out > out, bp::std_err > bp::null,
                    bp::std_in < bp::null);
    std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    child.wait();
    if (child.exit_code() != 0) return nullptr;
    nlohmann::json d = nlohmann::json::parse(text);
    return d.contains("flavors") && d["flavors"].is_object() ? d : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

class MeshtrainAdapter : public TrainerAdapter {
 public:
  std::string name() const override { return "meshtrain"; }

  std::vector<std::string> default_command() const override {
    return {"{meshtrain}",   "{action}",    "--model",             "{model}",    "--mesh", "{mesh}", "--backend",
            "{backend}",     "--dump-folder", "{phase_dir}", "--checkpoint.folder", "{case_dir}/checkpoint"};
  }

  std::vector<std::string> reserved_options() const override { return {"mesh", "backend", "dump-folder", "model"}; }

  // metrics.jsonl and state_dict_keys.json in the phase folder (docs/contracts.md).
  Outputs default_outputs() const override { return {}; }

  std::optional<std::vector<std::string>> models() const override {
    const nlohmann::json& d = description();
    if (d.is_null()) return std::nullopt;
    std::vector<std::string> names;
    for (const auto& [name, flavor] : d.at("flavors").items()) names.push_back(name);
    return names;
  }

  std::string mesh_problem(const std::string& model, const meshtrain::MeshShape& mesh,
                           const std::function<std::string(const std::string&)>& option) const override {
    const nlohmann::json& d = description();
    if (d.is_null() || !d.at("flavors").contains(model)) return "";
    const long long tp = mesh.tp;
    const std::string prefix = "tp=" + std::to_string(tp) + ": ";
    for (const auto& rule : d["flavors"][model].at("tp_must_divide")) {
      const std::string what = rule.at(0);
      const long long value = rule.at(1);
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

 private:
  const nlohmann::json& description() const {
    std::call_once(asked_, [this] {
      const std::string binary = meshtrain_binary();
      description_ = ask_meshtrain(binary);
      if (description_.is_null())
        std::fprintf(stderr, "meshtest: note: could not ask %s describe --json; model names and meshes are not "
                             "checked before launch\n", binary.c_str());
    });
    return description_;
  }
  mutable std::once_flag asked_;
  mutable nlohmann::json description_;
};

}  // namespace

const TrainerAdapter& meshtrain_adapter() {
  static const MeshtrainAdapter adapter;
  return adapter;
}

}  // namespace meshtest
