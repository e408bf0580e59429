// `simulate: true` (docs/simulation.md): a case whose ranks share one GPU. Loading, the
// devices it holds, the backend its commands get, the memory refusal and the reports' word.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/matrix.h"
#include "core/plan.h"

using namespace meshtest;

namespace {

const char* kMatrix = R"(suite: s
defaults: {model: debugmodel, simulate: true}
cases:
  - {name: one, simulate: false, mesh: {dp_shard: 1}}
  - {name: fsdp8, mesh: {dp_shard: 8}}
  - name: chain
    phases:
      - {name: save, mesh: {dp_shard: 4}}
      - {name: load, mesh: {tp: 4}}
)";

std::string errors_of(const std::string& yaml) {
  try {
    load_suite_text(yaml, "m.yaml");
  } catch (const MatrixError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::vector<std::string>& argv, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == a && argv[i + 1] == b) return true;
  return false;
}

Plan plan_of(const Suite& s, const std::string& backend, int devices, double gpu_memory_gib = 0) {
  RunOptions opt;
  opt.backend = backend;
  opt.devices = devices;
  opt.gpu_memory_bytes = gpu_memory_gib * (1u << 30);
  std::vector<const Case*> cases;
  for (const auto& c : s.cases) cases.push_back(&c);
  return plan_run(cases, opt, {});
}

}  // namespace

TEST(Simulate, DefaultsAndCasesSayWhetherAWorldIsSimulated) {
  const Suite s = load_suite_text(kMatrix, "m.yaml");
  ASSERT_EQ(s.cases.size(), 3u);
  EXPECT_FALSE(s.cases[0].simulated);
  EXPECT_TRUE(s.cases[1].simulated);
  EXPECT_TRUE(s.cases[2].simulated);
  EXPECT_EQ(s.cases[1].ngpu, 8);
  EXPECT_EQ(s.cases[1].to_json().value("simulated", false), true);
  EXPECT_FALSE(s.cases[0].to_json().contains("simulated"));
}

// On GPUs a simulated world holds one GPU however many ranks it has; on CPU slots each rank
// still takes a slot (the ranks are processes on the CPU's cores).
TEST(Simulate, AWorldHoldsOneGpuOrOneCpuSlotPerRank) {
  const Suite s = load_suite_text(kMatrix, "m.yaml");
  const Plan gpu = plan_of(s, "nccl", 1);
  ASSERT_EQ(gpu.tasks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(gpu.runs(i)) << s.cases[i].id << ": " << gpu.skip[i];
  EXPECT_EQ(gpu.tasks[1].ngpu, 1);
  EXPECT_EQ(gpu.tasks[2].ngpu, 1);
  const Plan cpu = plan_of(s, "gloo", 8);
  EXPECT_EQ(cpu.tasks[1].ngpu, 8);
  EXPECT_EQ(cpu.tasks[2].ngpu, 4);
}

// {backend} becomes meshtrain's shared-memory backend in a simulated world, the run's elsewhere.
TEST(Simulate, CommandsGetTheAdaptersSimulatedBackend) {
  const Suite s = load_suite_text(kMatrix, "m.yaml");
  const Plan p = plan_of(s, "nccl", 1);
  EXPECT_TRUE(has(p.cases[0].phases[0].argv, "--backend", "nccl"));
  EXPECT_TRUE(has(p.cases[1].phases[0].argv, "--backend", "shm"));
  for (const auto& phase : p.cases[2].phases) EXPECT_TRUE(has(phase.argv, "--backend", "shm")) << phase.name;
  EXPECT_EQ(backend_of(s.cases[1], "gloo"), "shm");
  EXPECT_EQ(backend_of(s.cases[0], "gloo"), "gloo");
}

// A world whose ranks cannot share the GPU's memory is refused before launch, with the
// sizes; the same world on a GPU large enough runs.
TEST(Simulate, AWorldTooLargeForTheGpuIsRefusedBeforeLaunch) {
  const Suite s = load_suite_text(kMatrix, "m.yaml");
  const Plan small = plan_of(s, "nccl", 1, /*gpu_memory_gib=*/2);
  EXPECT_TRUE(small.runs(0)) << "a one-rank case is not simulated: " << small.skip[0];
  EXPECT_FALSE(small.runs(1));
  EXPECT_NE(small.skip[1].find("a simulated world of 8 ranks of debugmodel needs about"), std::string::npos)
      << small.skip[1];
  EXPECT_NE(small.skip[1].find("more than its 2.0 GiB"), std::string::npos) << small.skip[1];
  const Plan large = plan_of(s, "nccl", 1, /*gpu_memory_gib=*/139);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(large.runs(i)) << large.skip[i];
}

// `grid` (registered by adapters_test.cpp in this program) says nothing of simulation.
TEST(Simulate, AdapterThatCannotSimulateIsAnErrorAtLoad) {
  const std::string e = errors_of("suite: s\ncases:\n  - {name: c, adapter: grid, ngpu: 2, simulate: true}\n");
  EXPECT_NE(e.find("m.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("adapter 'grid' cannot simulate a world"), std::string::npos) << e;
  const std::string bad = errors_of("suite: s\ncases:\n  - {name: c, model: tiny, simulate: yes}\n");
  EXPECT_NE(bad.find("simulate must be true"), std::string::npos) << bad;
}

// A PyTorch trainer (`command:`, torchtitan) simulates through meshtest_sim: its {backend} stays
// the run's (nccl, which sim/python/sitecustomize.py maps), and the adapter names the Python
// folder that its ranks load first (run_test.cpp checks that the ranks get it).
TEST(Simulate, APytorchTrainerSimulatesThroughMeshtestSim) {
  const Suite s = load_suite_text(
      "suite: s\ncases:\n  - {name: c, command: [t, --backend, '{backend}'], ngpu: 4, simulate: true}\n", "m.yaml");
  ASSERT_EQ(s.cases.size(), 1u);
  EXPECT_TRUE(s.cases[0].simulated);
  EXPECT_EQ(s.cases[0].devices(true), 1);
  const Plan p = plan_of(s, "nccl", 1);
  EXPECT_TRUE(has(p.cases[0].phases[0].argv, "--backend", "nccl"));
  const auto world = trainer_adapters().find("command")->simulation();
  ASSERT_TRUE(world.has_value()) << "this meshtest was built from a checkout with sim/";
  EXPECT_EQ(world->python_path.substr(world->python_path.size() - 11), "/sim/python");
  EXPECT_NE(
      std::find(world->env.begin(), world->env.end(), std::make_pair(std::string("MESHTEST_SIM"), std::string("1"))),
      world->env.end());
}
