// FSDP, DDP, HSDP and tensor parallel (alone and in 2-D/3-D meshes) in separate
// processes over Gloo, against the single-rank run with the same global batch: losses,
// gradient norms and final weights must agree.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <tuple>

#include "trainer/run_meshtrain.h"
#include "test_paths.h"

using namespace meshtrain_test;

namespace {

constexpr int kSteps = 20;
constexpr int kGlobalBatch = 8;
constexpr double kRtol = 1e-5;

std::vector<std::string> train_args(const std::string& flavor, const fs::path& dump, int local_batch) {
  return {"train",
          "--model",
          flavor,
          "--steps",
          std::to_string(kSteps),
          "--seed",
          "7",
          "--local-batch-size",
          std::to_string(local_batch),
          "--global-batch-size",
          std::to_string(kGlobalBatch),
          "--dump-folder",
          dump.string(),
          "--backend",
          "gloo",
          "--quiet"};
}

// The single-rank run of a flavor, which every layout of it is compared with. CTest runs each
// test in a process of its own, so the run is shared through a folder keyed by the arguments
// and this program (which holds the trainer) and its time: the first test to need it runs it
// under a file lock, the others (86 layouts over four flavors) read its files.
fs::path single_rank_run(const std::string& flavor) {
  const auto self = fs::read_symlink("/proc/self/exe");
  std::string key = self.string() + " " + std::to_string(fs::last_write_time(self).time_since_epoch().count());
  for (const auto& a : train_args(flavor, "DUMP", kGlobalBatch)) key += " " + a;
  const fs::path shared = fs::temp_directory_path() / ("meshtrain_test_single_" + std::to_string(::getuid()));
  const fs::path dump = shared / (flavor + "_" + std::to_string(std::hash<std::string>{}(key)));
  fs::create_directories(shared);
  const int lock = ::open((dump.string() + ".lock").c_str(), O_CREAT | O_RDWR, 0600);
  ::flock(lock, LOCK_EX);
  if (!fs::exists(dump / "complete")) {
    fs::remove_all(dump);
    fs::create_directories(dump);
    auto r = meshtrain(train_args(flavor, dump, kGlobalBatch));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code == 0) std::ofstream(dump / "complete") << key << "\n";
  }
  ::close(lock);  // releases the lock
  return dump;
}

struct Layout {
  std::string flavor;
  int ranks;  // world size; the data-parallel degree is ranks / tp
  std::string mesh;
  std::vector<std::string> extra;  // --ac / --reshard-after-forward
  std::string name;
  int tp = 1;
  int cp = 1;  // context parallel ranks share their batch: dp = ranks / (pp x tp x cp)
  int pp = 1;  // pipeline stages share their batch too
};

// gtest prints a parameter in test listings and failures; the name says it all.
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name << " (" << l.mesh << ")"; }

fs::path run_layout(const Layout& l) {
  auto dump = fresh_dir(l.name);
  const int dp = l.ranks / (l.pp * l.tp * l.cp);
  auto args = train_args(l.flavor, dump, kGlobalBatch / dp);
  args.insert(args.end(), {"--mesh", l.mesh});
  args.insert(args.end(), l.extra.begin(), l.extra.end());
  Job job(l.ranks, args, dump);
  auto codes = job.wait();
  for (int r = 0; r < l.ranks; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << job.err(r);
  return dump;
}

// Two digests agree when sum and L2 norm differ by at most rtol x the tensor's L2 norm.
void expect_same_weights(const fs::path& a, const fs::path& b) {
  auto da = json::parse(slurp(a / "param_digest.json"))["params"];
  auto db = json::parse(slurp(b / "param_digest.json"))["params"];
  ASSERT_EQ(da.size(), db.size());
  for (auto& [key, va] : da.items()) {
    const auto& vb = db.at(key);
    const double scale = va["l2"].get<double>();
    EXPECT_NEAR(va["l2"].get<double>(), vb["l2"].get<double>(), kRtol * scale) << key;
    EXPECT_NEAR(va["sum"].get<double>(), vb["sum"].get<double>(), kRtol * scale) << key;
  }
}

class DataParallelMatchesSingleRank : public ::testing::TestWithParam<Layout> {};

}  // namespace

TEST_P(DataParallelMatchesSingleRank, LossGradNormAndWeights) {
  const Layout& l = GetParam();
  auto single = single_rank_run(l.flavor);
  auto parallel = run_layout(l);
  auto ms = metrics(single), mp = metrics(parallel);
  ASSERT_EQ(ms.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(mp.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    const double ls = ms[i]["loss"], lp = mp[i]["loss"];
    EXPECT_NEAR(lp, ls, kRtol * ls) << "step " << i + 1 << " loss";
    const double gs = ms[i]["grad_norm"], gp = mp[i]["grad_norm"];
    EXPECT_NEAR(gp, gs, kRtol * gs) << "step " << i + 1 << " grad_norm";
  }
  expect_same_weights(single, parallel);
}

// --fsdp.bucketing changes how many collectives a step issues, never the numbers. tiny
// under dp_shard=2 has 21 weights: the embedding, 9 per block, the final norm and output.
TEST(Bucketing, ModesChangeTheCollectivesNotTheNumbers) {
  struct Mode {
    std::string name;
    std::vector<std::string> flags;
    int64_t all_gathers, reduce_scatters;
  };
  // block: embedding, 2 blocks, head, and block 0 gathered again for its backward (the last
  // block keeps its weights); none: 21 weights and block 0's 9 again; auto: both blocks in
  // one bucket, which holds the last block and so keeps its weights. none with full AC: 21
  // weights, then both blocks' 18 again in their recompute, and not one gather more.
  const std::vector<Mode> modes{{"block", {"--fsdp.bucketing", "block"}, 5, 4},
                                {"none", {"--fsdp.bucketing", "none"}, 30, 21},
                                {"auto", {"--fsdp.bucketing", "auto"}, 3, 3},
                                {"none_ac_full", {"--fsdp.bucketing", "none", "--ac", "full"}, 39, 21}};
  std::vector<json> curves;
  for (const auto& m : modes) {
    auto dump = run_layout({"tiny", 2, "dp_shard=2", m.flags, "tiny_fsdp2_bucketing_" + m.name});
    auto rows = metrics(dump);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(rows[1]["comm_calls"]["all_gather"].get<int64_t>(), m.all_gathers) << m.name;
    EXPECT_EQ(rows[1]["comm_calls"]["reduce_scatter"].get<int64_t>(), m.reduce_scatters) << m.name;
    curves.push_back(rows);
  }
  for (size_t i = 1; i < modes.size(); ++i)
    for (int s = 0; s < kSteps; ++s) {
      const double a = curves[0][s]["loss"], b = curves[i][s]["loss"];
      EXPECT_NEAR(b, a, kRtol * a) << modes[i].name << " step " << s + 1;
    }
}

// The optimizer in backward gives the numbers of the normal step (neither clips), and each
// gradient is gone once its parameters have stepped: none is left when backward returns.
TEST(OptimizerInBackward, EqualsTheNormalStepAndHoldsNoGradients) {
  const std::vector<std::string> no_clip{"--max-norm", "0"};
  std::vector<std::string> early = no_clip;
  early.push_back("--optimizer.early-step-in-backward");
  for (const auto& [mesh, ranks, tp] : {std::tuple{std::string("dp_shard=2"), 2, 1}, {"dp_shard=2,tp=2", 4, 2}}) {
    auto normal = run_layout({"tiny", ranks, mesh, no_clip, "opt_normal_" + mesh, tp});
    auto stepped = run_layout({"tiny", ranks, mesh, early, "opt_in_bwd_" + mesh, tp});
    auto mn = metrics(normal), me = metrics(stepped);
    ASSERT_EQ(me.size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      const double ln = mn[i]["loss"], le = me[i]["loss"];
      EXPECT_NEAR(le, ln, kRtol * ln) << mesh << " step " << i + 1;
      const double gn = mn[i]["grad_norm"], ge = me[i]["grad_norm"];
      EXPECT_NEAR(ge, gn, kRtol * gn) << mesh << " step " << i + 1 << " grad_norm";
    }
    expect_same_weights(normal, stepped);
    EXPECT_GT(json::parse(slurp(normal / "rank0.json"))["grad_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(json::parse(slurp(stepped / "rank0.json"))["grad_bytes"].get<int64_t>(), 0) << mesh;
  }
}

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  for (std::string flavor : {"tiny", "tiny_uneven"}) {
    for (std::string ac : {"none", "full"}) {
      out.push_back({flavor, 2, "dp_shard=2", {"--ac", ac}, flavor + "_fsdp2_ac_" + ac});
      out.push_back({flavor, 4, "dp_shard=4", {"--ac", ac}, flavor + "_fsdp4_ac_" + ac});
      out.push_back({flavor, 4, "dp_replicate=4", {"--ac", ac}, flavor + "_ddp4_ac_" + ac});
      out.push_back({flavor, 4, "dp_replicate=2,dp_shard=2", {"--ac", ac}, flavor + "_hsdp2x2_ac_" + ac});
    }
    for (std::string reshard : {"always", "never"})
      out.push_back(
          {flavor, 4, "dp_shard=4", {"--reshard-after-forward", reshard}, flavor + "_fsdp4_reshard_" + reshard});
  }
  out.push_back({"tiny", 4, "dp_shard=-1", {"--ac", "selective"}, "tiny_fsdp_inferred_ac_selective"});

  // Tensor parallel, with and without loss parallel and sequence parallel.
  const std::vector<std::pair<std::string, std::vector<std::string>>> tp_options{
      {"plain", {}},
      {"lp", {"--loss-parallel"}},
      {"sp", {"--sequence-parallel"}},
      {"lp_sp", {"--loss-parallel", "--sequence-parallel"}}};
  struct Mesh {
    int ranks;
    std::string spec;
    std::string name;
    int tp;
  };
  for (const auto& m :
       {Mesh{2, "tp=2", "tp2", 2}, Mesh{4, "tp=4", "tp4", 4}, Mesh{4, "dp_shard=2,tp=2", "fsdp2_tp2", 2},
        Mesh{4, "dp_replicate=2,tp=2", "ddp2_tp2", 2}, Mesh{8, "dp_replicate=2,dp_shard=2,tp=2", "hsdp2x2_tp2", 2}})
    for (const auto& [opt, flags] : tp_options)
      out.push_back({"tiny", m.ranks, m.spec, flags, "tiny_" + m.name + "_" + opt, m.tp});
  // tiny_uneven has 2 kv heads: tp=2 only; its vocabulary (259) and ffn (137) split unevenly.
  for (const auto& [opt, flags] : tp_options)
    out.push_back({"tiny_uneven", 2, "tp=2", flags, "tiny_uneven_tp2_" + opt, 2});
  out.push_back({"tiny_uneven", 4, "dp_shard=2,tp=2", {"--sequence-parallel"}, "tiny_uneven_fsdp2_tp2_sp", 2});

  // Context parallel in both rotate modes, alone and with FSDP, HSDP and TP.
  for (std::string rotate : {"allgather", "alltoall"}) {
    const std::vector<std::string> flags{"--cp-rotate", rotate};
    out.push_back({"tiny", 2, "cp=2", flags, "tiny_cp2_" + rotate, 1, 2});
    out.push_back({"tiny_uneven", 2, "cp=2", flags, "tiny_uneven_cp2_" + rotate, 1, 2});
    out.push_back({"tiny", 4, "dp_shard=2,cp=2", flags, "tiny_fsdp2_cp2_" + rotate, 1, 2});
  }
  out.push_back({"tiny", 4, "dp_replicate=2,cp=2", {}, "tiny_ddp2_cp2", 1, 2});
  out.push_back({"tiny", 4, "cp=2,tp=2", {"--cp-rotate", "alltoall"}, "tiny_cp2_tp2_alltoall", 2, 2});
  out.push_back({"tiny", 4, "cp=2,tp=2", {"--sequence-parallel", "--loss-parallel"}, "tiny_cp2_tp2_sp_lp", 2, 2});
  out.push_back({"tiny", 8, "dp_replicate=2,dp_shard=2,cp=2", {"--ac", "full"}, "tiny_hsdp2x2_cp2_ac_full", 1, 2});

  // Pipeline parallel: every schedule, on tiny (one layer per stage) and tiny_uneven
  // (5 layers: stages of 3 and 2, or 2, 1, 1, 1 interleaved), alone and with FSDP, TP, CP.
  for (std::string schedule : {"gpipe", "1f1b"}) {
    const std::vector<std::string> flags{"--pp.schedule", schedule, "--pp.microbatches", "4"};
    out.push_back({"tiny", 2, "pp=2", flags, "tiny_pp2_" + schedule, 1, 1, 2});
    out.push_back({"tiny_uneven", 2, "pp=2", flags, "tiny_uneven_pp2_" + schedule, 1, 1, 2});
  }
  out.push_back({"tiny_uneven",
                 2,
                 "pp=2",
                 {"--pp.schedule", "interleaved_1f1b", "--pp.microbatches", "4"},
                 "tiny_uneven_pp2_interleaved_1f1b",
                 1,
                 1,
                 2});
  out.push_back({"tiny_uneven", 2, "pp=2", {"--pp.split", "1,4"}, "tiny_uneven_pp2_split_1_4", 1, 1, 2});
  out.push_back({"tiny_uneven",
                 4,
                 "pp=2,dp_shard=2",
                 {"--pp.schedule", "interleaved_1f1b"},
                 "tiny_uneven_pp2_fsdp2_interleaved",
                 1,
                 1,
                 2});
  out.push_back(
      {"tiny", 4, "pp=2,dp_shard=2", {"--reshard-after-forward", "always"}, "tiny_pp2_fsdp2_reshard_always", 1, 1, 2});
  out.push_back({"tiny_uneven", 4, "pp=2,tp=2", {"--sequence-parallel"}, "tiny_uneven_pp2_tp2_sp", 2, 1, 2});
  out.push_back({"tiny", 8, "pp=2,dp_shard=2,tp=2", {"--pp.schedule", "gpipe"}, "tiny_pp2_fsdp2_tp2_gpipe", 2, 1, 2});
  out.push_back({"tiny", 4, "pp=2,dp_replicate=2", {"--ac", "full"}, "tiny_pp2_ddp2_ac_full", 1, 1, 2});
  out.push_back({"tiny", 4, "pp=2,cp=2", {"--cp-rotate", "alltoall"}, "tiny_pp2_cp2_alltoall", 1, 2, 2});
  out.push_back(
      {"tiny_uneven", 3, "pp=3", {"--pp.microbatches", "4"}, "tiny_uneven_pp3_1f1b", 1, 1, 3});  // 2, 2, 1 layers
  // Gradient accumulation around the pipeline (2 x 4 samples, each cut into 2 microbatches).
  out.push_back({"tiny", 2, "pp=2", {"--local-batch-size", "4"}, "tiny_pp2_accumulation", 1, 1, 2});
  out.push_back({"tiny", 4, "pp=2,tp=2", {"--loss-parallel"}, "tiny_pp2_tp2_loss_parallel", 2, 1, 2});
  out.push_back({"tiny", 8, "pp=2,dp_replicate=2,dp_shard=2", {}, "tiny_pp2_hsdp2x2", 1, 1, 2});

  // Mixture of experts: FSDP, expert parallel (alone, inside FSDP, under AC), and experts
  // that are tensor parallel (ETP), with and without EP.
  out.push_back({"tiny_moe", 4, "dp_shard=4", {}, "tiny_moe_fsdp4"});
  out.push_back({"tiny_moe", 2, "dp_shard=2", {"--ep", "2"}, "tiny_moe_ep2"});
  out.push_back({"tiny_moe", 4, "dp_shard=4", {"--ep", "4"}, "tiny_moe_ep4"});
  out.push_back({"tiny_moe", 4, "dp_shard=4", {"--ep", "2", "--ac", "full"}, "tiny_moe_fsdp4_ep2_ac_full"});
  out.push_back({"tiny_moe", 2, "tp=2", {}, "tiny_moe_tp2_etp", 2});
  out.push_back({"tiny_moe", 4, "dp_shard=2,tp=2", {"--ep", "2"}, "tiny_moe_fsdp2_tp2_ep2_etp", 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallelMatchesSingleRank, ::testing::ValuesIn(layouts()),
                         [](const auto& info) { return info.param.name; });

TEST(DataParallel, FsdpKeepsAQuarterOfTheBytesOnFourRanks) {
  auto single = single_rank_run("tiny");
  auto fsdp = run_layout({"tiny", 4, "dp_shard=4", {}, "fsdp4_bytes"});
  auto bytes = [](const json& r) {
    return r["param_bytes"].get<double>() + r["grad_bytes"].get<double>() + r["optimizer_bytes"].get<double>();
  };
  const double one = bytes(json::parse(slurp(single / "rank0.json")));
  for (int r = 0; r < 4; ++r) {
    const double mine = bytes(json::parse(slurp(fsdp / ("rank" + std::to_string(r) + ".json"))));
    EXPECT_LE(mine, 0.30 * one) << "rank " << r << " keeps " << mine << " bytes vs " << one << " on one rank";
  }
}

// Per step, FSDP gathers each transformer block's weights with one all-gather (twice with
// reshard-after-forward: forward, and again just before the block's backward; by default
// not the last block, whose backward comes right away) and reduces their gradients with
// one reduce-scatter; the embedding and the head (final norm and output layer) take one of
// each. tiny has 2 blocks. DDP reduces each of these buckets with one all-reduce.
TEST(DataParallel, OneCollectivePerBlockAndDirection) {
  auto calls = [](const fs::path& dump) { return metrics(dump).front()["comm_calls"]; };
  const auto fsdp = calls(run_layout({"tiny", 2, "dp_shard=2", {}, "fsdp2_calls"}));
  EXPECT_EQ(fsdp["all_gather"], 2 * 2 - 1 + 2);
  EXPECT_EQ(fsdp["reduce_scatter"], 2 + 2);
  const auto always =
      calls(run_layout({"tiny", 2, "dp_shard=2", {"--reshard-after-forward", "always"}, "fsdp2_always_calls"}));
  EXPECT_EQ(always["all_gather"], 2 * 2 + 2);
  const auto never =
      calls(run_layout({"tiny", 2, "dp_shard=2", {"--reshard-after-forward", "never"}, "fsdp2_never_calls"}));
  EXPECT_EQ(never["all_gather"], 2 + 2);
  const auto ddp = calls(run_layout({"tiny", 2, "dp_replicate=2", {}, "ddp2_calls"}));
  EXPECT_EQ(ddp["all_gather"], 0);
  // One per bucket, and the loss (replicated gradients need none for the norm).
  EXPECT_EQ(ddp["all_reduce"], 2 + 2 + 1);
}

TEST(DataParallel, ReplicasEndBitwiseEqual) {
  for (const auto& [mesh, replicas] :
       std::vector<std::pair<std::string, int>>{{"dp_replicate=4", 4}, {"dp_replicate=2,dp_shard=2", 2}}) {
    auto dump = run_layout({"tiny", 4, mesh, {}, "replicas_" + std::to_string(replicas)});
    const int shards = 4 / replicas;
    for (int s = 0; s < shards; ++s) {
      // Ranks with the same dp_shard coordinate hold the same piece: rank = rep * shards + s.
      auto first = json::parse(slurp(dump / ("rank" + std::to_string(s) + ".json")))["local_params"];
      for (int rep = 1; rep < replicas; ++rep) {
        const int r = rep * shards + s;
        auto other = json::parse(slurp(dump / ("rank" + std::to_string(r) + ".json")))["local_params"];
        for (auto& [key, v] : first.items())
          EXPECT_EQ(v["fnv1a64"], other[key]["fnv1a64"]) << mesh << ": " << key << " differs on rank " << r;
      }
    }
  }
}

TEST(DataParallel, KilledRankMakesThePeersFailNotHang) {
  auto dump = fresh_dir("killed");
  auto args = train_args("tiny", dump, 4);
  args[4] = "100000";  // --steps: far more than the test waits for
  args.insert(args.end(), {"--mesh", "dp_shard=2", "--timeout", "15"});
  const std::string err = rank0_error_after_rank1_killed(args, dump);
  EXPECT_NE(err.find("meshtrain: error: "), std::string::npos) << err;
}

TEST(DataParallel, MixedPrecisionComputesInBfloat16AndReducesInFloat32) {
  auto single = single_rank_run("tiny");
  auto dump = fresh_dir("bf16");
  auto args = train_args("tiny", dump, kGlobalBatch / 2);
  args.insert(args.end(), {"--mesh", "dp_shard=2", "--param-dtype", "bfloat16", "--reduce-dtype", "float32"});
  Job job(2, args, dump);
  auto codes = job.wait();
  ASSERT_EQ(codes[0], 0) << job.err(0);
  ASSERT_EQ(codes[1], 0) << job.err(1);
  auto ms = metrics(single), mb = metrics(dump);
  ASSERT_EQ(mb.size(), static_cast<size_t>(kSteps));
  bool any_difference = false;
  for (int i = 0; i < kSteps; ++i) {
    const double ls = ms[i]["loss"], lb = mb[i]["loss"];
    EXPECT_NEAR(lb, ls, 2e-2 * ls) << "step " << i + 1 << ": bf16 compute strays too far from float32";
    any_difference |= lb != ls;
  }
  EXPECT_TRUE(any_difference) << "bf16 losses equal float32 bit for bit: the policy was not applied";
  // Parameters and optimizer state stay float32 (master weights).
  auto rank = json::parse(slurp(dump / "rank0.json"));
  auto one = json::parse(slurp(single / "rank0.json"));
  EXPECT_NEAR(rank["param_bytes"].get<double>(), one["param_bytes"].get<double>() / 2,
              0.01 * one["param_bytes"].get<double>());
}
