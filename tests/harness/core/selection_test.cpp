// Which cases `run` and `list` take (core/selection.h), and the repro line and Slurm options a
// run carries (run_matrix.h, core/run_options.h).
#include <gtest/gtest.h>

#include "core/run_options.h"
#include "core/selection.h"
#include "run_matrix.h"

namespace meshtest {
namespace {

std::vector<Suite> suites() {
  std::vector<Suite> s;
  s.push_back(
      load_suite_text("suite: s\n"
                      "cases:\n"
                      "  - {name: base, command: [t]}\n"
                      "  - {name: fsdp, command: [t], tags: [gpu], checks: [{loss_matches: {baseline: base}}]}\n"
                      "  - {name: tp, command: [t], tags: [gpu]}\n"
                      "  - {name: other, command: [t]}\n",
                      "m.yaml"));
  validate_suites(s);
  return s;
}

std::vector<std::string> ids(const std::vector<const Case*>& cases) {
  std::vector<std::string> out;
  for (const Case* c : cases) out.push_back(c->id);
  return out;
}

TEST(Selection, EveryFilterMustHoldAndTheBaselinesComeBackInMatrixOrder) {
  const auto s = suites();
  Selection by_tag;
  by_tag.tags = {"gpu"};
  EXPECT_EQ(ids(select_cases(s, by_tag)), (std::vector<std::string>{"s/base", "s/fsdp", "s/tp"}));
  by_tag.excludes = {"tp"};
  EXPECT_EQ(ids(select_cases(s, by_tag)), (std::vector<std::string>{"s/base", "s/fsdp"}));
  by_tag.keywords = {"oth"};  // a keyword no gpu case holds: nothing
  EXPECT_TRUE(select_cases(s, by_tag).empty());
  Selection none;
  EXPECT_EQ(select_cases(s, none).size(), 4u);
}

TEST(Selection, AnIdOrAShardThatNamesNothingIsAnError) {
  const auto s = suites();
  Selection wrong;
  wrong.ids = {"s/nope"};
  EXPECT_THROW(select_cases(s, wrong), std::invalid_argument);
  for (const char* shard : {"0/2", "3/2", "1-2", "1/2/3", "x"}) {
    Selection bad;
    bad.shard = shard;
    EXPECT_THROW(select_shard(s, bad, RunOptions{}, {}), std::invalid_argument) << shard;
  }
  Selection half;
  half.shard = "2/2";
  EXPECT_FALSE(select_shard(s, half, RunOptions{}, {}).empty());
}

TEST(Selection, TheReproLineCarriesEveryOptionThatChangesTheRun) {
  RunRequest r;
  r.selection.matrices = {"my matrix.yaml"};
  r.options.devices = 4;
  r.options.retries = 2;
  r.options.grace_s = 5;
  r.skip_tags = {"gpu=no GPU here"};
  r.meshtrain = "/opt/meshtrain";
  r.options.launcher = "slurm";
  r.options.slurm.max_pending = 3;
  r.options.slurm.partition = "a100";
  r.options.slurm.srun_args = {"--mpi=none"};
  EXPECT_EQ(
      repro_prefix("meshtest", r),
      "meshtest run 'my matrix.yaml' --backend gloo --ngpu 4 --grace 5.0 --retries 2 --skip-tag 'gpu=no GPU here' "
      "--meshtrain /opt/meshtrain --launcher slurm --gpus-per-node 8 --max-pending 3 --partition a100 "
      "--srun-arg=--mpi=none");
  RunRequest plain;
  plain.options.devices = 8;
  EXPECT_EQ(repro_prefix("./meshtest", plain), "./meshtest run --backend gloo --ngpu 8");
}

TEST(Selection, SlurmOptionsRoundTripThroughTheSummary) {
  SlurmOptions o;
  o.partition = "p";
  o.account = "acct";
  o.gpus_per_node = 4;
  o.time_limit_min = 30;
  o.max_pending = 2;
  o.srun_args = {"--exclusive"};
  const SlurmOptions back = SlurmOptions::from_json(o.to_json());
  EXPECT_EQ(back.to_args(), o.to_args());
  EXPECT_EQ(SlurmOptions::from_json(nlohmann::json::object()).to_args(), SlurmOptions{}.to_args());
}

}  // namespace
}  // namespace meshtest
