// The checks a matrix may declare, and the parameters each one takes. The matrix
// loader validates declarations against this table before anything runs; the
// implementations live in checks.cpp. Documented in docs/checks.md.
#pragma once

#include <string>
#include <vector>

namespace meshtest {

enum class ParamType { kString, kNumber, kBool, kInt };

struct CheckParam {
  std::string name;
  ParamType type;
};

struct CheckKind {
  std::string name;
  std::vector<CheckParam> params;
  std::vector<std::string> needs_one_of;  // e.g. a reference: baseline, against or golden
  // Parameters naming another case: validated against the loaded cases.
  bool takes_baseline() const;
};

const std::vector<CheckKind>& check_kinds();
const CheckKind* find_check_kind(const std::string& name);
std::vector<std::string> check_kind_names();

}  // namespace meshtest
