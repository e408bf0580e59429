#include "readers/pickle.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "readers/utf8.h"

namespace meshtest::pickle {

namespace {

const char* opcode_name(uint8_t op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// The pickle virtual machine, minus everything that would run code.
class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, const std::string& label) : data_(data), size_(size), label_(label) {}

  Pickle run() {
    while (true) {
      if (pos_ >= size_) fail_at(pos_, "input ends without a STOP opcode (truncated?)");
      op_pos_ = pos_;
      op_ = data_[pos_++];
      if (op_ == '.') break;
      step();
    }
    out_.root_ = pop();
    out_.input_size_ = pos_;
    return std::move(out_);
  }

 private:
  using Kind = Value::Kind;

  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    throw PickleError(label_ + ": byte " + std::to_string(at) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const {
    const char* name = opcode_name(op_);
    char code[8];
    std::snprintf(code, sizeof code, "0x%02x", op_);
    throw PickleError(label_ + ": byte " + std::to_string(op_pos_) + " (opcode " + code + (name ? " " : "") +
                      (name ? name : "") + "): " + what);
  }

  // ---- reading the input ----
  void need(uint64_t n) const {
    if (n > size_ - pos_)
      fail("needs " + std::to_string(n) + " bytes but only " + std::to_string(size_ - pos_) +
           " are left (truncated or a bad length)");
  }
  const uint8_t* take(uint64_t n) {
    need(n);
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  uint64_t read_le(int n) {
    const uint8_t* p = take(n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::string read_string(uint64_t n) {
    const uint8_t* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  // A text opcode's argument: the bytes up to the next newline.
  std::string read_line() {
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (!nl) fail("its text argument has no terminating newline (truncated?)");
    const size_t end = static_cast<const uint8_t*>(nl) - data_;
    std::string line(reinterpret_cast<const char*>(data_ + pos_), end - pos_);
    pos_ = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }

  // ---- values ----
  Value* make(Kind kind) {
    out_.arena_.push_back(std::make_unique<Value>());
    out_.arena_.back()->kind = kind;
    return out_.arena_.back().get();
  }
  Value* make_int(int64_t v) {
    Value* x = make(Kind::Int);
    x->integer = v;
    return x;
  }
  Value* make_text(Kind kind, std::string s) {
    Value* x = make(kind);
    x->text = std::move(s);
    return x;
  }
  Value* make_global(std::string module, std::string name) {
    Value* g = make(Kind::Global);
    g->text = std::move(module);
    g->name = std::move(name);
    out_.globals_.push_back(g);
    return g;
  }
  Value* make_object(const Value* callable, const Value* args) {
    Value* o = make(Kind::Object);
    o->callable = callable;
    o->args = args;
    return o;
  }

  // ---- the stack and the marks ----
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value* v) { stack_.push_back(v); }
  Value* pop() {
    if (stack_.size() <= floor())
      fail("stack underflow: nothing to pop" + std::string(marks_.empty() ? "" : " above the MARK"));
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= floor())
      fail("stack underflow: the stack is empty" + std::string(marks_.empty() ? "" : " above the MARK"));
    return stack_.back();
  }
  // The items pushed since the last MARK, removing them and the mark.
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("needs a MARK but none is open");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return items;
  }

  // ---- the memo ----
  void memo_put(uint64_t index) { memo_[index] = top(); }
  Value* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo has no entry " + std::to_string(index));
    return it->second;
  }

  // ---- opcodes ----
  void step() {
    switch (op_) {
      case 0x80: proto(); break;
      case 0x95: frame(); break;
      case '(': marks_.push_back(stack_.size()); break;
      case '0': pop(); break;
      case '1': pop_mark(); break;
      case '2': push(top()); break;
      case 'N': push(make(Kind::None)); break;
      case 0x88: push_bool(true); break;
      case 0x89: push_bool(false); break;
      case 'J': push(make_int(static_cast<int32_t>(read_le(4)))); break;
      case 'K': push(make_int(static_cast<int64_t>(read_le(1)))); break;
      case 'M': push(make_int(static_cast<int64_t>(read_le(2)))); break;
      case 0x8a: push(make_int(read_long(read_le(1)))); break;
      case 0x8b: push(make_int(read_long(read_le(4)))); break;
      case 'I': text_int(); break;
      case 'L': push(make_int(parse_int(strip_suffix(read_line(), 'L')))); break;
      case 'G': binfloat(); break;
      case 'F': push_float(parse_float(read_line())); break;
      case 0x8c: push(make_text(Kind::Str, read_string(read_le(1)))); break;
      case 'X': push(make_text(Kind::Str, read_string(read_le(4)))); break;
      case 0x8d: push(make_text(Kind::Str, read_string(read_le(8)))); break;
      case 'V': push(make_text(Kind::Str, decode_raw_unicode_escape(read_line()))); break;
      case 'U': push(make_text(Kind::Str, read_string(read_le(1)))); break;
      case 'T': binstring(); break;
      case 'S': push(make_text(Kind::Str, decode_quoted(read_line()))); break;
      case 'C': push(make_text(Kind::Bytes, read_string(read_le(1)))); break;
      case 'B': push(make_text(Kind::Bytes, read_string(read_le(4)))); break;
      case 0x8e:
      case 0x96: push(make_text(Kind::Bytes, read_string(read_le(8)))); break;
      case 'c': global_text(); break;
      case 0x93: stack_global(); break;
      case 0x94: memo_put(memo_.size()); break;
      case 'q': memo_put(read_le(1)); break;
      case 'r': memo_put(read_le(4)); break;
      case 'p': memo_put(parse_index(read_line())); break;
      case 'h': push(memo_get(read_le(1))); break;
      case 'j': push(memo_get(read_le(4))); break;
      case 'g': push(memo_get(parse_index(read_line()))); break;
      case '}': push(make(Kind::Dict)); break;
      case ']': push(make(Kind::List)); break;
      case ')': push(make(Kind::Tuple)); break;
      case 0x8f: push(make(Kind::Set)); break;
      case 'd': dict_from_mark(); break;
      case 'l': sequence_from_mark(Kind::List); break;
      case 't': sequence_from_mark(Kind::Tuple); break;
      case 0x91: sequence_from_mark(Kind::FrozenSet); break;
      case 0x85: small_tuple(1); break;
      case 0x86: small_tuple(2); break;
      case 0x87: small_tuple(3); break;
      case 's': setitem(); break;
      case 'u': setitems(); break;
      case 'a': append(); break;
      case 'e': appends(); break;
      case 0x90: additems(); break;
      case 'R': reduce(); break;
      case 0x81: newobj(); break;
      case 0x92: newobj_ex(); break;
      case 'o': obj(); break;
      case 'i': inst(); break;
      case 'b': build(); break;
      case 'Q': persistent_id(pop()); break;
      case 'P': persistent_id(make_text(Kind::Str, read_line())); break;
      case 0x82:
      case 0x83:
      case 0x84: fail("the extension registry (copyreg) is not supported");
      case 0x97:
      case 0x98: fail("out-of-band buffers (protocol 5) are not supported");
      default: fail("unknown opcode");
    }
  }

  void proto() {
    const uint64_t v = read_le(1);
    if (v > 5) fail("protocol " + std::to_string(v) + " is newer than 5, the newest this reader knows");
  }
  void frame() {
    const uint64_t n = read_le(8);
    if (n > size_ - pos_)
      fail("frame of " + std::to_string(n) + " bytes but only " + std::to_string(size_ - pos_) +
           " are left (truncated?)");
  }
  void push_bool(bool b) {
    Value* v = make(Kind::Bool);
    v->integer = b;
    push(v);
  }
  void push_float(double d) {
    Value* v = make(Kind::Float);
    v->real = d;
    push(v);
  }
  void binfloat() {
    const uint8_t* p = take(8);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];  // big-endian
    double d;
    std::memcpy(&d, &bits, sizeof d);
    push_float(d);
  }
  // LONG1/LONG4: little-endian two's complement of `n` bytes, kept only when it fits 64 bits.
  int64_t read_long(uint64_t n) {
    const uint8_t* p = take(n);
    if (n == 0) return 0;
    const bool negative = p[n - 1] & 0x80;
    for (uint64_t i = 8; i < n; ++i)
      if (p[i] != (negative ? 0xFF : 0x00)) fail("integer wider than 64 bits (" + std::to_string(n) + " bytes)");
    if (n > 8 && (((p[7] & 0x80) != 0) != negative))
      fail("integer wider than 64 bits (" + std::to_string(n) + " bytes)");
    uint64_t v = negative ? ~uint64_t{0} : 0;
    const uint64_t used = n < 8 ? n : 8;
    for (uint64_t i = 0; i < used; ++i) {
      v &= ~(uint64_t{0xFF} << (8 * i));
      v |= uint64_t{p[i]} << (8 * i);
    }
    return static_cast<int64_t>(v);
  }
  static std::string strip_suffix(std::string s, char c) {
    if (!s.empty() && s.back() == c) s.pop_back();
    return s;
  }
  int64_t parse_int(const std::string& s) {
    if (s.empty()) fail("empty integer");
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (end != s.c_str() + s.size()) fail("'" + s.substr(0, 40) + "' is not an integer");
    if (errno == ERANGE) fail("integer '" + s.substr(0, 40) + "' is wider than 64 bits");
    return v;
  }
  uint64_t parse_index(const std::string& s) {
    const int64_t v = parse_int(s);
    if (v < 0) fail("negative memo index");
    return static_cast<uint64_t>(v);
  }
  double parse_float(const std::string& s) {
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) fail("'" + s.substr(0, 40) + "' is not a float");
    return d;
  }
  void text_int() {
    const std::string s = read_line();
    if (s == "00" || s == "01") return push_bool(s == "01");
    push(make_int(parse_int(s)));
  }
  void binstring() {
    const int64_t n = static_cast<int32_t>(read_le(4));
    if (n < 0) fail("negative BINSTRING length");
    push(make_text(Kind::Str, read_string(static_cast<uint64_t>(n))));
  }
  // UNICODE's raw-unicode-escape: \uXXXX and \UXXXXXXXX, everything else as is.
  std::string decode_raw_unicode_escape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t digits = (s[i] == '\\' && i + 1 < s.size()) ? (s[i + 1] == 'u' ? 4 : s[i + 1] == 'U' ? 8 : 0) : 0;
      if (digits == 0 || i + 2 + digits > s.size()) {
        append_utf8(out, static_cast<uint8_t>(s[i]));  // latin-1, as Python reads the bytes
        continue;
      }
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        const int d = hex_digit(s[i + 2 + k]);
        if (d < 0) fail("bad \\u escape");
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      if (cp > 0x10FFFF) fail("code point beyond U+10FFFF");
      append_utf8(out, cp);
      i += 1 + digits;
    }
    return out;
  }
  // STRING's argument: a Python repr, quoted, with backslash escapes.
  std::string decode_quoted(const std::string& s) {
    if (s.size() < 2 || (s[0] != '\'' && s[0] != '"') || s.back() != s[0]) fail("STRING argument is not quoted");
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      if (++i + 1 > s.size() - 1) fail("STRING ends inside an escape");
      const char e = s[i];
      if (e == 'n')
        out += '\n';
      else if (e == 't')
        out += '\t';
      else if (e == 'r')
        out += '\r';
      else if (e == '\\' || e == '\'' || e == '"')
        out += e;
      else if (e == 'x' && i + 2 < s.size() - 1 && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
        out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
        i += 2;
      } else {
        fail(std::string("unsupported escape \\") + e + " in STRING");
      }
    }
    return out;
  }

  void global_text() {
    std::string module = read_line();
    std::string name = read_line();
    push(make_global(std::move(module), std::move(name)));
  }
  void stack_global() {
    Value* name = pop();
    Value* module = pop();
    if (!name->is(Kind::Str) || !module->is(Kind::Str))
      fail(std::string("needs two str (module, name), got ") + kind_name(module->kind) + " and " +
           kind_name(name->kind));
    // The memo could otherwise hand one huge string to every global: copies must stay small.
    if (module->text.size() + name->text.size() > 1024) fail("module and name longer than 1024 bytes");
    push(make_global(module->text, name->text));
  }

  void dict_from_mark() {
    std::vector<Value*> items = pop_mark();
    if (items.size() % 2) fail("odd number of items (" + std::to_string(items.size()) + ") for a dict");
    Value* d = make(Kind::Dict);
    for (size_t i = 0; i < items.size(); i += 2) d->pairs.emplace_back(items[i], items[i + 1]);
    push(d);
  }
  void sequence_from_mark(Kind kind) {
    std::vector<Value*> items = pop_mark();
    Value* v = make(kind);
    v->items.assign(items.begin(), items.end());
    push(v);
  }
  void small_tuple(size_t n) {
    Value* t = make(Kind::Tuple);
    t->items.resize(n);
    for (size_t i = n; i-- > 0;) t->items[i] = pop();
    push(t);
  }
  // SETITEM(S) apply to dicts and to objects (an OrderedDict or a dict subclass made by REDUCE).
  Value* mapping_target() {
    Value* target = top();
    if (!target->is(Kind::Dict) && !target->is(Kind::Object))
      fail(std::string("sets items on a ") + kind_name(target->kind) + ", not a dict");
    return target;
  }
  Value* sequence_target() {
    Value* target = top();
    if (!target->is(Kind::List) && !target->is(Kind::Set) && !target->is(Kind::Object))
      fail(std::string("appends to a ") + kind_name(target->kind) + ", not a list or set");
    return target;
  }
  void setitem() {
    Value* value = pop();
    Value* key = pop();
    mapping_target()->pairs.emplace_back(key, value);
  }
  void setitems() {
    std::vector<Value*> items = pop_mark();
    if (items.size() % 2) fail("odd number of items (" + std::to_string(items.size()) + ") for SETITEMS");
    Value* target = mapping_target();
    for (size_t i = 0; i < items.size(); i += 2) target->pairs.emplace_back(items[i], items[i + 1]);
  }
  void append() {
    Value* item = pop();
    sequence_target()->items.push_back(item);
  }
  void appends() {
    std::vector<Value*> items = pop_mark();
    Value* target = sequence_target();
    target->items.insert(target->items.end(), items.begin(), items.end());
  }
  void additems() {
    std::vector<Value*> items = pop_mark();
    Value* target = top();
    if (!target->is(Kind::Set)) fail(std::string("adds items to a ") + kind_name(target->kind) + ", not a set");
    target->items.insert(target->items.end(), items.begin(), items.end());
  }

  void reduce() {
    Value* args = pop();
    Value* callable = pop();
    if (!args->is(Kind::Tuple)) fail(std::string("arguments are a ") + kind_name(args->kind) + ", not a tuple");
    push(make_object(callable, args));
  }
  void newobj() {
    Value* args = pop();
    Value* cls = pop();
    if (!args->is(Kind::Tuple)) fail(std::string("arguments are a ") + kind_name(args->kind) + ", not a tuple");
    push(make_object(cls, args));
  }
  void newobj_ex() {
    Value* kwargs = pop();
    Value* args = pop();
    Value* cls = pop();
    if (!args->is(Kind::Tuple) || !kwargs->is(Kind::Dict)) fail("needs a class, an argument tuple and a keyword dict");
    Value* o = make_object(cls, args);
    o->kwargs = kwargs;
    push(o);
  }
  void obj() {  // MARK cls args... OBJ
    std::vector<Value*> items = pop_mark();
    if (items.empty()) fail("needs a class after the MARK");
    Value* args = make(Kind::Tuple);
    args->items.assign(items.begin() + 1, items.end());
    push(make_object(items[0], args));
  }
  void inst() {  // MARK args... INST module\nname\n
    std::string module = read_line();
    std::string name = read_line();
    std::vector<Value*> items = pop_mark();
    Value* args = make(Kind::Tuple);
    args->items.assign(items.begin(), items.end());
    push(make_object(make_global(std::move(module), std::move(name)), args));
  }
  void build() {
    Value* state = pop();
    Value* target = top();
    if (!target->is(Kind::Object))
      fail(std::string("sets the state of a ") + kind_name(target->kind) + ", not an object");
    target->state = state;
  }
  void persistent_id(Value* pid) {
    Value* v = make(Kind::PersistentId);
    v->args = pid;
    push(v);
  }

  const uint8_t* data_;
  size_t size_;
  const std::string& label_;
  size_t pos_ = 0, op_pos_ = 0;
  uint8_t op_ = 0;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;  // stack heights at each open MARK
  std::unordered_map<uint64_t, Value*> memo_;
  Pickle out_;
};

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::Str: return "str";
    case Value::Kind::Bytes: return "bytes";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Set: return "set";
    case Value::Kind::FrozenSet: return "frozenset";
    case Value::Kind::Global: return "global";
    case Value::Kind::Object: return "object";
    case Value::Kind::PersistentId: return "persistent id";
  }
  return "?";
}

const Value* Value::cls() const {
  return kind == Kind::Object && callable && callable->kind == Kind::Global ? callable : nullptr;
}

bool Value::is_instance_of(std::string_view class_name) const {
  const Value* c = cls();
  return c && c->name == class_name;
}

bool Value::is_global(std::string_view module, std::string_view global_name) const {
  return kind == Kind::Global && text == module && name == global_name;
}

const Value* Value::get(std::string_view key) const {
  if (kind != Kind::Dict) return nullptr;
  for (auto it = pairs.rbegin(); it != pairs.rend(); ++it)
    if (it->first->kind == Kind::Str && it->first->text == key) return it->second;
  return nullptr;
}

const Value* Value::attribute(std::string_view attr) const {
  if (kind != Kind::Object || !state) return nullptr;
  if (state->kind == Kind::Dict) return state->get(attr);
  // A class with __slots__ pickles its state as (dict or None, slots dict).
  if (state->kind == Kind::Tuple && state->items.size() == 2) {
    if (const Value* v = state->items[1]->get(attr)) return v;
    return state->items[0]->get(attr);
  }
  return nullptr;
}

namespace {

void describe_into(const Value& v, int depth, size_t max_chars, std::string& out) {
  if (out.size() > max_chars) return;
  using K = Value::Kind;
  auto list = [&](const std::vector<const Value*>& items, const char* open, const char* close) {
    out += open;
    for (size_t i = 0; i < items.size() && out.size() <= max_chars; ++i) {
      if (i) out += ", ";
      describe_into(*items[i], depth - 1, max_chars, out);
    }
    out += close;
  };
  if (depth <= 0 && (v.kind == K::Tuple || v.kind == K::List || v.kind == K::Dict || v.kind == K::Set ||
                     v.kind == K::FrozenSet || v.kind == K::Object || v.kind == K::PersistentId)) {
    out += "...";
    return;
  }
  switch (v.kind) {
    case K::None: out += "None"; break;
    case K::Bool: out += v.integer ? "True" : "False"; break;
    case K::Int: out += std::to_string(v.integer); break;
    case K::Float: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.real);
      out += buf;
      break;
    }
    case K::Str: out += "'" + v.text.substr(0, max_chars) + "'"; break;
    case K::Bytes: out += "b<" + std::to_string(v.text.size()) + " bytes>"; break;
    case K::Tuple: list(v.items, "(", v.items.size() == 1 ? ",)" : ")"); break;
    case K::List: list(v.items, "[", "]"); break;
    case K::Set: list(v.items, "{", "}"); break;
    case K::FrozenSet: list(v.items, "frozenset({", "})"); break;
    case K::Dict:
      out += "{";
      for (size_t i = 0; i < v.pairs.size() && out.size() <= max_chars; ++i) {
        if (i) out += ", ";
        describe_into(*v.pairs[i].first, depth - 1, max_chars, out);
        out += ": ";
        describe_into(*v.pairs[i].second, depth - 1, max_chars, out);
      }
      out += "}";
      break;
    case K::Global: out += v.text + "." + v.name; break;
    case K::Object:
      if (v.callable) describe_into(*v.callable, depth - 1, max_chars, out);
      if (v.args) describe_into(*v.args, depth - 1, max_chars, out);
      if (v.state) {
        out += ".state=";
        describe_into(*v.state, depth - 1, max_chars, out);
      }
      break;
    case K::PersistentId:
      out += "persid(";
      if (v.args) describe_into(*v.args, depth - 1, max_chars, out);
      out += ")";
      break;
  }
}

}  // namespace

Pickle parse(const uint8_t* data, size_t size, const std::string& file_label) {
  if (size == 0 || !data) throw PickleError(file_label + ": empty pickle");
  return Unpickler(data, size, file_label).run();
}

std::string describe(const Value& value, int max_depth, size_t max_chars) {
  std::string out;
  describe_into(value, max_depth, max_chars, out);
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

}  // namespace meshtest::pickle
