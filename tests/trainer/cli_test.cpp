// meshtrain as a user runs it: real processes, real files.
#include <gtest/gtest.h>

#include "run_meshtrain.h"

using namespace meshtrain_test;

namespace {

std::vector<std::string> train_args(const fs::path& dump, int steps) {
  return {"train",  "--model",       "tiny",        "--steps",   std::to_string(steps),  "--seed",
          "42",     "--dump-folder", dump.string(), "--backend", MESHTRAIN_TEST_BACKEND, "--deterministic",
          "--quiet"};
}

// A user error: non-zero exit, exactly one line on stderr that says what is wrong.
void expect_one_line_error(const Result& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("meshtrain: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << r.err;
}

}  // namespace

TEST(MeshtrainCli, SameConfigTwiceGivesBitwiseIdenticalLosses) {
  auto a = fresh_dir("det_a"), b = fresh_dir("det_b");
  ASSERT_EQ(meshtrain(train_args(a, 30)).exit_code, 0);
  ASSERT_EQ(meshtrain(train_args(b, 30)).exit_code, 0);
  auto ma = metrics(a), mb = metrics(b);
  ASSERT_EQ(ma.size(), 30u);
  ASSERT_EQ(mb.size(), 30u);
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  EXPECT_EQ(json::parse(slurp(a / "param_digest.json")), json::parse(slurp(b / "param_digest.json")));
}

TEST(MeshtrainCli, TinyLearnsOver200Steps) {
  auto dump = fresh_dir("learn");
  auto r = meshtrain(train_args(dump, 200));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = metrics(dump);
  ASSERT_EQ(m.size(), 200u);
  const double first = m.front()["loss"], last = m.back()["loss"];
  EXPECT_LE(last, 0.6 * first) << "step 1 loss " << first << ", step 200 loss " << last;
}

TEST(MeshtrainCli, GradientAccumulationMatchesOneLargeBatch) {
  auto big = fresh_dir("accum_big"), acc = fresh_dir("accum_4x");
  auto big_args = train_args(big, 5);
  big_args.insert(big_args.end(), {"--local-batch-size", "8"});
  auto acc_args = train_args(acc, 5);
  acc_args.insert(acc_args.end(), {"--local-batch-size", "2", "--global-batch-size", "8"});
  ASSERT_EQ(meshtrain(big_args).exit_code, 0);
  ASSERT_EQ(meshtrain(acc_args).exit_code, 0);
  auto mb = metrics(big), ma = metrics(acc);
  ASSERT_EQ(mb.size(), 5u);
  ASSERT_EQ(ma.size(), 5u);
  for (size_t i = 0; i < mb.size(); ++i) {
    const double lb = mb[i]["loss"], la = ma[i]["loss"];
    EXPECT_NEAR(la, lb, 1e-5 * lb) << "step " << i + 1;
    const double gb = mb[i]["grad_norm"], ga = ma[i]["grad_norm"];
    EXPECT_NEAR(ga, gb, 1e-5 * gb) << "step " << i + 1;
    EXPECT_EQ(ma[i]["tokens"], 8 * 64);
  }
}

TEST(MeshtrainCli, WritesTheHarnessContractFiles) {
  auto dump = fresh_dir("outputs");
  auto r = meshtrain(train_args(dump, 3));
  ASSERT_EQ(r.exit_code, 0) << r.err;

  auto row = metrics(dump).front();
  for (const char* field :
       {"step", "loss", "grad_norm", "lr", "tokens", "step_time_s", "tokens_per_s", "host_peak_rss_bytes"})
    EXPECT_TRUE(row.contains(field)) << field;

  auto keys = json::parse(slurp(dump / "state_dict_keys.json"))["keys"];
  EXPECT_EQ(keys["model.tok_embeddings.weight"]["shape"], json({258, 64}));
  EXPECT_EQ(keys["model.layers.1.feed_forward.w2.weight"]["shape"], json({64, 192}));
  EXPECT_EQ(keys["model.layers.0.attention.wk.weight"]["shape"], json({32, 64}));  // 2 kv heads x 16
  EXPECT_EQ(keys["model.output.weight"]["dtype"], "float32");
  EXPECT_EQ(keys["optimizer.state.norm.weight.exp_avg_sq"]["shape"], json({64}));
  EXPECT_EQ(keys["dataloader.dp_rank_0"]["kind"], "object");
  EXPECT_EQ(keys["train_state"]["kind"], "object");

  auto digest = json::parse(slurp(dump / "param_digest.json"));
  EXPECT_EQ(digest["step"], 3);
  EXPECT_EQ(digest["params"]["model.norm.weight"]["numel"], 64);
  int model_keys = 0;
  for (auto& [k, v] : keys.items()) model_keys += k.rfind("model.", 0) == 0;
  EXPECT_EQ(static_cast<int>(digest["params"].size()), model_keys);

  auto rank = json::parse(slurp(dump / "rank0.json"));
  EXPECT_EQ(rank["world_size"], 1);
  const int64_t params = 131648;  // tiny's parameter count, float32
  EXPECT_EQ(rank["param_bytes"], params * 4);
  EXPECT_EQ(rank["grad_bytes"], params * 4);
  EXPECT_EQ(rank["optimizer_bytes"], params * 8);
}

TEST(MeshtrainCli, PrintsALossTable) {
  auto dump = fresh_dir("table");
  auto r = meshtrain({"train", "--steps", "2", "--dump-folder", dump.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loss"), std::string::npos);
  EXPECT_NE(r.out.find("     2 "), std::string::npos) << r.out;
}

TEST(MeshtrainCli, HelpDocumentsTheFlags) {
  auto r = meshtrain({"train", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--steps", "--seed", "--model", "--dump-folder", "--local-batch-size", "--global-batch-size",
                           "--seq-len", "--backend"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

TEST(MeshtrainCli, AFailingRankRecordsItsErrorWhereTheLauncherAsks) {
  auto dir = fresh_dir("record");
  const std::string file = (dir / "error_rank0.json").string();
  const Result r = meshtrain({"train", "--steps", "-1", "--dump-folder", (dir / "dump").string()},
                             {{"TORCHELASTIC_ERROR_FILE", file}});
  EXPECT_EQ(r.exit_code, 1);
  const auto record = nlohmann::json::parse(slurp(file));
  EXPECT_EQ(record["message"]["message"], "meshtrain: error: --steps must be >= 0");
  EXPECT_TRUE(record["message"]["extraInfo"].contains("timestamp")) << record.dump();
}

TEST(MeshtrainCli, BadInputGetsOneLineErrors) {
  auto dump = fresh_dir("bad");
  expect_one_line_error(meshtrain({"train", "--bogus", "1"}), "--bogus");
  expect_one_line_error(meshtrain({"train", "--steps", "ten"}), "--steps");
  expect_one_line_error(
      meshtrain({"train", "--model", "huge", "--dump-folder", dump.string()}),
      "unknown model flavor 'huge' (known: tiny, tiny_uneven, tiny_moe, debugmodel, debugmodel_moe, 1B, 1B_moe, 8B_short)");
  expect_one_line_error(meshtrain({"train", "--seq-len", "0", "--dump-folder", dump.string()}),
                        "seq_len must be positive");
  expect_one_line_error(meshtrain({"train", "--backend", "mpi", "--dump-folder", dump.string()}),
                        "unknown backend 'mpi'");
  expect_one_line_error(meshtrain({"train", "--global-batch-size", "12", "--dump-folder", dump.string()}),
                        "not a multiple of local batch");
  expect_one_line_error(meshtrain({"train", "--corpus", "/nonexistent.txt", "--dump-folder", dump.string()}),
                        "cannot read corpus '/nonexistent.txt'");
  // A file where a folder should be: fails for root too, unlike permission bits.
  std::ofstream(dump / "a_file") << "x";
  expect_one_line_error(meshtrain({"train", "--dump-folder", (dump / "a_file" / "sub").string()}),
                        "cannot create dump folder");
  expect_one_line_error(meshtrain({"train", "--dump-folder", dump.string()}, {{"RANK", "3"}, {"WORLD_SIZE", "2"}}),
                        "RANK=3 is not below WORLD_SIZE=2");
  expect_one_line_error(
      meshtrain({"train", "--mesh", "dp_shard=3", "--dump-folder", dump.string()}),
      "--mesh 'dp_shard=3' has 3 ranks (pp=1,dp_replicate=1,dp_shard=3,cp=1,tp=1) but WORLD_SIZE is 1");
  expect_one_line_error(meshtrain({"train", "--mesh", "dp=2", "--dump-folder", dump.string()}),
                        "unknown dimension 'dp' (known: pp, dp_replicate, dp_shard, cp, tp)");
  expect_one_line_error(meshtrain({"train", "--ac", "some", "--dump-folder", dump.string()}), "unknown --ac 'some'");
  if (std::string(MESHTRAIN_TEST_BACKEND) == "gloo")  // the CPU build: refused before any step runs
    expect_one_line_error(meshtrain({"train", "--profile-step", "2", "--dump-folder", dump.string()}),
                          "--profile-step needs the CUDA build (Kineto)");
  // An impossible TP degree is rejected before any rendezvous (no peer ever starts here).
  const std::map<std::string, std::string> rank0_of_4{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}};
  expect_one_line_error(
      meshtrain({"train", "--model", "tiny_uneven", "--mesh", "tp=4", "--dump-folder", dump.string()}, rank0_of_4),
      "tp=4: n_kv_heads 2 of model 'tiny_uneven' is not divisible by tp 4");
  expect_one_line_error(
      meshtrain({"train", "--mesh", "tp=4", "--sequence-parallel", "--seq-len", "30", "--dump-folder", dump.string()},
                rank0_of_4),
      "tp=4: --sequence-parallel needs seq_len divisible by tp, got seq_len 30");
  expect_one_line_error(meshtrain({"train", "--reshard-after-forward", "maybe", "--dump-folder", dump.string()}),
                        "unknown --reshard-after-forward 'maybe'");
  expect_one_line_error(meshtrain({"train", "--fsdp.bucketing", "some", "--dump-folder", dump.string()}),
                        "unknown --fsdp.bucketing 'some' (known: none, block, auto)");
  expect_one_line_error(meshtrain({"train", "--optimizer.early-step-in-backward", "--dump-folder", dump.string()}),
                        "--optimizer.early-step-in-backward cannot clip gradients");
  expect_one_line_error(
      meshtrain({"train", "--model", "tiny", "--ep", "2", "--mesh", "dp_shard=2", "--dump-folder", dump.string()},
                {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
      "ep=2: model 'tiny' has no experts");
}
