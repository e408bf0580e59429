// The checkpoint read without a job (CheckpointReader needs no process groups): what
// `meshtrain ckpt` and a run's initial load rely on. A one-rank Checkpointer writes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "components/checkpointer.h"

using namespace meshtrain;

namespace {

std::string fresh_folder(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meshtrain_reader_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

ParamLayout layout_of(const std::vector<int64_t>& shape, const std::vector<Split>& splits) {
  ParamLayout l;
  l.name = "w";
  l.global_shape = shape;
  l.splits = splits;
  l.chunk = local_chunk(shape, splits);
  return l;
}

}  // namespace

TEST(CheckpointReader, ReadsAnyPieceOfASavedTensorWithoutProcessGroups) {
  CheckpointConfig config;
  config.folder = fresh_folder("piece");
  const auto w = torch::arange(24, torch::kFloat32).view({6, 4});
  const ParamLayout whole = layout_of({6, 4}, {});
  {
    MeshGroups groups = join_mesh(LaunchEnv{}, MeshShape{}, Backend::kGloo, std::chrono::seconds(30));
    Checkpointer writer(config, groups, 0);
    writer.save(3, {{"model.w", &whole, w}}, {{"train_state", {{"step", 3}}}});
  }
  CheckpointReader reader(config);
  ASSERT_EQ(reader.latest_step(), std::optional<int64_t>(3));
  const ParamLayout columns = layout_of({6, 4}, {{1, 2, 1}});  // columns 2..3, as a tp rank holds them
  auto got = torch::zeros({6, 2});
  const auto objects = reader.load(3, {{"model.w", &columns, got}});
  EXPECT_TRUE(got.equal(w.narrow(1, 2, 2))) << got;
  EXPECT_EQ(objects.at("train_state").at("step"), 3);
  EXPECT_GT(reader.io().bytes_read, 0);
  std::filesystem::remove_all(config.folder);
}

TEST(CheckpointReader, AMissingKeyFailsInDcpsWords) {
  CheckpointConfig config;
  config.folder = fresh_folder("missing");
  const ParamLayout whole = layout_of({2}, {});
  {
    MeshGroups groups = join_mesh(LaunchEnv{}, MeshShape{}, Backend::kGloo, std::chrono::seconds(30));
    Checkpointer(config, groups, 0).save(1, {{"model.w", &whole, torch::ones({2})}}, nlohmann::json::object());
  }
  CheckpointReader reader(config);
  auto t = torch::zeros({2});
  try {
    reader.load(1, {{"model.v", &whole, t}});
    FAIL() << "loaded a key the checkpoint lacks";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "Missing key in checkpoint state_dict: model.v.");
  }
  std::filesystem::remove_all(config.folder);
}
