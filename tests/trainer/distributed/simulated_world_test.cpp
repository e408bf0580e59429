// A simulated world (--backend shm, trainer/distributed/shm_comm.h) against the same layout in real
// processes over Gloo: the same losses, gradient norms and weights, for every kind of
// parallelism; bit for bit where every group has at most two ranks (a + b is the same in any
// order), within fp32 reduction-order noise where Gloo's ring sums 4 ranks in another order.
// And a simulated world repeats itself exactly, and a killed rank fails it instead of hanging it.
#include <gtest/gtest.h>

#include <csignal>
#include <cmath>

#include "trainer/run_meshtrain.h"

using namespace meshtrain_test;

namespace {

constexpr int kSteps = 10;
constexpr int kGlobalBatch = 8;

struct World {
  std::string name;
  std::string model;
  std::string mesh;
  int ranks;
  int dp;  // data-parallel degree: the local batch is kGlobalBatch / dp
  std::vector<std::string> extra;
  bool pairs_only;  // every group of the mesh has at most two ranks: bitwise equal to Gloo
};

void PrintTo(const World& w, std::ostream* os) { *os << w.name << " (" << w.mesh << ")"; }

fs::path run_world(const World& w, const std::string& backend, const std::string& tag = "") {
  auto dump = fresh_dir(w.name + "_" + backend + tag);
  std::vector<std::string> args = {"train",
                                   "--model",
                                   w.model,
                                   "--steps",
                                   std::to_string(kSteps),
                                   "--seed",
                                   "7",
                                   "--local-batch-size",
                                   std::to_string(kGlobalBatch / w.dp),
                                   "--global-batch-size",
                                   std::to_string(kGlobalBatch),
                                   "--dump-folder",
                                   dump.string(),
                                   "--backend",
                                   backend,
                                   "--mesh",
                                   w.mesh,
                                   "--quiet"};
  args.insert(args.end(), w.extra.begin(), w.extra.end());
  Job job(w.ranks, args, dump);
  auto codes = job.wait();
  for (int r = 0; r < w.ranks; ++r) EXPECT_EQ(codes[r], 0) << backend << " rank " << r << ": " << job.err(r);
  return dump;
}

json digests(const fs::path& dump) { return json::parse(slurp(dump / "param_digest.json"))["params"]; }

class SimulatedMatchesGloo : public ::testing::TestWithParam<World> {};

}  // namespace

// rtol 1e-6 for four-rank groups: 10x the largest difference measured over these worlds
// (docs/simulation.md#against-gloo).
TEST_P(SimulatedMatchesGloo, LossGradNormAndWeights) {
  const World& w = GetParam();
  const auto gloo = run_world(w, "gloo"), shm = run_world(w, "shm");
  const auto mg = metrics(gloo), ms = metrics(shm);
  ASSERT_EQ(mg.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(ms.size(), static_cast<size_t>(kSteps));
  const double rtol = w.pairs_only ? 0.0 : 1e-6;
  for (int i = 0; i < kSteps; ++i)
    for (const char* metric : {"loss", "grad_norm"}) {
      const double g = mg[i][metric], s = ms[i][metric];
      if (w.pairs_only)
        EXPECT_EQ(s, g) << "step " << i + 1 << " " << metric << ": a two-rank sum must not depend on the backend";
      else
        EXPECT_NEAR(s, g, rtol * std::abs(g)) << "step " << i + 1 << " " << metric;
    }
  const auto dg = digests(gloo), ds = digests(shm);
  ASSERT_EQ(dg.size(), ds.size());
  for (auto& [key, vg] : dg.items()) {
    const double scale = vg["l2"].get<double>();
    EXPECT_NEAR(ds.at(key)["l2"].get<double>(), vg["l2"].get<double>(), std::max(rtol, 1e-7) * scale) << key;
    EXPECT_NEAR(ds.at(key)["sum"].get<double>(), vg["sum"].get<double>(), std::max(rtol, 1e-7) * scale) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, SimulatedMatchesGloo,
    ::testing::Values(World{"fsdp2", "tiny", "dp_shard=2", 2, 2, {}, true},
                      World{"tp2_sp", "tiny", "tp=2", 2, 1, {"--sequence-parallel", "--loss-parallel"}, true},
                      World{"pp2_1f1b", "tiny", "pp=2", 2, 1, {"--pp.schedule", "1f1b"}, true},
                      World{"cp2_ring", "tiny", "cp=2", 2, 1, {"--cp-rotate", "alltoall"}, true},
                      World{"moe_ep2", "tiny_moe", "dp_shard=2", 2, 2, {"--ep", "2"}, true},
                      World{"fsdp4", "tiny", "dp_shard=4", 4, 4, {}, false},
                      World{"hsdp_tp", "tiny", "dp_replicate=2,dp_shard=2,tp=2", 8, 4, {}, false},
                      World{"pp_gpipe_dp", "tiny", "pp=2,dp_shard=2", 4, 2, {"--pp.schedule", "gpipe"}, false}),
    [](const ::testing::TestParamInfo<World>& info) { return info.param.name; });

// Reductions in rank order: a rerun gives the same bits, loss by loss and weight by weight.
TEST(SimulatedWorld, RepeatsItselfBitForBit) {
  const World w{"repeat", "tiny", "dp_shard=4", 4, 4, {}, false};
  const auto a = run_world(w, "shm", "_a"), b = run_world(w, "shm", "_b");
  const auto ma = metrics(a), mb = metrics(b);
  ASSERT_EQ(ma.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(mb.size(), ma.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["loss"], mb[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(ma[i]["grad_norm"], mb[i]["grad_norm"]) << "step " << i + 1;
  }
  EXPECT_EQ(digests(a), digests(b));
}

// A rank that dies mid-run fails its peers at once, naming it, long before the timeout.
TEST(SimulatedWorld, KilledRankMakesThePeersFailNotHang) {
  auto dump = fresh_dir("shm_killed");
  std::vector<std::string> args = {"train",         "--model",     "tiny",      "--steps", "100000",
                                   "--dump-folder", dump.string(), "--backend", "shm",     "--mesh",
                                   "dp_shard=2",    "--timeout",   "600",       "--quiet"};
  const std::string err = rank0_error_after_rank1_killed(args, dump);
  EXPECT_NE(err.find("global rank 1 died while rank 0 waited for it"), std::string::npos) << err;
}
