// Metrics from foreign trainers: torchtitan's console line, a user's log pattern, the Hugging
// Face Trainer's trainer_state.json, and TensorBoard event files (built here by a tiny protobuf + TFRecord writer, and, when present,
// files made by PyTorch's SummaryWriter with their values as TensorBoard's reader returned them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "harness/judge/checks_fixture.h"
#include "readers/log_lines.h"
#include "readers/log_metrics.h"
#include "readers/tensorboard.h"
#include "readers/trainer_state.h"
#include "harness/readers/tensorboard_events.h"
#include "test_paths.h"

namespace meshtest {
namespace {

namespace fs = std::filesystem;
using Warnings = std::vector<std::string>;
using namespace tensorboard_events;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool any_contains(const Warnings& warnings, const std::string& part) {
  for (const auto& w : warnings)
    if (contains(w, part)) return true;
  return false;
}

// ---- torchtitan's line ---------------------------------------------------------------

MetricSeries titan(const std::string& text, Warnings* warnings = nullptr) {
  std::istringstream in(text);
  return parse_torchtitan_log(in, "train.log", warnings);
}

// The three lines of foreign-trainers.md section 1, as torchtitan PRs quote them (colours stripped).
const char* kReferenceLines =
    "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319  memory:  "
    "9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%\n"
    "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: "
    "66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%\n"
    "[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  tps: "
    "5,856  tflops: 339.16  mfu: 34.29%\n";

// Mutant: a memory field without its share of the device (`memory: 9.46GiB`, as a CPU run or an
// older torchtitan prints it) refused, dropping the step's memory figure.
TEST(TorchtitanLog, AMemoryFieldWithoutItsShareIsRead) {
  Warnings warnings;
  MetricSeries s = titan("step:  3  loss:  7.5000  grad_norm:  1.2500  memory:  9.46GiB  tps: 7,282\n", &warnings);
  ASSERT_EQ(s.count(3), 1u);
  EXPECT_DOUBLE_EQ(s.at(3).at("loss"), 7.5);
  EXPECT_DOUBLE_EQ(s.at(3).at("memory_gib"), 9.46);
  EXPECT_EQ(s.at(3).count("memory_pct"), 0u);
}

TEST(TorchtitanLog, ReadsTheReferenceLines) {
  Warnings warnings;
  MetricSeries s = titan(kReferenceLines, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(s.size(), 3u);
  const auto& step14 = s.at(14);
  EXPECT_DOUBLE_EQ(step14.at("loss"), 3.24405);
  EXPECT_DOUBLE_EQ(step14.at("grad_norm"), 0.8319);
  EXPECT_DOUBLE_EQ(step14.at("memory_gib"), 9.46);
  EXPECT_DOUBLE_EQ(step14.at("memory_pct"), 64.99);
  EXPECT_DOUBLE_EQ(step14.at("tps"), 7282);
  EXPECT_DOUBLE_EQ(step14.at("tflops"), 0.52);
  EXPECT_DOUBLE_EQ(step14.at("mfu_pct"), 0.17);
  EXPECT_DOUBLE_EQ(s.at(4).at("loss"), 7.62585);
  EXPECT_DOUBLE_EQ(s.at(4).at("grad_norm"), 26.625);
  EXPECT_DOUBLE_EQ(s.at(4).at("tps"), 10050);
  EXPECT_DOUBLE_EQ(s.at(200).at("loss"), 6.1384);  // 7.4f, before grad_norm was logged
  EXPECT_EQ(s.at(200).count("grad_norm"), 0u);
  EXPECT_DOUBLE_EQ(s.at(200).at("tflops"), 339.16);
}

TEST(TorchtitanLog, ReadsTheLineWithTorchtitansColours) {
  // metrics.py's f-string with utils.py's escapes; the reset is \033[39m, orange/turquoise are 24-bit.
  std::string line =
      "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - \033[31mstep: 14  \033[32mloss:  3.24405  "
      "\033[38;2;180;60;0mgrad_norm:  0.8319  \033[38;2;54;234;195mmemory:  9.46GiB(64.99%)  "
      "\033[34mtps: 7,282  \033[36mtflops: 1,234.56  \033[35mmfu: N/A\033[39m\r\n";
  Warnings warnings;
  MetricSeries s = titan(line, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(s.count(14), 1u);
  EXPECT_DOUBLE_EQ(s[14].at("loss"), 3.24405);
  EXPECT_DOUBLE_EQ(s[14].at("grad_norm"), 0.8319);
  EXPECT_DOUBLE_EQ(s[14].at("tps"), 7282);
  EXPECT_DOUBLE_EQ(s[14].at("tflops"), 1234.56);
  EXPECT_EQ(s[14].count("mfu_pct"), 0u);  // N/A (FP8) is absent, not an error
}

TEST(TorchtitanLog, ValidationLinesGoUnderTheValidationNamesOfEverySource) {
  MetricSeries s = titan(
      "[titan] 2026-02-24 19:46:17,508 - root - INFO - step: 10  loss:  2.12345  grad_norm:  1.0000\n"
      "[titan] 2026-02-24 19:46:18,000 - root - INFO - validate step: 10  loss: 2.5000  memory:  1.00GiB(2.00%)  "
      "tps: 1,000\n");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_DOUBLE_EQ(s[10].at("loss"), 2.12345);  // not replaced by the validation loss
  EXPECT_DOUBLE_EQ(s[10].at("validation_loss"), 2.5);
  EXPECT_DOUBLE_EQ(s[10].at("validation_tps"), 1000);
  EXPECT_DOUBLE_EQ(s[10].at("validation_memory_gib"), 1.0);
}

TEST(TorchtitanLog, NanInfAndMissingSteps) {
  MetricSeries s = titan(
      "step:  1  loss:      nan  grad_norm:     inf\n"
      "some other line\n"
      "step: 10  loss: -inf  grad_norm: 0.5\n"
      "step: 20  loss:  1.00000\n");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(std::isnan(s[1].at("loss")));
  EXPECT_EQ(s[1].at("grad_norm"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(s[10].at("loss"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(s.count(2), 0u);
}

TEST(TorchtitanLog, LaterDuplicateStepWinsWithWarning) {
  Warnings warnings;
  MetricSeries s = titan(
      "step: 5  loss: 3.0  grad_norm: 9.0\n"
      "step: 6  loss: 2.9\n"
      "[titan] 2026-01-01 00:00:00,000 - root - INFO - Resuming from step 5\n"
      "step: 5  loss: 3.1\n",
      &warnings);
  EXPECT_DOUBLE_EQ(s[5].at("loss"), 3.1);
  EXPECT_EQ(s[5].count("grad_norm"), 0u);  // the later line wins whole
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "train.log:4:")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], "line 1")) << warnings[0];
}

TEST(TorchtitanLog, UnparsableNumberIsLeftOutWithWarning) {
  Warnings warnings;
  MetricSeries s = titan("step: 3  loss: 2.5  grad_norm: 0.1.2  tps: 12,34\nstep: x  loss: 1\n", &warnings);
  EXPECT_DOUBLE_EQ(s[3].at("loss"), 2.5);
  EXPECT_EQ(s[3].count("grad_norm"), 0u);
  EXPECT_EQ(s[3].count("tps"), 0u);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_TRUE(any_contains(warnings, "grad_norm '0.1.2'"));
  EXPECT_TRUE(any_contains(warnings, "train.log:2:"));
}

// A memory field whose share is not a number is warned about, as any unparsable field is.
TEST(TorchtitanLog, AMemoryShareThatIsNoNumberIsWarnedAbout) {
  Warnings warnings;
  MetricSeries s = titan("step: 3  loss: 2.5  memory: 12.5GiB(x%)\n", &warnings);
  EXPECT_DOUBLE_EQ(s[3].at("loss"), 2.5);
  EXPECT_TRUE(any_contains(warnings, "memory '12.5GiB(x%)'")) << (warnings.empty() ? "" : warnings[0]);
}

TEST(TorchtitanLog, OtherLevelsAndMessagesAreNotSteps) {
  MetricSeries s = titan(
      "[titan] 2026-01-01 00:00:00,000 - root - WARNING - step: 7  loss: 1.0\n"
      "[titan] 2026-01-01 00:00:00,000 - root - INFO - Training starts at step 1\n"
      "[rank3]:something step: 8 loss: 1.0\n");
  EXPECT_TRUE(s.empty());
}

TEST(TorchtitanLog, HostileInputNeverCrashes) {
  std::mt19937 random(7);
  std::string garbage;
  for (int i = 0; i < 200000; ++i) garbage.push_back(static_cast<char>(random()));
  garbage += "\x1b[";  // an escape cut at the end
  EXPECT_NO_THROW(titan(garbage));
  std::string fragments =
      "[rank\n[rank0]:\n[titan]\nstep:\nstep: \nvalidate step:\nstep: 1 loss:\nstep: 2 :\n"
      "step: 3 loss: 1,\nstep: 4 memory: GiB(\nstep: 5 memory: 1GiB(%)\nstep: 1e400\n\x1b";
  EXPECT_NO_THROW(titan(fragments));
  Warnings warnings;
  std::string long_line(1 << 20, 'x');
  MetricSeries s = titan("step: 1  loss: 1.0\n" + long_line + "\nstep: 2  loss: 2.0\n", &warnings);
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(any_contains(warnings, "train.log:2: line of 1048576 bytes skipped")) << warnings.front();
}

TEST(TorchtitanLog, WarningsAreBounded) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += "step: 1  loss: 1.0\n";
  Warnings warnings;
  titan(text, &warnings);
  EXPECT_EQ(warnings.size(), kMaxLogWarnings + 1);
  EXPECT_TRUE(contains(warnings.back(), "449 more warnings")) << warnings.back();
}

TEST(TorchtitanLog, RankFilterKeepsOneRanksLines) {
  // LOG_RANK=0,1 under PP: the first stage (rank 0) logs a loss of -1, the last stage the loss.
  std::string two_ranks =
      "[rank0]:[titan] 2026-01-01 00:00:00,000 - root - INFO - step:  1  loss: -1.00000  grad_norm:  0.5000\n"
      "[rank1]:[titan] 2026-01-01 00:00:00,000 - root - INFO - step:  1  loss:  8.04910  grad_norm:  0.5000\n";
  std::istringstream in(two_ranks);
  Warnings warnings;
  MetricSeries s = parse_torchtitan_log(in, "train.log", &warnings, 1);
  EXPECT_DOUBLE_EQ(s.at(1).at("loss"), 8.0491);
  EXPECT_TRUE(warnings.empty());
  MetricSeries all = titan(two_ranks, &warnings);  // every rank: the later line wins, with a warning
  EXPECT_DOUBLE_EQ(all.at(1).at("loss"), 8.0491);
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(TorchtitanLog, MissingFileIsAnError) {
  try {
    read_torchtitan_log("/nonexistent/train.log", nullptr);
    FAIL();
  } catch (const MetricsError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read /nonexistent/train.log");
  }
}

TEST(LogNumbers, SeparatorsSpecialsAndJunk) {
  double v = 0;
  EXPECT_TRUE(parse_log_number("7,282", v) && v == 7282);
  EXPECT_TRUE(parse_log_number("1,234,567.5", v) && v == 1234567.5);
  EXPECT_TRUE(parse_log_number("-0.5e-3", v) && v == -0.5e-3);
  EXPECT_TRUE(parse_log_number(".5", v) && v == 0.5);
  EXPECT_TRUE(parse_log_number("NaN", v) && std::isnan(v));
  EXPECT_TRUE(parse_log_number("-inf", v) && v == -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(parse_log_number("1e999", v) && v == std::numeric_limits<double>::infinity());
  for (const char* bad : {"", "N/A", "12,34", ",123", "1,2345", "1234,567", ".", "1e", "1.2.3", "0x10", "1 2", "-"})
    EXPECT_FALSE(parse_log_number(bad, v)) << bad;
}

TEST(LogNumbers, StripAnsi) {
  EXPECT_EQ(strip_ansi("\x1b[38;2;180;60;0mgrad\x1b[39m \x1b[1;31mX\x1b[0m"), "grad X");
  EXPECT_EQ(strip_ansi("a\x1b[38;2"), "a");
  EXPECT_EQ(strip_ansi("a\x1b"), "a");
  EXPECT_EQ(strip_ansi("a\x1b(Bb"), "ab");  // ESC, intermediate, final
  EXPECT_EQ(strip_ansi("a\x1b]0;title\x07"
                       "b"),
            "ab");                                   // OSC to BEL
  EXPECT_EQ(strip_ansi("a\x1b]8;;x\x1b\\b"), "ab");  // OSC to ST
  // The ends of each byte range: CSI's final bytes 0x40 ('@') to 0x7E ('~'), intermediates 0x20 to 0x2F.
  EXPECT_EQ(strip_ansi("a\x1b[2~b"), "ab");
  EXPECT_EQ(strip_ansi("a\x1b[4@b"), "ab");
  EXPECT_EQ(strip_ansi("a\x1b /Bb"), "ab");
}

// A step is a whole, finite number a double holds exactly; anything else is no step.
TEST(LogNumbers, AStepIsAWholeFiniteNumber) {
  long long step = -1;
  EXPECT_TRUE(log_lines::parse_step("12", step) && step == 12);
  EXPECT_TRUE(log_lines::parse_step("1,000", step) && step == 1000);
  for (const char* bad : {"x", "2.5", "inf", "nan", "1e300", "-1e17", ""})
    EXPECT_FALSE(log_lines::parse_step(bad, step)) << bad;
}

// ---- the user's pattern --------------------------------------------------------------

MetricSeries patterned(const std::string& pattern, const std::string& text, Warnings* warnings = nullptr) {
  std::istringstream in(text);
  return parse_log_with_pattern(in, "job.out", LogPattern(pattern), warnings);
}

TEST(LogPattern, PythonAndJavaScriptNamedGroups) {
  LogPattern pattern(R"(it (?P<step>[\d,]+) .*loss=(?<loss>\S+)(?: gn=(?P<grad_norm>\S+))?)");
  EXPECT_EQ(pattern.names(), (std::vector<std::string>{"step", "loss", "grad_norm"}));
  std::istringstream in("\x1b[32mit 1,000 | loss=2.5 gn=0.25\x1b[0m\nit 1001 | loss=nan\nnoise\n");
  MetricSeries s = parse_log_with_pattern(in, "job.out", pattern, nullptr);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s[1000].at("loss"), 2.5);
  EXPECT_DOUBLE_EQ(s[1000].at("grad_norm"), 0.25);
  EXPECT_TRUE(std::isnan(s[1001].at("loss")));
  EXPECT_EQ(s[1001].count("grad_norm"), 0u);  // the optional group did not take part
}

TEST(LogPattern, ParensInClassesEscapesAndNonCapturingGroupsAreNotCounted) {
  // Every `(` here but the named ones and `(b)` is literal, non-capturing or a lookahead.
  LogPattern pattern(
      R"(^\((?:a|(b))\) [(](?P<step>\d+)[)] [^()\]]*(?=l)loss\[(?<loss>[\d.]+)\] [[:alpha:](]+ (?P<lr>[\d.e-]+)$)");
  EXPECT_EQ(pattern.names(), (std::vector<std::string>{"step", "loss", "lr"}));
  MetricSeries s = patterned(pattern.pattern(), "(b) (42) xy loss[1.5] ab(c 3e-4\n");
  ASSERT_EQ(s.count(42), 1u);
  EXPECT_DOUBLE_EQ(s[42].at("loss"), 1.5);
  EXPECT_DOUBLE_EQ(s[42].at("lr"), 3e-4);
}

TEST(LogPattern, LeadingIgnoreCaseFlag) {
  MetricSeries s = patterned(R"((?i)STEP (?P<step>\d+) LOSS (?P<loss>\S+))", "Step 3 Loss 0.75\n");
  EXPECT_DOUBLE_EQ(s.at(3).at("loss"), 0.75);
}

TEST(LogPattern, NamedBackReferences) {
  MetricSeries s =
      patterned(R"((?P<q>["'])(?P<step>\d+)(?P=q) loss (?P<loss>\S+) \k<q>)", "'7' loss 0.5 '\n\"8' loss 1 '\n");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_DOUBLE_EQ(s[7].at("loss"), 0.5);
  EXPECT_FALSE(s[7].count("q"));  // `'` is not a number: left out (with a warning)
}

TEST(LogPattern, BadPatternsNameThePattern) {
  for (const char* bad :
       {R"(loss=(?P<loss>\S+))", R"((?P<step>\d+)", R"((?P<step>\d+) (?P<step>\d+))", R"((?P<1x>\d+) (?P<step>\d+))",
        R"((?P<step>\d+)[)", R"((?P<step>\d+) (?P<lo-ss>\S+))", R"((?P<step>\d+) (?P<lo ss>\S+))",
        R"((?P<step>\d+) (?P=nope))", R"((?P<step\d+))", "(?P<step>\\d+)\\"}) {
    try {
      LogPattern pattern(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const MetricsError& e) {
      EXPECT_TRUE(contains(e.what(), std::string("'") + bad + "'")) << e.what();
    }
  }
}

TEST(LogPattern, LongLinesSkipDuplicatesWinAndJunkWarns) {
  // 60 KiB between step and loss: `.*` recurses per character in libstdc++; this must not overflow.
  std::string long_ok = "step 1 " + std::string(60 * 1024, 'x') + " loss=1.5";
  std::string too_long = "step 2 " + std::string(kMaxLogLineBytes, 'x') + " loss=2.5";
  Warnings warnings;
  MetricSeries s = patterned(R"(step (?P<step>\d+).*loss=(?P<loss>\S+))",
                             long_ok + "\n" + too_long + "\nstep 3 loss=abc\nstep 1 loss=N/A\n", &warnings);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[1].empty());  // line 4 re-logged step 1 and wins; N/A is absent
  EXPECT_TRUE(s[3].empty());
  EXPECT_TRUE(any_contains(warnings, "job.out:2: line of"));
  EXPECT_TRUE(any_contains(warnings, "job.out:3: loss 'abc' is not a number"));
  EXPECT_TRUE(any_contains(warnings, "job.out:4: step 1 logged again (before at line 1)"));
}

TEST(LogPattern, GarbageNeverCrashes) {
  std::mt19937 random(11);
  std::string garbage;
  for (int i = 0; i < 300000; ++i) garbage.push_back(static_cast<char>(random() % 7 == 0 ? '\n' : random()));
  EXPECT_NO_THROW(patterned(R"((?P<step>-?\d+)\D*(?P<loss>[-+.\deE]+))", garbage));
}

// ---- TensorBoard (events written by tensorboard_events.h) ----------------------------

MetricSeries parse(const std::string& bytes, Warnings* warnings = nullptr,
                   const std::map<std::string, std::string>& tags = default_tensorboard_tags()) {
  return parse_tfrecord_events(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "events.out.tfevents.1",
                               tags, warnings);
}

// A file as torchtitan writes it: file_version, then per step a few scalars.
std::string torchtitan_file(double loss_offset = 0) {
  std::string f = tfrecord(file_version_event());
  for (int step = 1; step <= 3; ++step)
    f += tfrecord(event(step, {simple_value("loss_metrics/global_avg_loss", float(10 - step + loss_offset)),
                               simple_value("grad_norm", float(step) / 4), simple_value("tflops", 1.5f)}));
  return f;
}

TEST(TensorBoard, Crc32cKnownValue) {
  const char* digits = "123456789";
  EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t*>(digits), 9), 0xE3069283u);
}

TEST(TensorBoard, SimpleValuesUnderTheDefaultTagMap) {
  Warnings warnings;
  MetricSeries s = parse(torchtitan_file(), &warnings);
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].at("loss"), 9.0);
  EXPECT_EQ(s[2].at("grad_norm"), 0.5);
  EXPECT_EQ(s[3].count("tflops"), 0u);  // not mapped
  MetricSeries all = parse(torchtitan_file(), nullptr, {});
  EXPECT_EQ(all[3].at("tflops"), 1.5);
  EXPECT_EQ(all[3].at("loss_metrics/global_avg_loss"), 7.0);
}

// Mutants: the matrix's tag map (`outputs.metrics.tags`) read backwards (tag for metric), or
// ignored for the defaults: a run whose loss and grad norm are under tags of its own must be read
// through them, and the default tag's values, present too, must not stand in for them.
TEST_F(Checks, TensorBoardTagOverridesReadTheLossAndGradNormThroughTheirOwnTags) {
  load(
      "  - name: ref\n"
      "  - name: tb\n"
      "    outputs: {metrics: {from: tensorboard, path: tb, tags: {loss: train/lm_loss, grad_norm: train/gnorm}}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}, {loss_matches: {baseline: ref, metric: grad_norm, exact: true}}]\n");
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":9.5,\"grad_norm\":0.25}\n{\"step\":2,\"loss\":8.25,\"grad_norm\":0.5}\n");
  std::string events = tfrecord(file_version_event());
  for (int step = 1; step <= 2; ++step)
    events += tfrecord(
        event(step, {simple_value("train/lm_loss", step == 1 ? 9.5f : 8.25f), simple_value("train/gnorm", step * 0.25f),
                     simple_value("loss_metrics/global_avg_loss", 100.0f)}));
  fs::create_directories(dir_ + "/tb/train/tb");
  write("tb/train/tb/events.out.tfevents.1700000000.host.1.0", events);
  run(1, "loss_matches");
  int judged = 0;
  for (const auto& check : outcomes_[1].checks) {
    EXPECT_TRUE(check.passed) << check.kind << ": " << check.message;
    judged += check.kind == "loss_matches";
  }
  EXPECT_EQ(judged, 2) << "the loss and the grad norm";
  // The tags swapped: the loss read is the grad norm, and the check says so with numbers.
  load(
      "  - name: ref\n"
      "  - name: tb\n"
      "    outputs: {metrics: {from: tensorboard, path: tb, tags: {loss: train/gnorm, grad_norm: train/lm_loss}}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":9.5,\"grad_norm\":0.25}\n{\"step\":2,\"loss\":8.25,\"grad_norm\":0.5}\n");
  fs::create_directories(dir_ + "/tb/train/tb");
  write("tb/train/tb/events.out.tfevents.1700000000.host.1.0", events);
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 1: loss 0.25"), std::string::npos) << r.message;
}

TEST(TensorBoard, TensorScalarsOfEveryDtype) {
  std::string scalar_shape = bytes_field(2, "");  // rank 0
  std::string one_by_one = bytes_field(2, bytes_field(2, varint_field(1, 1)) + bytes_field(2, varint_field(1, 1)));
  std::string packed_float = bytes_field(5, le(0x3fc00000, 4));  // 1.5f, packed
  std::string f = tfrecord(file_version_event());
  f += tfrecord(event(0, {tensor_value("f32", varint_field(1, 1) + packed_float)}));  // step 0 is left out
  f += tfrecord(event(1, {tensor_value("f32", varint_field(1, 1) + scalar_shape + float_field(5, 0.1f)),
                          tensor_value("f64", varint_field(1, 2) + one_by_one + key(6, 1) + double_bits(0.1)),
                          tensor_value("f64c", varint_field(1, 2) + bytes_field(4, double_bits(-2.25))),
                          tensor_value("i64", varint_field(1, 9) + varint_field(10, static_cast<uint64_t>(-5))),
                          tensor_value("i32", varint_field(1, 3) + bytes_field(7, varint(7))),
                          tensor_value("f16", varint_field(1, 19) + varint_field(13, 0x3e00)),        // 1.5
                          tensor_value("bf16", varint_field(1, 14) + bytes_field(4, le(0xc0a0, 2))),  // -5
                          tensor_value("empty", varint_field(1, 1)),                                  // zeros
                          tensor_value("text", varint_field(1, 7) + bytes_field(8, "hello")),
                          tensor_value("vector", varint_field(1, 1) + bytes_field(5, le(0, 8))),
                          bytes_field(1, "image") + bytes_field(4, "png")}));
  Warnings warnings;
  MetricSeries s = parse(f, &warnings, {});
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s[0].at("f32"), 1.5);
  EXPECT_EQ(s[1].at("f32"), double(0.1f));  // float32 widened, not rounded to 0.1
  EXPECT_EQ(s[1].at("f64"), 0.1);
  EXPECT_EQ(s[1].at("f64c"), -2.25);
  EXPECT_EQ(s[1].at("i64"), -5.0);
  EXPECT_EQ(s[1].at("i32"), 7.0);
  EXPECT_EQ(s[1].at("f16"), 1.5);
  EXPECT_EQ(s[1].at("bf16"), -5.0);
  EXPECT_EQ(s[1].at("empty"), 0.0);
  EXPECT_EQ(s[1].size(), 8u);  // vector, text and image passed over
  Warnings asked;
  parse(f, &asked, {{"vector", "v"}, {"text", "t"}});
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_TRUE(contains(asked[0], "tag 'text' at step 1: tensor of dtype 7 is not a number")) << asked[0];
  EXPECT_TRUE(contains(asked[1], "tag 'vector' at step 1: tensor of one element holds 2 values")) << asked[1];
}

// A file's warnings stop at 20, and the last line counts the rest.
TEST(TensorBoard, WarningsAreBoundedAndTheRestCounted) {
  std::string f = tfrecord(file_version_event());
  for (int step = 1; step <= 25; ++step)
    f += tfrecord(event(step, {tensor_value("text", varint_field(1, 7) + bytes_field(8, "hello"))}));
  Warnings warnings;
  parse(f, &warnings, {{"text", "t"}});
  ASSERT_EQ(warnings.size(), 21u);
  EXPECT_TRUE(contains(warnings[20], ": 5 more warnings not shown")) << warnings[20];
}

// A field number of 0 is no protobuf: the frame is malformed, not read as a value.
TEST(TensorBoard, AFieldNumberOfZeroIsMalformed) {
  const std::string f = tfrecord(file_version_event()) + tfrecord(key(0, 0) + varint(1));
  try {
    parse(f);
    FAIL() << "a field number 0 was read";
  } catch (const MetricsError& e) {
    EXPECT_TRUE(contains(e.what(), "record 2 at byte")) << e.what();
  }
}

TEST(TensorBoard, NonFiniteAndDuplicateStepsLastWins) {
  std::string f = tfrecord(event(4, {simple_value("grad_norm", std::numeric_limits<float>::quiet_NaN()),
                                     simple_value("loss_metrics/global_avg_loss", 1.0f)}));
  f += tfrecord(event(4, {simple_value("loss_metrics/global_avg_loss", -std::numeric_limits<float>::infinity())}));
  Warnings warnings;
  MetricSeries s = parse(f, &warnings);
  EXPECT_TRUE(std::isnan(s[4].at("grad_norm")));
  EXPECT_EQ(s[4].at("loss"), -std::numeric_limits<double>::infinity());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "1 (step, metric) pairs written again")) << warnings[0];
}

// The warning names the first repeat, not the last (a mutant named the later ones).
TEST(TensorBoard, ARepeatedStepWarningNamesTheFirstRepeat) {
  std::string f = tfrecord(event(4, {simple_value("loss_metrics/global_avg_loss", 1.0f)}));
  f += tfrecord(event(5, {simple_value("loss_metrics/global_avg_loss", 2.0f)}));
  f += tfrecord(event(4, {simple_value("loss_metrics/global_avg_loss", 3.0f)}));
  f += tfrecord(event(5, {simple_value("loss_metrics/global_avg_loss", 4.0f)}));
  Warnings warnings;
  MetricSeries s = parse(f, &warnings);
  EXPECT_EQ(s[4].at("loss"), 3.0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "2 (step, metric) pairs written again")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], "(first: step 4 'loss')")) << warnings[0];
}

TEST(TensorBoard, FlippedDataByteNamesFileRecordAndOffset) {
  std::string f = torchtitan_file();
  size_t second = tfrecord(file_version_event()).size();
  f[second + 12 + 5] ^= 0x01;
  try {
    parse(f);
    FAIL();
  } catch (const MetricsError& e) {
    EXPECT_TRUE(
        contains(e.what(), "events.out.tfevents.1: record 2 at byte " + std::to_string(second) + ": data CRC mismatch"))
        << e.what();
  }
}

TEST(TensorBoard, FlippedLengthByteIsAnError) {
  std::string f = torchtitan_file();
  f[0] ^= 0x40;
  try {
    parse(f);
    FAIL();
  } catch (const MetricsError& e) {
    EXPECT_TRUE(contains(e.what(), "record 1 at byte 0: length CRC mismatch")) << e.what();
  }
}

TEST(TensorBoard, TruncatedTailWarnsAndKeepsWhatCameBefore) {
  std::string whole = torchtitan_file();
  for (size_t cut : {size_t(1), size_t(5), size_t(13), size_t(30)}) {
    Warnings warnings;
    MetricSeries s = parse(whole.substr(0, whole.size() - cut), &warnings);
    EXPECT_EQ(s.size(), 2u) << cut;
    ASSERT_EQ(warnings.size(), 1u) << cut;
    EXPECT_TRUE(contains(warnings[0], "record 4 at byte")) << warnings[0];
    EXPECT_TRUE(contains(warnings[0], "cut short")) << warnings[0];
  }
}

TEST(TensorBoard, MalformedProtobufInAGoodFrameIsAnError) {
  std::string f = tfrecord(file_version_event()) + tfrecord(key(5, 2) + varint(100) + "short");
  try {
    parse(f);
    FAIL();
  } catch (const MetricsError& e) {
    EXPECT_TRUE(contains(e.what(), "record 2 at byte")) << e.what();
    EXPECT_TRUE(contains(e.what(), "malformed Event")) << e.what();
  }
}

TEST(TensorBoard, RandomBytesAndRandomEventsNeverCrash) {
  std::mt19937 random(3);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(random() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    // Half the time framed properly, so the protobuf reader sees the junk.
    if (i % 2) bytes = tfrecord(bytes) + tfrecord(event(1, {tensor_value("x", bytes)}));
    try {
      parse(bytes, nullptr, {});
    } catch (const MetricsError&) {
    }
  }
}

// A temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("metric_sources_test." + std::to_string(getpid()) + "." +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TensorBoard, LatestRunFolderIsRead) {
  TempDir tmp;
  fs::path tb = tmp.path() / "tb";
  write(tb / "20260101-0000" / "events.out.tfevents.1700000000.host.1.0", torchtitan_file(100));
  write(tb / "20260102-0930" / "events.out.tfevents.1700000100.host.2.0", torchtitan_file(0));
  // A second writer in the same minute: its file sorts later, its values win.
  write(tb / "20260102-0930" / "events.out.tfevents.1700000160.host.3.0",
        tfrecord(event(3, {simple_value("loss_metrics/global_avg_loss", 0.5f)})));
  write(tb / "20260102-0930" / "not-an-event-file.txt", "junk");
  EXPECT_EQ(fs::path(tensorboard_run_folder(tb.string())).filename(), "20260102-0930");
  Warnings warnings;
  MetricSeries s = read_tensorboard_scalars(tb.string(), default_tensorboard_tags(), &warnings);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].at("loss"), 9.0);
  EXPECT_EQ(s[3].at("loss"), 0.5);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "1700000160.host.3.0: 1 (step, metric) pairs written again by this file"))
      << warnings[0];
  // The run folder itself reads the same.
  EXPECT_EQ(read_tensorboard_scalars((tb / "20260102-0930").string(), default_tensorboard_tags(), nullptr), s);
}

// A file one launch wrote from `start`: file_version, then step k's loss `loss(k)` one second apart.
std::string launch_file(double start, long long first, long long last, float (*loss)(long long)) {
  std::string f = tfrecord(file_version_event_at(start));
  for (long long step = first; step <= last; ++step)
    f += tfrecord(
        event_at(start + double(step - first + 1), step, {simple_value("loss_metrics/global_avg_loss", loss(step))}));
  return f;
}
float first_launch_loss(long long step) { return float(step); }
float second_launch_loss(long long step) { return float(100 + step); }

// torchtitan's resume within the minute it started: both launches' files in one run folder. The
// second resumed from step 3's checkpoint, so it wrote steps 4 and 5 again.
TEST(TensorBoard, AWindowKeepsTheEventsItsLaunchWrote) {
  TempDir tmp;
  const fs::path run = tmp.path() / "tb" / "20261202-1506";
  const double t1 = 1.7e9, t2 = 1.7e9 + 60;
  write(run / "events.out.tfevents.1700000000.host.10.0", launch_file(t1, 1, 5, first_launch_loss));
  write(run / "events.out.tfevents.1700000060.host.11.0", launch_file(t2, 4, 8, second_launch_loss));
  const std::string tb = (tmp.path() / "tb").string();
  auto steps = [](const MetricSeries& s) {
    std::vector<long long> out;
    for (const auto& [step, values] : s) out.push_back(step);
    return out;
  };

  // Without a window: both files, the later one's values winning (what meshtest read before).
  MetricSeries all = read_tensorboard_scalars(tb, default_tensorboard_tags(), nullptr);
  EXPECT_EQ(steps(all), (std::vector<long long>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(all[4].at("loss"), 104.0);

  Warnings warnings;
  MetricSeries first = read_tensorboard_scalars(tb, default_tensorboard_tags(), &warnings, TimeWindow{t1, t1 + 10});
  EXPECT_EQ(steps(first), (std::vector<long long>{1, 2, 3, 4, 5}));
  EXPECT_EQ(first[4].at("loss"), 4.0);
  EXPECT_EQ(first[5].at("loss"), 5.0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0],
                       "host.11.0: 5 events written outside this launch (wall time 1700000000.000 to "
                       "1700000010.000) left out"))
      << warnings[0];

  MetricSeries second = read_tensorboard_scalars(tb, default_tensorboard_tags(), nullptr, TimeWindow{t2, t2 + 10});
  EXPECT_EQ(steps(second), (std::vector<long long>{4, 5, 6, 7, 8}));
  EXPECT_EQ(second[4].at("loss"), 104.0);

  // Both ends are inside: an event at the window's edge is kept.
  EXPECT_EQ(steps(read_tensorboard_scalars(tb, default_tensorboard_tags(), nullptr, TimeWindow{t1 + 2, t1 + 4})),
            (std::vector<long long>{2, 3, 4}));
  // A window no event lies in reads nothing, and says why.
  Warnings none_warnings;
  EXPECT_TRUE(read_tensorboard_scalars(tb, default_tensorboard_tags(), &none_warnings, TimeWindow{1, 2}).empty());
  EXPECT_EQ(none_warnings.size(), 2u);

  // An event without a wall time cannot be placed: it is kept, whatever the window.
  write(run / "events.out.tfevents.1700000120.host.12.0",
        tfrecord(event_at(0, 42, {simple_value("loss_metrics/global_avg_loss", 0.5f)})));
  EXPECT_EQ(read_tensorboard_scalars(tb, default_tensorboard_tags(), nullptr, TimeWindow{t1, t1 + 10}).count(42), 1u);
}

// Launches in different minutes: each window reads the run folder its launch wrote into.
TEST(TensorBoard, AWindowPicksTheRunFolderItsLaunchWroteInto) {
  TempDir tmp;
  const fs::path tb = tmp.path() / "tb";
  const double t1 = 1.7e9, t2 = 1.7e9 + 60;
  write(tb / "20261202-1506" / "events.out.tfevents.1700000000.host.10.0", launch_file(t1, 1, 5, first_launch_loss));
  write(tb / "20261202-1507" / "events.out.tfevents.1700000060.host.11.0", launch_file(t2, 6, 10, second_launch_loss));
  write(tb / "20261202-1508" / "events.out.tfevents.1700000120.host.12.0", "damaged: not a record");
  EXPECT_EQ(fs::path(tensorboard_run_folder(tb.string(), TimeWindow{t1, t1 + 10})).filename(), "20261202-1506");
  EXPECT_EQ(fs::path(tensorboard_run_folder(tb.string(), TimeWindow{t2, t2 + 10})).filename(), "20261202-1507");
  // Without a window, or when no folder holds an event inside it: the latest by name.
  EXPECT_EQ(fs::path(tensorboard_run_folder(tb.string())).filename(), "20261202-1508");
  EXPECT_EQ(fs::path(tensorboard_run_folder(tb.string(), TimeWindow{1, 2})).filename(), "20261202-1508");
  MetricSeries first =
      read_tensorboard_scalars(tb.string(), default_tensorboard_tags(), nullptr, TimeWindow{t1, t1 + 10});
  ASSERT_EQ(first.size(), 5u);
  EXPECT_EQ(first.begin()->first, 1);
  EXPECT_EQ(first.rbegin()->second.at("loss"), 5.0);
}

TEST(TensorBoard, FoldersWithoutEventFilesAreErrors) {
  TempDir tmp;
  EXPECT_THROW(read_tensorboard_scalars((tmp.path() / "absent").string(), {}, nullptr), MetricsError);
  EXPECT_THROW(read_tensorboard_scalars(tmp.path().string(), {}, nullptr), MetricsError);
  write(tmp.path() / "20260101-0000" / "rank_0" / "events.out.tfevents.1", torchtitan_file());
  try {
    read_tensorboard_scalars(tmp.path().string(), {}, nullptr);
    FAIL();
  } catch (const MetricsError& e) {
    EXPECT_TRUE(contains(e.what(), "20260101-0000: no events.out.tfevents.* files (subfolders: rank_0")) << e.what();
  }
}

// Files written by torch.utils.tensorboard.SummaryWriter (tools/fixtures/make_tb_fixtures.py),
// with every scalar as TensorBoard's own reader returned it.
TEST(TensorBoard, MatchesTensorBoardsReaderOnFilesMadeByPyTorch) {
  fs::path made = fs::path(MESHTEST_SOURCE_DIR) / "tests" / "fixtures" / "tb-made";
  if (!fs::exists(made / "expected.json")) GTEST_SKIP() << made << " not made yet (tools/fixtures/make_tb_fixtures.py)";
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(made / "expected.json"));
  std::string tb = (made / "tb").string();
  EXPECT_EQ(fs::path(tensorboard_run_folder(tb)).filename().string(), expected.at("run").get<std::string>());
  MetricSeries got = read_tensorboard_scalars(tb, {}, nullptr);
  size_t compared = 0;
  for (const auto& [tag, points] : expected.at("scalars").items()) {
    std::map<long long, double> want;  // the last value of a step wins, as in the reader
    for (const auto& point : points) {
      const auto& v = point.at(1);
      double value = v.is_string() ? (v == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                                      : v == "inf" ? std::numeric_limits<double>::infinity()
                                                   : -std::numeric_limits<double>::infinity())
                                   : v.get<double>();
      want[point.at(0).get<long long>()] = value;
    }
    for (const auto& [step, value] : want) {
      ASSERT_TRUE(got.count(step) && got[step].count(tag)) << tag << " at step " << step;
      double mine = got[step][tag];
      if (std::isnan(value))
        EXPECT_TRUE(std::isnan(mine)) << tag << " at step " << step;
      else
        EXPECT_EQ(mine, value) << tag << " at step " << step;
      ++compared;
    }
  }
  size_t mine = 0;
  for (const auto& [step, metrics] : got) mine += metrics.size();
  EXPECT_EQ(mine, compared) << "scalars the C++ reader found that TensorBoard's did not";
  EXPECT_GT(compared, 0u);
}

// ---- the Hugging Face Trainer's trainer_state.json ----------------------------------

// log_history read per step (the closing train_runtime entry left out, eval_loss as the
// validation loss), from the newest checkpoint-<N> when the folder holds no trainer_state.json;
// a NaN loss the Trainer wrote bare is caught; a tolerance under the 4-decimal rounding of the
// loss is said in the failure; a file without log_history is refused by name.
TEST_F(Checks, TrainerStateJsonIsReadAndItsRoundingIsSaidInTheVerdict) {
  const std::string state = R"({"global_step": 2, "log_history": [
    {"epoch": 0.5, "grad_norm": 1.25, "learning_rate": 5e-05, "loss": 9.5012, "step": 1},
    {"epoch": 1.0, "grad_norm": 0.75, "learning_rate": 2.5e-05, "loss": 8.2504, "step": 2},
    {"epoch": 1.0, "eval_loss": 8.4, "step": 2},
    {"epoch": 1.0, "step": 2, "total_flos": 1.0, "train_loss": 8.87, "train_runtime": 1.5}]})";
  load(
      "  - name: ref\n"
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    checks: [{loss_matches: {baseline: ref, rtol: 0, atol: 1.0e-6}}, "
      "{loss_matches: {baseline: ref, metric: grad_norm, exact: true}}]\n");
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":9.50123,\"grad_norm\":1.25}\n"
        "{\"step\":2,\"loss\":8.25042,\"grad_norm\":0.75}\n");
  fs::create_directories(dir_ + "/hf/train/checkpoint-1");
  fs::create_directories(dir_ + "/hf/train/checkpoint-2");
  write("hf/train/checkpoint-1/trainer_state.json", R"({"log_history": []})");
  write("hf/train/checkpoint-2/trainer_state.json", state);
  run(1, "loss_matches");
  const auto& checks = outcomes_[1].checks;
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_FALSE(checks[1].passed);
  EXPECT_NE(checks[1].message.find("step 1: loss 9.5012 in phase train vs 9.50123"), std::string::npos)
      << checks[1].message;
  EXPECT_NE(checks[1].message.find("loss is logged rounded to 1.00e-04 (trainer_state.json), so a tolerance under "
                                   "that judges the rounding, not the run"),
            std::string::npos)
      << checks[1].message;
  EXPECT_TRUE(checks[2].passed) << checks[2].message;  // grad_norm is logged unrounded

  const MetricSeries series = read_trainer_state(dir_ + "/hf/train");
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series.at(2).at("validation_loss"), 8.4);
  EXPECT_EQ(series.at(2).at("lr"), 2.5e-05);
  EXPECT_EQ(series.at(2).at("loss"), 8.2504);  // not train_loss, the closing average

  write("nan.json", R"({"log_history": [{"loss": NaN, "grad_norm": Infinity, "step": 1, "note": "NaN"}]})");
  const MetricSeries nan = read_trainer_state(dir_ + "/nan.json");
  EXPECT_TRUE(std::isnan(nan.at(1).at("loss")));
  EXPECT_TRUE(std::isinf(nan.at(1).at("grad_norm")));
  load("  - name: hf\n    outputs: {metrics: {from: hf-trainer-state, path: nan.json}}\n    checks: [loss_finite]\n");
  fs::create_directories(dir_ + "/hf/train");
  write("hf/train/nan.json", R"({"log_history": [{"loss": NaN, "step": 1}]})");
  EXPECT_EQ(run(0, "loss_finite").message, "phase train: loss is nan at step 1");

  // A resumed phase keeps the log history of its checkpoint: its own steps are those after it.
  load(
      "  - name: ref\n"
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state}}\n"
      "    phases:\n"
      "      - {name: save}\n"
      "      - {name: resume, options: {resume_from_checkpoint: \"{case_dir}/save\"}}\n"
      "    checks: [{resume_matches: {phase: resume, baseline: ref, atol: 1.0e-4}}]\n");
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":9.5}\n{\"step\":2,\"loss\":8.25}\n"
        "{\"step\":3,\"loss\":7.5}\n{\"step\":4,\"loss\":7.0}\n");
  fs::create_directories(dir_ + "/hf/save/checkpoint-2");
  const std::string two = R"({"loss": 9.5, "step": 1}, {"loss": 8.25, "step": 2})";
  write("hf/save/checkpoint-2/trainer_state.json", "{\"global_step\": 2, \"log_history\": [" + two + "]}");
  write("hf/resume/trainer_state.json",
        "{\"global_step\": 4, \"log_history\": [" + two + R"(, {"loss": 7.5, "step": 3}, {"loss": 7.0, "step": 4}]})");
  const CheckResult resumed = run(1, "resume_matches");
  EXPECT_TRUE(resumed.passed) << resumed.message;
  ASSERT_EQ(resumed.series.size(), 2u);
  EXPECT_EQ(resumed.series[0].points.front().first, 3);  // steps 1-2 are the checkpoint's

  write("bare.json", R"({"global_step": 3})");
  try {
    read_trainer_state(dir_ + "/bare.json");
    ADD_FAILURE() << "a trainer_state.json without log_history was read";
  } catch (const MetricsError& e) {
    EXPECT_NE(std::string(e.what()).find("bare.json: has no log_history list"), std::string::npos) << e.what();
  }
}

// The trainer_state.json the real Trainer wrote (transformers 5.17, tests/fixtures/hf-made): every
// step's loss, grad_norm and learning rate, full floats (5.17 does not round the loss), so a loss
// check against it says nothing of rounding; a copy with its log_history cut is refused by name.
TEST_F(Checks, TrainerStateFromTheRealTrainer) {
  const fs::path made = fs::path(MESHTEST_SOURCE_DIR) / "tests" / "fixtures" / "hf-made" / "trainer_state.json";
  const MetricSeries series = read_trainer_state(made.string());
  ASSERT_EQ(series.size(), 8u);
  EXPECT_EQ(series.begin()->first, 1);
  EXPECT_DOUBLE_EQ(series.at(1).at("loss"), 5.554424285888672);
  EXPECT_DOUBLE_EQ(series.at(1).at("grad_norm"), 0.8436499834060669);
  EXPECT_EQ(series.at(1).at("lr"), 0.0);  // warmup starts at 0
  EXPECT_EQ(series.at(8).count("loss"), 1u);
  std::ifstream in(made);
  std::stringstream text;
  text << in.rdbuf();
  load(
      "  - name: ref\n"
      "  - name: hf\n"
      "    outputs: {metrics: {from: hf-trainer-state, path: real.json}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}]\n");
  std::string jsonl;
  for (const auto& [step, m] : series)
    jsonl += "{\"step\":" + std::to_string(step) +
             ",\"loss\":" + (step == 3 ? "5.5" : nlohmann::json(m.at("loss")).dump()) + "}\n";
  write("ref/train/metrics.jsonl", jsonl);
  write("hf/train/real.json", text.str());
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("step 3: loss 5.544407 in phase train vs 5.5"), std::string::npos) << r.message;
  EXPECT_EQ(r.message.find("rounded"), std::string::npos) << r.message;  // full floats: no rounding to blame

  std::string cut = text.str();
  cut.replace(cut.find("\"log_history\""), 13, "\"log_hist0ry\"");
  write("cut.json", cut);
  try {
    read_trainer_state(dir_ + "/cut.json");
    ADD_FAILURE() << "a trainer_state.json without its log_history was read";
  } catch (const MetricsError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.json: has no log_history list"), std::string::npos) << e.what();
  }
}
// Megatron (`from: megatron`, the megatron adapter's): its TensorBoard tags when the folder has a
// loss, else the last rank's iteration line; when neither has one, the message says what each
// held and that Megatron could not write TensorBoard.
TEST_F(Checks, MegatronCurvesComeFromTensorBoardElseTheLastRanksLine) {
  const std::string cases =
      "  - name: ref\n"
      "  - name: mg\n"
      "    outputs: {metrics: {from: megatron}}\n"
      "    checks: [{loss_matches: {baseline: ref, exact: true}}, {loss_matches: {baseline: ref, metric: grad_norm, "
      "exact: true}}]\n";
  const std::string ref =
      "{\"step\":1,\"loss\":10.5,\"grad_norm\":2.5}\n{\"step\":2,\"loss\":9.25,\"grad_norm\":1.5}\n";
  // TensorBoard, as Megatron's last rank writes it (`lm loss`, `grad-norm`, ...); the log is ignored.
  load(cases);
  write("ref/train/metrics.jsonl", ref);
  std::string events = tfrecord(file_version_event());
  for (int step = 1; step <= 2; ++step)
    events += tfrecord(event(step, {simple_value("lm loss", step == 1 ? 10.5f : 9.25f),
                                    simple_value("grad-norm", step == 1 ? 2.5f : 1.5f), simple_value("num-zeros", 7)}));
  fs::create_directories(dir_ + "/mg/train/tensorboard");
  write("mg/train/tensorboard/events.out.tfevents.1700000000.host.1.0", events);
  write("mg/train/rank1.log", " iteration        1/       2 | lm loss: 1.000000E+00 | grad norm: 1.000 |\n");
  run(1, "loss_matches");
  for (const auto& check : outcomes_[1].checks) EXPECT_TRUE(check.passed) << check.kind << ": " << check.message;
  // No events: the line of the last rank that left a log (rank1.log of ranks 0 and 1).
  fs::remove_all(dir_ + "/mg");
  load(cases);
  write("ref/train/metrics.jsonl", ref);
  write("mg/train/rank0.log", "nothing from rank 0\n");
  write("mg/train/rank1.log",
        " iteration        1/       2 | lm loss: 1.050000E+01 | grad norm: 2.500 |\n"
        " iteration        2/       2 | lm loss: 9.250000E+00 | grad norm: 1.500 |\n");
  run(1, "loss_matches");
  for (const auto& check : outcomes_[1].checks) EXPECT_TRUE(check.passed) << check.kind << ": " << check.message;
  // The line prints the grad norm to 3 decimals: a failure finer than that says it judged the rounding.
  fs::remove_all(dir_ + "/mg");
  load(cases);
  write("ref/train/metrics.jsonl",
        "{\"step\":1,\"loss\":10.5,\"grad_norm\":2.5004}\n{\"step\":2,\"loss\":9.25,\"grad_norm\":1.5}\n");
  write("mg/train/rank0.log",
        " iteration        1/       2 | lm loss: 1.050000E+01 | grad norm: 2.500 |\n"
        " iteration        2/       2 | lm loss: 9.250000E+00 | grad norm: 1.500 |\n");
  run(1, "loss_matches");
  std::vector<CheckResult> matches;
  for (const auto& check : outcomes_[1].checks)
    if (check.kind == "loss_matches") matches.push_back(check);
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_TRUE(matches[0].passed) << matches[0].message;
  EXPECT_FALSE(matches[1].passed);
  EXPECT_NE(matches[1].message.find("grad_norm is logged rounded to 1.00e-03 (Megatron's iteration line, 3 decimals), "
                                    "so a tolerance under that judges the rounding"),
            std::string::npos)
      << matches[1].message;
  // Neither: Megatron's own warning is quoted.
  fs::remove_all(dir_ + "/mg");
  load(cases);
  write("ref/train/metrics.jsonl", ref);
  write("mg/train/rank1.log",
        "WARNING: TensorBoard writing requested but is not available (are you using PyTorch 1.1.0 or later?), no "
        "TensorBoard logs will be written.\n");
  const CheckResult r = run(1, "loss_matches");
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("no loss values in Megatron's TensorBoard scalars in tensorboard, else its log line in the "
                           "last rank's log"),
            std::string::npos)
      << r.message << "\n"
      << r.details;
  EXPECT_NE(r.details.find("Megatron said: TensorBoard writing requested but is not available"), std::string::npos)
      << r.details;
}
}  // namespace
}  // namespace meshtest
