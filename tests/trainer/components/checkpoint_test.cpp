// Sharded checkpoints in separate processes over Gloo: resume, resharding across meshes,
// the seed's parametrize-key failure and its fix, and corrupt inputs.
#include <gtest/gtest.h>

#include <sys/mount.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>

#include "trainer/run_meshtrain.h"

using namespace meshtrain_test;

namespace {

constexpr int kGlobalBatch = 8;

std::vector<std::string> args_for(const fs::path& dump, int ranks, int tp, const std::string& mesh,
                                  std::vector<std::string> extra = {}) {
  const int dp = ranks / tp;
  std::vector<std::string> a{"train",
                             "--model",
                             "tiny",
                             "--steps",
                             "20",
                             "--seed",
                             "7",
                             "--global-batch-size",
                             std::to_string(kGlobalBatch),
                             "--local-batch-size",
                             std::to_string(kGlobalBatch / dp),
                             "--mesh",
                             mesh,
                             "--dump-folder",
                             dump.string(),
                             "--backend",
                             "gloo",
                             "--quiet"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

struct Run {
  std::vector<int> codes;
  std::string err0;
};

Run run(const fs::path& dump, int ranks, int tp, const std::string& mesh, std::vector<std::string> extra = {}) {
  fs::create_directories(dump);
  Job job(ranks, args_for(dump, ranks, tp, mesh, std::move(extra)), dump);
  auto codes = job.wait();
  return {codes, job.err(0)};
}

void expect_ok(const Run& r) {
  for (size_t i = 0; i < r.codes.size(); ++i) ASSERT_EQ(r.codes[i], 0) << "rank " << i << ": " << r.err0;
}

// Steps 11..20 of `resumed` against the uninterrupted run.
void expect_resumed_matches(const fs::path& uninterrupted, const fs::path& resumed, double rtol) {
  auto full = metrics(uninterrupted), tail = metrics(resumed);
  ASSERT_EQ(full.size(), 20u);
  ASSERT_EQ(tail.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(tail[i]["step"], 11 + i);
    const double a = full[10 + i]["loss"], b = tail[i]["loss"];
    if (rtol == 0)
      EXPECT_EQ(a, b) << "step " << 11 + i;
    else
      EXPECT_NEAR(b, a, rtol * a) << "step " << 11 + i;
  }
}

// Saves steps 1..10 under [dp:4] into `dump`/checkpoint and returns the uninterrupted run.
fs::path uninterrupted_and_first_half(const fs::path& dump, std::vector<std::string> extra = {}) {
  auto full = fresh_dir("uninterrupted");
  expect_ok(run(full, 4, 1, "dp_shard=4"));
  extra.insert(extra.end(), {"--stop-at", "10", "--checkpoint.enable"});
  expect_ok(run(dump, 4, 1, "dp_shard=4", extra));
  EXPECT_TRUE(fs::exists(dump / "checkpoint" / "step-10" / ".metadata"));
  return full;
}

// A size-limited tmpfs at `at`, unmounted when it goes out of scope: a real full or
// read-only file system. Mounting needs root (CAP_SYS_ADMIN); `error` says why it failed.
class Tmpfs {
 public:
  Tmpfs(const fs::path& at, int64_t bytes) : at_(at) {
    fs::create_directories(at);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + std::to_string(bytes)).c_str()) != 0)
      error = std::string("mount -t tmpfs failed: ") + std::strerror(errno) + " (needs root or CAP_SYS_ADMIN)";
  }
  ~Tmpfs() {
    if (error.empty()) ::umount2(at_.c_str(), MNT_DETACH);
  }
  void remount(int64_t bytes, bool read_only = false) {
    const auto flags = MS_REMOUNT | (read_only ? MS_RDONLY : 0);
    ASSERT_EQ(::mount("tmpfs", at_.c_str(), "tmpfs", flags, ("size=" + std::to_string(bytes)).c_str()), 0)
        << std::strerror(errno);
  }
  std::string error;

 private:
  fs::path at_;
};

int64_t folder_bytes(const fs::path& dir) {
  int64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) bytes += static_cast<int64_t>(e.file_size());
  return bytes;
}

}  // namespace

TEST(Checkpoint, ResumeOnTheSameMeshIsBitwiseEqual) {
  auto dump = fresh_dir("resume_same");
  auto full = uninterrupted_and_first_half(dump);
  auto resumed = dump / "second";
  expect_ok(
      run(resumed, 4, 1, "dp_shard=4", {"--checkpoint.enable", "--checkpoint.folder", (dump / "checkpoint").string()}));
  expect_resumed_matches(full, resumed, 0.0);
}

TEST(Checkpoint, AnAsyncSaveWritesTheSynchronousBytesAndResumesBitExactly) {
  // Steps 3, 6, 9 and 10 saved synchronously, and each of them in the background, each
  // background save waiting for the one before while training goes on.
  auto sync = fresh_dir("async_reference");
  auto full = uninterrupted_and_first_half(sync, {"--checkpoint.interval", "3"});
  auto dump = fresh_dir("async");
  expect_ok(run(
      dump, 4, 1, "dp_shard=4",
      {"--stop-at", "10", "--checkpoint.enable", "--checkpoint.async-mode", "async", "--checkpoint.interval", "3"}));
  auto names = [](const fs::path& dir) {
    std::set<std::string> found;
    for (const auto& e : fs::directory_iterator(dir)) found.insert(e.path().filename().string());
    return found;
  };
  EXPECT_EQ(names(dump / "checkpoint"), (std::set<std::string>{"step-3", "step-6", "step-9", "step-10"}))
      << "no temporary folder is left";
  for (const std::string step : {"step-3", "step-6", "step-9", "step-10"}) {
    const fs::path a = sync / "checkpoint" / step, b = dump / "checkpoint" / step;
    ASSERT_EQ(names(a), names(b)) << step;
    for (const auto& name : names(a))  // the data files, their checksums and the metadata, byte for byte
      EXPECT_TRUE(slurp(a / name) == slurp(b / name)) << step << "/" << name << " differs from the synchronous save's";
  }

  auto resumed = dump / "second";
  expect_ok(
      run(resumed, 4, 1, "dp_shard=4", {"--checkpoint.enable", "--checkpoint.folder", (dump / "checkpoint").string()}));
  expect_resumed_matches(full, resumed, 0.0);
}

TEST(Checkpoint, AnUnknownAsyncModeIsRefusedWithTheKnownOnes) {
  auto r = run(fresh_dir("async_mode"), 1, 1, "dp_shard=1", {"--checkpoint.enable", "--checkpoint.async-mode", "fast"});
  EXPECT_NE(r.codes, std::vector<int>{0});
  EXPECT_NE(r.err0.find("--checkpoint.async-mode: unknown mode 'fast' (known: disabled, async)"), std::string::npos)
      << r.err0;
}

TEST(Checkpoint, ReshardsAcrossMeshesAndCarriesOptimizerState) {
  auto dump = fresh_dir("reshard");
  auto full = uninterrupted_and_first_half(dump);
  const std::string folder = (dump / "checkpoint").string();
  struct Target {
    int ranks, tp;
    std::string mesh;
  };
  for (const auto& t : {Target{4, 2, "dp_shard=2,tp=2"}, Target{4, 4, "tp=4"}, Target{4, 2, "dp_replicate=2,tp=2"},
                        Target{2, 1, "dp_shard=2"}, Target{1, 1, "dp_shard=1"}}) {
    auto out = dump / ("to_" + std::to_string(t.ranks) + "_" + std::to_string(t.tp) + "_" + t.mesh);
    expect_ok(run(out, t.ranks, t.tp, t.mesh,
                  {"--checkpoint.enable", "--checkpoint.folder", folder, "--checkpoint.load-step", "10",
                   "--checkpoint.exclude-from-loading", "dataloader", "--checkpoint.keep-latest-k", "0"}));
    expect_resumed_matches(full, out, 1e-5);
    // A reshard reads the bytes this rank needs and their checksums, not whole chunks.
    for (int r = 0; r < t.ranks; ++r) {
      const json facts = json::parse(slurp(out / ("rank" + std::to_string(r) + ".json")));
      const double ratio = facts["checkpoint_bytes_read"].get<double>() / facts["local_state_bytes"].get<double>();
      EXPECT_LE(ratio, 1.25) << t.mesh << " rank " << r << " read " << facts["checkpoint_bytes_read"] << " bytes for "
                             << facts["local_state_bytes"] << " local";
      EXPECT_GE(ratio, 1.0) << t.mesh << " rank " << r;
    }
    fs::remove_all(dump / "checkpoint" / "step-20");
  }
}

TEST(Checkpoint, SeedChainDp4ToDp2Tp2ToTp4) {
  // [dp:4] steps 1-10 -> [dp:2,tp:2] steps 11-15 -> [tp:4] steps 16-20, optimizer state carried.
  auto dump = fresh_dir("chain");
  auto full = uninterrupted_and_first_half(dump);
  const std::string folder = (dump / "checkpoint").string();
  const std::vector<std::string> common{"--checkpoint.enable", "--checkpoint.folder", folder,
                                        "--checkpoint.exclude-from-loading", "dataloader"};
  auto mid = dump / "dp2_tp2", last = dump / "tp4";
  auto a = common;
  a.insert(a.end(), {"--stop-at", "15"});
  expect_ok(run(mid, 4, 2, "dp_shard=2,tp=2", a));
  expect_ok(run(last, 4, 4, "tp=4", common));
  auto f = metrics(full), m = metrics(mid), l = metrics(last);
  ASSERT_EQ(m.size(), 5u);
  ASSERT_EQ(l.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(m[i]["loss"].get<double>(), f[10 + i]["loss"].get<double>(), 1e-5 * f[10 + i]["loss"].get<double>());
    EXPECT_NEAR(l[i]["loss"].get<double>(), f[15 + i]["loss"].get<double>(), 1e-5 * f[15 + i]["loss"].get<double>());
  }
}

// Pipeline stages save their own layers under global keys, so a run can move between
// pipeline and non-pipeline meshes: [pp:2,dp_shard:2] steps 1-5 -> [dp_shard:4] 6-10 ->
// [tp:4] 11-15 -> [pp:4] 16-20, each segment against the uninterrupted run. debugmodel:
// pp=4 needs four layers and tp=4 four kv heads.
TEST(Checkpoint, ResumesAcrossPipelineAndOtherMeshes) {
  auto dump = fresh_dir("pp_chain");
  auto args = [&](const fs::path& out, int dp, const std::string& mesh, std::vector<std::string> extra) {
    std::vector<std::string> a{"train",
                               "--model",
                               "debugmodel",
                               "--seq-len",
                               "32",
                               "--steps",
                               "20",
                               "--seed",
                               "7",
                               "--global-batch-size",
                               std::to_string(kGlobalBatch),
                               "--local-batch-size",
                               std::to_string(kGlobalBatch / dp),
                               "--mesh",
                               mesh,
                               "--dump-folder",
                               out.string(),
                               "--backend",
                               "gloo",
                               "--quiet"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto run_ok = [&](const fs::path& out, int ranks, int dp, const std::string& mesh, std::vector<std::string> extra) {
    fs::create_directories(out);
    Job job(ranks, args(out, dp, mesh, std::move(extra)), out);
    auto codes = job.wait();
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(codes[r], 0) << mesh << " rank " << r << ": " << job.err(r);
  };
  auto full = dump / "uninterrupted";
  run_ok(full, 4, 4, "dp_shard=4", {});
  const std::string folder = (dump / "checkpoint").string();
  struct Segment {
    int ranks, dp;
    std::string mesh;
    int stop;
  };
  const std::vector<Segment> chain{
      {4, 2, "pp=2,dp_shard=2", 5}, {4, 4, "dp_shard=4", 10}, {4, 1, "tp=4", 15}, {4, 1, "pp=4", 20}};
  auto f = metrics(full);
  ASSERT_EQ(f.size(), 20u);
  for (size_t i = 0; i < chain.size(); ++i) {
    const auto& seg = chain[i];
    auto out = dump / ("segment" + std::to_string(i));
    run_ok(out, seg.ranks, seg.dp, seg.mesh,
           {"--checkpoint.enable", "--checkpoint.folder", folder, "--stop-at", std::to_string(seg.stop),
            "--checkpoint.exclude-from-loading", "dataloader"});
    auto m = metrics(out);
    ASSERT_EQ(m.size(), 5u) << seg.mesh;
    for (int k = 0; k < 5; ++k) {
      const double want = f[seg.stop - 5 + k]["loss"], got = m[k]["loss"];
      EXPECT_NEAR(got, want, 1e-5 * want) << seg.mesh << " step " << seg.stop - 4 + k;
    }
  }
  // Every stage's keys are in the checkpoint, under their global names.
  auto keys = json::parse(slurp(dump / "segment0" / "state_dict_keys.json"))["keys"];
  EXPECT_TRUE(keys.contains("model.layers.5.feed_forward.w2.weight"));
  EXPECT_TRUE(keys.contains("model.tok_embeddings.weight"));
  auto tensor_keys = [](const json& all) {
    std::vector<std::string> out;
    for (const auto& [key, info] : all.items())
      if (info["kind"] == "tensor") out.push_back(key + " " + info["shape"].dump());
    return out;
  };
  EXPECT_EQ(tensor_keys(keys), tensor_keys(json::parse(slurp(full / "state_dict_keys.json"))["keys"]));
}

TEST(Checkpoint, ParametrizeKeysFailUnderTp4LikeTheSeedAndTheKeyMapFixesIt) {
  auto dump = fresh_dir("parametrize");
  auto full = uninterrupted_and_first_half(dump, {"--checkpoint.key-style", "parametrize"});
  auto keys = json::parse(slurp(dump / "state_dict_keys.json"))["keys"];
  EXPECT_TRUE(keys.contains("model.tok_embeddings.parametrizations.weight.original"));
  const std::string folder = (dump / "checkpoint").string();
  std::vector<std::string> load{
      "--checkpoint.enable", "--checkpoint.folder",    folder,       "--checkpoint.exclude-from-loading",
      "dataloader",          "--checkpoint.key-style", "parametrize"};
  // [dp:2,tp:2] is wrapped in data parallel too: its keys match, as in the seed.
  auto dp2tp2 = dump / "dp2_tp2";
  auto a = load;
  a.insert(a.end(), {"--stop-at", "11"});
  expect_ok(run(dp2tp2, 4, 2, "dp_shard=2,tp=2", a));
  fs::remove_all(dump / "checkpoint" / "step-11");
  // [tp:4] has no data parallel, so canonical names: the seed's failure, word for word.
  auto failed = run(dump / "tp4_fails", 4, 4, "tp=4", load);
  EXPECT_NE(failed.codes[0], 0);
  EXPECT_NE(failed.err0.find("Missing key in checkpoint state_dict: model.tok_embeddings.weight."), std::string::npos)
      << failed.err0;
  load.insert(load.end(), {"--checkpoint.key-map", "parametrize-to-canonical"});
  auto fixed = dump / "tp4_key_map";
  expect_ok(run(fixed, 4, 4, "tp=4", load));
  expect_resumed_matches(full, fixed, 1e-5);
}

TEST(Checkpoint, DataloaderStateUnderAnotherDpDegreeNeedsExclusion) {
  auto dump = fresh_dir("loader");
  uninterrupted_and_first_half(dump);
  auto r = run(dump / "dp2", 2, 1, "dp_shard=2",
               {"--checkpoint.enable", "--checkpoint.folder", (dump / "checkpoint").string()});
  EXPECT_NE(r.codes[0], 0);
  EXPECT_NE(r.err0.find("dataloader state was saved for data-parallel degree 4, this run has 2; pass "
                        "--checkpoint.exclude-from-loading dataloader"),
            std::string::npos)
      << r.err0;
}

TEST(Checkpoint, CorruptInputsGiveOneClearErrorNamingFileAndKey) {
  auto dump = fresh_dir("corrupt");
  uninterrupted_and_first_half(dump);
  const fs::path good = dump / "checkpoint" / "step-10";
  auto try_load = [&](const std::string& name, const std::function<void(const fs::path&)>& damage) {
    auto folder = dump / ("ck_" + name);
    fs::remove_all(folder);
    fs::create_directories(folder);
    fs::copy(good, folder / "step-10", fs::copy_options::recursive);
    damage(folder / "step-10");
    auto r =
        meshtrain({"train", "--model", "tiny", "--steps", "20", "--seed", "7", "--local-batch-size", "8",
                   "--dump-folder", (dump / ("out_" + name)).string(), "--checkpoint.enable", "--checkpoint.folder",
                   folder.string(), "--checkpoint.exclude-from-loading", "dataloader", "--quiet"});
    EXPECT_NE(r.exit_code, 0) << name;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
    return r.err;
  };
  auto flip = [](const fs::path& p, std::streamoff at) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x40));
  };
  auto err = try_load("flipped", [&](const fs::path& d) { flip(d / "__1_0.distcp", 100); });
  EXPECT_NE(err.find("__1_0.distcp"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch in key 'model."), std::string::npos) << err;
  err = try_load("truncated", [&](const fs::path& d) { fs::resize_file(d / "__2_0.distcp", 10); });
  EXPECT_NE(err.find("__2_0.distcp' is truncated: key '"), std::string::npos) << err;
  err = try_load("missing", [&](const fs::path& d) { fs::remove(d / "__3_0.distcp"); });
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
  EXPECT_NE(err.find("__3_0.distcp' for key '"), std::string::npos) << err;
  err = try_load("garbage", [&](const fs::path& d) { std::ofstream(d / ".metadata") << "{ not json"; });
  EXPECT_NE(err.find(".metadata: not valid JSON"), std::string::npos) << err;
  err = try_load("out_of_range", [&](const fs::path& d) {
    auto m = json::parse(slurp(d / ".metadata"));
    m["keys"]["model.norm.weight"]["chunks"][0]["offsets"] = json::array({1000});
    std::ofstream(d / ".metadata") << m.dump();
  });
  // The metadata's parse (contract/checkpoint_format, shared with meshtest) refuses it naming file and key.
  EXPECT_NE(err.find(".metadata: key 'model.norm.weight': chunk at offsets [1000]"), std::string::npos) << err;
  EXPECT_NE(err.find("lies outside the [64] tensor"), std::string::npos) << err;
}

TEST(Checkpoint, AnUnfinishedSaveLeavesThePreviousStepLoadable) {
  auto dump = fresh_dir("unfinished");
  auto full = uninterrupted_and_first_half(dump);
  // What a save killed half-way leaves: a temporary folder with partial data, no metadata.
  const fs::path partial = dump / "checkpoint" / ".tmp-step-20";
  fs::create_directories(partial);
  std::ofstream(partial / "__0_0.distcp") << "partial";
  auto resumed = dump / "second";
  expect_ok(
      run(resumed, 4, 1, "dp_shard=4", {"--checkpoint.enable", "--checkpoint.folder", (dump / "checkpoint").string()}));
  expect_resumed_matches(full, resumed, 0.0);
}

TEST(Checkpoint, GenerateGivesIdenticalTokensUnderEveryMesh) {
  auto dump = fresh_dir("generate");
  uninterrupted_and_first_half(dump);
  const std::string folder = (dump / "checkpoint").string();
  struct Target {
    int ranks;
    std::string mesh;
  };
  std::vector<json> outputs;
  for (const auto& t :
       {Target{1, "dp_shard=1"}, Target{4, "dp_shard=4"}, Target{4, "tp=4"}, Target{4, "dp_shard=2,tp=2"}}) {
    auto out = dump / ("gen_" + std::to_string(t.ranks) + "_" + t.mesh);
    fs::create_directories(out);
    Job job(t.ranks,
            {"generate", "--model", "tiny", "--mesh", t.mesh, "--checkpoint.folder", folder, "--prompt", "And God said",
             "--max-new-tokens", "16", "--dump-folder", out.string(), "--backend", "gloo", "--quiet"},
            out);
    auto codes = job.wait();
    for (int r = 0; r < t.ranks; ++r) ASSERT_EQ(codes[r], 0) << t.mesh << " rank " << r << ": " << job.err(r);
    outputs.push_back(json::parse(slurp(out / "generate.json")));
  }
  ASSERT_FALSE(outputs[0]["generated_ids"].empty());
  EXPECT_EQ(outputs[0]["prompt"], "And God said");
  for (size_t i = 1; i < outputs.size(); ++i)
    EXPECT_EQ(outputs[i]["generated_ids"], outputs[0]["generated_ids"]) << outputs[i]["mesh"];
}

TEST(Checkpoint, CkptInspectDiffAndConsolidate) {
  auto canonical = fresh_dir("tools_canonical"), parametrize = fresh_dir("tools_parametrize");
  uninterrupted_and_first_half(canonical);
  uninterrupted_and_first_half(parametrize, {"--checkpoint.key-style", "parametrize"});
  const auto a = (canonical / "checkpoint" / "step-10").string(), b = (parametrize / "checkpoint" / "step-10").string();

  // Looking inside is meshtest's (one `ckpt inspect|diff` for both programs); consolidate stays here.
  auto inspect = run_meshtest({"ckpt", "inspect", a});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find(
                "step 10, format 2, written under pp=1,dp_replicate=1,dp_shard=4,cp=1,tp=1, key style canonical"),
            std::string::npos)
      << inspect.out;
  const auto row = inspect.out.find("  model.tok_embeddings.weight ");
  ASSERT_NE(row, std::string::npos) << inspect.out;
  const std::string line = inspect.out.substr(row, inspect.out.find('\n', row) - row);
  for (const char* part : {"float32", "[258,64]", " 4 chunks", " 66048 B"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " not in: " << line;
  EXPECT_NE(inspect.out.find("files: __0_0.distcp ("), std::string::npos) << inspect.out;
  EXPECT_NE(meshtrain({"ckpt", "inspect", a}).exit_code, 0);  // removed: meshtest ckpt inspect is the one

  auto same = run_meshtest({"ckpt", "diff", a, a});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  auto diff = run_meshtest({"ckpt", "diff", a, b});
  EXPECT_EQ(diff.exit_code, 1) << diff.out << diff.err;
  EXPECT_NE(diff.out.find("only in A: model.tok_embeddings.weight [258,64]\n"), std::string::npos) << diff.out;
  EXPECT_NE(diff.out.find("only in B: model.tok_embeddings.parametrizations.weight.original [258,64]\n"),
            std::string::npos)
      << diff.out;

  // safetensors: u64 header length, JSON header, raw float32 data. meshtest reads it as a
  // checkpoint: every tensor equal, value for value, to the step it came from (its non-tensor
  // items, the dataloader's and scheduler's state, are not in it).
  const auto out = canonical / "model.safetensors";
  auto consolidate = meshtrain({"ckpt", "consolidate", a, out.string()});
  ASSERT_EQ(consolidate.exit_code, 0) << consolidate.err;
  auto st = run_meshtest({"ckpt", "inspect", out.string()});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_NE(st.out.find("(safetensors)"), std::string::npos) << st.out;
  const auto norm = st.out.find("  model.norm.weight ");
  ASSERT_NE(norm, std::string::npos) << st.out;
  for (const char* part : {"float32", "[64]", " 1 chunk ", " 256 B"})
    EXPECT_NE(st.out.substr(norm, st.out.find('\n', norm) - norm).find(part), std::string::npos) << part << st.out;
  auto against = run_meshtest({"ckpt", "diff", a, out.string(), "--values", "--rtol", "0", "--atol", "0"});
  EXPECT_EQ(against.exit_code, 1) << against.out << against.err;  // the non-tensor items are only in A
  EXPECT_EQ(against.out.find("differs"), std::string::npos) << against.out;
  EXPECT_EQ(against.out.find("only in B"), std::string::npos) << against.out;
  EXPECT_EQ(against.out.find("only in A: model."), std::string::npos) << against.out;
  EXPECT_EQ(against.out.find("only in A: optimizer.state"), std::string::npos) << against.out;
  EXPECT_NE(against.out.find("only in A: lr_scheduler []"), std::string::npos) << against.out;
  EXPECT_NE(against.out.find("same   model.norm.weight: max |A-B| 0.000e+00"), std::string::npos) << against.out;
}

// A safetensors file meshtrain wrote, damaged the ways users meet: each is refused by name,
// and a sharded copy (index + shard) reads the same until its shard goes missing.
TEST(Checkpoint, SafetensorsDamagedOrShardedIsReadOrRefusedByName) {
  auto dump = fresh_dir("safetensors");
  expect_ok(run(dump / "run", 1, 1, "dp_shard=1", {"--stop-at", "2", "--checkpoint.enable"}));
  const fs::path good = dump / "model.safetensors";
  ASSERT_EQ(
      meshtrain({"ckpt", "consolidate", (dump / "run" / "checkpoint" / "step-2").string(), good.string()}).exit_code,
      0);
  const std::string bytes = slurp(good);
  auto refused = [&](const std::string& name, const std::string& content, const std::string& message) {
    const fs::path bad = dump / name;
    std::ofstream(bad, std::ios::binary) << content;
    auto r = run_meshtest({"ckpt", "inspect", bad.string()});
    EXPECT_NE(r.exit_code, 0) << name;
    EXPECT_NE(r.err.find(bad.string() + ": " + message), std::string::npos) << name << ": " << r.err;
  };
  refused("short.safetensors", bytes.substr(0, 5), "5 bytes: too short for a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  refused("header.safetensors", bytes.substr(0, 8 + n / 2), "the header length " + std::to_string(n) + " runs past");
  refused("data.safetensors", bytes.substr(0, bytes.size() - 4), "tensor '");  // the last tensor's bytes are cut
  std::string json_broken = bytes;
  json_broken[8] = 'x';
  refused("json.safetensors", json_broken, "the header is not JSON");

  // Sharded: the same file as the one shard of an index that names its every tensor.
  const fs::path sharded = dump / "sharded";
  fs::create_directories(sharded);
  fs::copy_file(good, sharded / "model-00001-of-00001.safetensors");
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  const json header = json::parse(bytes.substr(8, n));
  for (const auto& [key, v] : header.items())
    if (key != "__metadata__") index["weight_map"][key] = "model-00001-of-00001.safetensors";
  std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
  auto same = run_meshtest({"ckpt", "diff", good.string(), sharded.string(), "--values", "--rtol", "0", "--atol", "0"});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
  auto missing = run_meshtest({"ckpt", "inspect", sharded.string()});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("model.safetensors.index.json: names shard model-00002-of-00002.safetensors (for "
                             "'model.norm.weight' and 0 other tensors), which is missing"),
            std::string::npos)
      << missing.err;
}

// A Hugging Face export (--checkpoint.last-save-in-hf) starts another run under another mesh:
// each rank reads only its rows, and the weights come back bit for bit (rank files' hashes).
TEST(Checkpoint, AHuggingFaceExportStartsARunUnderAnotherMeshReadingOnlyEachRanksRows) {
  auto dump = fresh_dir("hf_export");
  expect_ok(run(
      dump / "export", 1, 1, "dp_shard=1",
      {"--steps", "3", "--checkpoint.enable", "--checkpoint.last-save-model-only", "--checkpoint.last-save-in-hf"}));
  const fs::path step = dump / "export" / "checkpoint" / "step-3";
  ASSERT_TRUE(fs::exists(step / "model.safetensors"));
  ASSERT_TRUE(fs::exists(step / "config.json"));
  EXPECT_EQ(json::parse(slurp(step / "config.json"))["architectures"][0], "LlamaForCausalLM");
  // The DCP-format copy of the export holds model weights only, so a resume is refused.
  auto resume =
      run(dump / "resume", 1, 1, "dp_shard=1",
          {"--steps", "6", "--checkpoint.enable", "--checkpoint.folder", (dump / "export" / "checkpoint").string()});
  ASSERT_NE(resume.codes[0], 0);
  EXPECT_NE(resume.err0.find("is a model-only export (--checkpoint.last-save-model-only)"), std::string::npos)
      << resume.err0;

  expect_ok(run(dump / "load", 4, 2, "dp_shard=2,tp=2",
                {"--steps", "0", "--checkpoint.initial-load-path", step.string(), "--checkpoint.initial-load-in-hf"}));
  const int64_t file_bytes = static_cast<int64_t>(fs::file_size(step / "model.safetensors"));
  for (int r = 0; r < 4; ++r) {
    const json rank = json::parse(slurp(dump / "load" / ("rank" + std::to_string(r) + ".json")));
    EXPECT_GT(rank["initial_load_bytes_read"].get<int64_t>(), 0);
    EXPECT_LT(rank["initial_load_bytes_read"].get<int64_t>(), file_bytes * 3 / 10) << "rank " << r;
  }
  // The pieces add up to the exported weights (global sums in float64, summed in another order).
  const json a = json::parse(slurp(dump / "export" / "param_digest.json"))["params"];
  const json b = json::parse(slurp(dump / "load" / "param_digest.json"))["params"];
  for (const auto& [key, d] : a.items()) {
    const double l2 = d["l2"].get<double>();
    EXPECT_NEAR(b.at(key)["sum"].get<double>(), d["sum"].get<double>(), 1e-12 * l2 * 1e3) << key;
    EXPECT_NEAR(b.at(key)["l2"].get<double>(), l2, 1e-12 * l2) << key;
  }

  // Bad paths and another flavor's weights are refused with the file and the key.
  auto missing = run(dump / "missing", 1, 1, "dp_shard=1",
                     {"--steps", "0", "--checkpoint.initial-load-path", (dump / "nowhere").string(),
                      "--checkpoint.initial-load-in-hf"});
  ASSERT_NE(missing.codes[0], 0);
  EXPECT_NE(missing.err0.find("no Hugging Face checkpoint at '" + (dump / "nowhere").string() + "'"), std::string::npos)
      << missing.err0;
  auto other = run(dump / "other", 1, 1, "dp_shard=1",
                   {"--model", "debugmodel", "--steps", "0", "--checkpoint.initial-load-path", step.string(),
                    "--checkpoint.initial-load-in-hf"});
  ASSERT_NE(other.codes[0], 0);
  EXPECT_NE(
      other.err0.find((step / "model.safetensors").string() + "': 'model.embed_tokens.weight' has shape [258, 64], "
                                                              "meshtrain's model.tok_embeddings.weight is [258, 256]"),
      std::string::npos)
      << other.err0;
}

// Only the newest K steps stay: older step folders go, and so does the folder a step replaced
// when a resumed run saves that step again. Nothing else is left beside them.
TEST(Checkpoint, KeepLatestKLeavesTheNewestStepsAndNoReplacedFolder) {
  auto dump = fresh_dir("keep_latest");
  const std::string folder = (dump / "checkpoint").string();
  const std::vector<std::string> every_step{"--steps",
                                            "5",
                                            "--checkpoint.enable",
                                            "--checkpoint.folder",
                                            folder,
                                            "--checkpoint.interval",
                                            "1",
                                            "--checkpoint.keep-latest-k",
                                            "2"};
  auto left = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(folder)) names.insert(e.path().filename().string());
    return names;
  };
  expect_ok(run(dump / "first", 2, 1, "dp_shard=2", every_step));
  EXPECT_EQ(left(), (std::set<std::string>{"step-4", "step-5"}));
  auto from_step_4 = every_step;  // trains step 5 again and saves it over the first run's
  from_step_4.insert(from_step_4.end(), {"--checkpoint.load-step", "4"});
  expect_ok(run(dump / "second", 2, 1, "dp_shard=2", from_step_4));
  EXPECT_EQ(left(), (std::set<std::string>{"step-4", "step-5"}));
  EXPECT_EQ(metrics(dump / "second").size(), 1u);
}

TEST(Checkpoint, SigkillDuringSavesLeavesTheLatestCompleteStepLoadable) {
  // Saving every step, the whole job is killed at an arbitrary moment (often mid-save);
  // whatever step-<N> exists must load.
  auto dump = fresh_dir("sigkill");
  auto args = args_for(
      dump, 2, 1, "dp_shard=2",
      {"--steps", "1000", "--checkpoint.enable", "--checkpoint.interval", "1", "--checkpoint.keep-latest-k", "2"});
  Job job(2, args, dump);
  for (int i = 0; i < 600 && metrics(dump).size() < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(metrics(dump).size(), 6u) << job.err(0);
  ::kill(job.pid(0), SIGKILL);
  ::kill(job.pid(1), SIGKILL);
  job.wait(std::chrono::seconds(30));
  auto resumed = dump / "resumed";
  auto r = run(resumed, 1, 1, "dp_shard=1",
               {"--steps", "1000", "--stop-at", "0", "--checkpoint.enable", "--checkpoint.folder",
                (dump / "checkpoint").string(), "--checkpoint.exclude-from-loading", "dataloader"});
  expect_ok(r);
  int complete = 0;
  for (const auto& e : fs::directory_iterator(dump / "checkpoint"))
    complete += e.path().filename().string().rfind("step-", 0) == 0 && fs::exists(e.path() / ".metadata");
  EXPECT_GE(complete, 1);
}

// A disk that fills during the save of step 10 (`mode`: the --checkpoint.async-mode flags).
static void disk_full_during_a_save(const std::string& name, const std::vector<std::string>& mode) {
  auto dump = fresh_dir(name);
  // The uninterrupted run, saving every 5 steps on an ordinary disk: the size of one step.
  std::vector<std::string> every5{"--checkpoint.enable", "--checkpoint.interval", "5"};
  every5.insert(every5.end(), mode.begin(), mode.end());
  expect_ok(run(dump / "full", 4, 1, "dp_shard=4", every5));
  const int64_t step_bytes = folder_bytes(dump / "full" / "checkpoint" / "step-5");
  ASSERT_GT(step_bytes, 0);

  // Room for step 5 and half of step 10.
  const fs::path disk = dump / "disk";
  Tmpfs tmpfs(disk, step_bytes * 3 / 2);
  if (!tmpfs.error.empty()) GTEST_SKIP() << tmpfs.error;
  std::vector<std::string> into_disk = every5;
  into_disk.insert(into_disk.end(), {"--checkpoint.folder", disk.string()});
  auto failed = run(dump / "failed", 4, 1, "dp_shard=4", into_disk);
  std::string errors;
  for (int r = 0; r < 4; ++r) errors += slurp(dump / "failed" / ("rank" + std::to_string(r) + ".err"));
  EXPECT_NE(failed.codes, std::vector<int>(4, 0));
  EXPECT_NE(errors.find("checkpoint: writing '" + disk.string() + "/.tmp-step-10/"), std::string::npos) << errors;
  EXPECT_NE(errors.find("No space left on device"), std::string::npos) << errors;
  // No half step looks complete: step 10 was never published.
  EXPECT_TRUE(fs::exists(disk / "step-5" / ".metadata"));
  EXPECT_FALSE(fs::exists(disk / "step-10"));

  // Space is freed; the run resumes from step 5 and retraces the uninterrupted run bit for bit.
  tmpfs.remount(step_bytes * 8);
  expect_ok(run(dump / "resumed", 4, 1, "dp_shard=4", into_disk));
  const auto full = metrics(dump / "full"), resumed = metrics(dump / "resumed");
  ASSERT_EQ(full.size(), 20u);
  ASSERT_EQ(resumed.size(), 15u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    ASSERT_EQ(resumed[i]["step"], full[5 + i]["step"]);
    EXPECT_EQ(resumed[i]["loss"].get<double>(), full[5 + i]["loss"].get<double>()) << "step " << resumed[i]["step"];
  }
}

TEST(Checkpoint, ADiskFullDuringASaveNamesTheFileAndErrnoAndThePreviousStepResumesBitExactly) {
  disk_full_during_a_save("disk_full", {});
}

// The write fails on the background thread; the rank's next save throws it.
TEST(Checkpoint, ADiskFullDuringAnAsyncSaveIsReportedAndThePreviousStepResumesBitExactly) {
  disk_full_during_a_save("disk_full_async", {"--checkpoint.async-mode", "async"});
}

TEST(Checkpoint, AnUnwritableCheckpointFolderIsRefusedBeforeTraining) {
  auto dump = fresh_dir("unwritable");
  // A folder that cannot be created (its parent is a file): refused on any machine.
  std::ofstream(dump / "a_file") << "x";
  auto r = run(dump / "under_a_file", 2, 1, "dp_shard=2",
               {"--checkpoint.enable", "--checkpoint.folder", (dump / "a_file" / "checkpoint").string()});
  EXPECT_NE(r.codes, std::vector<int>(2, 0));
  EXPECT_NE(r.err0.find("checkpoint: cannot create folder '" + (dump / "a_file" / "checkpoint").string() + "'"),
            std::string::npos)
      << r.err0;
  EXPECT_TRUE(metrics(dump / "under_a_file").empty()) << "no step may run";

  // A read-only file system (root ignores permission bits, so a mount is the real test).
  const fs::path disk = dump / "read_only";
  Tmpfs tmpfs(disk, 1 << 20);
  if (!tmpfs.error.empty()) GTEST_SKIP() << tmpfs.error;
  tmpfs.remount(1 << 20, /*read_only=*/true);
  r = run(dump / "on_read_only", 2, 1, "dp_shard=2", {"--checkpoint.enable", "--checkpoint.folder", disk.string()});
  EXPECT_NE(r.codes, std::vector<int>(2, 0));
  EXPECT_NE(r.err0.find("checkpoint: folder '" + disk.string() + "' is not writable: Read-only file system"),
            std::string::npos)
      << r.err0;
  EXPECT_TRUE(metrics(dump / "on_read_only").empty()) << "no step may run";
}
