// The trainer's one spelling of state-dict keys (train_state.h), which the harness's
// state_dict_keys checks and torchtitan's DCP names must agree with.
#include <gtest/gtest.h>

#include "train_state.h"

using namespace meshtrain;

TEST(TrainStateKeys, SpellTorchtitansNames) {
  EXPECT_EQ(state_keys::model("layers.0.attention.wq.weight"), "model.layers.0.attention.wq.weight");
  EXPECT_EQ(state_keys::optimizer("output.weight", "exp_avg"), "optimizer.state.output.weight.exp_avg");
  EXPECT_EQ(state_keys::optimizer("output.weight", "exp_avg_sq"), "optimizer.state.output.weight.exp_avg_sq");
  EXPECT_EQ(state_keys::dataloader(3), "dataloader.dp_rank_3");
  EXPECT_EQ(state_keys::kMoments, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

TEST(TrainStateKeys, ObjectsAreTheScheduleTheStateAndOneDataPositionPerDpRank) {
  EXPECT_EQ(state_keys::objects(1), (std::vector<std::string>{"lr_scheduler", "train_state", "dataloader.dp_rank_0"}));
  EXPECT_EQ(state_keys::objects(2).size(), 4u);
  EXPECT_EQ(state_keys::objects(2).back(), "dataloader.dp_rank_1");
}
