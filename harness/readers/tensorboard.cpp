// TensorBoard event files: TFRecord framing, a bounds-checked protobuf wire-format reader, and
// the few messages (Event, Summary, Summary.Value, TensorProto) scalars live in.
#include "readers/tensorboard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

namespace meshtest {
namespace {

namespace fs = std::filesystem;

// ---- CRC32C ------------------------------------------------------------------------

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[i] = crc;
  }
  return table;
}

uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

uint64_t load_le64(const uint8_t* p) { return uint64_t(load_le32(p)) | uint64_t(load_le32(p + 4)) << 32; }

std::string hex32(uint32_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

// ---- protobuf wire format ------------------------------------------------------------

// A malformed message; turned into a MetricsError that names the file and record.
class ProtoError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Reads one message's fields in order; every read is checked against the message's end.
class ProtoReader {
 public:
  ProtoReader(const uint8_t* begin, size_t size) : p_(begin), end_(begin + size) {}

  // The next field's number and wire type; false at the end of the message.
  bool next(uint32_t& field, int& wire) {
    if (p_ == end_) return false;
    uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3);
    wire = static_cast<int>(key & 7);
    if (field == 0 || (key >> 3) > 0x1fffffff) throw ProtoError("bad field number");
    return true;
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {  // at most 10 bytes
      need(1);
      uint8_t byte = *p_++;
      value |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw ProtoError("varint longer than 10 bytes");
  }
  uint32_t fixed32() {
    need(4);
    p_ += 4;
    return load_le32(p_ - 4);
  }
  uint64_t fixed64() {
    need(8);
    p_ += 8;
    return load_le64(p_ - 8);
  }
  // A length-delimited field's bytes, as a reader of their own.
  ProtoReader bytes() {
    uint64_t size = varint();
    need(size);
    ProtoReader inner(p_, static_cast<size_t>(size));
    p_ += size;
    return inner;
  }
  std::string string() {
    ProtoReader inner = bytes();
    return std::string(reinterpret_cast<const char*>(inner.p_), inner.size());
  }
  void skip(int wire) {
    switch (wire) {
      case kVarint: varint(); return;
      case kFixed64: fixed64(); return;
      case kLengthDelimited: bytes(); return;
      case kFixed32: fixed32(); return;
      default: throw ProtoError("wire type " + std::to_string(wire) + " (groups are not used by Event)");
    }
  }
  const uint8_t* data() const { return p_; }
  size_t size() const { return static_cast<size_t>(end_ - p_); }

 private:
  void need(uint64_t n) const {
    if (n > static_cast<uint64_t>(end_ - p_)) throw ProtoError("field runs past the end of its message");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

double float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

double double_from_bits(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

double half_from_bits(uint16_t bits) {
  int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude =
      exponent == 0    ? std::ldexp(mantissa, -24)
      : exponent == 31 ? (mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity())
                       : std::ldexp(mantissa + 1024, exponent - 25);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

double bfloat16_from_bits(uint16_t bits) { return float_from_bits(uint32_t(bits) << 16); }

// ---- TensorProto ---------------------------------------------------------------------

enum DataType {
  kFloat = 1,
  kDouble = 2,
  kInt32 = 3,
  kUint8 = 4,
  kInt16 = 5,
  kInt8 = 6,
  kInt64 = 9,
  kBfloat16 = 14,
  kUint16 = 17,
  kHalf = 19
};

// How many values a repeated field held, and the first (all a scalar needs).
struct ValueList {
  size_t count = 0;
  double first = 0;
  void add(double value) {
    if (count++ == 0) first = value;
  }
};

// The parts of a TensorProto that decide whether it is a scalar and what it holds.
struct TensorFields {
  int dtype = 0;
  bool unknown_rank = false;
  bool every_dim_one = true;  // rank 0 counts
  const uint8_t* content = nullptr;
  size_t content_size = 0;
  ValueList floats, doubles, ints, int64s, halves;
};

void read_shape(ProtoReader shape, TensorFields& tensor) {
  uint32_t field;
  int wire;
  while (shape.next(field, wire)) {
    if (field == 2 && wire == kLengthDelimited) {  // Dim {int64 size = 1; string name = 2}
      ProtoReader dim = shape.bytes();
      int64_t size = 0;
      uint32_t dim_field;
      int dim_wire;
      while (dim.next(dim_field, dim_wire)) {
        if (dim_field == 1 && dim_wire == kVarint)
          size = static_cast<int64_t>(dim.varint());
        else
          dim.skip(dim_wire);
      }
      tensor.every_dim_one = tensor.every_dim_one && size == 1;
    } else if (field == 3 && wire == kVarint) {
      tensor.unknown_rank = shape.varint() != 0;
    } else {
      shape.skip(wire);
    }
  }
}

// A repeated numeric field, packed (one length-delimited run) or not (one value per field).
template <typename Decode>
void read_repeated(ProtoReader& reader, int wire, int scalar_wire, ValueList& list, Decode decode) {
  if (wire == scalar_wire) return list.add(decode(reader));
  if (wire != kLengthDelimited) return reader.skip(wire);
  ProtoReader packed = reader.bytes();
  while (packed.size() > 0) list.add(decode(packed));
}

TensorFields read_tensor(ProtoReader tensor) {
  TensorFields t;
  auto as_float = [](ProtoReader& r) { return float_from_bits(r.fixed32()); };
  auto as_double = [](ProtoReader& r) { return double_from_bits(r.fixed64()); };
  auto as_int32 = [](ProtoReader& r) { return double(static_cast<int32_t>(r.varint())); };
  auto as_int64 = [](ProtoReader& r) { return double(static_cast<int64_t>(r.varint())); };
  auto as_bits16 = [](ProtoReader& r) { return double(static_cast<uint16_t>(r.varint())); };
  uint32_t field;
  int wire;
  while (tensor.next(field, wire)) {
    if (field == 1 && wire == kVarint) {
      t.dtype = static_cast<int>(tensor.varint());
    } else if (field == 2 && wire == kLengthDelimited) {
      read_shape(tensor.bytes(), t);
    } else if (field == 4 && wire == kLengthDelimited) {
      ProtoReader content = tensor.bytes();
      t.content = content.data();
      t.content_size = content.size();
    } else if (field == 5) {
      read_repeated(tensor, wire, kFixed32, t.floats, as_float);
    } else if (field == 6) {
      read_repeated(tensor, wire, kFixed64, t.doubles, as_double);
    } else if (field == 7) {
      read_repeated(tensor, wire, kVarint, t.ints, as_int32);
    } else if (field == 10) {
      read_repeated(tensor, wire, kVarint, t.int64s, as_int64);
    } else if (field == 13) {
      read_repeated(tensor, wire, kVarint, t.halves, as_bits16);  // the 16 bits, decoded by dtype below
    } else {
      tensor.skip(wire);
    }
  }
  return t;
}

// One element of `dtype` from little-endian bytes (size already checked).
double decode_element(int dtype, const uint8_t* p) {
  uint16_t bits16 = uint16_t(p[0] | p[1] << 8);
  switch (dtype) {
    case kFloat: return float_from_bits(load_le32(p));
    case kDouble: return double_from_bits(load_le64(p));
    case kInt32: return double(static_cast<int32_t>(load_le32(p)));
    case kInt64: return double(static_cast<int64_t>(load_le64(p)));
    case kInt16: return double(static_cast<int16_t>(bits16));
    case kUint16: return double(bits16);
    case kInt8: return double(static_cast<int8_t>(p[0]));
    case kUint8: return double(p[0]);
    case kHalf: return half_from_bits(bits16);
    default: return bfloat16_from_bits(bits16);
  }
}

size_t element_size(int dtype) {
  switch (dtype) {
    case kFloat:
    case kInt32: return 4;
    case kDouble:
    case kInt64: return 8;
    case kInt16:
    case kUint16:
    case kHalf:
    case kBfloat16: return 2;
    case kInt8:
    case kUint8: return 1;
    default: return 0;
  }
}

// The value list TensorFlow keeps a dtype's values in.
const ValueList& values_of(const TensorFields& t) {
  switch (t.dtype) {
    case kFloat: return t.floats;
    case kDouble: return t.doubles;
    case kInt64: return t.int64s;
    case kHalf:
    case kBfloat16: return t.halves;
    default: return t.ints;
  }
}

// The tensor's one value, or false with `why` when it is not a numeric scalar.
// An empty value list is 0, as TensorFlow's make_ndarray reads it.
bool tensor_scalar(const TensorFields& t, double& value, std::string& why) {
  auto refuse = [&why](std::string reason) {
    why = std::move(reason);
    return false;
  };
  size_t size = element_size(t.dtype);
  if (size == 0) return refuse("tensor of dtype " + std::to_string(t.dtype) + " is not a number");
  if (t.unknown_rank || !t.every_dim_one) return refuse("tensor is not a scalar (shape)");
  if (t.content_size > 0) {
    if (t.content_size != size)
      return refuse("tensor_content of " + std::to_string(t.content_size) + " bytes for one element");
    value = decode_element(t.dtype, t.content);
    return true;
  }
  const ValueList& list = values_of(t);
  if (list.count > 1) return refuse("tensor of one element holds " + std::to_string(list.count) + " values");
  value = list.first;
  if (t.dtype == kHalf) value = half_from_bits(static_cast<uint16_t>(list.first));
  if (t.dtype == kBfloat16) value = bfloat16_from_bits(static_cast<uint16_t>(list.first));
  return true;
}

// ---- Event > Summary > Summary.Value --------------------------------------------------

struct TaggedValue {
  std::string tag;
  enum Kind { kNone, kSimple, kTensor } kind = kNone;
  double simple = 0;
  TensorFields tensor;
};

TaggedValue read_summary_value(ProtoReader value) {
  TaggedValue v;
  uint32_t field;
  int wire;
  while (value.next(field, wire)) {
    if (field == 1 && wire == kLengthDelimited) {
      v.tag = value.string();
    } else if (field == 2 && wire == kFixed32) {
      v.kind = TaggedValue::kSimple;
      v.simple = float_from_bits(value.fixed32());
    } else if (field == 8 && wire == kLengthDelimited) {
      v.kind = TaggedValue::kTensor;
      v.tensor = read_tensor(value.bytes());
    } else {
      value.skip(wire);
    }
  }
  return v;
}

struct EventValues {
  double wall_time = 0;  // seconds since the epoch; 0: not written
  long long step = 0;    // proto3 leaves a 0 step out
  std::vector<TaggedValue> values;
};

EventValues read_event(ProtoReader event) {
  EventValues e;
  uint32_t field;
  int wire;
  while (event.next(field, wire)) {
    if (field == 1 && wire == kFixed64) {
      e.wall_time = double_from_bits(event.fixed64());
    } else if (field == 2 && wire == kVarint) {
      e.step = static_cast<long long>(event.varint());
    } else if (field == 5 && wire == kLengthDelimited) {
      ProtoReader summary = event.bytes();
      uint32_t summary_field;
      int summary_wire;
      while (summary.next(summary_field, summary_wire)) {
        if (summary_field == 1 && summary_wire == kLengthDelimited)
          e.values.push_back(read_summary_value(summary.bytes()));
        else
          summary.skip(summary_wire);
      }
    } else {
      event.skip(wire);
    }
  }
  return e;
}

// ---- from records to a series ---------------------------------------------------------

constexpr size_t kMaxWarningsPerFile = 20;

// Warnings for one file: at most kMaxWarningsPerFile, then one line counting the rest.
class FileWarnings {
 public:
  FileWarnings(std::vector<std::string>* out, const std::string& file) : out_(out), file_(file) {}
  void add(const std::string& message) {
    if (out_ != nullptr && count_++ < kMaxWarningsPerFile) out_->push_back(file_ + ": " + message);
  }
  void finish() {
    if (out_ != nullptr && count_ > kMaxWarningsPerFile)
      out_->push_back(file_ + ": " + std::to_string(count_ - kMaxWarningsPerFile) + " more warnings not shown");
  }

 private:
  std::vector<std::string>* out_;
  std::string file_;
  size_t count_ = 0;
};

// Puts values into a series, the last (step, metric) winning, counting the repeats.
class SeriesWriter {
 public:
  explicit SeriesWriter(MetricSeries& series) : series_(series) {}
  void put(long long step, const std::string& name, double value) {
    auto [it, fresh] = series_[step].insert_or_assign(name, value);
    (void)it;
    if (!fresh && repeats_++ == 0) first_repeat_ = "step " + std::to_string(step) + " '" + name + "'";
  }
  void report(FileWarnings& warnings, const char* where) const {
    if (repeats_ > 0)
      warnings.add(std::to_string(repeats_) + " (step, metric) pairs written again " + where +
                   " (first: " + first_repeat_ + "); the later values win");
  }

 private:
  MetricSeries& series_;
  size_t repeats_ = 0;
  std::string first_repeat_;
};

// The metric name a tag is kept under, or null when it is not kept.
const std::string* metric_name(const std::string& tag, const std::map<std::string, std::string>& tags) {
  if (tags.empty()) return &tag;
  auto it = tags.find(tag);
  return it == tags.end() ? nullptr : &it->second;
}

void add_event(const EventValues& event, const std::map<std::string, std::string>& tags, SeriesWriter& out,
               FileWarnings& warnings) {
  for (const TaggedValue& v : event.values) {
    const std::string* name = metric_name(v.tag, tags);
    if (name == nullptr || v.kind == TaggedValue::kNone) continue;
    double value = v.simple;
    std::string why;
    if (v.kind == TaggedValue::kTensor && !tensor_scalar(v.tensor, value, why)) {
      if (!tags.empty())
        warnings.add("tag '" + v.tag + "' at step " + std::to_string(event.step) + ": " + why + "; left out");
      continue;
    }
    out.put(event.step, *name, value);
  }
}

std::string record_place(const std::string& file, long record, size_t offset) {
  return file + ": record " + std::to_string(record) + " at byte " + std::to_string(offset);
}

// The data of the record at `offset`, its CRCs checked; false (with a warning) when the file ends
// inside it.
bool next_record(const uint8_t* data, size_t size, size_t offset, long record, const std::string& file,
                 FileWarnings& warnings, const uint8_t*& body, uint64_t& length) {
  size_t left = size - offset;
  auto cut_short = [&](const std::string& what) {
    warnings.add("record " + std::to_string(record) + " at byte " + std::to_string(offset) + " is cut short (" + what +
                 "; a writer still running?); the " + std::to_string(record - 1) + " records before it are kept");
    return false;
  };
  if (left < 12) return cut_short(std::to_string(left) + " bytes of its 12-byte header");
  const uint8_t* header = data + offset;
  length = load_le64(header);
  uint32_t stored = load_le32(header + 8), computed = mask_crc32c(crc32c(header, 8));
  if (stored != computed)
    throw MetricsError(record_place(file, record, offset) + ": length CRC mismatch (stored " + hex32(stored) +
                       ", computed " + hex32(computed) + ")");
  if (length > left - 12 || left - 12 - length < 4)
    return cut_short(std::to_string(left - 12) + " of its " + std::to_string(length) + "+4 data bytes");
  body = header + 12;
  stored = load_le32(body + length);
  computed = mask_crc32c(crc32c(body, static_cast<size_t>(length)));
  if (stored != computed)
    throw MetricsError(record_place(file, record, offset) + ": data CRC mismatch (stored " + hex32(stored) +
                       ", computed " + hex32(computed) + ")");
  return true;
}

// Calls `visit` with each event of one file, in order, until it returns false.
template <typename Visit>
void for_each_event(const uint8_t* data, size_t size, const std::string& file, FileWarnings& warnings, Visit visit) {
  size_t offset = 0;
  for (long record = 1; offset < size; ++record) {
    const uint8_t* body = nullptr;
    uint64_t length = 0;
    if (!next_record(data, size, offset, record, file, warnings, body, length)) break;
    EventValues event;
    try {
      event = read_event(ProtoReader(body, static_cast<size_t>(length)));
    } catch (const ProtoError& e) {
      throw MetricsError(record_place(file, record, offset) + ": malformed Event protobuf: " + e.what());
    }
    if (!visit(event)) return;
    offset += 12 + static_cast<size_t>(length) + 4;
  }
}

// An event written outside `window` (another launch's). One without a wall time cannot be
// placed, and is kept.
bool outside(const EventValues& event, const std::optional<TimeWindow>& window) {
  return window && event.wall_time != 0 && !window->holds(event.wall_time);
}

std::string wall_time_text(double t) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", t);
  return buf;
}

// Parses one file into `series` (which may already hold earlier files' values), leaving out
// the events written outside `window`.
void parse_events_into(const uint8_t* data, size_t size, const std::string& file,
                       const std::map<std::string, std::string>& tags, const std::optional<TimeWindow>& window,
                       MetricSeries& series, FileWarnings& warnings) {
  SeriesWriter writer(series);
  size_t left_out = 0;
  for_each_event(data, size, file, warnings, [&](const EventValues& event) {
    if (outside(event, window))
      left_out += !event.values.empty();
    else
      add_event(event, tags, writer, warnings);
    return true;
  });
  writer.report(warnings, "in this file");
  if (left_out > 0)
    warnings.add(std::to_string(left_out) + " events written outside this launch (wall time " +
                 wall_time_text(window->from) + " to " + wall_time_text(window->to) +
                 ") left out: another launch's, in the same folder");
}

// ---- folders -------------------------------------------------------------------------

bool is_event_file(const fs::directory_entry& entry) {
  std::error_code ec;
  return entry.is_regular_file(ec) && entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
}

// Entries of `folder` that pass `keep`, by name.
template <typename Keep>
std::vector<fs::path> list_sorted(const fs::path& folder, Keep keep) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (keep(*it)) found.push_back(it->path());
  if (ec) throw MetricsError("cannot read " + folder.string() + ": " + ec.message());
  std::sort(found.begin(), found.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  return found;
}

std::vector<fs::path> event_files(const fs::path& folder) { return list_sorted(folder, is_event_file); }

std::vector<fs::path> subfolders(const fs::path& folder) {
  return list_sorted(folder, [](const fs::directory_entry& e) {
    std::error_code ec;
    return e.is_directory(ec);
  });
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MetricsError("cannot read " + path.string());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw MetricsError("cannot read " + path.string());
  return bytes;
}

// Whether any event file in `folder` holds an event written inside `window`. A file that cannot
// be read, or is damaged, counts for what could be read before the damage.
bool written_within(const fs::path& folder, const TimeWindow& window) {
  for (const fs::path& file : event_files(folder)) {
    bool found = false;
    try {
      std::vector<uint8_t> bytes = read_bytes(file);
      FileWarnings quiet(nullptr, file.string());
      for_each_event(bytes.data(), bytes.size(), file.string(), quiet, [&](const EventValues& event) {
        found = event.wall_time != 0 && window.holds(event.wall_time);
        return !found;
      });
    } catch (const MetricsError&) {
    }
    if (found) return true;
  }
  return false;
}

}  // namespace

// ---- public --------------------------------------------------------------------------

uint32_t crc32c(const uint8_t* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

const std::map<std::string, std::string>& default_tensorboard_tags() {
  static const std::map<std::string, std::string> tags = {{"loss_metrics/global_avg_loss", "loss"},
                                                          {"grad_norm", "grad_norm"},
                                                          {"validation_metrics/loss", "validation_loss"}};
  return tags;
}

MetricSeries parse_tfrecord_events(const uint8_t* data, size_t size, const std::string& file,
                                   const std::map<std::string, std::string>& tags, std::vector<std::string>* warnings) {
  MetricSeries series;
  FileWarnings file_warnings(warnings, file);
  parse_events_into(data, size, file, tags, std::nullopt, series, file_warnings);
  file_warnings.finish();
  return series;
}

std::string tensorboard_run_folder(const std::string& dir, const std::optional<TimeWindow>& window) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw MetricsError("cannot read " + dir + ": not a folder");
  if (!event_files(dir).empty()) return dir;
  std::vector<fs::path> runs = subfolders(dir);
  if (runs.empty()) throw MetricsError(dir + ": no events.out.tfevents.* files and no run folders");
  if (window)
    for (auto run = runs.rbegin(); run != runs.rend(); ++run)
      if (written_within(*run, *window)) return run->string();
  return runs.back().string();
}

MetricSeries read_tensorboard_scalars(const std::string& dir, const std::map<std::string, std::string>& tags,
                                      std::vector<std::string>* warnings, const std::optional<TimeWindow>& window) {
  std::string folder = tensorboard_run_folder(dir, window);
  std::vector<fs::path> files = event_files(folder);
  if (files.empty()) {
    std::string inside;
    for (const fs::path& sub : subfolders(folder)) inside += (inside.empty() ? "" : ", ") + sub.filename().string();
    throw MetricsError(folder + ": no events.out.tfevents.* files" +
                       (inside.empty() ? std::string() : " (subfolders: " + inside + "; pass one of them)"));
  }
  MetricSeries series;
  for (const fs::path& file : files) {
    std::vector<uint8_t> bytes = read_bytes(file);
    FileWarnings file_warnings(warnings, file.string());
    MetricSeries one;
    parse_events_into(bytes.data(), bytes.size(), file.string(), tags, window, one, file_warnings);
    SeriesWriter merged(series);
    for (const auto& [step, metrics] : one)
      for (const auto& [name, value] : metrics) merged.put(step, name, value);
    merged.report(file_warnings, "by this file over earlier files");
    file_warnings.finish();
  }
  return series;
}

}  // namespace meshtest
