#include "core/case_parts.h"

namespace meshtest {

std::string Expectation::str() const {
  switch (kind) {
    case kPass: return "pass";
    case kXfail: return "xfail: " + reason;
    case kSkip: return "skip: " + reason;
    case kFail: return std::string("fail: ") + check_kind_name(check);
  }
  return "?";
}

nlohmann::json CheckSpec::to_json() const {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& p : check_signature(kind).params)
    if (const auto value = p.value_in(params)) std::visit([&](const auto& v) { values[p.name] = v; }, *value);
  return {{"kind", check_kind_name(kind)}, {"params", values}, {"where", where.str()}};
}

namespace {
const char* const kRequirementKindNames[] = {"python", "command", "python_version", "gpus"};  // by Requirement::Kind

// Long or multi-line probe text on one line, for a reason: each run of white space one space.
std::string one_line(const std::string& text, size_t max_chars = 80) {
  std::string out;
  for (char ch : text) {
    const bool space = ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
    if (!space)
      out += ch;
    else if (!out.empty() && out.back() != ' ')
      out += ' ';
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

}  // namespace meshtest
