// Paths, as a class: real meshtrain cases (a checkpoint saved under one layout and resumed
// under another, a model-only save judged by tensors_match, a golden file beside the matrix)
// and a foreign `command` case with `outputs:` run under each way a user names paths:
// relative, absolute, with spaces and non-ASCII characters, through a symlink, and with
// meshtest started from another directory. Every case must meet its expectation, the reports
// must land where --out says, and every path meshtrain records must be absolute.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "harness/shell.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kMatrix = R"(suite: paths
defaults:
  model: tiny
  timeout: 300
  options: {steps: 4, seed: 42, global-batch-size: 4, local-batch-size: 2, quiet: true}
  checks: [loss_finite]
cases:
  - name: one
    mesh: {dp_shard: 1}
    options: {checkpoint.enable: true}
    checks: [{loss_matches: {golden: "golden dir/one loss.txt", rtol: 0.5}}]
  - name: save-load
    options: {checkpoint.enable: true, checkpoint.exclude-from-loading: dataloader}
    phases:
      - {name: save, mesh: {dp_shard: 2}, options: {stop-at: 2}}
      - {name: load, mesh: {dp_shard: 1}}
    checks:
      - {keys_match: {phase: load, against: save}}
      - {saved_once: {phase: save}}
      - {resume_matches: {phase: load, baseline: one, rtol: 1.0e-5}}
  - name: model_only
    mesh: {dp_shard: 2}
    options: {checkpoint.enable: true, checkpoint.last-save-model-only: true}
    checks: [{tensors_match: {baseline: one, prefix: model., rtol: 1.0e-4, atol: 1.0e-6}}]
  - name: foreign
    mesh: {dp_shard: 1}
    command: ["{meshtrain}", train, --model, tiny, --mesh, dp_shard=1, --backend, "{backend}",
              --dump-folder, "{phase_dir}/its dump", --checkpoint.folder, "{case_dir}/its checkpoint",
              --checkpoint.enable]
    outputs:
      metrics: {from: metrics-jsonl, path: its dump/metrics.jsonl}
      checkpoint: {path: "{case_dir}/its checkpoint"}
    checks: [{tensors_match: {baseline: one, rtol: 0, atol: 0}}]
)";

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One way of naming paths: where meshtest starts, and how it names the matrix, --out and
// meshtrain (relative to that directory, or absolute).
struct Form {
  std::string name;
  std::string matrix_dir;  // under the test's root, where m.yaml and its golden file are
  std::string cwd;         // under the root (may be a symlink); "/" for the absolute form
  std::string matrix;      // as typed; "" means absolute
  std::string out;         // as typed; "" means absolute
};
void PrintTo(const Form& f, std::ostream* os) { *os << f.name; }

class Paths : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-paths-XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(root_);
  }
  fs::path root_;
};

}  // namespace

TEST_P(Paths, EveryCaseMeetsItsExpectationAndRecordsAbsolutePaths) {
  if (std::string(MESHTRAIN_TEST_BACKEND) != "gloo")
    GTEST_SKIP() << "two ranks of meshtrain need Gloo; the CUDA build has NCCL only";
  const Form& f = GetParam();
  const fs::path dir = root_ / fs::u8path(f.matrix_dir);
  fs::create_directories(dir / "golden dir");
  std::ofstream(dir / "m.yaml") << kMatrix;
  std::ofstream(dir / "golden dir" / "one loss.txt") << "1 6.0\n2 6.0\n3 6.0\n4 6.0\n";
  if (f.name == "symlink") fs::create_directory_symlink(dir, root_ / "link");
  fs::create_directories(root_ / "elsewhere");

  const fs::path cwd = f.cwd == "/" ? fs::path("/") : root_ / fs::u8path(f.cwd);
  const std::string matrix = f.matrix.empty() ? (dir / "m.yaml").string() : f.matrix;
  const std::string out = f.out.empty() ? (root_ / "abs out").string() : f.out;
  // meshtrain named relative to the working directory too, where the form is relative.
  const std::string meshtrain =
      f.out.empty() ? std::string(MESHTRAIN_BIN) : fs::relative(MESHTRAIN_BIN, fs::canonical(cwd)).string();
  const Output o = sh("cd " + quote(cwd.string()) + " && CI=1 " + MESHTEST_BIN + " run " + quote(matrix) + " --out " +
                      quote(out) + " --meshtrain " + quote(meshtrain) + " --grace 5");
  EXPECT_EQ(o.rc, 0) << o.text.substr(o.text.size() > 6000 ? o.text.size() - 6000 : 0);

  const fs::path out_dir = fs::path(out).is_absolute() ? fs::path(out) : cwd / fs::u8path(out);
  std::ifstream in(out_dir / "summary.json");
  ASSERT_TRUE(in) << "no summary.json in " << out_dir;
  const json s = json::parse(in);
  ASSERT_EQ(s["cases"].size(), 4u);
  for (const auto& c : s["cases"]) EXPECT_EQ(c["status"], "passed") << c["id"] << ": " << c["reason"];
  EXPECT_TRUE(fs::exists(out_dir / "junit.xml"));
  EXPECT_TRUE(fs::exists(out_dir / "report.html"));

  // What meshtrain records for the harness is absolute, wherever it was started.
  for (const auto& e : fs::recursive_directory_iterator(out_dir)) {
    if (e.path().filename() != "rank0.json") continue;
    std::ifstream rank(e.path());
    const json r = json::parse(rank);
    if (r.contains("checkpoint_folder"))
      EXPECT_TRUE(fs::path(r["checkpoint_folder"].get<std::string>()).is_absolute())
          << e.path() << ": " << r["checkpoint_folder"];
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, Paths,
                         ::testing::Values(Form{"relative", "m", "m", "m.yaml", "out"},
                                           Form{"absolute", "m", "/", "", ""},
                                           Form{"spaces_and_non_ascii", "dir with spaces/\xc3\xbcn\xc3\xaf", "",
                                                "dir with spaces/\xc3\xbcn\xc3\xaf/m.yaml", "rel out/\xc3\xb8"},
                                           Form{"symlink", "real", "link", "m.yaml", "out"},
                                           Form{"another_directory", "m", "elsewhere", "../m/m.yaml", "../out"}),
                         [](const auto& info) { return info.param.name; });
