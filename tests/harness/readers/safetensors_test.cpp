// The safetensors reader on files written here byte by byte: a sharded save read through its
// index, an index that points outside its folder, and data bytes no tensor claims; the header's
// metadata in CheckpointView's about(), and the Hugging Face Trainer's checkpoint-<N> folders
// that CheckpointView chooses among.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "readers/checkpoint_view.h"
#include "readers/safetensors.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {

struct FloatTensor {
  std::string key;
  std::vector<float> values;
  uint64_t gap_before = 0;  // bytes of data no tensor claims, before this one
};

// One .safetensors file: the 8-byte little-endian header length, the JSON header, the data.
void write_safetensors(const std::string& path, const std::vector<FloatTensor>& tensors,
                       const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& t : tensors) {
    data.append(t.gap_before, '\0');
    const uint64_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
    header[t.key] = {{"dtype", "F32"}, {"shape", {t.values.size()}}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << text << data;
}

void write_index(const std::string& folder, const nlohmann::json& weight_map) {
  std::ofstream(folder + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
}

std::string error_of(const std::string& path) {
  try {
    safetensors::check_data_covered(safetensors::open(path));
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-safetensors-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

}  // namespace

TEST_F(Safetensors, AShardedSaveIsReadThroughItsIndex) {
  write_safetensors(dir_ + "/model-00001-of-00002.safetensors", {{"model.b", {1, 2}}, {"model.a", {3}}});
  write_safetensors(dir_ + "/model-00002-of-00002.safetensors", {{"lm_head.weight", {4, 5, 6}}});
  write_index(dir_, {{"model.a", "model-00001-of-00002.safetensors"},
                     {"model.b", "model-00001-of-00002.safetensors"},
                     {"lm_head.weight", "model-00002-of-00002.safetensors"}});
  const safetensors::Checkpoint c = safetensors::open(dir_);
  ASSERT_EQ(c.tensors.size(), 3u);
  EXPECT_EQ(c.tensors[0].key, "lm_head.weight");  // sorted by key, across shards
  EXPECT_EQ(safetensors::read(c.tensors[0]), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(c.tensors[1].key, "model.a");
  EXPECT_EQ(safetensors::read(c.tensors[2]), (std::vector<double>{1, 2}));
  EXPECT_EQ(c.files.size(), 2u);
  EXPECT_EQ(error_of(dir_), "");
}

TEST_F(Safetensors, AnIndexNamingAShardOutsideItsFolderIsRefused) {
  write_safetensors(dir_ + "/model.safetensors", {{"w", {1}}});
  for (const char* outside : {"../model.safetensors", "sub/model.safetensors", ".."}) {
    write_index(dir_, {{"w", outside}});
    EXPECT_NE(error_of(dir_).find("weight_map['w'] names '" + std::string(outside) + "', outside the folder"),
              std::string::npos)
        << error_of(dir_);
  }
}

TEST_F(Safetensors, DataBytesNoTensorClaimsAreNamed) {
  write_safetensors(dir_ + "/model.safetensors", {{"a", {1, 2}}, {"b", {3}, 4}});
  EXPECT_NE(error_of(dir_).find("model.safetensors: data bytes 8..12 belong to no tensor"), std::string::npos)
      << error_of(dir_);
}

// The header's __metadata__ is shown as one line, "metadata: k=v, k=v": what the writer
// recorded about the save, the first thing a person reads of a checkpoint; files() counts the
// file's data bytes, not its header.
TEST_F(Safetensors, AboutListsTheHeadersMetadataAndFilesCountTheData) {
  write_safetensors(dir_ + "/model.safetensors", {{"w", {1, 2}}}, {{"format", "pt"}, {"step", "4"}});
  const CheckpointView view = CheckpointView::open(dir_ + "/model.safetensors");
  EXPECT_EQ(view.about(), "metadata: format=pt, step=4");
  EXPECT_EQ(view.files(), (std::map<std::string, uint64_t>{{"model.safetensors", 8}}));  // its data: 2 floats
}

// In a folder of the Trainer's checkpoint-<N> folders, the newest with trainer_state.json is
// read, or the one asked for, checkpoint-0 included. Only checkpoint-<digits> folders of at most
// 15 digits count ("checkpoint-", "checkpoint-final", 16 digits and files are left out), and a
// step not there is refused with the folders listed, the unfinished ones marked.
TEST_F(Safetensors, TheTrainersCheckpointFoldersNewestCompleteOrTheOneAskedFor) {
  auto folder = [&](const std::string& name, bool complete) {
    fs::create_directories(dir_ + "/" + name);
    write_safetensors(dir_ + "/" + name + "/model.safetensors", {{"w", {1, 2}}});
    if (complete) std::ofstream(dir_ + "/" + name + "/trainer_state.json") << "{}";
  };
  folder("checkpoint-0", true);
  folder("checkpoint-3", true);
  folder("checkpoint-5", false);
  folder("checkpoint-100000000000000", false);  // 15 digits
  folder("checkpoint-1000000000000000", true);  // 16 digits: not a step
  folder("checkpoint-", true);
  folder("checkpoint-final", true);
  std::ofstream(dir_ + "/checkpoint-7") << "not a folder";
  EXPECT_EQ(CheckpointView::open(dir_).step_dir(), dir_ + "/checkpoint-3");
  EXPECT_EQ(CheckpointView::open(dir_, 0).step_dir(), dir_ + "/checkpoint-0");
  EXPECT_EQ(CheckpointView::open(dir_, 5).step_dir(), dir_ + "/checkpoint-5");
  std::string error;
  try {
    CheckpointView::open(dir_, 9);
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, dir_ +
                       ": no checkpoint-9 folder (found: checkpoint-0, checkpoint-3, checkpoint-5 (no "
                       "trainer_state.json), checkpoint-100000000000000 (no trainer_state.json))");
}
