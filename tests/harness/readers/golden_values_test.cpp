// Megatron-LM's golden values files (readers/golden_values.h), read from real files copied from
// Megatron-LM (tests/fixtures/megatron-golden/README.md), each also refused once corrupted; and
// meshtest's own golden curve files (readers/golden_curve.h), two columns or a band of three.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "readers/golden_curve.h"
#include "readers/golden_values.h"
#include "readers/metric_series.h"
#include "report/megatron_golden.h"
#include "test_paths.h"

namespace meshtest {
namespace {

namespace fs = std::filesystem;

const std::string kMegatronFixtures = std::string(MESHTEST_SOURCE_DIR) + "/tests/fixtures/megatron-golden/";
const std::string kVp1 =
    kMegatronFixtures + "gpt3_mcore_te_tp1_pp4_vp1_resume_torch_dist/golden_values_dev_dgx_h100.json";
const std::string kNoTe = kMegatronFixtures + "gpt3_mcore_tp2_pp2_uninstall_te/golden_values_dev_dgx_a100.json";
const std::string kMtp =
    kMegatronFixtures + "gpt3_mcore_te_tp2_pp2_ep4_etp1_mtp_resume_torch_dist_fp8/golden_values_dev_dgx_h100.json";
const std::string kHybrid =
    kMegatronFixtures + "hybrid_mr_mcore_te_tp1_pp1_cp1_dgx_a100_1N8G/golden_values_dev_dgx_a100.json";

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const GoldenValuesMetric& metric_named(const GoldenValues& g, const std::string& name) {
  for (const auto& [n, m] : g)
    if (n == name) return m;
  throw std::runtime_error("no metric " + name);
}

// The message a file's refusal gives, "" when it was read.
std::string refusal(const std::string& text, const std::string& file = "g.json") {
  try {
    parse_golden_values(text, file);
    return "";
  } catch (const MetricsError& e) {
    return e.what();
  }
}

// `from` with its first `old` replaced by `with` (which must be there: a test corrupts what it means to).
std::string replaced(std::string from, const std::string& old, const std::string& with) {
  const size_t at = from.find(old);
  if (at == std::string::npos) throw std::runtime_error("no '" + old + "' to replace");
  return from.replace(at, old.size(), with);
}

class GoldenFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-golden-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

}  // namespace

TEST_F(GoldenFiles, RealMegatronGoldenValuesAreReadAsMegatronWroteThem) {
  const GoldenValues vp1 = read_golden_values(kVp1);
  ASSERT_EQ(vp1.size(), 5u);
  EXPECT_EQ(vp1[0].first, "lm loss");  // the file's order
  const GoldenValuesMetric& loss = metric_named(vp1, "lm loss");
  EXPECT_EQ(loss.start_step, 1);
  EXPECT_EQ(loss.end_step, 100);
  EXPECT_EQ(loss.step_interval, 5);
  EXPECT_EQ(loss.values.size(), 21u);
  EXPECT_DOUBLE_EQ(loss.values.at(1), 10.84517);
  EXPECT_DOUBLE_EQ(loss.values.at(100), 9.39541);
  EXPECT_DOUBLE_EQ(metric_named(vp1, "num-zeros").values.at(5), 1803.0);

  // Megatron's "nan": num-zeros logged nothing on the first steps (skipped iterations).
  const GoldenValues no_te = read_golden_values(kNoTe);  // held: metric_named returns into it
  const GoldenValuesMetric& zeros = metric_named(no_te, "num-zeros");
  EXPECT_TRUE(std::isnan(zeros.values.at(1)));
  EXPECT_TRUE(std::isnan(zeros.values.at(15)));
  EXPECT_DOUBLE_EQ(zeros.values.at(20), 1751.0);

  // Indented, with an MTP loss meshtest does not judge: read all the same.
  const GoldenValues mtp = read_golden_values(kMtp);
  EXPECT_EQ(metric_named(mtp, "mtp_1 loss").values.size(), 11u);
}

// A real file of Megatron-LM whose steps leave its own grid: refused, its missing steps named.
TEST_F(GoldenFiles, ARealMegatronFileWithMissingStepsIsRefusedNamingThem) {
  EXPECT_EQ(refusal(text_of(kHybrid), "h.json"),
            "h.json: \"lm loss\": 39 steps of its grid (1, then every multiple of 1 up to 50) have no value: 2, 3, 4, "
            "6, 7, 8, 9, 11, 12, 13 and 29 more; its steps are every 5 (Megatron's _infer_step_interval), its "
            "step_interval says 1");
  EXPECT_THROW(read_golden_values(kHybrid), MetricsError);
}

// Each way a golden values file goes bad, made from a real one in the test's folder: refused by
// file and metric, with what is wrong.
TEST_F(GoldenFiles, EachCorruptionOfARealGoldenValuesFileIsRefusedByName) {
  const std::string good = text_of(kVp1);
  ASSERT_EQ(refusal(good), "");
  const std::string truncated = write("truncated.json", good.substr(0, good.size() / 2));
  try {
    read_golden_values(truncated);
    ADD_FAILURE() << "a truncated file was read";
  } catch (const MetricsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(truncated + ": not JSON (", 0), 0u) << e.what();
  }
  // An empty file (Megatron-LM has four, and two that are not JSON at all).
  EXPECT_EQ(
      refusal("").rfind("g.json: not JSON ([json.exception.parse_error.101] parse error at line 1, column 1: ", 0), 0u);
  EXPECT_EQ(refusal("[1, 2]"),
            "g.json: not Megatron golden values: the top level is a list, not an object of "
            "metric -> {start_step, end_step, step_interval, values}");
  EXPECT_EQ(refusal("{}"), "g.json: no metrics in it ({})");
  EXPECT_EQ(refusal(replaced(good, "\"step_interval\": 5, ", "")),
            "g.json: \"lm loss\": has no step_interval (every metric of a golden values file has start_step, "
            "end_step, step_interval and values)");
  EXPECT_EQ(refusal(R"({"0": {"input_prompt": "Hi", "generated_text": "there"}})"),
            "g.json: \"0\": has no start_step, end_step, step_interval, values (every metric of a golden values file "
            "has start_step, end_step, step_interval and values; an inference golden file is another format)");
  // A step of the grid without its value: Megatron would count it a miss silently.
  EXPECT_EQ(refusal(replaced(good, "\"10\": 10.82907, ", "")),
            "g.json: \"lm loss\": 1 step of its grid (1, then every multiple of 5 up to 100) has no value: 10");
  EXPECT_EQ(refusal(replaced(good, "\"10\": 10.82907", "\"12\": 10.82907")),
            "g.json: \"lm loss\": step 12 is not on its grid (1, then every multiple of 5 up to 100)");
  EXPECT_EQ(refusal(replaced(good, "10.82907", "\"10.8\"")),
            "g.json: \"lm loss\": step 10 has \"10.8\": a value is a number or \"nan\"");
  EXPECT_EQ(refusal(replaced(good, "10.82907", "null")),
            "g.json: \"lm loss\": step 10 has null: a value is a number or \"nan\"");
  EXPECT_EQ(refusal(replaced(good, "\"10\": 10.82907", "\"1e1\": 10.82907")),
            "g.json: \"lm loss\": values has the key \"1e1\", not a step number");
  EXPECT_EQ(refusal(replaced(good, "\"step_interval\": 5", "\"step_interval\": \"5\"")),
            "g.json: \"lm loss\": step_interval must be a whole number, got \"5\"");
  EXPECT_EQ(refusal(replaced(good, "\"step_interval\": 5", "\"step_interval\": 0")),
            "g.json: \"lm loss\": start_step 1, end_step 100, step_interval 0: expected 0 <= start_step <= end_step "
            "<= 10^15 and step_interval >= 1");
  EXPECT_EQ(refusal(R"({"lm loss": {"start_step": 0, "end_step": 50, "step_interval": 5, "values": [10.9, 10.8]}})"),
            "g.json: \"lm loss\": values is a list (Megatron's older format); meshtest reads {\"<step>\": value}");
  EXPECT_EQ(refusal(R"({"lm loss": 10.9})"),
            "g.json: \"lm loss\": is a number, not {start_step, end_step, step_interval, values}");
  // A broken metric meshtest does not import still makes the file bad.
  EXPECT_EQ(refusal(replaced(good, "\"10\": 0.0973, ", "")),
            "g.json: \"iteration-time\": 1 step of its grid (1, then every multiple of 5 up to 100) has no value: 10");
}

TEST_F(GoldenFiles, MegatronsDocumentIsWrittenAsItInfersItsGridAndReadsBack) {
  EXPECT_EQ(infer_step_interval({1, 5, 10, 15}, 1), 5);
  EXPECT_EQ(infer_step_interval({5, 10}, 5), 10);  // one step after the start: its own gap
  EXPECT_EQ(infer_step_interval({1}, 1), 1);
  EXPECT_EQ(infer_step_interval({6, 7, 8, 9}, 6), 1);
  const auto doc =
      golden_values_json({{"lm loss", {{1, 10.84517}, {2, 10.8}, {3, NAN}}}, {"num-zeros", {{1, 1655.0}}}});
  EXPECT_EQ(doc.dump(),
            R"({"lm loss":{"start_step":1,"end_step":3,"step_interval":1,"values":{"1":10.84517,"2":10.8,"3":"nan"}},)"
            R"("num-zeros":{"start_step":1,"end_step":1,"step_interval":1,"values":{"1":1655.0}}})");
  const GoldenValues back = parse_golden_values(doc.dump(4), "back.json");
  EXPECT_DOUBLE_EQ(metric_named(back, "lm loss").values.at(2), 10.8);
  EXPECT_TRUE(std::isnan(metric_named(back, "lm loss").values.at(3)));
}

TEST_F(GoldenFiles, ImportWritesAGoldenPerMetricItJudgesWithWhereItCameFrom) {
  ASSERT_EQ(import_megatron_golden({kNoTe}, dir_ + "/out"), 0);
  const std::string loss = dir_ + "/out/golden_values_dev_dgx_a100.loss.txt";
  const GoldenCurve curve = read_golden_curve(loss);
  EXPECT_FALSE(curve.band);
  ASSERT_EQ(curve.steps.size(), 11u);
  EXPECT_DOUBLE_EQ(curve.steps.at(1).min, 10.92717);
  EXPECT_DOUBLE_EQ(curve.steps.at(50).max, 10.28766);
  ASSERT_GE(curve.comments.size(), 3u);
  EXPECT_EQ(curve.comments[1], "from: " + kNoTe);
  EXPECT_EQ(curve.comments[2],
            "metric: \"lm loss\" (start_step 1, end_step 50, step_interval 5; 11 steps) as meshtest's loss");
  const std::string zeros = text_of(dir_ + "/out/golden_values_dev_dgx_a100.num_zeros.txt");
  EXPECT_NE(zeros.find("\n1 nan\n5 nan\n10 nan\n15 nan\n20 1751\n"), std::string::npos) << zeros;
  EXPECT_FALSE(fs::exists(dir_ + "/out/golden_values_dev_dgx_a100.iteration-time.txt"));
  // Nothing is written when any input is bad, and the error names it.
  try {
    import_megatron_golden({kVp1, kHybrid}, dir_ + "/two");
    ADD_FAILURE() << "a file with missing steps was imported";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(kHybrid + ": \"lm loss\": 39 steps of its grid", 0), 0u) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ + "/two"));
  const std::string only_time = write(
      "time.json", R"({"iteration-time": {"start_step": 1, "end_step": 1, "step_interval": 5, "values": {"1": 0.2}}})");
  try {
    import_megatron_golden({only_time}, dir_ + "/out");
    ADD_FAILURE() << "a file with nothing to import was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), only_time +
                                         ": none of its metrics (iteration-time) is one meshtest judges (lm "
                                         "loss, num-zeros, grad-norm, lm loss validation)");
  }
}

TEST_F(GoldenFiles, GoldenCurvesAreTwoColumnsOrABandAndAnythingElseIsRefusedByLine) {
  const GoldenCurve two = read_golden_curve(write("two.txt", "# from somewhere\n1 6.0\n\n2 5.5\n3 nan\n"));
  EXPECT_FALSE(two.band);
  EXPECT_EQ(two.comments, std::vector<std::string>{"from somewhere"});
  EXPECT_DOUBLE_EQ(two.steps.at(2).min, 5.5);
  EXPECT_DOUBLE_EQ(two.steps.at(2).max, 5.5);
  EXPECT_TRUE(std::isnan(two.steps.at(3).max));
  const GoldenCurve band = read_golden_curve(write("band.txt", "1 6.0 6.25\n2 5.5 5.5\n"));
  EXPECT_TRUE(band.band);
  EXPECT_DOUBLE_EQ(band.steps.at(1).max, 6.25);
  EXPECT_EQ(band.text(), "1 6 6.25\n2 5.5 5.5\n");
  EXPECT_EQ(golden_number(6.028340339660645), "6.028340339660645");
  EXPECT_EQ(golden_number(1655.0), "1655");
  auto refused = [&](const std::string& text) {
    const std::string path = write("bad.txt", text);
    try {
      read_golden_curve(path);
      return std::string("read");
    } catch (const MetricsError& e) {
      std::string m = e.what();
      return m.replace(m.find(path), path.size(), "F");
    }
  };
  EXPECT_EQ(refused("1 6.0\n2 6.1 6.0\n"), "F:2: a band's min must not be above its max, got min 6.1, max 6.0");
  EXPECT_EQ(refused("1 6.0\n1 6.0\n"), "F:2: step 1 again (first on line 1)");
  EXPECT_EQ(refused("1 6.0abc\n"), "F:1: expected '<step> <value>' or '<step> <min> <max>', got '1 6.0abc'");
  EXPECT_EQ(refused("1 6.0 6.1 6.2\n"), "F:1: expected '<step> <value>' or '<step> <min> <max>', got '1 6.0 6.1 6.2'");
  EXPECT_EQ(refused("-1 6.0\n"), "F:1: expected '<step> <value>' or '<step> <min> <max>', got '-1 6.0'");
  EXPECT_EQ(refused("1 nan 6.0\n"), "F:1: a band's min must not be above its max, got min nan, max 6.0");
  EXPECT_EQ(refused("# only a comment\n"), "golden file F has no steps");
}

}  // namespace meshtest
