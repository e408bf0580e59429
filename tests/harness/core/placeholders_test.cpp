// The one placeholder rule (core/placeholders.h): what a place fills now, keeps for later and
// refuses, in one form of message; and the run-time fill, in one pass.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/placeholders.h"

using namespace meshtest;

namespace {

std::vector<std::string> refused(const std::string& text, const PlaceholderPlace& place,
                                 std::string* filled = nullptr) {
  std::vector<std::string> out;
  const std::string f = fill_placeholders(text, place, [&](const std::string& m) { out.push_back(m); });
  if (filled) *filled = f;
  return out;
}

}  // namespace

TEST(Placeholders, APlaceFillsItsNowNamesKeepsItsLaterOnesAndRefusesTheRest) {
  const PlaceholderPlace command{
      "command", {{"mesh", "dp_shard=2"}, {"nproc", "2"}}, {"phase_dir"}, {{"model", "this phase has no model"}}, ""};
  std::string filled;
  EXPECT_TRUE(refused("--mesh={mesh} -n {nproc} --out {phase_dir} {not a placeholder}", command, &filled).empty());
  EXPECT_EQ(filled, "--mesh=dp_shard=2 -n 2 --out {phase_dir} {not a placeholder}");
  EXPECT_EQ(refused("{phase_dri}/x", command, &filled),
            std::vector<std::string>{"unknown placeholder {phase_dri} in command; did you mean {phase_dir}?"});
  EXPECT_EQ(filled, "{phase_dri}/x");  // kept as written, for the message's sake
  EXPECT_EQ(refused("{model}", command),
            std::vector<std::string>{"unknown placeholder {model} in command; this phase has no model"});
  EXPECT_EQ(refused("{a}{b}", command).size(), 2u);  // every one is named
}

TEST(Placeholders, EveryPlaceRefusesInTheSameForm) {
  const PlaceholderPlace outputs{
      "outputs.tokens", {}, {"case_dir", "phase_dir"}, {}, "outputs paths take {case_dir} and {phase_dir}"};
  EXPECT_EQ(
      refused("{case_dri}/gen.json", outputs),
      std::vector<std::string>{"unknown placeholder {case_dri} in outputs.tokens; outputs paths take {case_dir} and "
                               "{phase_dir}; did you mean {case_dir}?"});
  const PlaceholderPlace probe{"requires.command", {{"matrix_dir", "/m"}}, {}, {}, "a probe takes only {matrix_dir}"};
  std::string filled;
  EXPECT_EQ(
      refused("{matrix_dir}/probe.sh {case_dir}", probe, &filled),
      std::vector<std::string>{"unknown placeholder {case_dir} in requires.command; a probe takes only {matrix_dir}"});
  EXPECT_EQ(filled, "/m/probe.sh {case_dir}");
}

// A filled value is never read for placeholders again: a folder whose name holds "{phase_dir}"
// stays that folder.
TEST(Placeholders, TheRunTimeFillIsOnePass) {
  EXPECT_EQ(fill_run_time("{case_dir}/{phase_dir}/{other}", {{"case_dir", "/o/{phase_dir}"}, {"phase_dir", "/o/p"}}),
            "/o/{phase_dir}//o/p/{other}");
}
