#include "core/adapters.h"

#include <algorithm>
#include <stdexcept>

namespace meshtest {

int64_t Layout::ranks() const {
  int64_t n = 1;
  for (const auto& [axis, size] : axes) n *= size;
  return n;
}

int64_t Layout::size(const std::string& axis) const {
  for (const auto& [name, size] : axes)
    if (name == axis) return size;
  return 1;
}

bool Layout::names(const std::string& axis) const {
  return std::any_of(axes.begin(), axes.end(), [&](const auto& a) { return a.first == axis; });
}

std::string Layout::to_compact_string() const {
  std::string out;
  for (const auto& [axis, size] : axes)
    if (size != 1) out += (out.empty() ? "" : ",") + axis + "=" + std::to_string(size);
  if (out.empty() && !axes.empty()) out = axes.front().first + "=1";
  return out;
}

Layout parse_layout(const std::string& spec) {
  Layout layout;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("mesh '" + spec + "': '" + item + "' is not NAME=SIZE");
    const std::string axis = item.substr(0, eq), value = item.substr(eq + 1);
    size_t used = 0;
    long long size = 0;
    try {
      size = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size())
      throw std::invalid_argument("mesh '" + spec + "': size of " + axis + " ('" + value + "') is not an integer");
    if (size < 1) throw std::invalid_argument("mesh '" + spec + "': " + axis + " must be >= 1");
    for (const auto& [seen, unused] : layout.axes)
      if (seen == axis) throw std::invalid_argument("mesh '" + spec + "': " + axis + " appears twice");
    layout.axes.emplace_back(axis, size);
  }
  return layout;
}

std::vector<std::string> TrainerAdapter::phase_args(const PhaseRequest& phase) const {
  std::vector<std::string> args;
  for (const auto& option : phase.options) {
    if (option.flag) {
      if (*option.flag) args.push_back("--" + option.key);
    } else {
      args.insert(args.end(), {"--" + option.key, option.value});
    }
  }
  return args;
}

namespace {

// Any program, described by the case's YAML alone: `command:` plus `outputs:`.
class CommandAdapter : public TrainerAdapter {
 public:
  std::string name() const override { return "command"; }
  std::vector<std::string> default_command() const override { return {}; }
  std::vector<ReservedOption> reserved_options() const override { return {}; }
  Outputs default_outputs(const Layout&) const override { return {}; }
  bool needs_model() const override { return false; }
  std::optional<std::vector<std::string>> models() const override { return std::nullopt; }
  std::vector<std::string> layout_axes() const override { return {}; }
  std::optional<Layout> default_layout(int) const override { return std::nullopt; }
  std::string layout_problem(const std::string&, const Layout&,
                             const std::function<std::string(const std::string&)>&) const override {
    return "";
  }
  std::optional<double> steps(const std::vector<std::string>&) const override { return std::nullopt; }
  std::string how_to_report(const std::string&) const override { return ""; }
  std::vector<std::pair<std::string, std::string>> placeholders() const override { return {}; }
  // The command may well be a PyTorch trainer; for any other program the setting is inert.
  std::optional<SimulatedWorld> simulation() const override { return pytorch_simulation(); }
};

}  // namespace

AdapterRegistry::AdapterRegistry() { add(std::make_unique<CommandAdapter>()); }

void AdapterRegistry::add(std::unique_ptr<TrainerAdapter> adapter) {
  const std::string name = adapter->name();
  for (auto& known : adapters_)
    if (known->name() == name) {
      known = std::move(adapter);  // a later registration replaces (tests register their own)
      return;
    }
  adapters_.push_back(std::move(adapter));
}

void AdapterRegistry::set_default(const std::string& name) {
  if (!find(name)) throw std::invalid_argument("no trainer adapter '" + name + "' to make the default");
  default_ = name;
}

const TrainerAdapter* AdapterRegistry::find(const std::string& name) const {
  for (const auto& a : adapters_)
    if (a->name() == name) return a.get();
  return nullptr;
}

std::vector<std::string> AdapterRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& a : adapters_) out.push_back(a->name());
  return out;
}

std::vector<const TrainerAdapter*> AdapterRegistry::all() const {
  std::vector<const TrainerAdapter*> out;
  for (const auto& a : adapters_) out.push_back(a.get());
  return out;
}

std::vector<std::pair<std::string, std::string>> AdapterRegistry::placeholders() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& a : adapters_)
    for (auto& p : a->placeholders()) out.push_back(std::move(p));
  return out;
}

AdapterRegistry& trainer_adapters() {
  static AdapterRegistry registry;
  return registry;
}

}  // namespace meshtest
