#include "core/placeholders.h"

#include <algorithm>
#include <regex>

#include "core/yaml_reader.h"

namespace meshtest {

namespace {

// Calls `on(name)` for each placeholder of `text` and returns the text with each replaced by
// what `on` returns.
std::string replace_each(const std::string& text, const std::function<std::string(const std::string&)>& on) {
  static const std::regex placeholder(R"(\{([A-Za-z_][A-Za-z0-9_]*)\})");
  std::string out;
  size_t last = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), placeholder); it != std::sregex_iterator(); ++it) {
    out += text.substr(last, static_cast<size_t>(it->position()) - last);
    last = static_cast<size_t>(it->position() + it->length());
    out += on((*it)[1].str());
  }
  return out + text.substr(last);
}

}  // namespace

std::string fill_placeholders(const std::string& text, const PlaceholderPlace& place,
                              const std::function<void(const std::string& message)>& refuse) {
  return replace_each(text, [&](const std::string& name) {
    const std::string written = "{" + name + "}";
    if (auto v = place.now.find(name); v != place.now.end()) return v->second;
    if (std::find(place.later.begin(), place.later.end(), name) != place.later.end()) return written;
    std::string message = "unknown placeholder " + written + " in " + place.what;
    if (auto why = place.lacking.find(name); why != place.lacking.end()) {
      refuse(message + "; " + why->second);
      return written;
    }
    if (!place.takes.empty()) message += "; " + place.takes;
    std::vector<std::string> known = place.later;
    for (const auto& [n, value] : place.now) known.push_back(n);
    refuse(message + did_you_mean(name, known, "{", "}"));
    return written;
  });
}

std::string fill_run_time(const std::string& text, const std::map<std::string, std::string>& values) {
  return replace_each(text, [&](const std::string& name) {
    const auto v = values.find(name);
    return v == values.end() ? "{" + name + "}" : v->second;
  });
}

}  // namespace meshtest
