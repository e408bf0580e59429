// The parts of an asynchronous save: the snapshot is a copy training cannot reach, and the
// background save reports its error once and never outlives its owner.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "components/async_save.h"

using namespace meshtrain;

TEST(HostSnapshot, IsAContiguousCopyInTheSavedDtypeThatTrainingCannotChange) {
  auto weight = torch::arange(12, torch::kFloat32).reshape({3, 4});
  auto column = weight.t();  // a strided view, as a parameter's shard may be
  const auto copies = host_snapshot({weight, column}, torch::kBFloat16);
  ASSERT_EQ(copies.size(), 2u);
  weight.mul_(-1);  // the optimizer's next step
  EXPECT_TRUE(copies[0].is_contiguous() && copies[1].is_contiguous());
  EXPECT_EQ(copies[0].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(copies[0], torch::arange(12, torch::kBFloat16).reshape({3, 4})));
  EXPECT_TRUE(torch::equal(copies[1], torch::arange(12, torch::kBFloat16).reshape({3, 4}).t()));
}

TEST(HostStaging, TheNextSnapshotReusesTheBuffersAndHoldsTheNewValues) {
  auto weight = torch::arange(12, torch::kFloat32).reshape({3, 4});
  HostStaging staging;
  const auto first = staging.snapshot({weight}, torch::kFloat32);
  const void* buffer = first[0].data_ptr();
  weight.mul_(-1);
  const auto second = staging.snapshot({weight}, torch::kFloat32);
  EXPECT_EQ(second[0].data_ptr(), buffer) << "the second save allocated again";
  EXPECT_TRUE(torch::equal(second[0], -torch::arange(12, torch::kFloat32).reshape({3, 4})));
  // Another shape or dtype is another buffer, never a copy into the wrong one.
  const auto other = staging.snapshot({weight.reshape({4, 3})}, torch::kBFloat16);
  EXPECT_EQ(other[0].sizes(), torch::IntArrayRef({4, 3}));
  EXPECT_EQ(other[0].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(other[0], -torch::arange(12, torch::kBFloat16).reshape({4, 3})));
}

TEST(BackgroundSave, WaitRethrowsTheSavesErrorOnceAndTheNextSaveRuns) {
  BackgroundSave save;
  save.start([](const std::atomic<bool>&) { throw std::runtime_error("checkpoint: writing 'x' failed: No space"); });
  EXPECT_THROW(
      {
        try {
          save.wait();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "checkpoint: writing 'x' failed: No space");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_NO_THROW(save.wait());  // reported once
  bool ran = false;
  save.start([&ran](const std::atomic<bool>&) { ran = true; });
  save.wait();
  EXPECT_TRUE(ran);
}

TEST(BackgroundSave, StartWaitsForTheSaveBeforeIt) {
  BackgroundSave save;
  std::atomic<int> running{0}, most{0};
  auto slow = [&](const std::atomic<bool>&) {
    most = std::max(most.load(), ++running);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    --running;
  };
  for (int i = 0; i < 3; ++i) save.start(slow);
  save.wait();
  EXPECT_EQ(most.load(), 1);
}

TEST(BackgroundSave, DestroyingItAbandonsASaveThatWaitsForOtherRanks) {
  std::atomic<bool> gave_up{false};
  {
    BackgroundSave save;
    save.start([&gave_up](const std::atomic<bool>& abandoned) {
      while (!abandoned) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a plan that never comes
      gave_up = true;
      throw std::runtime_error("abandoned");
    });
  }  // without the flag this would wait for ever
  EXPECT_TRUE(gave_up);
}
