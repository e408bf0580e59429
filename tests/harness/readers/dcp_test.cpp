// CheckpointView over real PyTorch DCP folders (torch 2.11, checked in under shared/fixtures),
// over hand-built ones (protocol-2 pickles, torch 1.13's TensorProperties, bf16, strided and
// ZIP64 records, a record beyond 2 GiB) and over meshtrain's own format; and every kind of damage
// yielding one clear error that names the file and the key, never a crash.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "readers/checkpoint_view.h"
#include "readers/dcp.h"
#include "readers/stored_bytes.h"
#include "contract/hash.h"
#include "readers/pickle.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using meshtest::CheckpointError;
using meshtest::CheckpointView;
using Dims = std::vector<int64_t>;

namespace {

// ---- files --------------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/meshtest-dcp-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string shared_fixtures() { return std::string(MESHTEST_SOURCE_DIR) + "/../shared/fixtures/dcp-torch-2.11"; }

// ---- a tiny pickle writer -----------------------------------------------------------------------

std::string le_bytes(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// Emits opcodes by name; enough for DCP metadata and torch.save's data.pkl.
class PickleWriter {
 public:
  std::string bytes;
  PickleWriter& proto(int v) { return raw(std::string("\x80") + static_cast<char>(v)); }
  PickleWriter& raw(const std::string& s) {
    bytes += s;
    return *this;
  }
  PickleWriter& op(char c) { return raw(std::string(1, c)); }
  PickleWriter& global(const std::string& module, const std::string& name) {
    return raw("c" + module + "\n" + name + "\n");
  }
  PickleWriter& str(const std::string& s) { return raw("X" + le_bytes(s.size(), 4) + s); }
  PickleWriter& integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) return raw("J" + le_bytes(static_cast<uint64_t>(v), 4));
    return raw("\x8a\x08" + le_bytes(static_cast<uint64_t>(v), 8));  // LONG1
  }
  PickleWriter& put(uint8_t i) { return raw(std::string("q") + static_cast<char>(i)); }
  PickleWriter& get(uint8_t i) { return raw(std::string("h") + static_cast<char>(i)); }
  PickleWriter& mark() { return op('('); }
  PickleWriter& tuple() { return op('t'); }
  PickleWriter& ints(const Dims& dims) {
    mark();
    for (int64_t d : dims) integer(d);
    return tuple();
  }
  PickleWriter& no_args_new() { return op(')').op('\x81'); }  // EMPTY_TUPLE NEWOBJ
  PickleWriter& stop() { return op('.'); }
};

// ---- torch.save records --------------------------------------------------------------------------

uint32_t crc32(const std::string& data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

// A STORED zip; with `zip64` every size and offset is saturated and given in ZIP64 extra fields.
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64) {
  std::string out, cd;
  const uint64_t sat = 0xFFFFFFFF;
  for (const auto& [name, data] : entries) {
    const uint64_t local_at = out.size();
    const std::string local_extra =
        zip64 ? le_bytes(1, 2) + le_bytes(16, 2) + le_bytes(data.size(), 8) + le_bytes(data.size(), 8) : "";
    out += le_bytes(0x04034b50, 4) + le_bytes(45, 2) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 4) +
           le_bytes(crc32(data), 4) + le_bytes(zip64 ? sat : data.size(), 4) + le_bytes(zip64 ? sat : data.size(), 4) +
           le_bytes(name.size(), 2) + le_bytes(local_extra.size(), 2) + name + local_extra + data;
    const std::string extra = zip64 ? le_bytes(1, 2) + le_bytes(24, 2) + le_bytes(data.size(), 8) +
                                          le_bytes(data.size(), 8) + le_bytes(local_at, 8)
                                    : "";
    cd += le_bytes(0x02014b50, 4) + le_bytes(45, 2) + le_bytes(45, 2) + le_bytes(0, 2) + le_bytes(0, 2) +
          le_bytes(0, 4) + le_bytes(crc32(data), 4) + le_bytes(zip64 ? sat : data.size(), 4) +
          le_bytes(zip64 ? sat : data.size(), 4) + le_bytes(name.size(), 2) + le_bytes(extra.size(), 2) +
          le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 4) + le_bytes(zip64 ? sat : local_at, 4) +
          name + extra;
  }
  const uint64_t cd_at = out.size();
  out += cd;
  if (zip64) {
    const uint64_t eocd64_at = out.size();
    out += le_bytes(0x06064b50, 4) + le_bytes(44, 8) + le_bytes(45, 2) + le_bytes(45, 2) + le_bytes(0, 4) +
           le_bytes(0, 4) + le_bytes(entries.size(), 8) + le_bytes(entries.size(), 8) + le_bytes(cd.size(), 8) +
           le_bytes(cd_at, 8);
    out += le_bytes(0x07064b50, 4) + le_bytes(0, 4) + le_bytes(eocd64_at, 8) + le_bytes(1, 4);
  }
  out += le_bytes(0x06054b50, 4) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(zip64 ? 0xFFFF : entries.size(), 2) +
         le_bytes(zip64 ? 0xFFFF : entries.size(), 2) + le_bytes(zip64 ? sat : cd.size(), 4) +
         le_bytes(zip64 ? sat : cd_at, 4) + le_bytes(0, 2);
  return out;
}

// What torch.save(tensor) writes: _rebuild_tensor_v2(persid(storage), offset, size, stride, ...).
struct TensorBlob {
  std::string storage_class = "FloatStorage";
  std::string storage;  // raw little-endian elements
  int64_t storage_numel = 0;
  int64_t storage_offset = 0;
  Dims size, stride;
};

std::string make_record(const TensorBlob& t, bool zip64 = false) {
  PickleWriter p;
  p.proto(2).global("torch._utils", "_rebuild_tensor_v2").put(0).mark();
  p.mark().str("storage").global("torch", t.storage_class).str("0").str("cpu").integer(t.storage_numel).tuple().op('Q');
  p.integer(t.storage_offset).ints(t.size).ints(t.stride).op('\x89');
  p.global("collections", "OrderedDict").op(')').op('R').tuple().op('R').stop();
  return make_zip({{"archive/data.pkl", p.bytes}, {"archive/byteorder", "little"}, {"archive/data/0", t.storage}},
                  zip64);
}

std::string floats(const std::vector<float>& values) {
  std::string s(values.size() * 4, '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());  // an empty vector's data() may be null
  return s;
}

// A contiguous float32 record of `size` holding 0, 1, 2, ... plus `base`.
std::string counting_record(const Dims& size, float base = 0) {
  int64_t n = 1;
  for (int64_t d : size) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  Dims stride(size.size(), 1);
  for (size_t d = size.size(); d-- > 1;) stride[d - 1] = stride[d] * size[d];
  return make_record({"FloatStorage", floats(v), n, 0, size, stride});
}

// ---- hand-built DCP folders ---------------------------------------------------------------------

struct TestChunk {
  Dims offsets, sizes;
  std::string record;  // its bytes, appended to `file`
  std::string file = "__0_0.distcp";
  int64_t offset_override = -1, length_override = -1;  // to point a record somewhere wrong
  std::string transform;                               // one transform_descriptors entry ("zstd"); none when empty
  bool offset_as_text = false;                         // the record's offset pickled as a string
};

struct TestItem {
  std::string key;
  bool tensor = true;
  std::string dtype = "float32";
  Dims shape;
  std::vector<TestChunk> chunks;  // bytes items: one, with the pickled object as its record
};

struct MetadataStyle {
  bool old_properties = false;  // torch 1.13: a dataclass with a dict state in _shard.sharded_tensor
  std::string unknown_global;   // "module name" placed in planner_data
};

class MetadataWriter {
 public:
  explicit MetadataWriter(MetadataStyle style) : style_(std::move(style)) {}

  std::string write(const std::vector<TestItem>& items,
                    const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& where) {
    const std::string m = "torch.distributed.checkpoint.metadata";
    p_.proto(2).global(m, "Metadata").no_args_new().op('}').mark();
    p_.str("state_dict_metadata").op('}').mark();
    for (const auto& item : items) {
      p_.str(item.key);
      if (item.tensor)
        tensor_metadata(item);
      else
        p_.global(m, "BytesStorageMetadata").no_args_new();
    }
    p_.op('u').str("storage_data").op('}').mark();
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t c = 0; c < items[i].chunks.size(); ++c) storage_entry(items[i], items[i].chunks[c], where[i][c]);
    p_.op('u').str("planner_data");
    if (style_.unknown_global.empty()) {
      p_.op('N');
    } else {
      const size_t space = style_.unknown_global.find(' ');
      p_.global(style_.unknown_global.substr(0, space), style_.unknown_global.substr(space + 1))
          .mark()
          .integer(1)
          .tuple()
          .op('R');
    }
    p_.str("version").str("1.0.0").op('u').op('b').stop();
    return p_.bytes;
  }

 private:
  void size(const Dims& dims) {  // torch.Size((dims,)) with the global memoized at 1
    if (size_memoized_)
      p_.get(1);
    else
      p_.global("torch", "Size").put(1);
    size_memoized_ = true;
    p_.mark().ints(dims).tuple().op('R');
  }
  void properties(const std::string& dtype) {
    if (style_.old_properties) {
      p_.global("torch.distributed._shard.sharded_tensor.metadata", "TensorProperties").no_args_new().op('}').mark();
      p_.str("dtype").global("torch", dtype).str("layout").global("torch", "strided").str("requires_grad").op('\x89');
      p_.str("memory_format").global("torch", "contiguous_format").str("pin_memory").op('\x89').op('u').op('b');
      return;
    }
    const std::string m = "torch.distributed.checkpoint.metadata";
    p_.global(m, "TensorProperties").no_args_new().mark().global("torch", dtype);
    p_.global("torch.serialization", "_get_layout").mark().str("torch.strided").tuple().op('R').op('\x89');
    p_.global(m, "_MEM_FORMAT_ENCODING").mark().integer(0).tuple().op('R').op('\x89').tuple().op('b');
  }
  void tensor_metadata(const TestItem& item) {
    const std::string m = "torch.distributed.checkpoint.metadata";
    p_.global(m, "TensorStorageMetadata").no_args_new().op('}').mark();
    p_.str("properties");
    properties(item.dtype);
    p_.str("size");
    size(item.shape);
    p_.str("chunks").op(']').mark();
    for (const auto& c : item.chunks) {
      p_.global(m, "ChunkStorageMetadata").no_args_new().op('}').mark().str("offsets");
      size(c.offsets);
      p_.str("sizes");
      size(c.sizes);
      p_.op('u').op('b');
    }
    p_.op('e').op('u').op('b');
  }
  void storage_entry(const TestItem& item, const TestChunk& c, std::pair<uint64_t, uint64_t> at) {
    p_.global("torch.distributed.checkpoint.metadata", "MetadataIndex").no_args_new().op('}').mark();
    p_.str("fqn").str(item.key);
    if (item.tensor) {
      p_.str("offset");
      size(c.offsets);
    }
    p_.str("index").integer(0).op('u').op('b');
    p_.global("torch.distributed.checkpoint.filesystem", "_StorageInfo").no_args_new().op('}').mark();
    p_.str("relative_path").str(c.file).str("offset");
    if (c.offset_as_text)
      p_.str(std::to_string(at.first));
    else
      p_.integer(static_cast<int64_t>(at.first));
    if (!c.transform.empty()) p_.str("transform_descriptors").op(']').mark().str(c.transform).op('e');
    p_.str("length").integer(static_cast<int64_t>(at.second)).op('u').op('b');
  }

  MetadataStyle style_;
  PickleWriter p_;
  bool size_memoized_ = false;
};

// Writes every chunk's record into its file (in order) and the .metadata that points at them.
void write_dcp(const std::string& dir, const std::vector<TestItem>& items, const MetadataStyle& style = {}) {
  std::map<std::string, std::string> files;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> where;
  for (const auto& item : items) {
    where.emplace_back();
    for (const auto& c : item.chunks) {
      std::string& f = files[c.file];
      const uint64_t offset = c.offset_override >= 0 ? static_cast<uint64_t>(c.offset_override) : f.size();
      const uint64_t length = c.length_override >= 0 ? static_cast<uint64_t>(c.length_override) : c.record.size();
      where.back().emplace_back(offset, length);
      f += c.record;
    }
  }
  for (const auto& [name, bytes] : files) write_file(dir + "/" + name, bytes);
  write_file(dir + "/.metadata", MetadataWriter(style).write(items, where));
}

// Runs `f`, expecting a CheckpointError whose message holds every one of `parts`.
template <class F>
std::string expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const CheckpointError& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no CheckpointError";
  return "";
}

// ---- fixtures written by PyTorch ----------------------------------------------------------------

// Every key, kind, dtype and shape as expected.json says, and each tensor's float64 sum and sum of
// squares after reassembly.
void check_against_expected(const std::string& folder) {
  const nlohmann::json expected = nlohmann::json::parse(read_file(folder + "/expected.json"));
  const CheckpointView view = CheckpointView::open(folder);
  EXPECT_EQ(view.format(), "pytorch-dcp");
  EXPECT_EQ(view.entries().size(), expected["metadata_keys"].size());
  for (const auto& [key, cls] : expected["metadata_keys"].items()) {
    const meshtest::CheckpointEntry* e = view.find(key);
    ASSERT_NE(e, nullptr) << key;
    EXPECT_EQ(e->is_tensor, cls == "TensorStorageMetadata") << key;
    EXPECT_GT(e->bytes, 0u) << key;
    EXPECT_GT(e->chunks, 0u) << key;
  }
  for (const auto& [key, want] : expected["tensors"].items()) {
    const meshtest::CheckpointEntry* e = view.find(key);
    ASSERT_NE(e, nullptr) << key;
    EXPECT_EQ(e->dtype, want["dtype"].get<std::string>()) << key;
    EXPECT_EQ(e->shape, want["shape"].get<Dims>()) << key;
    const std::vector<double> values = view.read_tensor(key);
    double s = 0, sq = 0;
    for (double x : values) {
      s += x;
      sq += x * x;
    }
    const double want_sum = want["sum"], want_sumsq = want["sumsq"];
    EXPECT_LE(std::fabs(s - want_sum), 1e-12 * std::max(1.0, std::fabs(want_sum))) << key;
    EXPECT_LE(std::fabs(sq - want_sumsq), 1e-12 * std::max(1.0, std::fabs(want_sumsq))) << key;
    if (want.contains("wsum")) {  // order-sensitive: each chunk in its place (make_dcp_fixtures.py)
      double wsum = 0, scale = 1;
      for (size_t i = 0; i < values.size(); ++i) {
        wsum += static_cast<double>(i + 1) * values[i];
        scale += static_cast<double>(i + 1) * std::fabs(values[i]);
      }
      EXPECT_LE(std::fabs(wsum - want["wsum"].get<double>()), 1e-12 * scale) << key;
    }
  }
}

class TorchFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchFixture, KeysShapesAndSumsMatchExpected) {
  const std::string folder = shared_fixtures() + "/" + GetParam();
  if (!fs::exists(folder + "/expected.json"))
    GTEST_SKIP() << folder << " is absent (the shared fixtures are not checked out)";
  check_against_expected(folder);
  EXPECT_TRUE(CheckpointView::open(folder).warnings().empty());
}

INSTANTIATE_TEST_SUITE_P(Dcp, TorchFixture, ::testing::Values("canonical", "parametrize"));

// Made by tools/fixtures/make_dcp_fixtures.py on a machine with PyTorch.
class MadeFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(MadeFixture, KeysShapesAndSumsMatchExpected) {
  const std::string folder = std::string(MESHTEST_SOURCE_DIR) + "/tests/fixtures/dcp-made/" + GetParam();
  if (!fs::exists(folder + "/expected.json"))
    GTEST_SKIP() << folder
                 << " is absent: run tools/fixtures/make_dcp_fixtures.py tests/fixtures/dcp-made with PyTorch";
  check_against_expected(folder);
}

INSTANTIATE_TEST_SUITE_P(Dcp, MadeFixture, ::testing::Values("bf16", "uneven-shard0", "mesh-2x2", "protocol2"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

// A copy of the canonical fixture's step folder to damage.
class DamagedFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = shared_fixtures() + "/canonical/step-5";
    if (!fs::exists(source_ + "/.metadata")) GTEST_SKIP() << source_ << " is absent";
    step_ = tmp_.path() + "/step-5";
    fs::copy(source_, step_);
  }
  // The key whose record starts at `offset` of `file`.
  std::string key_at(const std::string& file, uint64_t offset) {
    for (const auto& item : meshtest::dcp::read_metadata(source_).items)
      for (const auto& c : item.chunks)
        if (c.record.file == file && c.record.offset == offset) return item.key;
    return "";
  }
  void damage(const std::string& file, size_t at, const std::string& bytes) {
    std::string data = read_file(step_ + "/" + file);
    data.replace(at, bytes.size(), bytes);
    fs::permissions(step_ + "/" + file, fs::perms::owner_write, fs::perm_options::add);
    write_file(step_ + "/" + file, data);
  }

  TempDir tmp_;
  std::string source_, step_;
};

TEST_F(DamagedFixture, TruncatedMetadataNamesTheFileAndOffset) {
  const std::string meta = read_file(step_ + "/.metadata");
  fs::permissions(step_ + "/.metadata", fs::perms::owner_write, fs::perm_options::add);
  for (size_t cut : {size_t{1}, size_t{11}, meta.size() / 2, meta.size() - 1}) {
    write_file(step_ + "/.metadata", meta.substr(0, cut));
    expect_error([&] { CheckpointView::open(step_); }, {step_ + "/.metadata", "byte "});
  }
}

TEST_F(DamagedFixture, UnknownOpcodeNamesTheByteAndOpcode) {
  damage(".metadata", 11, "\xff");  // the first opcode after PROTO and FRAME
  expect_error([&] { CheckpointView::open(step_); }, {step_ + "/.metadata", "byte 11", "0xff", "unknown opcode"});
}

TEST_F(DamagedFixture, RecordBeyondTheEndOfTheFileNamesFileAndKey) {
  const std::string file = step_ + "/__1_0.distcp";
  fs::permissions(file, fs::perms::owner_write, fs::perm_options::add);
  fs::resize_file(file, fs::file_size(file) / 2);
  const CheckpointView view = CheckpointView::open(step_);
  size_t failed = 0;
  for (const auto& e : view.entries()) {
    if (!e.is_tensor) continue;
    try {
      view.read_tensor(e.key);
    } catch (const CheckpointError& err) {
      ++failed;
      const std::string msg = err.what();
      EXPECT_NE(msg.find("__1_0.distcp"), std::string::npos) << msg;
      EXPECT_NE(msg.find("key '" + e.key + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("lies beyond the end of the file"), std::string::npos) << msg;
    }
  }
  EXPECT_GT(failed, 0u);
}

TEST_F(DamagedFixture, DamagedZipNamesFileAndKey) {
  const std::string key = key_at("__0_0.distcp", 0);
  ASSERT_FALSE(key.empty());
  const std::string original = read_file(source_ + "/__0_0.distcp");
  const size_t eocd = original.find(std::string("PK\x05\x06", 4));
  const size_t central = original.find(std::string("PK\x01\x02", 4));
  struct Case {
    size_t at;
    std::string bytes, says;
  };
  for (const Case& c :
       {Case{eocd, "XXXX", "end-of-central-directory"}, Case{central + 10, std::string("\x08", 1), "compressed"},
        Case{central, "XXXX", "bad signature"}}) {
    fs::remove_all(step_);
    fs::copy(source_, step_);
    damage("__0_0.distcp", c.at, c.bytes);
    const CheckpointView view = CheckpointView::open(step_);
    expect_error([&] { view.read_tensor(key); }, {"__0_0.distcp", "key '" + key + "'", c.says});
  }
}

TEST_F(DamagedFixture, FlippedDataByteFailsTheCrc) {
  const std::string key = key_at("__0_0.distcp", 0);
  const std::string original = read_file(source_ + "/__0_0.distcp");
  // The first record's tensor entry: its local header, then name, extra and the data.
  const size_t header = original.find("archive/data/0") - 30;
  const size_t data = header + 30 + static_cast<uint8_t>(original[header + 26]) +
                      256 * static_cast<uint8_t>(original[header + 27]) + static_cast<uint8_t>(original[header + 28]) +
                      256 * static_cast<uint8_t>(original[header + 29]);
  damage("__0_0.distcp", data + 5, std::string(1, static_cast<char>(original[data + 5] ^ 0x40)));
  expect_error([&] { CheckpointView::open(step_).read_tensor(key); }, {"__0_0.distcp", "key '" + key + "'", "CRC-32"});
}

// ---- hand-built checkpoints ---------------------------------------------------------------------

TEST(DcpHandBuilt, Protocol2WithTorch113TensorPropertiesAndStridedBf16Records) {
  TempDir tmp;
  // A transposed view: storage holds 0..5 as [2, 3] row-major; the tensor is its [3, 2] transpose.
  TensorBlob transposed{"FloatStorage", floats({0, 1, 2, 3, 4, 5}), 6, 0, {3, 2}, {1, 3}};
  // bf16 with a storage offset: storage [9, 1.5, -2, 0.25], the tensor is its last 3.
  std::string bf;
  for (float f : {9.0f, 1.5f, -2.0f, 0.25f}) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bf += le_bytes(bits >> 16, 2);
  }
  TensorBlob bf16{"BFloat16Storage", bf, 4, 1, {3}, {1}};
  write_dcp(tmp.path(),
            {{"a", true, "float32", {3, 2}, {{{0, 0}, {3, 2}, make_record(transposed)}}},
             {"b", true, "bfloat16", {3}, {{{0}, {3}, make_record(bf16, /*zip64=*/true)}}},
             {"train_state.step", false, "", {}, {{{}, {}, "not parsed"}}}},
            MetadataStyle{/*old_properties=*/true, ""});
  const CheckpointView view = CheckpointView::open(tmp.path());
  ASSERT_EQ(view.entries().size(), 3u);
  EXPECT_EQ(view.find("a")->dtype, "float32");
  EXPECT_EQ(view.find("b")->dtype, "bfloat16");
  // A key that is not there, sorting between two that are and after all of them: none, never a neighbour.
  EXPECT_EQ(view.find("aa"), nullptr);
  EXPECT_EQ(view.find("zz"), nullptr);
  EXPECT_FALSE(view.find("train_state.step")->is_tensor);
  EXPECT_EQ(view.find("train_state.step")->bytes, 10u);
  EXPECT_EQ(view.read_tensor("a"), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(view.read_tensor("b"), (std::vector<double>{1.5, -2, 0.25}));
  EXPECT_TRUE(view.warnings().empty()) << view.warnings()[0];
  expect_error([&] { view.read_tensor("train_state.step"); }, {"key 'train_state.step'", "not a tensor"});
  expect_error([&] { view.read_tensor("nope"); }, {"key 'nope'"});
}

TEST(DcpHandBuilt, ReassemblesA2DMeshOfUnevenChunks) {
  TempDir tmp;
  // [5, 4] split into rows 0-2 x cols 0-1, rows 0-2 x cols 2-3, rows 3-4 x all cols.
  write_dcp(tmp.path(), {{"w",
                          true,
                          "float32",
                          {5, 4},
                          {{{0, 0}, {3, 2}, counting_record({3, 2}, 0)},
                           {{0, 2}, {3, 2}, counting_record({3, 2}, 100)},
                           {{3, 0}, {2, 4}, counting_record({2, 4}, 200)}}}});
  const auto v = CheckpointView::open(tmp.path()).read_tensor("w");
  EXPECT_EQ(
      v, (std::vector<double>{0, 1, 100, 101, 2, 3, 102, 103, 4, 5, 104, 105, 200, 201, 202, 203, 204, 205, 206, 207}));
}

// Chunks at one row offset are told apart by their other dims whatever order they are listed
// in (the right half before the left is no overlap), and a chunk that holds part of a middle
// dim is placed run by run, at its own rows: a resharded save lists chunks in any such way.
TEST(DcpHandBuilt, ChunksListedRightToLeftOrSplitAlongAMiddleDimReassemble) {
  TempDir tmp;
  write_dcp(tmp.path() + "/cols",
            {{"w",
              true,
              "float32",
              {2, 4},
              {{{0, 2}, {2, 2}, counting_record({2, 2}, 100)}, {{0, 0}, {2, 2}, counting_record({2, 2}, 0)}}}});
  EXPECT_EQ(CheckpointView::open(tmp.path() + "/cols").read_tensor("w"),
            (std::vector<double>{0, 1, 100, 101, 2, 3, 102, 103}));
  write_dcp(tmp.path() + "/middle", {{"w",
                                      true,
                                      "float32",
                                      {2, 2, 2},
                                      {{{0, 0, 0}, {2, 1, 2}, counting_record({2, 1, 2}, 0)},
                                       {{0, 1, 0}, {2, 1, 2}, counting_record({2, 1, 2}, 100)}}}});
  EXPECT_EQ(CheckpointView::open(tmp.path() + "/middle").read_tensor("w"),
            (std::vector<double>{0, 1, 100, 101, 2, 3, 102, 103}));
}

// A scalar tensor (shape []) saved as its one chunk reads as its value: a single chunk is no
// overlap (a loss scale or a step counter is saved so).
TEST(DcpHandBuilt, AScalarTensorOfOneChunkReads) {
  TempDir tmp;
  write_dcp(tmp.path(), {{"scale", true, "float32", {}, {{{}, {}, counting_record({}, 7)}}}});
  const CheckpointView view = CheckpointView::open(tmp.path());
  EXPECT_EQ(view.read_tensor("scale"), (std::vector<double>{7}));
  EXPECT_NO_THROW(view.check_stored_once());
}

// Two records that share bytes of a file are refused naming both, in file order: the keys a
// person looks for in the writer.
TEST(DcpHandBuilt, OverlappingRecordsAreRefusedNamingBothKeys) {
  TempDir tmp;
  TestChunk b{{0}, {2}, counting_record({2}, 10)};
  b.offset_override = 4;  // inside a's 8 bytes
  write_dcp(tmp.path(),
            {{"a", true, "float32", {2}, {{{0}, {2}, counting_record({2}, 0)}}}, {"b", true, "float32", {2}, {b}}});
  const std::string error = expect_error([&] { CheckpointView::open(tmp.path()).check_stored_once(); }, {"overlap"});
  EXPECT_EQ(error, tmp.path() + "/__0_0.distcp: the records of key 'a' chunk at [0] and key 'b' chunk at [0] overlap");
}

// Mutant: reading a tensor stops at its first empty chunk (`break` for `continue`), so the chunks
// listed after it are never read. Uneven shards give ranks empty chunks; a writer may list one first.
TEST(DcpHandBuilt, AnEmptyChunkListedFirstDoesNotEndTheRead) {
  TempDir tmp;
  write_dcp(tmp.path(), {{"w",
                          true,
                          "float32",
                          {4},
                          {{{4}, {0}, counting_record({0})},
                           {{0}, {2}, counting_record({2}, 10)},
                           {{2}, {2}, counting_record({2}, 20)}}}});
  EXPECT_EQ(CheckpointView::open(tmp.path()).read_tensor("w"), (std::vector<double>{10, 11, 20, 21}));
}

// Mutants: the allow-list of globals loosened, so that any name of torch.serialization or of
// collections (or any module's _get_layout, OrderedDict) passes as known. Each must still be named.
TEST(DcpHandBuilt, OnlyTheKnownNamesOfAModulePassTheAllowList) {
  for (const char* global :
       {"torch.serialization load", "collections Counter", "mylib _get_layout", "mylib OrderedDict", "copyreg other",
        "mylib _reconstructor", "_codecs decode", "mylib encode"}) {
    TempDir tmp;
    write_dcp(tmp.path(), {{"w", true, "float32", {2}, {{{0}, {2}, counting_record({2})}}}},
              MetadataStyle{false, global});
    const CheckpointView view = CheckpointView::open(tmp.path());
    std::string dotted = global;
    dotted[dotted.find(' ')] = '.';
    ASSERT_EQ(view.warnings().size(), 1u) << global;
    EXPECT_NE(view.warnings()[0].find(dotted), std::string::npos) << view.warnings()[0];
  }
}

// The names protocol 2 writes for plain objects and bytes pass without a warning, under both
// spellings of copyreg.
TEST(DcpHandBuilt, TheReconstructorAndTheBytesEncoderAreKnownNames) {
  for (const char* global : {"copyreg _reconstructor", "copy_reg _reconstructor", "_codecs encode"}) {
    TempDir tmp;
    write_dcp(tmp.path(), {{"w", true, "float32", {2}, {{{0}, {2}, counting_record({2})}}}},
              MetadataStyle{false, global});
    EXPECT_TRUE(CheckpointView::open(tmp.path()).warnings().empty()) << global;
  }
}

// A chunk that reaches past its tensor's end, though it starts inside it, is refused with the dim.
TEST(DcpHandBuilt, AChunkReachingPastItsTensorIsRefused) {
  TempDir tmp;
  write_dcp(tmp.path(),
            {{"w", true, "float32", {4}, {{{0}, {2}, counting_record({2})}, {{2}, {3}, counting_record({3})}}}});
  expect_error([&] { CheckpointView::open(tmp.path()); },
               {"key 'w'", "chunk at offset 2 size 3 in dim 0 lies outside the tensor's 4"});
}

// A record DCP wrote through a transform (compressed) is refused by name, never read as raw bytes;
// a record offset that is not an integer is refused at load.
TEST(DcpHandBuilt, ATransformedRecordAndATextOffsetAreRefused) {
  TempDir tmp;
  TestChunk compressed{{0}, {2}, counting_record({2})};
  compressed.transform = "zstd";
  write_dcp(tmp.path() + "/zstd", {{"w", true, "float32", {2}, {compressed}}});
  expect_error([&] { CheckpointView::open(tmp.path() + "/zstd").read_tensor("w"); },
               {"key 'w'", "transform_descriptors", "zstd", "not supported"});
  TestChunk text{{0}, {2}, counting_record({2})};
  text.offset_as_text = true;
  write_dcp(tmp.path() + "/text", {{"w", true, "float32", {2}, {text}}});
  expect_error([&] { CheckpointView::open(tmp.path() + "/text").read_tensor("w"); }, {"offset", "not an int"});
}

TEST(DcpHandBuilt, UnknownGlobalIsAWarningNotAnError) {
  TempDir tmp;
  write_dcp(tmp.path(), {{"w", true, "float32", {2}, {{{0}, {2}, counting_record({2})}}}},
            MetadataStyle{false, "mylib.sub Weird"});
  const CheckpointView view = CheckpointView::open(tmp.path());
  ASSERT_EQ(view.warnings().size(), 1u);
  EXPECT_NE(view.warnings()[0].find("mylib.sub.Weird"), std::string::npos) << view.warnings()[0];
  EXPECT_EQ(view.read_tensor("w"), (std::vector<double>{0, 1}));
}

TEST(DcpHandBuilt, MissingAndOverlappingChunksAreRefused) {
  TempDir tmp;
  write_dcp(tmp.path() + "/missing", {{"w", true, "float32", {4, 2}, {{{0, 0}, {2, 2}, counting_record({2, 2})}}}});
  expect_error([&] { CheckpointView::open(tmp.path() + "/missing").read_tensor("w"); },
               {".metadata", "key 'w'", "cover 4 of the 8"});
  write_dcp(tmp.path() + "/overlap",
            {{"w",
              true,
              "float32",
              {4, 2},
              {{{0, 0}, {3, 2}, counting_record({3, 2})}, {{2, 0}, {2, 2}, counting_record({2, 2})}}}});
  expect_error([&] { CheckpointView::open(tmp.path() + "/overlap").read_tensor("w"); }, {"key 'w'", "overlap"});
}

// Two chunks that overlap by exactly the rows a missing chunk would hold: the volumes add up to
// the tensor's, so only the overlap test refuses it (else row 3 would read as zeros).
TEST(DcpHandBuilt, OverlappingChunksWhoseVolumesAddUpAreRefused) {
  TempDir tmp;
  write_dcp(tmp.path(), {{"w",
                          true,
                          "float32",
                          {4, 2},
                          {{{0, 0}, {3, 2}, counting_record({3, 2})}, {{2, 0}, {1, 2}, counting_record({1, 2})}}}});
  const std::string message =
      expect_error([&] { CheckpointView::open(tmp.path()).read_tensor("w"); }, {"key 'w'", "overlap"});
  EXPECT_NE(message.find("[0, 0] and [2, 0]"), std::string::npos) << message;
}

TEST(DcpHandBuilt, RecordOutsideTheFileNamesFileKeyOffsetAndSize) {
  TempDir tmp;
  TestChunk c{{0}, {2}, counting_record({2})};
  c.offset_override = 123456;
  write_dcp(tmp.path(), {{"w", true, "float32", {2}, {c}}});
  const std::string size = std::to_string(counting_record({2}).size());
  expect_error(
      [&] { CheckpointView::open(tmp.path()).read_tensor("w"); },
      {tmp.path() + "/__0_0.distcp", "key 'w'", "offset 123456", "beyond the end of the file (size " + size + ")"});
}

// Mutant: the bound as offset + length <= size + offset, so a record that starts inside the file
// and runs past its end is read. Refused with the file, key, offset and size.
TEST(DcpHandBuilt, ARecordStartingInsideTheFileAndEndingPastItIsRefused) {
  TempDir tmp;
  const std::string record = counting_record({2});
  TestChunk c{{0}, {2}, record};
  c.offset_override = 10;
  c.length_override = static_cast<int64_t>(record.size()) - 5;  // ends 5 bytes past the end
  write_dcp(tmp.path(), {{"w", true, "float32", {2}, {c}}});
  expect_error([&] { CheckpointView::open(tmp.path()).read_tensor("w"); },
               {tmp.path() + "/__0_0.distcp", "key 'w'", "offset 10",
                "beyond the end of the file (size " + std::to_string(record.size()) + ")"});
}

TEST(DcpHandBuilt, RecordsThatDisagreeWithTheMetadataAreRefused) {
  TempDir tmp;
  TensorBlob bf16{"BFloat16Storage", std::string(8, '\0'), 4, 0, {4}, {1}};
  TestChunk short_record{{0}, {4}, counting_record({4})};
  short_record.length_override = 8;
  write_dcp(tmp.path(), {{"dtype", true, "float32", {4}, {{{0}, {4}, make_record(bf16)}}},
                         {"shape", true, "float32", {4}, {{{0}, {4}, counting_record({2, 2})}}},
                         {"short", true, "float32", {4}, {short_record}}});
  const CheckpointView view = CheckpointView::open(tmp.path());
  expect_error([&] { view.read_tensor("dtype"); },
               {"__0_0.distcp", "key 'dtype'", "holds bfloat16 but .metadata says float32"});
  expect_error([&] { view.read_tensor("shape"); }, {"key 'shape'", "holds a [2, 2] tensor but .metadata says [4]"});
  expect_error([&] { view.read_tensor("short"); }, {"key 'short'", "length 8 is too short"});
}

// `bytes` at `offset` of a new file whose hole takes no disk; false where the filesystem cannot.
bool write_sparse(const std::string& path, uint64_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) return false;
  // A small write first: a filesystem without holes shows it before gigabytes are written.
  bool ok = ::pwrite(fd, "", 1, static_cast<off_t>(offset) - 1) == 1;
  struct stat st {};
  ok = ok && ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 < (uint64_t{64} << 20);
  ok = ok && ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  return ok;
}

TEST(DcpHandBuilt, RecordBeyondTwoGiBIsRead) {
  TempDir tmp;
  const std::string record = counting_record({3, 4}, 7);
  const uint64_t offset = (uint64_t{1} << 31) + 4096 + 3;
  if (!write_sparse(tmp.path() + "/__0_0.distcp", offset, record))
    GTEST_SKIP() << tmp.path() << " cannot hold a sparse 2 GiB file";
  TestChunk c{{0, 0}, {3, 4}, record, "__0_0.distcp", static_cast<int64_t>(offset), -1};
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> where{{{offset, record.size()}}};
  write_file(tmp.path() + "/.metadata", MetadataWriter({}).write({{"w", true, "float32", {3, 4}, {c}}}, where));
  const auto v = CheckpointView::open(tmp.path()).read_tensor("w");
  ASSERT_EQ(v.size(), 12u);
  EXPECT_EQ(v.front(), 7);
  EXPECT_EQ(v.back(), 18);
}

TEST(DcpHandBuilt, FixtureRecordCopiedBeyondTwoGiBReadsTheSame) {
  const std::string source = shared_fixtures() + "/canonical/step-5";
  if (!fs::exists(source + "/.metadata")) GTEST_SKIP() << source << " is absent";
  const auto meta = meshtest::dcp::read_metadata(source);
  const auto& item = *std::find_if(meta.items.begin(), meta.items.end(),
                                   [](const auto& i) { return i.is_tensor && i.shape.size() == 2; });
  const auto& chunk = item.chunks[0];
  const std::string record =
      read_file(source + "/" + chunk.record.file).substr(chunk.record.offset, chunk.record.length);
  TempDir tmp;
  const uint64_t offset = (uint64_t{5} << 30) + 17;
  if (!write_sparse(tmp.path() + "/__0_0.distcp", offset, record))
    GTEST_SKIP() << tmp.path() << " cannot hold a sparse 5 GiB file";
  TestChunk c{Dims(chunk.sizes.size(), 0), chunk.sizes, record};
  write_file(tmp.path() + "/.metadata",
             MetadataWriter({}).write({{"w", true, "float32", chunk.sizes, {c}}}, {{{offset, record.size()}}}));
  EXPECT_EQ(CheckpointView::open(tmp.path()).read_tensor("w"), meshtest::dcp::read_chunk(source, item, chunk));
}

// ---- folders of steps ---------------------------------------------------------------------------

TEST(CheckpointFolders, NewestCompleteStepOrTheOneAskedFor) {
  TempDir tmp;
  write_dcp(tmp.path() + "/step-2", {{"w", true, "float32", {2}, {{{0}, {2}, counting_record({2}, 2)}}}});
  write_dcp(tmp.path() + "/step-10", {{"w", true, "float32", {2}, {{{0}, {2}, counting_record({2}, 10)}}}});
  fs::create_directories(tmp.path() + "/step-20");  // a save that died
  EXPECT_EQ(CheckpointView::open(tmp.path()).step_dir(), tmp.path() + "/step-10");
  EXPECT_EQ(CheckpointView::open(tmp.path(), 2).read_tensor("w"), (std::vector<double>{2, 3}));
  expect_error([&] { CheckpointView::open(tmp.path(), 20); }, {"step-20", "no .metadata"});
  expect_error([&] { CheckpointView::open(tmp.path(), 7); }, {"no step-7", "step-2, step-10, step-20 (no .metadata)"});
  expect_error([&] { CheckpointView::open(tmp.path() + "/none"); }, {"no such folder"});
  fs::create_directories(tmp.path() + "/empty");  // a checkpoint folder the run never saved into
  expect_error([&] { CheckpointView::open(tmp.path() + "/empty"); }, {"no complete step-<N> folder (found: none)"});
  write_file(tmp.path() + "/junk/.metadata", "hello");
  expect_error([&] { CheckpointView::open(tmp.path() + "/junk"); }, {"junk/.metadata", "neither a pickle"});
}

// ---- meshtrain's format -------------------------------------------------------------------------

// A [3, 2] float32 tensor in two row chunks with mix64 leaf checksums, and one object key.
void write_meshtrain(const std::string& dir) {
  const std::string a = floats({1, 2, 3, 4}), b = floats({5, 6});
  auto hashes = [](const std::string& data, size_t leaf) {
    std::string out;
    for (size_t at = 0; at < data.size(); at += leaf)
      out += le_bytes(contract::mix64(data.data() + at, std::min(leaf, data.size() - at)), 8);
    return out;
  };
  const std::string file = a + b + hashes(a, 8) + hashes(b, 8);
  write_file(dir + "/__0_0.distcp", file);
  nlohmann::json chunk0 = {{"offsets", {0, 0}}, {"sizes", {2, 2}}, {"file", "__0_0.distcp"}, {"byte_offset", 0},
                           {"byte_length", 16}, {"leaf_bytes", 8}, {"hash_offset", 24}};
  nlohmann::json chunk1 = {{"offsets", {2, 0}}, {"sizes", {1, 2}}, {"file", "__0_0.distcp"}, {"byte_offset", 16},
                           {"byte_length", 8},  {"leaf_bytes", 8}, {"hash_offset", 40}};
  nlohmann::json doc = {
      {"format_version", 2},
      {"step", 3},
      {"keys",
       {{"model.w", {{"kind", "tensor"}, {"dtype", "float32"}, {"shape", {3, 2}}, {"chunks", {chunk0, chunk1}}}},
        {"train_state", {{"kind", "object"}, {"value", {{"step", 3}}}}}}}};
  write_file(dir + "/.metadata", doc.dump());
}

TEST(Meshtrain, ReadsKeysAndReassemblesChunks) {
  TempDir tmp;
  write_meshtrain(tmp.path() + "/step-3");
  const CheckpointView view = CheckpointView::open(tmp.path());
  EXPECT_EQ(view.format(), "meshtrain");
  ASSERT_EQ(view.entries().size(), 2u);
  EXPECT_EQ(view.entries()[0].key, "model.w");
  EXPECT_EQ(view.entries()[0].shape, (Dims{3, 2}));
  EXPECT_EQ(view.entries()[0].chunks, 2u);
  EXPECT_EQ(view.entries()[0].bytes, 24u);
  EXPECT_FALSE(view.find("train_state")->is_tensor);
  EXPECT_EQ(view.read_tensor("model.w"), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

// about() says what the save recorded; a save that recorded no writer's mesh shows "?" there,
// not an empty gap.
TEST(Meshtrain, AboutShowsAQuestionMarkForAnUnrecordedMesh) {
  TempDir tmp;
  write_meshtrain(tmp.path() + "/step-3");
  EXPECT_EQ(CheckpointView::open(tmp.path()).about(), "step 3, format 2, written under ?, key style canonical");
}

// A key of a kind the reader does not know is listed as a non-tensor item with a warning naming
// it; tensors and objects, the kinds meshtrain writes, raise none.
TEST(Meshtrain, OnlyAKeyOfAnUnknownKindIsWarnedAbout) {
  TempDir tmp;
  write_meshtrain(tmp.path());
  EXPECT_TRUE(CheckpointView::open(tmp.path()).warnings().empty());
  auto doc = nlohmann::json::parse(read_file(tmp.path() + "/.metadata"));
  doc["keys"]["rng"] = {{"kind", "blob"}};
  write_file(tmp.path() + "/.metadata", doc.dump());
  const CheckpointView view = CheckpointView::open(tmp.path());
  EXPECT_EQ(view.warnings(), (std::vector<std::string>{tmp.path() + "/.metadata: key 'rng': unknown kind 'blob'; "
                                                                    "listed as a non-tensor item"}));
  EXPECT_FALSE(view.find("rng")->is_tensor);
}

// A chunk whose byte_length is not its elements' bytes, and one running past the end of its
// file, are refused naming the chunk: read as they are, they would shift or cut the tensor.
TEST(Meshtrain, AChunkOfTheWrongLengthOrPastTheFilesEndIsRefused) {
  TempDir tmp;
  write_meshtrain(tmp.path());
  auto doc = nlohmann::json::parse(read_file(tmp.path() + "/.metadata"));
  doc["keys"]["model.w"]["chunks"][1]["byte_length"] = 12;
  write_file(tmp.path() + "/.metadata", doc.dump());
  EXPECT_EQ(expect_error([&] { CheckpointView::open(tmp.path()).read_tensor("model.w"); }, {}),
            tmp.path() +
                "/__0_0.distcp: chunk of key 'model.w' at offsets [2, 0] (byte offset 16 length 12): byte_length "
                "is not 4 x the chunk's 2 elements");
  write_meshtrain(tmp.path());
  fs::resize_file(tmp.path() + "/__0_0.distcp", 20);  // chunk 1 is bytes 16..24
  EXPECT_EQ(expect_error([&] { CheckpointView::open(tmp.path()).read_tensor("model.w"); }, {}),
            tmp.path() +
                "/__0_0.distcp: chunk of key 'model.w' at offsets [2, 0] (byte offset 16 length 8) lies beyond the "
                "end of the file (size 20)");
}

// An empty chunk (a rank whose shard of an uneven split is empty) may sit at the very end of its
// file: it holds no byte past it, and the tensor reads whole.
TEST(Meshtrain, AnEmptyChunkAtTheEndOfItsFileIsRead) {
  TempDir tmp;
  write_meshtrain(tmp.path());
  auto doc = nlohmann::json::parse(read_file(tmp.path() + "/.metadata"));
  const auto end = fs::file_size(tmp.path() + "/__0_0.distcp");
  doc["keys"]["model.w"]["chunks"].push_back(
      {{"offsets", {3, 0}}, {"sizes", {0, 2}}, {"file", "__0_0.distcp"}, {"byte_offset", end}, {"byte_length", 0}});
  write_file(tmp.path() + "/.metadata", doc.dump());
  EXPECT_EQ(CheckpointView::open(tmp.path()).read_tensor("model.w"), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

// A chunk whose bytes are no multiple of its leaf size ends in a short leaf, checksummed over its
// own bytes only: an intact save of 3 floats in 8-byte leaves verifies.
TEST(Meshtrain, AShortLastLeafIsCheckedOverItsOwnBytes) {
  TempDir tmp;
  const std::string data = floats({1, 2, 3});
  const std::string hashes =
      le_bytes(contract::mix64(data.data(), 8), 8) + le_bytes(contract::mix64(data.data() + 8, 4), 8);
  write_file(tmp.path() + "/__0_0.distcp", data + hashes);
  nlohmann::json chunk = {{"offsets", {0}},    {"sizes", {3}},    {"file", "__0_0.distcp"}, {"byte_offset", 0},
                          {"byte_length", 12}, {"leaf_bytes", 8}, {"hash_offset", 12}};
  write_file(
      tmp.path() + "/.metadata",
      nlohmann::json{
          {"format_version", 2},
          {"step", 3},
          {"keys", {{"model.b", {{"kind", "tensor"}, {"dtype", "float32"}, {"shape", {3}}, {"chunks", {chunk}}}}}}}
          .dump());
  EXPECT_EQ(CheckpointView::open(tmp.path()).read_tensor("model.b"), (std::vector<double>{1, 2, 3}));
}

TEST(Meshtrain, DamagedDataFailsItsChecksumAndFormat1IsRefused) {
  TempDir tmp;
  write_meshtrain(tmp.path());
  std::string data = read_file(tmp.path() + "/__0_0.distcp");
  data[17] ^= 1;
  write_file(tmp.path() + "/__0_0.distcp", data);
  expect_error([&] { CheckpointView::open(tmp.path()).read_tensor("model.w"); },
               {"__0_0.distcp", "key 'model.w'", "leaf 0", "checksum"});
  write_file(tmp.path() + "/.metadata", R"({"format_version": 1, "keys": {}})");
  expect_error([&] { CheckpointView::open(tmp.path()); }, {".metadata", "format_version 1"});
}

// JSON numbers that are not integers (a float, or an integer literal beyond uint64, which
// nlohmann reads as a float) are refused naming the key: converting them was undefined behaviour
// (found by checkpoint_fuzz; the input is kept in tests/fuzz/corpus/checkpoint_fuzz/).
TEST(Meshtrain, NumbersThatAreNotIntegersAreRefusedNamingTheKey) {
  TempDir tmp;
  write_meshtrain(tmp.path());
  const std::string meta = read_file(tmp.path() + "/.metadata");
  auto write_with = [&](const std::string& from, const std::string& to) {
    std::string changed = meta;
    const size_t at = changed.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    write_file(tmp.path() + "/.metadata", changed.replace(at, from.size(), to));
  };
  write_with("\"hash_offset\":24", "\"hash_offset\":44444444444444444444444444444444");
  expect_error([&] { CheckpointView::open(tmp.path()); },
               {".metadata", "key 'model.w'", "hash_offset", "not a non-negative integer"});
  write_with("\"byte_offset\":16", "\"byte_offset\":1e30");
  expect_error([&] { CheckpointView::open(tmp.path()); },
               {".metadata", "key 'model.w'", "byte_offset", "not a non-negative integer"});
  write_with("\"leaf_bytes\":8", "\"leaf_bytes\":-8");
  expect_error([&] { CheckpointView::open(tmp.path()); }, {".metadata", "key 'model.w'", "leaf_bytes -8"});
  write_with("\"shape\":[3,2]", "\"shape\":[3.5e20,2]");
  expect_error([&] { CheckpointView::open(tmp.path()); }, {".metadata", "key 'model.w'", "dim", "not an integer"});
  // A leaf_bytes near 2^64 once wrapped the leaf count to 0, and the checksums were skipped.
  write_with("\"leaf_bytes\":8", "\"leaf_bytes\":18446744073709551615");
  expect_error([&] { CheckpointView::open(tmp.path()).read_tensor("model.w"); },
               {"key 'model.w'", "leaf 0", "checksum"});
}

// ---- the unpickler on its own -------------------------------------------------------------------

std::string pickle_error(const std::string& bytes) {
  try {
    meshtest::pickle::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.pkl");
  } catch (const meshtest::pickle::PickleError& e) {
    return e.what();
  }
  return "";
}

// A global is its module and its name, both: the interpreter tells the rebuild functions apart
// by them. STACK_GLOBAL's module and name may take 1024 bytes together, not one more.
TEST(Pickle, AGlobalIsItsModuleAndNameAndTheirLengthIsBounded) {
  const std::string p2 =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n.";
  const auto v = meshtest::pickle::parse(reinterpret_cast<const uint8_t*>(p2.data()), p2.size(), "g.pkl");
  EXPECT_TRUE(v.root().is_global("torch._utils", "_rebuild_tensor_v2"));
  EXPECT_FALSE(v.root().is_global("torch._utils", "_rebuild_parameter"));
  EXPECT_FALSE(v.root().is_global("torch", "_rebuild_tensor_v2"));
  auto stack_global = [](size_t module_bytes, size_t name_bytes) {
    auto text = [](size_t n) { return std::string("X", 1) + le_bytes(n, 4) + std::string(n, 'm'); };
    return std::string("\x80\x04", 2) + text(module_bytes) + text(name_bytes) + "\x93.";
  };
  EXPECT_EQ(pickle_error(stack_global(1000, 24)), "");
  EXPECT_NE(pickle_error(stack_global(1000, 25)).find("longer than 1024 bytes"), std::string::npos);
}

// What a message shows of a pickled value: each level of nesting costs one of `depth`, an object's
// arguments one more than the object, and only containers collapse to "..." (a number never does).
TEST(Pickle, DescribeSpendsOneLevelPerNestingAndCollapsesOnlyContainers) {
  const std::string p = std::string(
      "\x80\x02"
      "cmod\nf\n(K\x01(K\x02ttR.");  // mod.f(1, (2,))
  const auto v = meshtest::pickle::parse(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "d.pkl");
  EXPECT_EQ(meshtest::pickle::describe(v.root(), 3, 200), "mod.f(1, (2,))");
  EXPECT_EQ(meshtest::pickle::describe(v.root(), 2, 200), "mod.f(1, ...)");
}

TEST(Pickle, DamageIsAnErrorNamingFileOffsetAndOpcode) {
  EXPECT_NE(pickle_error("\x80\x04\x8c\x05"
                         "ab")
                .find("x.pkl: byte 2 (opcode 0x8c SHORT_BINUNICODE)"),
            std::string::npos);
  EXPECT_NE(pickle_error(std::string("\x80\x04\x8d", 3) + le_bytes(uint64_t{1} << 60, 8)).find("BINUNICODE8"),
            std::string::npos);
  EXPECT_NE(pickle_error("\x80\x02"
                         "a.")
                .find("byte 2 (opcode 0x61 APPEND): stack underflow"),
            std::string::npos);
  EXPECT_NE(pickle_error("\x80\x02h\x07.").find("memo has no entry 7"), std::string::npos);
  EXPECT_NE(pickle_error("\x80\x02K\x01t.").find("needs a MARK"), std::string::npos);
  EXPECT_NE(pickle_error("\x80\x02K\x01").find("without a STOP"), std::string::npos);
  EXPECT_NE(pickle_error("\x80\x02\xfe.").find("byte 2 (opcode 0xfe): unknown opcode"), std::string::npos);
  EXPECT_NE(pickle_error(std::string("\x80\x02\x8a\x09", 4) + le_bytes(1, 8) + std::string(1, '\x01') + ".")
                .find("wider than 64 bits"),
            std::string::npos);
  EXPECT_NE(pickle_error(std::string("\x95", 1) + le_bytes(1000, 8) + "N.").find("truncated"), std::string::npos);
  EXPECT_NE(pickle_error("").find("x.pkl"), std::string::npos);
}

TEST(Pickle, ValuesOfEveryProtocol) {
  // Protocol 0 text opcodes, then protocol 2-4 binary ones.
  const std::string p0 = "(I42\nF2.5\nS'a\\nb'\nVcaf\\u00e9\nL-7L\nI01\nI00\ntp0\n.";
  const auto v0 = meshtest::pickle::parse(reinterpret_cast<const uint8_t*>(p0.data()), p0.size(), "p0");
  ASSERT_EQ(v0.root().items.size(), 7u);
  EXPECT_EQ(v0.root().items[0]->integer, 42);
  EXPECT_EQ(v0.root().items[1]->real, 2.5);
  EXPECT_EQ(v0.root().items[2]->text, "a\nb");
  EXPECT_EQ(v0.root().items[3]->text, "caf\xc3\xa9");
  EXPECT_EQ(v0.root().items[4]->integer, -7);
  EXPECT_TRUE(v0.root().items[5]->is(meshtest::pickle::Value::Kind::Bool));  // I01 and I00: True and False
  EXPECT_EQ(v0.root().items[5]->integer, 1);
  EXPECT_TRUE(v0.root().items[6]->is(meshtest::pickle::Value::Kind::Bool));
  EXPECT_EQ(v0.root().items[6]->integer, 0);
  // LONG1 of 2^40 and of -1 (one 0xff byte), a memoized list appended to itself (a cycle).
  const std::string p4 = std::string("\x80\x04\x8a\x06", 4) + le_bytes(uint64_t{1} << 40, 6) +
                         std::string(
                             "\x8a\x01\xff]\x94h\x00"
                             "a\x87.",
                             10);
  const auto v4 = meshtest::pickle::parse(reinterpret_cast<const uint8_t*>(p4.data()), p4.size(), "p4");
  ASSERT_EQ(v4.root().items.size(), 3u);
  EXPECT_EQ(v4.root().items[0]->integer, int64_t{1} << 40);
  EXPECT_EQ(v4.root().items[1]->integer, -1);
  EXPECT_EQ(v4.root().items[2]->items[0], v4.root().items[2]);
  EXPECT_LT(meshtest::pickle::describe(v4.root(), 50, 100).size(), 110u);  // the cycle is cut by the bounds
}

}  // namespace

// ---- survivors of tools/mutate.py (docs/reliability.md): each test kills one ----------------

// Every dtype a record may hold converts by its own rule (a mutant that read uint32 through
// another rule survived every other test); an unknown one is refused.
TEST(DcpValues, EveryDtypeConvertsByItsOwnRule) {
  const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(meshtest::element_to_double("uint8", ones), 255.0);
  EXPECT_EQ(meshtest::element_to_double("uint16", ones), 65535.0);
  EXPECT_EQ(meshtest::element_to_double("uint32", ones), 4294967295.0);
  EXPECT_EQ(meshtest::element_to_double("uint64", ones), 18446744073709551615.0);
  EXPECT_EQ(meshtest::element_to_double("int8", ones), -1.0);
  EXPECT_EQ(meshtest::element_to_double("int16", ones), -1.0);
  EXPECT_EQ(meshtest::element_to_double("int32", ones), -1.0);
  EXPECT_EQ(meshtest::element_to_double("int64", ones), -1.0);
  EXPECT_EQ(meshtest::element_to_double("bool", ones), 1.0);
  const uint8_t one_f32[4] = {0x00, 0x00, 0x80, 0x3f}, one_bf16[2] = {0x80, 0x3f}, one_f16[2] = {0x00, 0x3c};
  const uint8_t one_f64[8] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
  EXPECT_EQ(meshtest::element_to_double("float32", one_f32), 1.0);
  EXPECT_EQ(meshtest::element_to_double("bfloat16", one_bf16), 1.0);
  EXPECT_EQ(meshtest::element_to_double("float16", one_f16), 1.0);
  EXPECT_EQ(meshtest::element_to_double("float64", one_f64), 1.0);
  EXPECT_THROW(meshtest::element_to_double("complex64", ones), CheckpointError);
}

// A dtype that is not one of torch's is refused at open, naming it (a mutant accepted any
// global under torch).
TEST(DcpHandBuilt, ADtypeThatIsNotTorchsIsRefused) {
  TempDir tmp;
  write_dcp(tmp.path(), {{"w", true, "float31", {2}, {{{0}, {2}, counting_record({2})}}}});
  expect_error([&] { CheckpointView::open(tmp.path()); }, {"key 'w'", "torch.float31", "not a torch dtype"});
}

// A chunk whose box has fewer dims than its tensor, and a record path naming a folder, are
// refused with the key or the file, not read past.
TEST(DcpHandBuilt, AChunkOfTheWrongRankAndARecordThatIsAFolderAreRefused) {
  TempDir tmp;
  write_dcp(tmp.path() + "/rank", {{"w", true, "float32", {2, 2}, {{{0}, {4}, counting_record({4})}}}});
  expect_error([&] { CheckpointView::open(tmp.path() + "/rank"); },
               {"key 'w'", "chunk offsets/sizes have 1/1 dims, the tensor 2"});
  write_dcp(tmp.path() + "/sizes", {{"w", true, "float32", {2, 2}, {{{0, 0}, {4}, counting_record({4})}}}});
  expect_error([&] { CheckpointView::open(tmp.path() + "/sizes"); },
               {"key 'w'", "chunk offsets/sizes have 2/1 dims, the tensor 2"});
  write_dcp(tmp.path() + "/folder", {{"w", true, "float32", {2}, {{{0}, {2}, counting_record({2})}}}});
  fs::remove(tmp.path() + "/folder/__0_0.distcp");
  fs::create_directories(tmp.path() + "/folder/__0_0.distcp");
  expect_error([&] { CheckpointView::open(tmp.path() + "/folder").read_tensor("w"); },
               {"__0_0.distcp", "not a regular file"});
}
