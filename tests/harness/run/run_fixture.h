// The `Run` fixture of meshtest's end-to-end tests: a fresh folder per test, a matrix
// written there (FAKE stands for the fake trainer's path), `meshtest run` on it, and
// its summary.json read back.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "harness/shell.h"
#include "test_paths.h"

namespace meshtest_test {

const std::string kMeshtest = MESHTEST_BIN;
const std::string kFake = FAKE_TRAINER_BIN;

class Run : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-run-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string matrix(const std::string& body) {
    const std::string path = dir_ + "/m.yaml";
    std::string text = body;
    for (size_t at = text.find("FAKE"); at != std::string::npos; at = text.find("FAKE", at + kFake.size()))
      text.replace(at, 4, kFake);
    std::ofstream(path) << text;
    return path;
  }
  Output meshtest(const std::string& args) {
    return sh("CI=1 " + kMeshtest + " run " + dir_ + "/m.yaml --out " + dir_ + "/out --grace 5 " + args);
  }
  nlohmann::json summary() {
    std::ifstream in(dir_ + "/out/summary.json");
    return nlohmann::json::parse(in);
  }
  nlohmann::json case_of(const nlohmann::json& s, const std::string& id) {
    for (const auto& c : s["cases"])
      if (c["id"] == id) return c;
    ADD_FAILURE() << "no case " << id;
    return nlohmann::json();
  }
  std::string dir_;
};

}  // namespace meshtest_test
