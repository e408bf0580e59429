// The one spelling of state-dict keys (contract/state_keys.h), which meshtrain writes, the
// harness's state_dict_keys checks read and torchtitan's DCP names must agree with.
#include <gtest/gtest.h>

#include "contract/state_keys.h"

using namespace contract;

TEST(StateKeys, SpellTorchtitansNames) {
  EXPECT_EQ(state_keys::model("layers.0.attention.wq.weight"), "model.layers.0.attention.wq.weight");
  EXPECT_EQ(state_keys::optimizer("output.weight", "exp_avg"), "optimizer.state.output.weight.exp_avg");
  EXPECT_EQ(state_keys::optimizer("output.weight", "exp_avg_sq"), "optimizer.state.output.weight.exp_avg_sq");
  EXPECT_EQ(state_keys::dataloader(3), "dataloader.dp_rank_3");
  EXPECT_EQ(state_keys::kMoments, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

TEST(StateKeys, ObjectsAreTheScheduleTheStateAndOneDataPositionPerDpRank) {
  EXPECT_EQ(state_keys::objects(1), (std::vector<std::string>{"lr_scheduler", "train_state", "dataloader.dp_rank_0"}));
  EXPECT_EQ(state_keys::objects(2).size(), 4u);
  EXPECT_EQ(state_keys::objects(2).back(), "dataloader.dp_rank_1");
}

TEST(StateKeys, AModelKeyGivesBackItsModulePathAndNoOtherKeyDoes) {
  EXPECT_EQ(state_keys::model_fqn(state_keys::model("layers.0.attention.wq.weight")), "layers.0.attention.wq.weight");
  EXPECT_EQ(state_keys::model_fqn("model.norm.weight"), "norm.weight");
  EXPECT_EQ(state_keys::model_fqn(state_keys::optimizer("norm.weight", "exp_avg")), std::nullopt);
  EXPECT_EQ(state_keys::model_fqn(state_keys::kTrainState), std::nullopt);
  EXPECT_EQ(state_keys::model_fqn("model"), std::nullopt);  // the prefix is "model." with its dot
  EXPECT_EQ(state_keys::model_fqn("modelx.w"), std::nullopt);
}
