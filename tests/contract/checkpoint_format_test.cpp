// The checkpoint format both programs share (contract/checkpoint_format.h), without LibTorch:
// metadata errors name the file and the key, step folder names and key styles round-trip, and
// a parsed document writes back byte for byte.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "contract/checkpoint_format.h"
#include "contract/hash.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace contract;

namespace {

const std::string kPath = "/ck/step-3/.metadata";

// A [3, 2] float32 tensor in two row chunks and one object, as meshtrain writes them.
json sample_document() {
  json chunk0 = {{"offsets", {0, 0}}, {"sizes", {2, 2}},  {"file", "__0_0.distcp"}, {"byte_offset", 0},
                 {"byte_length", 16}, {"leaf_bytes", 64}, {"hash_offset", 16}};
  json chunk1 = {{"offsets", {2, 0}}, {"sizes", {1, 2}},  {"file", "__1_0.distcp"}, {"byte_offset", 0},
                 {"byte_length", 8},  {"leaf_bytes", 64}, {"hash_offset", 8}};
  return {
      {"format_version", 2},
      {"step", 3},
      {"writer_mesh", "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1"},
      {"key_style", "canonical"},
      {"keys",
       {{"model.w.weight", {{"kind", "tensor"}, {"dtype", "float32"}, {"shape", {3, 2}}, {"chunks", {chunk0, chunk1}}}},
        {"train_state", {{"kind", "object"}, {"value", {{"step", 3}}}}}}}};
}

// The error parse_metadata throws for `doc`, which must name every one of `parts`.
void expect_refused(const json& doc, std::initializer_list<std::string> parts) {
  try {
    metadata_from_json(doc, kPath);
  } catch (const CheckpointFormatError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "accepted: " << doc.dump();
}

TEST(CheckpointFormat, ParsesWhatTheWriterWritesAndWritesItBackUnchanged) {
  const json doc = sample_document();
  const CheckpointMetadata m = parse_metadata(doc.dump(1), kPath);
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.writer_mesh, "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1");
  ASSERT_EQ(m.keys.size(), 2u);
  const SavedKey& w = m.keys.at("model.w.weight");
  EXPECT_TRUE(w.is_tensor());
  EXPECT_EQ(w.shape, (std::vector<int64_t>{3, 2}));
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[1].file, "__1_0.distcp");
  EXPECT_TRUE(w.chunks[1].has_checksums);
  EXPECT_EQ(w.stored_bytes(), 24u);
  EXPECT_TRUE(m.keys.at("train_state").is_object());
  EXPECT_EQ(m.keys.at("train_state").value.at("step"), 3);
  EXPECT_EQ(to_json(m).dump(1), doc.dump(1));
}

TEST(CheckpointFormat, OptionalFieldsTakeTheirDefaults) {
  json doc = sample_document();
  doc.erase("step"), doc.erase("writer_mesh"), doc.erase("key_style");
  doc["keys"]["model.w.weight"]["chunks"][0].erase("leaf_bytes");
  const CheckpointMetadata m = metadata_from_json(doc, kPath);
  EXPECT_EQ(m.step, -1);
  EXPECT_EQ(m.key_style, "canonical");
  EXPECT_FALSE(m.keys.at("model.w.weight").chunks[0].has_checksums);
}

TEST(CheckpointFormat, ParseErrorsNameTheFileAndTheKey) {
  try {
    parse_metadata("{ not json", kPath);
    ADD_FAILURE() << "accepted garbage";
  } catch (const CheckpointFormatError& e) {
    EXPECT_NE(std::string(e.what()).find(kPath + ": not valid JSON"), std::string::npos) << e.what();
  }
  expect_refused(json::array(), {kPath, "no format_version"});
  json doc = sample_document();
  doc["format_version"] = 1;
  expect_refused(doc, {kPath, "format_version 1", "format 2"});
  doc = sample_document();
  doc.erase("keys");
  expect_refused(doc, {kPath, "no \"keys\" object"});
  doc = sample_document();
  doc["step"] = "three";
  expect_refused(doc, {kPath, "step \"three\" is not an integer"});

  auto damaged = [](const std::function<void(json&)>& damage) {
    json d = sample_document();
    damage(d["keys"]["model.w.weight"]);
    return d;
  };
  const std::string key = "key 'model.w.weight'";
  expect_refused(damaged([](json& k) { k.erase("dtype"); }), {kPath, key, "dtype"});
  expect_refused(damaged([](json& k) { k["shape"] = {3.5e20, 2}; }), {kPath, key, "dim", "not an integer"});
  expect_refused(damaged([](json& k) { k["shape"] = {-3, 2}; }), {kPath, key, "negative dim"});
  expect_refused(damaged([](json& k) { k["chunks"][0]["byte_offset"] = 1e30; }),
                 {kPath, key, "byte_offset", "not a non-negative integer"});
  expect_refused(damaged([](json& k) { k["chunks"][0]["leaf_bytes"] = -8; }), {kPath, key, "leaf_bytes -8"});
  expect_refused(damaged([](json& k) { k["chunks"][0]["file"] = "../x"; }), {kPath, key, "leaves the step folder"});
  expect_refused(damaged([](json& k) {
                   k["chunks"][1]["offsets"] = {1000, 0};
                 }),
                 {kPath, key, "chunk at offsets [1000, 0] sizes [1, 2] lies outside the [3, 2] tensor"});
  expect_refused(damaged([](json& k) { k["chunks"][1]["sizes"] = {1}; }), {kPath, key, "2 dims"});
}

TEST(CheckpointFormat, StepFolderNamesRoundTrip) {
  for (int64_t step : {0LL, 1LL, 10LL, 123456789012345678LL}) {
    EXPECT_EQ(parse_step_folder_name(step_folder_name(step)), step);
  }
  EXPECT_EQ(step_folder_name(10), "step-10");
  EXPECT_EQ(temp_step_folder_name(10), ".tmp-step-10");
  EXPECT_FALSE(parse_step_folder_name(temp_step_folder_name(10)));
  for (const char* not_a_step : {"step-", "step-1x", "step--1", "step-+1", "Step-1", "step-1234567890123456789", "x"})
    EXPECT_FALSE(parse_step_folder_name(not_a_step)) << not_a_step;
}

TEST(CheckpointFormat, StepFoldersCountOnlyWithMetadata) {
  char tmpl[] = "/tmp/contract-steps-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  for (int64_t s : {2, 10, 20}) fs::create_directories(dir + "/" + step_folder_name(s));
  fs::create_directories(dir + "/" + temp_step_folder_name(30));
  for (int64_t s : {2, 10}) std::ofstream(dir + "/" + step_folder_name(s) + "/.metadata") << "{}";
  const auto steps = list_step_folders(dir);
  EXPECT_EQ(steps, (std::map<int64_t, bool>{{2, true}, {10, true}, {20, false}}));
  EXPECT_EQ(latest_complete_step(dir), 10);
  EXPECT_FALSE(latest_complete_step(dir + "/none"));
  fs::remove_all(dir);
}

TEST(CheckpointFormat, KeyStylesRoundTrip) {
  EXPECT_EQ(parametrize_key("model.layers.0.attention.wq.weight"),
            "model.layers.0.attention.wq.parametrizations.weight.original");
  EXPECT_EQ(parametrize_key("optimizer.state.norm.weight.exp_avg"),
            "optimizer.state.norm.parametrizations.weight.original.exp_avg");
  for (const char* key : {"model.layers.0.attention.wq.weight", "optimizer.state.norm.weight.exp_avg_sq",
                          "model.output.bias", "train_state", "dataloader.dp_rank_0"}) {
    EXPECT_EQ(canonical_key(parametrize_key(key)), key);
  }
  EXPECT_EQ(parametrize_key("lr_scheduler"), "lr_scheduler");
  EXPECT_EQ(canonical_key("model.norm.weight"), "model.norm.weight");
}

TEST(CheckpointFormat, StateNamespaces) {
  for (const char* key :
       {"model.norm.weight", "optimizer.state.x", "lr_scheduler", "dataloader.dp_rank_1", "train_state"})
    EXPECT_TRUE(has_state_namespace(key)) << key;
  for (const char* key : {"tok_embeddings.weight", "models.x", ""}) EXPECT_FALSE(has_state_namespace(key)) << key;
}

TEST(CheckpointFormat, LeavesAndTheirChecksums) {
  EXPECT_EQ(leaf_bytes_for({65, 64}, 4), 64);     // tiny: 256-byte rows, 64-byte leaves
  EXPECT_EQ(leaf_bytes_for({8, 2048}, 4), 1024);  // 8 KiB rows, 1 KiB leaves
  EXPECT_EQ(leaf_bytes_for({1, 1 << 20}, 4), 4096);
  EXPECT_EQ(leaf_bytes_for({}, 4), 64);
  EXPECT_EQ(leaf_count(0, 64), 0u);
  EXPECT_EQ(leaf_count(65, 64), 2u);
  EXPECT_EQ(leaf_count(8, ~uint64_t{0}), 1u);  // a damaged leaf_bytes near 2^64 still checks one leaf
  const std::string data = "abcdefgh";
  EXPECT_EQ(leaf_checksum(data.data(), data.size()), mix64(data.data(), data.size()));
  EXPECT_EQ(dtype_bytes("float32"), 4);
  EXPECT_EQ(dtype_bytes("bfloat16"), 2);
  EXPECT_EQ(dtype_bytes("float64"), 0);
}

}  // namespace
