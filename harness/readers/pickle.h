// A non-executing reader of Python pickles (protocols 0-5), for files we must read without
// Python: PyTorch DCP's `.metadata` and the `data.pkl` inside torch.save zips.
//
// It never runs code: a global (`torch.Size`, a class) becomes an inert Global record, and calling
// it (REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST) an inert Object record holding the callable, its
// arguments and the state BUILD gave it. The caller decides which globals it understands.
//
// Promises: any input, however damaged, yields either a value or a PickleError whose message
// names the file, the byte offset and the opcode; memory stays proportional to the input (every
// declared length is checked against the bytes left before anything is allocated); nothing
// recurses over the parsed value except describe(), which is depth-bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshtest::pickle {

class PickleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One parsed value. Containers and records point at other values of the same Pickle; pointers
// may be shared (the memo) and may form cycles, so walk them with a depth bound.
struct Value {
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Dict,
    Set,
    FrozenSet,
    Global,
    Object,
    PersistentId
  };
  Kind kind = Kind::None;
  int64_t integer = 0;                                       // Bool (0/1), Int
  double real = 0;                                           // Float
  std::string text;                                          // Str (UTF-8), Bytes (raw); Global: its module
  std::string name;                                          // Global: its name
  std::vector<const Value*> items;                           // Tuple, List, Set; Object: appended items
  std::vector<std::pair<const Value*, const Value*>> pairs;  // Dict (in order); Object: set items
  const Value* callable = nullptr;                           // Object: what was called (usually a Global)
  const Value* args = nullptr;                               // Object: the argument tuple; PersistentId: the pid
  const Value* kwargs = nullptr;                             // Object made by NEWOBJ_EX
  const Value* state = nullptr;                              // Object: what BUILD gave it (a dict, a tuple, ...)

  bool is(Kind k) const { return kind == k; }
  // Object: the Global it was made from, or nullptr.
  const Value* cls() const;
  // Object made from a Global named `name` (any module)?
  bool is_instance_of(std::string_view name) const;
  // Global `module.name`?
  bool is_global(std::string_view module, std::string_view name) const;
  // Dict: the value under a str key (the last one, as Python keeps), or nullptr.
  const Value* get(std::string_view key) const;
  // Object: an attribute from its dict state (also a `(dict, slots)` state), or nullptr.
  const Value* attribute(std::string_view attr) const;
};

const char* kind_name(Value::Kind kind);

// A parsed pickle: the root value and the storage of every value it reaches.
class Pickle {
 public:
  const Value& root() const { return *root_; }
  // Every Global the pickle names, in order of appearance (for reporting unknown ones).
  const std::vector<const Value*>& globals() const { return globals_; }
  // Bytes read up to STOP: readers bound what they build from the value by it (the memo lets a
  // small pickle reference one big list many times).
  size_t input_size() const { return input_size_; }

 private:
  friend class Unpickler;
  std::vector<std::unique_ptr<Value>> arena_;
  std::vector<const Value*> globals_;
  const Value* root_ = nullptr;
  size_t input_size_ = 0;
};

// Parses `data` up to its STOP opcode. `file_label` names the input in errors.
Pickle parse(const uint8_t* data, size_t size, const std::string& file_label);

// A short Python-like rendering of `value` for messages: at most `max_depth` levels deep and
// about `max_chars` characters long.
std::string describe(const Value& value, int max_depth = 4, size_t max_chars = 200);

}  // namespace meshtest::pickle
