// The safetensors reader on files written here byte by byte: a sharded save read through its
// index, an index that points outside its folder, and data bytes no tensor claims.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
void write_safetensors(const std::string& path, const std::vector<FloatTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
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
