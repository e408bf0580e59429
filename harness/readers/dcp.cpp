#include "readers/dcp.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace meshtest::dcp {

namespace {

using pickle::Value;
using Kind = pickle::Value::Kind;

[[noreturn]] void fail(const std::string& message) { throw CheckpointError(message); }

// Keys are short in practice; a damaged file's may not be.
std::string key_label(const std::string& key) {
  return "key '" + (key.size() <= 200 ? key : key.substr(0, 200) + "...") + "'";
}

// ---- the globals a DCP folder may name ----------------------------------------------------------

const std::set<std::string>& torch_dtype_names() {
  static const std::set<std::string> names = {"float32",         "float64",
                                              "float16",         "bfloat16",
                                              "int64",           "int32",
                                              "int16",           "int8",
                                              "uint8",           "bool",
                                              "uint16",          "uint32",
                                              "uint64",          "complex32",
                                              "complex64",       "complex128",
                                              "float8_e4m3fn",   "float8_e5m2",
                                              "float8_e4m3fnuz", "float8_e5m2fnuz",
                                              "float8_e8m0fnu",  "float4_e2m1fn_x2",
                                              "qint8",           "quint8",
                                              "qint32"};
  return names;
}

bool is_known_global(const Value& g) {
  static const std::set<std::string> dcp_classes = {
      "Metadata",      "TensorStorageMetadata", "BytesStorageMetadata", "TensorProperties",    "ChunkStorageMetadata",
      "MetadataIndex", "_StorageInfo",          "StorageMeta",          "_MEM_FORMAT_ENCODING"};
  static const std::set<std::string> torch_names = {"Size",          "strided",          "sparse_coo",
                                                    "sparse_csr",    "_mkldnn",          "contiguous_format",
                                                    "channels_last", "channels_last_3d", "preserve_format"};
  if (g.text == "torch") return torch_names.count(g.name) || torch_dtype_names().count(g.name);
  if (g.text == "torch.serialization" && g.name == "_get_layout") return true;
  if (g.text == "pathlib") return g.name.size() >= 4 && g.name.compare(g.name.size() - 4, 4, "Path") == 0;
  if (g.text == "collections" && g.name == "OrderedDict") return true;
  // What protocol 2 writes for sets, bytes and plain objects.
  if ((g.text == "builtins" || g.text == "__builtin__") &&
      (g.name == "set" || g.name == "frozenset" || g.name == "bytearray"))
    return true;
  if ((g.text == "_codecs" && g.name == "encode") ||
      ((g.text == "copyreg" || g.text == "copy_reg") && g.name == "_reconstructor"))
    return true;
  return g.text.rfind("torch.", 0) == 0 && dcp_classes.count(g.name);
}

std::vector<std::string> unknown_global_warnings(const pickle::Pickle& p, const std::string& label) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const Value* g : p.globals()) {
    if (is_known_global(*g)) continue;
    const std::string name = g->text + "." + g->name;
    if (seen.insert(name).second)
      out.push_back(label + ": unknown pickle global '" + name + "' (kept as an inert record, not executed)");
  }
  return out;
}

// ---- reading values -----------------------------------------------------------------------------

// Where a value sits, for messages: "<file>: key 'x': <field>".
struct Where {
  const std::string& file;
  std::string context;
  [[noreturn]] void fail(const std::string& what) const {
    dcp::fail(file + ": " + (context.empty() ? "" : context + ": ") + what);
  }
};

int64_t as_int(const Value* v, const Where& where, const char* field) {
  if (!v || (!v->is(Kind::Int) && !v->is(Kind::Bool)))
    where.fail(std::string(field) + " is " + (v ? pickle::describe(*v, 2, 80) : "missing") + ", not an int");
  return v->integer;
}

const std::string& as_str(const Value* v, const Where& where, const char* field) {
  if (!v || !v->is(Kind::Str))
    where.fail(std::string(field) + " is " + (v ? pickle::describe(*v, 2, 80) : "missing") + ", not a str");
  return v->text;
}

// What interpreting a pickle may build: no more dims, chunks and key bytes (in 16-byte units)
// than the pickle has bytes (a real .metadata spends far more than a byte on each), however often
// the memo repeats one list or string.
struct Budget {
  uint64_t left;
  void spend(uint64_t units, const Where& where) {
    if (units > left)
      where.fail(
          "expands to more dims, chunks or key bytes than its own bytes can describe (a list or string shared many times?)");
    left -= units;
  }
};

// A torch.Size(...) record, or a plain tuple/list of ints. With a budget, every dim is paid
// for before it is built: the memo can make one long tuple appear many times.
std::vector<int64_t> as_dims(const Value* v, const Where& where, const char* field, Budget* budget = nullptr) {
  const Value* seq = v;
  if (v && v->is_instance_of("Size") && v->args && v->args->items.size() == 1) seq = v->args->items[0];
  if (v && v->is_instance_of("Size") && v->args && v->args->items.empty()) return {};
  if (!seq || (!seq->is(Kind::Tuple) && !seq->is(Kind::List)))
    where.fail(std::string(field) + " is " + (v ? pickle::describe(*v, 3, 80) : "missing") + ", not a torch.Size");
  if (budget) budget->spend(seq->items.size(), where);
  std::vector<int64_t> dims;
  for (const Value* d : seq->items) dims.push_back(as_int(d, where, field));
  return dims;
}

std::string dtype_of(const Value* global, const Where& where) {
  if (!global || !global->is(Kind::Global) || global->text != "torch" || !torch_dtype_names().count(global->name))
    where.fail("properties.dtype is " + (global ? pickle::describe(*global, 2, 80) : std::string("missing")) +
               ", not a torch dtype");
  return global->name;
}

// TensorProperties: a 5-tuple state via BUILD (torch >= 2.x), or a dataclass dict state (1.13).
std::string tensor_dtype(const Value* props, const Where& where) {
  if (!props || !props->is(Kind::Object)) where.fail("properties are missing or not a TensorProperties record");
  if (const Value* d = props->attribute("dtype")) return dtype_of(d, where);
  if (props->state && props->state->is(Kind::Tuple) && !props->state->items.empty())
    return dtype_of(props->state->items[0], where);
  if (props->args && !props->args->items.empty()) return dtype_of(props->args->items[0], where);
  where.fail("properties hold no dtype: " + pickle::describe(*props, 3, 120));
}

void check_box(const std::vector<int64_t>& shape, const Chunk& c, const Where& where) {
  if (c.offsets.size() != shape.size() || c.sizes.size() != shape.size())
    where.fail("chunk offsets/sizes have " + std::to_string(c.offsets.size()) + "/" + std::to_string(c.sizes.size()) +
               " dims, the tensor " + std::to_string(shape.size()));
  for (size_t d = 0; d < shape.size(); ++d)
    if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.offsets[d] > shape[d] || c.sizes[d] > shape[d] - c.offsets[d])
      where.fail("chunk at offset " + std::to_string(c.offsets[d]) + " size " + std::to_string(c.sizes[d]) +
                 " in dim " + std::to_string(d) + " lies outside the tensor's " + std::to_string(shape[d]));
}

void check_shape(const std::vector<int64_t>& shape, const Where& where) {
  int64_t numel = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) where.fail("size has a negative or overflowing dim");
}

Item tensor_item(const std::string& key, const Value& meta, const Where& where, Budget& budget) {
  Item item;
  item.key = key;
  item.is_tensor = true;
  item.dtype = tensor_dtype(meta.attribute("properties"), where);
  item.shape = as_dims(meta.attribute("size"), where, "size", &budget);
  check_shape(item.shape, where);
  const Value* chunks = meta.attribute("chunks");
  if (!chunks || !chunks->is(Kind::List)) where.fail("chunks is missing or not a list");
  for (const Value* c : chunks->items) {
    if (!c->is_instance_of("ChunkStorageMetadata")) where.fail("a chunk is " + pickle::describe(*c, 2, 80));
    budget.spend(1, where);
    Chunk chunk;
    chunk.offsets = as_dims(c->attribute("offsets"), where, "chunk offsets", &budget);
    chunk.sizes = as_dims(c->attribute("sizes"), where, "chunk sizes", &budget);
    check_box(item.shape, chunk, where);
    item.chunks.push_back(std::move(chunk));
  }
  return item;
}

// storage_data's key: a MetadataIndex's fqn and, for tensor chunks, its offset.
using RecordKey = std::tuple<std::string, bool, std::vector<int64_t>>;

std::map<RecordKey, Record> storage_records(const Value* storage_data, const std::string& file, Budget& budget) {
  std::map<RecordKey, Record> out;
  if (!storage_data || storage_data->is(Kind::None)) return out;
  if (!storage_data->is(Kind::Dict)) Where{file, ""}.fail("storage_data is not a dict");
  for (const auto& [index, info] : storage_data->pairs) {
    if (!index->is_instance_of("MetadataIndex"))
      Where{file, "storage_data"}.fail("a key is " + pickle::describe(*index, 2, 80) + ", not a MetadataIndex");
    const Where where{file, "storage_data"};
    const std::string& fqn = as_str(index->attribute("fqn"), where, "MetadataIndex.fqn");
    const Where at{file, key_label(fqn)};
    const Value* offset = index->attribute("offset");
    const bool has_offset = offset && !offset->is(Kind::None);
    budget.spend(1 + fqn.size() / 16, at);
    RecordKey rk{fqn, has_offset,
                 has_offset ? as_dims(offset, at, "MetadataIndex.offset", &budget) : std::vector<int64_t>{}};
    if (!info->is_instance_of("_StorageInfo")) at.fail("storage info is " + pickle::describe(*info, 2, 80));
    Record r;
    r.file = as_str(info->attribute("relative_path"), at, "relative_path");
    budget.spend(1 + r.file.size() / 16, at);
    const int64_t off = as_int(info->attribute("offset"), at, "offset");
    const int64_t len = as_int(info->attribute("length"), at, "length");
    if (off < 0 || len < 0)
      at.fail("record offset " + std::to_string(off) + " or length " + std::to_string(len) + " is negative");
    r.offset = static_cast<uint64_t>(off);
    r.length = static_cast<uint64_t>(len);
    const Value* transforms = info->attribute("transform_descriptors");
    if (transforms && !transforms->is(Kind::None) && !transforms->items.empty())
      r.transforms = pickle::describe(*transforms, 3, 120);
    out[std::move(rk)] = std::move(r);
  }
  return out;
}

void attach_records(Item& item, const std::map<RecordKey, Record>& records) {
  if (item.is_tensor) {
    for (Chunk& c : item.chunks) {
      auto it = records.find(RecordKey{item.key, true, c.offsets});
      if (it == records.end()) continue;
      c.has_record = true;
      c.record = it->second;
    }
    return;
  }
  auto it = records.find(RecordKey{item.key, false, {}});
  if (it != records.end()) item.records.push_back(it->second);
}

// ---- torch.save zips ----------------------------------------------------------------------------

uint32_t crc32(const uint8_t* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct ZipEntry {
  uint64_t local_offset = 0, compressed = 0, size = 0;
  uint32_t crc = 0;
  uint16_t method = 0, flags = 0;
};

// A zip archive stored at [base, base + length) of a file: the record of one chunk.
class RecordZip {
 public:
  RecordZip(const FileReader& file, const Record& record, std::string label)
      : file_(file), base_(record.offset), length_(record.length), label_(std::move(label)) {
    read_central_directory();
  }

  const std::map<std::string, ZipEntry>& entries() const { return entries_; }

  // `length` bytes from `from` inside the entry's data; the CRC is checked when that is all of it.
  std::vector<uint8_t> read(const std::string& name, const ZipEntry& e, uint64_t from, uint64_t length) const {
    if (e.method != 0)
      fail_("entry '" + name + "' is compressed (method " + std::to_string(e.method) +
            "); only STORED entries are supported");
    if (e.flags & 1) fail_("entry '" + name + "' is encrypted");
    if (from > e.size || length > e.size - from) fail_("entry '" + name + "' is shorter than the tensor needs");
    const std::vector<uint8_t> header = read_range(e.local_offset, 30, "local header of '" + name + "'");
    if (le(header.data(), 4) != 0x04034b50) fail_("local header of '" + name + "' has a bad signature (damaged zip)");
    const uint64_t data_at = e.local_offset + 30 + le(header.data() + 26, 2) + le(header.data() + 28, 2);
    std::vector<uint8_t> bytes = read_range(data_at + from, length, "data of '" + name + "'");
    if (from == 0 && length == e.size && crc32(bytes.data(), bytes.size()) != e.crc)
      fail_("entry '" + name + "' fails its CRC-32 check (damaged data)");
    return bytes;
  }

  [[noreturn]] void fail_(const std::string& what) const { fail(label_ + ": " + what); }

 private:
  // Bytes at [at, at + n) of the zip, refused when they lie outside the record.
  std::vector<uint8_t> read_range(uint64_t at, uint64_t n, const std::string& what) const {
    if (at > length_ || n > length_ - at)
      fail_(what + " at zip offset " + std::to_string(at) + " length " + std::to_string(n) +
            " lies outside the record (length " + std::to_string(length_) + "): damaged zip");
    return file_.read(base_ + at, n, label_ + ": " + what);
  }

  void read_central_directory() {
    const uint64_t tail_len = std::min<uint64_t>(length_, 22 + 65535);
    const uint64_t tail_at = length_ - tail_len;
    const std::vector<uint8_t> tail = read_range(tail_at, tail_len, "end of zip");
    size_t eocd = tail.size() < 22 ? std::string::npos : tail.size() - 22;
    while (eocd != std::string::npos && le(tail.data() + eocd, 4) != 0x06054b50)
      eocd = eocd == 0 ? std::string::npos : eocd - 1;
    if (eocd == std::string::npos) {
      // DCP's SAFETENSORS format starts with an 8-byte header length and a JSON header.
      if (length_ > 9 && read_range(8, 1, "start of record")[0] == '{')
        fail_(
            "looks like a safetensors record (DCP's SAFETENSORS format), which is not supported: only torch.save records are");
      fail_("no end-of-central-directory record: not a zip, or a damaged one");
    }
    const uint8_t* e = tail.data() + eocd;
    uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF ||
        (eocd >= 20 && le(e - 20, 4) == 0x07064b50)) {
      if (eocd < 20 || le(e - 20, 4) != 0x07064b50) fail_("ZIP64 values without a ZIP64 locator (damaged zip)");
      const uint64_t z64_at = le(e - 20 + 8, 8);
      const std::vector<uint8_t> z64 = read_range(z64_at, 56, "ZIP64 end of central directory");
      if (le(z64.data(), 4) != 0x06064b50) fail_("ZIP64 end of central directory has a bad signature (damaged zip)");
      count = le(z64.data() + 32, 8);
      cd_size = le(z64.data() + 40, 8);
      cd_offset = le(z64.data() + 48, 8);
    }
    if (count > cd_size / 46)
      fail_("central directory claims " + std::to_string(count) + " entries in " + std::to_string(cd_size) +
            " bytes (damaged zip)");
    const std::vector<uint8_t> cd = read_range(cd_offset, cd_size, "central directory");
    size_t at = 0;
    for (uint64_t i = 0; i < count; ++i) at = read_cd_entry(cd, at);
  }

  size_t read_cd_entry(const std::vector<uint8_t>& cd, size_t at) {
    if (cd.size() - at < 46 || le(cd.data() + at, 4) != 0x02014b50)
      fail_("central directory entry has a bad signature (damaged zip)");
    const uint8_t* p = cd.data() + at;
    ZipEntry e;
    e.flags = static_cast<uint16_t>(le(p + 8, 2));
    e.method = static_cast<uint16_t>(le(p + 10, 2));
    e.crc = static_cast<uint32_t>(le(p + 16, 4));
    e.compressed = le(p + 20, 4);
    e.size = le(p + 24, 4);
    const size_t name_len = le(p + 28, 2), extra_len = le(p + 30, 2), comment_len = le(p + 32, 2);
    e.local_offset = le(p + 42, 4);
    if (cd.size() - at - 46 < name_len + extra_len + comment_len)
      fail_("central directory entry runs past its end (damaged zip)");
    std::string name(reinterpret_cast<const char*>(p + 46), name_len);
    apply_zip64_extra(p + 46 + name_len, extra_len, e, name);
    entries_[std::move(name)] = e;
    return at + 46 + name_len + extra_len + comment_len;
  }

  // ZIP64's extra field holds, in order, each of size, compressed size and offset saturated above.
  void apply_zip64_extra(const uint8_t* extra, size_t len, ZipEntry& e, const std::string& name) const {
    for (size_t at = 0; at + 4 <= len;) {
      const uint64_t id = le(extra + at, 2), n = le(extra + at + 2, 2);
      if (n > len - at - 4) fail_("extra field of '" + name + "' runs past its end (damaged zip)");
      if (id == 0x0001) {
        const uint8_t* q = extra + at + 4;
        uint64_t left = n;
        for (uint64_t* field : {&e.size, &e.compressed, &e.local_offset}) {
          if (*field != 0xFFFFFFFF) continue;
          if (left < 8) fail_("ZIP64 extra field of '" + name + "' is too short (damaged zip)");
          *field = le(q, 8);
          q += 8;
          left -= 8;
        }
      }
      at += 4 + n;
    }
  }

  const FileReader& file_;
  uint64_t base_, length_;
  std::string label_;
  std::map<std::string, ZipEntry> entries_;
};

// ---- data.pkl -----------------------------------------------------------------------------------

// What torch._utils._rebuild_tensor_v2 would be called with.
struct TensorRecord {
  std::string storage_dtype;  // "" for an UntypedStorage (bytes)
  std::string storage_key;
  int64_t storage_numel = 0;
  int64_t storage_offset = 0;
  std::vector<int64_t> size, stride;
};

std::string storage_dtype(const Value* cls, const Where& where) {
  static const std::map<std::string, std::string> by_class = {{"FloatStorage", "float32"},
                                                              {"DoubleStorage", "float64"},
                                                              {"HalfStorage", "float16"},
                                                              {"BFloat16Storage", "bfloat16"},
                                                              {"LongStorage", "int64"},
                                                              {"IntStorage", "int32"},
                                                              {"ShortStorage", "int16"},
                                                              {"CharStorage", "int8"},
                                                              {"ByteStorage", "uint8"},
                                                              {"BoolStorage", "bool"},
                                                              {"ComplexFloatStorage", "complex64"},
                                                              {"ComplexDoubleStorage", "complex128"},
                                                              {"UntypedStorage", ""}};
  if (!cls || !cls->is(Kind::Global)) where.fail("data.pkl: the storage type is not a global");
  auto it = by_class.find(cls->name);
  if (it == by_class.end()) where.fail("data.pkl: unsupported storage type " + cls->text + "." + cls->name);
  return it->second;
}

TensorRecord tensor_record(const pickle::Pickle& p, const Where& where) {
  const Value* fn = p.root().callable;
  const Value* args = p.root().args;
  // Parameters and tensor subclasses wrap the plain rebuild call.
  for (int depth = 0; depth < 4 && fn && fn->is(Kind::Global) && fn->name != "_rebuild_tensor_v2"; ++depth) {
    if (fn->name.rfind("_rebuild_parameter", 0) == 0 && args && !args->items.empty() &&
        args->items[0]->is(Kind::Object)) {
      fn = args->items[0]->callable;
      args = args->items[0]->args;
    } else if (fn->name == "_rebuild_from_type_v2" && args && args->items.size() >= 3) {
      fn = args->items[0];
      args = args->items[2];
    } else {
      break;
    }
  }
  if (!fn || !fn->is(Kind::Global) || fn->name != "_rebuild_tensor_v2" || !args || args->items.size() < 4)
    where.fail("data.pkl is " + pickle::describe(p.root(), 3, 160) + ", not a torch._utils._rebuild_tensor_v2 call");
  const Value* persid = args->items[0];
  const Value* pid = persid->is(Kind::PersistentId) ? persid->args : nullptr;
  if (!pid || !pid->is(Kind::Tuple) || pid->items.size() < 5 || !pid->items[0]->is(Kind::Str) ||
      pid->items[0]->text != "storage")
    where.fail("data.pkl: the storage is " + pickle::describe(*persid, 3, 120) + ", not persid('storage', ...)");
  TensorRecord r;
  r.storage_dtype = storage_dtype(pid->items[1], where);
  r.storage_key = as_str(pid->items[2], where, "data.pkl storage key");
  r.storage_numel = as_int(pid->items[4], where, "data.pkl storage numel");
  r.storage_offset = as_int(args->items[1], where, "data.pkl storage_offset");
  r.size = as_dims(args->items[2], where, "data.pkl size");
  r.stride = as_dims(args->items[3], where, "data.pkl stride");
  if (r.size.size() != r.stride.size()) where.fail("data.pkl: size and stride have different lengths");
  return r;
}

const std::pair<const std::string, ZipEntry>* find_entry(const RecordZip& zip, const std::string& suffix) {
  // torch.save prefixes every entry with one folder (`archive/`, or the file's stem).
  for (const auto& kv : zip.entries()) {
    const size_t slash = kv.first.find('/');
    if (slash != std::string::npos && kv.first.compare(slash + 1, std::string::npos, suffix) == 0) return &kv;
  }
  return nullptr;
}

// The element at each position of `r.size`, row-major, from the storage bytes starting at element `first`.
std::vector<double> gather(const TensorRecord& r, const std::string& dtype, const std::vector<uint8_t>& bytes,
                           int64_t first) {
  const size_t esize = element_size(dtype);
  int64_t numel = 1;
  for (int64_t d : r.size) numel *= d;
  std::vector<double> out(static_cast<size_t>(numel));
  std::vector<int64_t> index(r.size.size(), 0);
  int64_t at = r.storage_offset - first;
  for (int64_t i = 0; i < numel; ++i) {
    out[static_cast<size_t>(i)] = element_to_double(dtype, bytes.data() + static_cast<size_t>(at) * esize);
    for (size_t d = r.size.size(); d-- > 0;) {  // odometer over the dims
      at += r.stride[d];
      if (++index[d] < r.size[d]) break;
      at -= r.stride[d] * r.size[d];
      index[d] = 0;
    }
  }
  return out;
}

// The tensor's elements, read from the storage entry: only the span its offset and strides reach.
std::vector<double> read_elements(const RecordZip& zip, const TensorRecord& r, const std::string& dtype) {
  const size_t esize = element_size(dtype);
  if (esize == 0) zip.fail_("dtype " + dtype + " cannot be read as numbers");
  const auto* data = find_entry(zip, "data/" + r.storage_key);
  if (!data) zip.fail_("no entry data/" + r.storage_key + " for the storage data.pkl names");
  if (r.storage_offset < 0) zip.fail_("data.pkl has a negative storage_offset");
  int64_t numel = 1, last = r.storage_offset;
  for (size_t d = 0; d < r.size.size(); ++d) {
    if (r.size[d] < 0 || r.stride[d] < 0) zip.fail_("data.pkl has a negative size or stride");
    if (__builtin_mul_overflow(numel, r.size[d], &numel)) zip.fail_("data.pkl's size overflows");
  }
  if (numel == 0) return {};
  for (size_t d = 0; d < r.size.size(); ++d) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(r.size[d] - 1, r.stride[d], &reach) || __builtin_add_overflow(last, reach, &last))
      zip.fail_("data.pkl's strides overflow");
  }
  const uint64_t storage_elements = data->second.size / esize;
  if (static_cast<uint64_t>(last) >= storage_elements)
    zip.fail_("the tensor reaches element " + std::to_string(last) + " of a storage of " +
              std::to_string(storage_elements) + " " + dtype + " elements");
  // Bounded memory: never more output than stored bytes, even for stride-0 (expanded) tensors.
  if (static_cast<uint64_t>(numel) > data->second.size / esize)
    zip.fail_("the tensor has more elements (" + std::to_string(numel) + ") than its storage holds");
  const uint64_t first = static_cast<uint64_t>(r.storage_offset);
  const std::vector<uint8_t> bytes =
      zip.read(data->first, data->second, first * esize, (static_cast<uint64_t>(last) - first + 1) * esize);
  return gather(r, dtype, bytes, r.storage_offset);
}

std::string join_path(const std::string& dir, const std::string& file) { return dir + "/" + file; }

void check_relative_path(const std::string& file, const Where& where) {
  if (file.empty() || file[0] == '/' || file == ".." || file.rfind("../", 0) == 0 ||
      file.find("/../") != std::string::npos || (file.size() >= 3 && file.compare(file.size() - 3, 3, "/..") == 0))
    where.fail("relative_path '" + file + "' leaves the step folder");
}

std::string record_label(const std::string& step_dir, const std::string& key, const Record& r) {
  return join_path(step_dir, r.file) + ": record for " + key_label(key) + " at offset " + std::to_string(r.offset) +
         " length " + std::to_string(r.length);
}

}  // namespace

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // callers checked the dims against an overflow-free shape
  return n;
}

// ---- public -------------------------------------------------------------------------------------

Metadata interpret_metadata(const pickle::Pickle& metadata, const std::string& file) {
  const Value& root = metadata.root();
  if (!root.is_instance_of("Metadata"))
    Where{file, ""}.fail("holds " + pickle::describe(root, 2, 120) + ", not a torch.distributed.checkpoint Metadata");
  Metadata out;
  out.warnings = unknown_global_warnings(metadata, file);
  if (const Value* v = root.attribute("version"); v && v->is(Kind::Str)) out.version = v->text;
  const Value* sdm = root.attribute("state_dict_metadata");
  if (!sdm || !sdm->is(Kind::Dict)) Where{file, ""}.fail("state_dict_metadata is missing or not a dict");
  Budget budget{metadata.input_size() + 64};
  std::map<std::string, Item> items;  // a repeated key keeps its last entry, as Python's dict does
  for (const auto& [k, meta] : sdm->pairs) {
    const std::string& key = as_str(k, Where{file, "state_dict_metadata"}, "a key");
    const Where where{file, key_label(key)};
    budget.spend(1 + key.size() / 16, where);  // keys are copied: a memo-shared long key must pay
    if (meta->is_instance_of("TensorStorageMetadata")) {
      items[key] = tensor_item(key, *meta, where, budget);
    } else {
      if (!meta->is_instance_of("BytesStorageMetadata") && out.warnings.size() < 100)
        out.warnings.push_back(file + ": " + key_label(key) + " has metadata " + pickle::describe(*meta, 2, 80) +
                               "; listed as a non-tensor item");
      Item item;
      item.key = key;
      items[key] = std::move(item);
    }
  }
  const auto records = storage_records(root.attribute("storage_data"), file, budget);
  for (auto& [key, item] : items) {
    attach_records(item, records);
    out.items.push_back(std::move(item));
  }
  return out;
}

Metadata read_metadata(const std::string& step_dir) {
  const std::string path = join_path(step_dir, ".metadata");
  const FileReader file(path);
  const std::vector<uint8_t> bytes = file.read(0, file.size(), path);
  try {
    const pickle::Pickle p = pickle::parse(bytes.data(), bytes.size(), path);
    return interpret_metadata(p, path);
  } catch (const pickle::PickleError& e) {
    throw CheckpointError(e.what());
  }
}

void check_chunk_records(const std::string& step_dir, const Item& item) {
  const size_t esize = element_size(item.dtype);
  const std::string meta = join_path(step_dir, ".metadata");
  if (esize == 0) fail(meta + ": " + key_label(item.key) + ": dtype " + item.dtype + " cannot be read as numbers");
  std::map<std::string, uint64_t> file_sizes;
  for (const Chunk& c : item.chunks) {
    if (!c.has_record)
      fail(meta + ": " + key_label(item.key) + ": chunk at offsets " + dims_text(c.offsets) +
           " has no storage_data record");
    check_relative_path(c.record.file, Where{meta, key_label(item.key)});
    const std::string label = record_label(step_dir, item.key, c.record);
    if (!c.record.transforms.empty())
      fail(label + ": transform_descriptors " + c.record.transforms + " are not supported");
    auto it = file_sizes.find(c.record.file);
    if (it == file_sizes.end())
      it = file_sizes.emplace(c.record.file, FileReader(join_path(step_dir, c.record.file)).size()).first;
    if (c.record.offset > it->second || c.record.length > it->second - c.record.offset)
      fail(label + " lies beyond the end of the file (size " + std::to_string(it->second) + ")");
    uint64_t needed = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel_of(c.sizes)), esize, &needed))
      fail(label + ": its " + dims_text(c.sizes) + " " + item.dtype + " chunk is too large to address");
    if (c.record.length < needed)
      fail(label + " is too short for its " + dims_text(c.sizes) + " " + item.dtype + " chunk (" +
           std::to_string(needed) + " bytes)");
  }
}

void check_record_path(const std::string& step_dir, const std::string& file) {
  check_relative_path(file, Where{join_path(step_dir, ".metadata"), ""});
}

std::vector<double> read_chunk(const std::string& step_dir, const Item& item, const Chunk& chunk) {
  if (!chunk.has_record)
    fail(join_path(step_dir, ".metadata") + ": " + key_label(item.key) + ": chunk at offsets " +
         dims_text(chunk.offsets) + " has no storage_data record");
  check_relative_path(chunk.record.file, Where{join_path(step_dir, ".metadata"), key_label(item.key)});
  const std::string label = record_label(step_dir, item.key, chunk.record);
  const FileReader file(join_path(step_dir, chunk.record.file));
  if (chunk.record.offset > file.size() || chunk.record.length > file.size() - chunk.record.offset)
    fail(label + " lies beyond the end of the file (size " + std::to_string(file.size()) + ")");
  const RecordZip zip(file, chunk.record, label);
  const Where where{label, ""};

  const auto* pkl = find_entry(zip, "data.pkl");
  if (!pkl) zip.fail_("no data.pkl entry: not a torch.save record");
  if (pkl->second.size > (64u << 20))
    zip.fail_("data.pkl is implausibly large (" + std::to_string(pkl->second.size) + " bytes)");
  const std::vector<uint8_t> pkl_bytes = zip.read(pkl->first, pkl->second, 0, pkl->second.size);
  TensorRecord r;
  try {
    r = tensor_record(pickle::parse(pkl_bytes.data(), pkl_bytes.size(), label + ": " + pkl->first), where);
  } catch (const pickle::PickleError& e) {
    throw CheckpointError(e.what());
  }
  if (const auto* order = find_entry(zip, "byteorder")) {
    const auto text = zip.read(order->first, order->second, 0, std::min<uint64_t>(order->second.size, 16));
    if (std::string(text.begin(), text.end()) != "little") zip.fail_("byteorder is not 'little'");
  }
  if (!r.storage_dtype.empty() && r.storage_dtype != item.dtype)
    zip.fail_("holds " + r.storage_dtype + " but .metadata says " + item.dtype);
  if (r.size != chunk.sizes)
    zip.fail_("holds a " + dims_text(r.size) + " tensor but .metadata says " + dims_text(chunk.sizes));
  return read_elements(zip, r, item.dtype);
}

}  // namespace meshtest::dcp
