// The fixture every check's test shares: a one-suite matrix loaded from text, its
// phases marked as run (nothing is launched), files written where the phases look, and
// a case run through run_checks and judge() as the run loop does.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/check_sources.h"
#include "judge/checks.h"
#include "judge/judge.h"
#include "test_paths.h"

namespace meshtest {

// A float32 tensor for write_checkpoint.
struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// <folder>/step-5 in meshtrain's format: each float32 tensor one chunk of one data file, and
// each of `objects` a kind "object" key.
inline void write_checkpoint(const std::string& folder, const std::map<std::string, FloatTensor>& tensors,
                             const std::vector<std::string>& objects = {}) {
  const std::string step = folder + "/step-5";
  std::filesystem::create_directories(step);
  std::ofstream data(step + "/__0_0.distcp", std::ios::binary);
  nlohmann::json keys = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [key, t] : tensors) {
    const uint64_t bytes = t.values.size() * sizeof(float);
    data.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(bytes));
    keys[key] = {{"kind", "tensor"},
                 {"dtype", "float32"},
                 {"shape", t.shape},
                 {"chunks",
                  {{{"offsets", std::vector<int64_t>(t.shape.size(), 0)},
                    {"sizes", t.shape},
                    {"file", "__0_0.distcp"},
                    {"byte_offset", offset},
                    {"byte_length", bytes}}}}};
    offset += bytes;
  }
  for (const auto& key : objects) keys[key] = {{"kind", "object"}, {"value", {{"step", 5}}}};
  std::ofstream(step + "/.metadata") << nlohmann::json{{"format_version", 2}, {"step", 5}, {"keys", keys}}.dump();
}

class Checks : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-checks-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Loads a one-suite matrix whose cases run `fake` (never launched here).
  void load(const std::string& cases) {
    suite_ = load_suite_text("suite: s\ndefaults: {command: [fake], ngpu: 2}\ncases:\n" + cases, dir_ + "/m.yaml");
    outcomes_.clear();
    outcomes_.resize(suite_.cases.size());
    for (size_t i = 0; i < suite_.cases.size(); ++i) {
      CaseOutcome& o = outcomes_[i];
      o.spec = &suite_.cases[i];
      o.dir = dir_ + "/" + o.spec->name;
      for (const auto& p : o.spec->phases) {
        PhaseOutcome po;
        po.name = p.name;
        po.nproc = p.nproc;
        po.dir = o.dir + "/" + p.name;
        po.ran = true;
        po.result.exits.resize(static_cast<size_t>(p.nproc));
        std::filesystem::create_directories(po.dir);
        o.phases.push_back(po);
      }
      o.verdict = {VerdictKind::kPassed, ""};
      o.finished = true;
    }
  }
  void write(const std::string& path, const std::string& text) { std::ofstream(dir_ + "/" + path) << text; }
  static std::string curve(std::vector<double> losses, int first_step = 1) {
    std::string s;
    for (size_t i = 0; i < losses.size(); ++i)
      s += "{\"step\":" + std::to_string(first_step + static_cast<int>(i)) + ",\"loss\":" + std::to_string(losses[i]) +
           ",\"grad_norm\":1.0}\n";
    return s;
  }
  // Runs and judges case `i`; returns the result of its check `kind`.
  CheckResult run(size_t i, const std::string& kind) {
    auto find = [&](const std::string& id) -> const CaseOutcome* {
      for (const auto& o : outcomes_)
        if (o.spec->id == id) return &o;
      return nullptr;
    };
    outcomes_[i].checks = run_checks(outcomes_[i], {find, history_});
    judge(outcomes_[i]);
    for (const auto& c : outcomes_[i].checks)
      if (c.kind == kind) return c;
    ADD_FAILURE() << "no check " << kind;
    return {};
  }

  std::string dir_;
  HistorySource history_;  // none: the run has no history
  Suite suite_;
  std::vector<CaseOutcome> outcomes_;
};

}  // namespace meshtest
