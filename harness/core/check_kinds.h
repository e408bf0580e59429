// The checks a matrix may declare: one list of kinds, and the parameters each takes.
// The matrix loader validates declarations against it before anything runs.
//
// A kind is added in one place, MESHTEST_CHECK_KINDS below, and the compiler then asks
// for the rest: check_kinds.cpp (its parameters) and judge/checks.cpp (its function)
// each switch over CheckKind with no default and build with -Werror=switch
// (CMakeLists.txt), so a kind without parameters or without a function does not build.
// Documented in docs/checks.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace meshtest {

// Every check kind: its enumerator and the name a matrix spells it with, in the order
// the documentation and the loader's messages list them.
#define MESHTEST_CHECK_KINDS(X)          \
  X(kExit, "exit")                       \
  X(kLossFinite, "loss_finite")          \
  X(kLossDecreases, "loss_decreases")    \
  X(kLossMatches, "loss_matches")        \
  X(kKeysMatch, "keys_match")            \
  X(kTokensMatch, "tokens_match")        \
  X(kResumeMatches, "resume_matches")    \
  X(kReplicasEqual, "replicas_equal")    \
  X(kParamsMatch, "params_match")        \
  X(kTensorsMatch, "tensors_match")      \
  X(kSavedOnce, "saved_once")            \
  X(kLogContains, "log_contains")        \
  X(kErrorMatches, "error_matches")

enum class CheckKind {
#define MESHTEST_CHECK_KIND_ENUMERATOR(kind, name) kind,
  MESHTEST_CHECK_KINDS(MESHTEST_CHECK_KIND_ENUMERATOR)
#undef MESHTEST_CHECK_KIND_ENUMERATOR
};

// Every kind, in the list's order.
inline constexpr CheckKind kAllCheckKinds[] = {
#define MESHTEST_CHECK_KIND_VALUE(kind, name) CheckKind::kind,
    MESHTEST_CHECK_KINDS(MESHTEST_CHECK_KIND_VALUE)
#undef MESHTEST_CHECK_KIND_VALUE
};

const char* check_kind_name(CheckKind kind);                         // "loss_matches"
std::optional<CheckKind> check_kind_named(const std::string& name);  // none for an unknown name
std::vector<std::string> check_kind_names();                         // for did-you-mean

// Message checks say *why* a run failed (log_contains, error_matches); judge() reads them
// apart from the number checks, `exit` included.
bool is_message_check(CheckKind kind);
bool is_message_check(const std::string& name);  // false for an unknown name

// What a check reads of a finished phase. The loader refuses a check whose phase cannot
// supply it (input_problem, core/outputs.h), at the check's file:line:col.
enum class CheckInput {
  kRun,            // the exit status and the ranks' logs: every phase has them
  kMetrics,        // the loss curve: every phase has a source (outputs.metrics)
  kTokens,         // generated tokens (outputs.tokens)
  kCheckpoint,     // a checkpoint: outputs.checkpoint, or the contract files that say where it is
  kContractFiles,  // meshtest's contract files themselves: rank<R>.json, param_digest.json
};

enum class ParamType { kString, kNumber, kBool, kInt };

struct CheckParam {
  std::string name;
  ParamType type;
};

// What a declaration of one kind may say: its parameters, and those of which it needs one.
struct CheckSignature {
  CheckKind kind;
  std::string name;
  CheckInput reads;
  std::vector<CheckParam> params;
  std::vector<std::string> needs_one_of;  // e.g. a reference: baseline, against or golden
  // Parameters naming another case: validated against the loaded cases.
  bool takes_baseline() const;
};

const CheckSignature& check_signature(CheckKind kind);
const CheckSignature* find_check_kind(const std::string& name);  // nullptr for an unknown name

}  // namespace meshtest
