#pragma once
// The pickle reader behind load_tensors (runtime/files/state_dict.hpp): a
// protocol-2 unpickler that knows only what torch.save emits for dicts of
// tensors. Internal to runtime/; nothing outside state_dict.cpp uses it.
#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace actorpipe::pickle {

/// One value on the unpickler's stack. Every value lives in the unpickler's
/// arena and points at others by raw pointer: memo entries and later
/// SETITEM/APPEND see the same object, a value may contain itself, and
/// nothing is destroyed recursively (a 2,000,000-deep nesting would
/// overflow the C++ stack).
struct pvalue;
using pvalue_ptr = pvalue*;

struct pvalue {
  enum class kind { none, boolean, integer, floating, string, tuple, list, dict, global, tensor };
  kind k = kind::none;
  /// Containers nested inside this one, itself included: exact for tuples
  /// (built whole), a lower bound for lists and dicts (filled later).
  int depth = 1;
  int64_t i = 0;
  double d = 0.0;
  std::string s;  ///< string, or "module.name" for a global
  std::vector<pvalue_ptr> items;  ///< tuple, list
  std::vector<std::pair<pvalue_ptr, pvalue_ptr>> entries;  ///< dict, in insertion order, repeats kept
  at::Tensor t;
};

/// Owns every value an unpickling builds; destroyed flat.
using pvalue_arena = std::deque<pvalue>;

/// Deeper than anything torch.save writes for a dict of tensors (about 4).
constexpr int max_depth = 100;

/// The file's content is not what torch.save writes for a dict of tensors.
/// Names in `what` come from the file: one printable line, cut short.
[[noreturn]] void unsupported(const std::string& path, const std::string& what);

/// "dict", "tensor", ...: a value's Python type as an error names it.
const char* kind_name(pvalue::kind k);

/// Runs the pickle `data[0..size)` of the torch.save archive `reader` to
/// its STOP and returns the value left on the stack; every value lives in
/// `arena`. `budget`: the bytes its tensors may take in all. Throws
/// std::runtime_error naming `path` for anything it does not know.
pvalue* unpickle(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader, const char* data,
                 size_t size, uint64_t budget, pvalue_arena& arena);

}  // namespace actorpipe::pickle
