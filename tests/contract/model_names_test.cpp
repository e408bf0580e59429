// The model's names: paths join as LibTorch joins module names, and a path goes through a module
// only at whole names (the TP plan and the HF mapping rely on it).
#include <gtest/gtest.h>

#include "contract/model_names.h"

using namespace contract::model_names;

TEST(ModelNames, PathsJoinWithDotsAndLayersKeepTheirGlobalId) {
  EXPECT_EQ(path({kAttention, kWo}), "attention.wo");
  EXPECT_EQ(path({layer(7), kMoe, kRouter, kWeight}), "layers.7.moe.router.weight");
  EXPECT_EQ(path({}), "");
}

TEST(ModelNames, APathGoesThroughAModuleOnlyAtWholeNames) {
  const std::string wq = "layers.0.attention.wq.weight";
  EXPECT_TRUE(goes_through(wq, path({kAttention, kWq})));
  EXPECT_TRUE(goes_through(wq, kWq));
  EXPECT_TRUE(goes_through(wq, layer(0)));
  EXPECT_FALSE(goes_through(wq, "attention.w"));  // a prefix of a name is not the name
  EXPECT_FALSE(goes_through(wq, "tention.wq"));
  EXPECT_FALSE(goes_through("layers.0.attention_norm.weight", kAttention));
  EXPECT_FALSE(goes_through("layers.10.ffn_norm.weight", layer(1)));
  EXPECT_TRUE(goes_through("norm.weight", kNorm));
  EXPECT_FALSE(goes_through("layers.0.ffn_norm.weight", kNorm));
}
