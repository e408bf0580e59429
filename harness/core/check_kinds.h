// The checks a matrix may declare: one list of kinds, and the parameters each takes, typed
// and with their defaults. The matrix loader validates declarations against it before
// anything runs and fills in the defaults, so `meshtest show` prints what a check will use
// and the judge repeats no default.
//
// A kind is added in one place, MESHTEST_CHECK_KINDS below, and the compiler then asks
// for the rest: check_kinds.cpp (its parameters) and judge/checks.cpp (its function)
// each switch over CheckKind with no default and build with -Werror=switch
// (CMakeLists.txt), so a kind without parameters or without a function does not build.
// Documented in docs/checks.md.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace meshtest {

// Every check kind: its enumerator and the name a matrix spells it with, in the order
// the documentation and the loader's messages list them.
#define MESHTEST_CHECK_KINDS(X)       \
  X(kExit, "exit")                    \
  X(kLossFinite, "loss_finite")       \
  X(kLossDecreases, "loss_decreases") \
  X(kLossMatches, "loss_matches")     \
  X(kKeysMatch, "keys_match")         \
  X(kTokensMatch, "tokens_match")     \
  X(kResumeMatches, "resume_matches") \
  X(kReplicasEqual, "replicas_equal") \
  X(kParamsMatch, "params_match")     \
  X(kTensorsMatch, "tensors_match")   \
  X(kSavedOnce, "saved_once")         \
  X(kLogContains, "log_contains")     \
  X(kErrorMatches, "error_matches")   \
  X(kDrift, "drift")

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

const char* check_kind_name(CheckKind kind);  // "loss_matches"
// The loader's one look-up by name; after load a check holds its CheckKind.
std::optional<CheckKind> check_kind_named(const std::string& name);  // none for an unknown name
std::vector<std::string> check_kind_names();                         // for did-you-mean

// Message checks say *why* a run failed (log_contains, error_matches); judge() reads them
// apart from the number checks, `exit` included.
bool is_message_check(CheckKind kind);

// What a check reads of a finished phase. The loader refuses a check whose phase cannot
// supply it (input_problem, core/outputs.h), at the check's file:line:col.
enum class CheckInput {
  kRun,            // the exit status and the ranks' logs: every phase has them
  kMetrics,        // the loss curve: every phase has a source (outputs.metrics)
  kTokens,         // generated tokens (outputs.tokens)
  kCheckpoint,     // a checkpoint: outputs.checkpoint, or the contract files that say where it is
  kContractFiles,  // meshtest's contract files themselves: rank<R>.json, param_digest.json
  kHistory,        // the case's recent green runs in the run history, and this run's loss curves
};

// loss_matches' `rule`: a named source of tolerance instead of rtol/atol/exact, read from its
// string once, by the loader. Megatron-LM's functional tests (tests/functional_tests/
// python_test_utils/common.py) judge golden values two ways: every step equal after rounding to 5
// decimals, or within rtol 0.05 (0.20 for num-zeros) with a few steps allowed to miss
// (judge/curve_rules.h; docs/matrix.md).
enum class CurveRule { kMegatronDeterministic, kMegatronApproximate };
const char* curve_rule_name(CurveRule rule);                         // "megatron-approximate"
std::optional<CurveRule> curve_rule_named(const std::string& name);  // none for an unknown name
std::vector<std::string> curve_rule_names();                         // every rule, for messages

// A declared check's parameters, typed. After load, each parameter in its kind's row holds
// the value the matrix declared, else the row's default; one whose row gives no default (a
// phase, a reference, a rank) stays empty unless declared. The judge reads them as they are.
struct CheckParams {
  std::optional<std::string> phase;           // the phase under test; none: the case's last
  std::optional<std::string> against;         // another phase of the same case
  std::optional<std::string> baseline;        // another case's id (the loader resolves a bare name)
  std::optional<std::string> baseline_phase;  // none: the baseline's last phase
  std::optional<std::string> golden;          // a reference file, relative to the matrix file's folder
  std::optional<double> rtol, atol;
  std::optional<bool> exact;
  std::optional<double> factor;  // loss_decreases
  std::optional<std::string> metric;
  std::optional<std::string> rule;      // loss_matches: as written ("megatron-approximate")
  std::optional<CurveRule> curve_rule;  // `rule` as the loader read it; in no kind's row
  std::optional<bool> shapes;           // keys_match
  std::optional<std::string> prefix;
  std::optional<std::string> text;
  std::optional<long long> rank;  // log_contains; none: any rank
  // drift: the band of the case's last `window` green runs (at least `min_runs`), median ±
  // max(k x 1.4826 x MAD, rel_floor x |median|) (history/drift.h)
  std::optional<long long> window, min_runs;
  std::optional<double> k, rel_floor;
};

// The types a parameter may have; ParamValue and ParamField list them in this order.
enum class ParamType { kString, kNumber, kBool, kInt };
using ParamValue = std::variant<std::string, double, bool, long long>;
using ParamField = std::variant<std::optional<std::string> CheckParams::*, std::optional<double> CheckParams::*,
                                std::optional<bool> CheckParams::*, std::optional<long long> CheckParams::*>;

// One parameter of a kind's row: its name in the matrix, where it lives in CheckParams (which
// gives its type), and its default. A `strictness` parameter says how strict a check is, not
// what it judges: a case's check that differs from an inherited one only in these replaces it.
struct CheckParam {
  template <class T>
  CheckParam(std::string name, std::optional<T> CheckParams::*field, typename std::optional<T>::value_type by_default,
             bool strictness = false)
      : name(std::move(name)), field(field), by_default(ParamValue(by_default)), strictness(strictness) {}
  template <class T>
  CheckParam(std::string name, std::optional<T> CheckParams::*field) : name(std::move(name)), field(field) {}

  std::string name;
  ParamField field;
  std::optional<ParamValue> by_default;  // none: empty unless declared
  bool strictness = false;

  ParamType type() const { return static_cast<ParamType>(field.index()); }
  std::optional<ParamValue> value_in(const CheckParams& params) const;
  void set(CheckParams& params, const ParamValue& value) const;  // `value` of this parameter's type
};

// What a declaration of one kind may say: its parameters, and those of which it needs one.
struct CheckSignature {
  CheckKind kind;
  std::string name;
  CheckInput reads;
  std::vector<CheckParam> params;
  std::vector<std::string> needs_one_of;  // e.g. a reference: baseline, against or golden

  const CheckParam* param(const std::string& name) const;  // nullptr when the kind has none of that name
  CheckParams defaults() const;                            // every parameter at its default
};

const CheckSignature& check_signature(CheckKind kind);

}  // namespace meshtest
