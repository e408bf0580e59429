#include "core/outputs.h"

#include <iterator>

namespace meshtest {

namespace {
const char* const kMetricsSourceNames[] = {"metrics-jsonl", "torchtitan-log",   "log-pattern",
                                           "tensorboard",   "hf-trainer-state", "megatron"};

}  // namespace

std::vector<std::string> metrics_source_names() {
  return {std::begin(kMetricsSourceNames), std::end(kMetricsSourceNames)};
}

std::optional<MetricsSource::Kind> metrics_source_kind(const std::string& name) {
  for (size_t k = 0; k < std::size(kMetricsSourceNames); ++k)
    if (name == kMetricsSourceNames[k]) return static_cast<MetricsSource::Kind>(k);
  return std::nullopt;
}

nlohmann::json outputs_to_json(const Outputs& o) {
  const MetricsSource& m = o.metrics;
  nlohmann::json j;
  j["metrics"] = {{"from", kMetricsSourceNames[m.kind]}};
  if (m.kind == MetricsSource::kJsonl || m.kind == MetricsSource::kTensorboard ||
      m.kind == MetricsSource::kHfTrainerState || m.kind == MetricsSource::kMegatron)
    j["metrics"]["path"] = m.path;
  if (m.kind == MetricsSource::kTorchtitanLog || m.kind == MetricsSource::kLogPattern ||
      m.kind == MetricsSource::kMegatron)
    j["metrics"]["rank"] = m.rank;
  if (m.kind == MetricsSource::kLogPattern) j["metrics"]["pattern"] = m.pattern;
  if (!m.tags.empty()) j["metrics"]["tags"] = m.tags;
  j["tokens"] = o.tokens;
  j["contract_files"] = o.contract_files;
  if (const auto& ck = o.checkpoint) {
    j["checkpoint"] = {{"path", ck->path},
                       {"step", ck->step},
                       {"model_prefix", ck->model_prefix},
                       {"rename", nlohmann::json::array()}};
    for (const auto& [from, to] : ck->rename) j["checkpoint"]["rename"].push_back({from, to});
  }
  return j;
}

Outputs outputs_from_json(const nlohmann::json& j) {
  Outputs o;
  if (!j.is_object()) return o;
  try {
    if (const auto m = j.value("metrics", nlohmann::json::object()); m.is_object()) {
      o.metrics.kind = metrics_source_kind(m.value("from", "")).value_or(MetricsSource::kJsonl);
      o.metrics.path = m.value("path", o.metrics.path);
      o.metrics.rank = m.value("rank", 0);
      o.metrics.pattern = m.value("pattern", "");
      o.metrics.tags = m.value("tags", std::map<std::string, std::string>());
    }
    o.tokens = j.value("tokens", o.tokens);
    o.contract_files = j.value("contract_files", o.contract_files);
    if (j.contains("checkpoint") && j["checkpoint"].is_object()) {
      const auto& c = j["checkpoint"];
      CheckpointSource ck;
      ck.path = c.value("path", "");
      ck.step = c.value("step", -1LL);
      ck.model_prefix = c.value("model_prefix", "");
      for (const auto& r : c.value("rename", nlohmann::json::array())) ck.rename.emplace_back(r.at(0), r.at(1));
      o.checkpoint = ck;
    }
  } catch (const nlohmann::json::exception&) {
    // an older or hand-edited summary.json: what could be read stands
  }
  return o;
}

std::string input_problem(CheckInput input, const Outputs& o, const std::string& adapter) {
  const std::string contract = "meshtest's contract files (rank<R>.json, param_digest.json; docs/contracts.md)";
  switch (input) {
    case CheckInput::kRun:
    case CheckInput::kMetrics:
    case CheckInput::kHistory:  // a run without a history says so in the check's result
      return "";
    case CheckInput::kTokens:
      if (!o.tokens.empty()) return "";
      return "it reads generated tokens, which adapter '" + adapter +
             "' does not write: name a JSON file with generated_ids in outputs.tokens";
    case CheckInput::kCheckpoint:
      if (o.checkpoint || o.contract_files) return "";
      return "it reads a checkpoint, and adapter '" + adapter + "' writes none of " + contract +
             " that say where one is: name it in outputs.checkpoint";
    case CheckInput::kContractFiles:
      if (o.contract_files) return "";
      return "it reads " + contract + ", which adapter '" + adapter +
             "' does not write (a checkpoint keeps one copy of a replicated tensor, so replicas cannot be compared "
             "from it); params_match and tensors_match compare its checkpoints instead";
  }
  return "";
}

std::string MetricsSource::describe() const {
  switch (kind) {
    case kJsonl: return path;
    case kTorchtitanLog: return "the torchtitan log of rank " + std::to_string(rank);
    case kLogPattern: return "rank " + std::to_string(rank) + "'s log through pattern '" + pattern + "'";
    case kTensorboard: return "TensorBoard scalars in " + path;
    case kHfTrainerState: return "the Hugging Face Trainer's trainer_state.json in " + path;
    case kMegatron:
      return "Megatron's TensorBoard scalars in " + path + ", else its log line in " +
             (rank < 0 ? std::string("the last rank's log") : "rank" + std::to_string(rank) + ".log");
  }
  return "?";
}

}  // namespace meshtest
