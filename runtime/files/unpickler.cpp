// The unpickler behind load_tensors: torch.save's protocol-2 pickle of a
// dict of tensors, read opcode by opcode (see runtime/files/unpickler.hpp).
#include "runtime/files/unpickler.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

namespace actorpipe::pickle {

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  std::string clean;
  for (char ch : what.substr(0, 200)) clean += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  if (what.size() > 200) clean += "...";
  throw std::runtime_error(path + ": unsupported pickle content: " + clean);
}

const char* kind_name(pvalue::kind k) {
  switch (k) {
    case pvalue::kind::none: return "None";
    case pvalue::kind::boolean: return "bool";
    case pvalue::kind::integer: return "int";
    case pvalue::kind::floating: return "float";
    case pvalue::kind::string: return "str";
    case pvalue::kind::tuple: return "tuple";
    case pvalue::kind::list: return "list";
    case pvalue::kind::dict: return "dict";
    case pvalue::kind::global: return "global";
    case pvalue::kind::tensor: return "tensor";
  }
  return "?";
}

namespace {

/// Storage class names as torch.save writes them.
const std::map<std::string, at::ScalarType>& storage_types() {
  static const std::map<std::string, at::ScalarType> types = {
      {"torch.FloatStorage", at::kFloat},     {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},       {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},       {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},     {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},       {"torch.BoolStorage", at::kBool},
  };
  return types;
}

class unpickler {
public:
  /// `budget`: the bytes that the tensors it builds may take in all.
  unpickler(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
            const char* data, size_t size, uint64_t budget, pvalue_arena& arena)
      : path_(path), reader_(reader), data_(data), size_(size), budget_(budget), arena_(arena) {}

  pvalue_ptr run() {
    for (;;) {
      const uint8_t op = u8();
      if (op == '.') {  // STOP
        if (stack_.size() != 1) fail("stack has " + std::to_string(stack_.size()) + " items at STOP");
        return stack_.back();
      }
      if (!scalar_op(op) && !container_op(op)) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail(std::string("opcode ") + hex + " at byte " + std::to_string(pos_ - 1));
      }
    }
  }

private:
  // Framing, globals, the memo, marks and scalars. False: not one of these.
  bool scalar_op(uint8_t op) {
    switch (op) {
      case 0x80: u8(); break;          // PROTO
      case 0x95: bytes(8); break;      // FRAME: framing is a hint only
      case 'c': {                      // GLOBAL
        std::string mod = line();
        std::string name = line();
        push(global(mod + "." + name));
        break;
      }
      case 0x93: {                     // STACK_GLOBAL
        auto name = pop(), mod = pop();
        if (mod->k != pvalue::kind::string || name->k != pvalue::kind::string) fail("STACK_GLOBAL of non-strings");
        push(global(mod->s + "." + name->s));
        break;
      }
      case 'q': memo_[u8()] = top(); break;          // BINPUT
      case 'r': memo_[u32()] = top(); break;         // LONG_BINPUT
      case 0x94: memo_[memo_.size()] = top(); break; // MEMOIZE
      case 'h': push(memo_get(u8())); break;         // BINGET
      case 'j': push(memo_get(u32())); break;        // LONG_BINGET
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case '0': pop(); break;                            // POP
      case '1': pop_mark(); break;                       // POP_MARK
      case '2': push(top()); break;                      // DUP
      case 'N': push(make(pvalue::kind::none)); break;
      case 0x88: push(boolean(true)); break;   // NEWTRUE
      case 0x89: push(boolean(false)); break;  // NEWFALSE
      case 'J': push(integer(static_cast<int32_t>(u32()))); break;  // BININT
      case 'K': push(integer(u8())); break;                         // BININT1
      case 'M': push(integer(u16())); break;                        // BININT2
      case 0x8a: push(integer(long1(u8()))); break;                 // LONG1
      case 'G': {                                                   // BINFLOAT, big-endian
        uint64_t bits = 0;
        const char* p = bytes(8);
        for (int b = 0; b < 8; ++b) bits = (bits << 8) | static_cast<uint8_t>(p[b]);
        auto v = make(pvalue::kind::floating);
        std::memcpy(&v->d, &bits, sizeof bits);
        push(v);
        break;
      }
      case 'X': push(string(u32())); break;   // BINUNICODE
      case 0x8c: push(string(u8())); break;   // SHORT_BINUNICODE
      default: return false;
    }
    return true;
  }

  // Tuples, lists, dicts, persistent ids, REDUCE and BUILD. False: not one of these.
  bool container_op(uint8_t op) {
    switch (op) {
      case ')': push(make(pvalue::kind::tuple)); break;  // EMPTY_TUPLE
      case 't': {                                        // TUPLE
        auto v = make(pvalue::kind::tuple);
        v->items = pop_mark();
        nest(v, v->items);
        push(v);
        break;
      }
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        auto v = make(pvalue::kind::tuple);
        v->items.resize(op - 0x84);
        for (auto it = v->items.rbegin(); it != v->items.rend(); ++it) *it = pop();
        nest(v, v->items);
        push(v);
        break;
      }
      case ']': push(make(pvalue::kind::list)); break;  // EMPTY_LIST
      case 'a': {                                       // APPEND
        auto v = pop();
        auto l = as(top(), pvalue::kind::list, "APPEND");
        l->items.push_back(v);
        nest(l, {v});
        break;
      }
      case 'e': {  // APPENDS
        auto vs = pop_mark();
        auto l = as(top(), pvalue::kind::list, "APPENDS");
        l->items.insert(l->items.end(), vs.begin(), vs.end());
        nest(l, vs);
        break;
      }
      case '}': push(make(pvalue::kind::dict)); break;  // EMPTY_DICT
      case 's': {                                       // SETITEM
        auto v = pop(), k = pop();
        set_item(as(top(), pvalue::kind::dict, "SETITEM"), k, v);
        break;
      }
      case 'u': {  // SETITEMS
        auto kvs = pop_mark();
        if (kvs.size() % 2 != 0) fail("SETITEMS with an odd item count");
        auto d = as(top(), pvalue::kind::dict, "SETITEMS");
        for (size_t j = 0; j < kvs.size(); j += 2) set_item(d, kvs[j], kvs[j + 1]);
        break;
      }
      case 'Q': push(persistent_load(pop())); break;  // BINPERSID
      case 'R': {                                     // REDUCE
        auto args = as(pop(), pvalue::kind::tuple, "REDUCE arguments");
        auto fn = as(pop(), pvalue::kind::global, "REDUCE callable");
        push(reduce(fn->s, args->items));
        break;
      }
      case 'b': {  // BUILD: the state (OrderedDict._metadata, tensor hooks) is not ours
        pop();
        const auto k = top()->k;
        if (k != pvalue::kind::dict && k != pvalue::kind::tensor)
          fail(std::string("BUILD on a ") + kind_name(k));
        break;
      }
      default: return false;
    }
    return true;
  }

  [[noreturn]] void fail(const std::string& what) const { unsupported(path_, what); }

  const char* bytes(size_t n) {
    if (size_ - pos_ < n) fail("truncated pickle at byte " + std::to_string(pos_));
    const char* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint8_t u8() { return static_cast<uint8_t>(*bytes(1)); }
  uint16_t u16() {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes(2));
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
  }
  uint32_t u32() {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes(4));
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
  }
  int64_t long1(size_t n) {
    if (n > 8) fail("integer wider than 64 bits");
    const auto* p = reinterpret_cast<const uint8_t*>(bytes(n));
    uint64_t v = 0;
    for (size_t b = 0; b < n; ++b) v |= uint64_t(p[b]) << (8 * b);
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  std::string line() {
    const size_t start = pos_;
    while (pos_ < size_ && data_[pos_] != '\n') ++pos_;
    if (pos_ >= size_) fail("truncated pickle in GLOBAL");
    return std::string(data_ + start, data_ + pos_++);
  }

  pvalue_ptr boolean(bool b) {
    auto v = make(pvalue::kind::boolean);
    v->i = b;
    return v;
  }
  pvalue_ptr integer(int64_t i) {
    auto v = make(pvalue::kind::integer);
    v->i = i;
    return v;
  }
  pvalue_ptr make(pvalue::kind k) {
    arena_.emplace_back();
    arena_.back().k = k;
    return &arena_.back();
  }

  /// `v` now holds `children`: bound how deep values nest.
  void nest(pvalue_ptr v, const std::vector<pvalue_ptr>& children) {
    for (const auto* c : children) v->depth = std::max(v->depth, c->depth + 1);
    if (v->depth > max_depth)
      fail("values nested deeper than " + std::to_string(max_depth) + " at byte " + std::to_string(pos_));
  }

  pvalue_ptr string(size_t n) {
    auto v = make(pvalue::kind::string);
    const char* p = bytes(n);
    v->s.assign(p, n);
    return v;
  }
  pvalue_ptr global(const std::string& name) {
    static const char* known[] = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                                  "collections.OrderedDict", "torch.jit._pickle.restore_type_tag"};
    bool ok = storage_types().count(name) > 0;
    for (const char* k : known) ok = ok || name == k;
    if (!ok) fail("global " + name);
    auto v = make(pvalue::kind::global);
    v->s = name;
    return v;
  }

  void push(pvalue_ptr v) { stack_.push_back(std::move(v)); }
  pvalue_ptr top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow at byte " + std::to_string(pos_));
    return stack_.back();
  }
  pvalue_ptr pop() {
    auto v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<pvalue_ptr> pop_mark() {
    if (marks_.empty()) fail("no MARK at byte " + std::to_string(pos_));
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<pvalue_ptr> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  pvalue_ptr memo_get(size_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " not set");
    return it->second;
  }
  pvalue_ptr as(const pvalue_ptr& v, pvalue::kind k, const char* where) const {
    if (v->k != k) fail(std::string(where) + " expects a " + kind_name(k) + ", got a " + kind_name(v->k));
    return v;
  }
  // A repeated key is resolved when the dict is read (collect): a search
  // here would make a dict of n keys cost n^2.
  void set_item(pvalue_ptr d, pvalue_ptr k, pvalue_ptr v) {
    d->entries.emplace_back(k, v);
    nest(d, {v});
  }

  int64_t int_at(const std::vector<pvalue_ptr>& xs, size_t j, const char* what) const {
    if (j >= xs.size() || xs[j]->k != pvalue::kind::integer) fail(std::string("expected an int for ") + what);
    return xs[j]->i;
  }
  std::vector<int64_t> ints(const pvalue_ptr& v, const char* what) const {
    if (v->k != pvalue::kind::tuple && v->k != pvalue::kind::list) fail(std::string("expected a tuple for ") + what);
    std::vector<int64_t> out;
    for (size_t j = 0; j < v->items.size(); ++j) out.push_back(int_at(v->items, j, what));
    return out;
  }

  /// ('storage', torch.XStorage, key, location, numel) -> a flat owned tensor.
  pvalue_ptr persistent_load(const pvalue_ptr& pid) {
    if (pid->k != pvalue::kind::tuple || pid->items.size() < 5 || pid->items[0]->k != pvalue::kind::string ||
        pid->items[0]->s != "storage")
      fail("persistent id that is not a storage");
    const auto& cls = pid->items[1];
    const auto& key = pid->items[2];
    if (cls->k != pvalue::kind::global || !storage_types().count(cls->s) || key->k != pvalue::kind::string)
      fail("storage of type " + cls->s);
    const int64_t numel = int_at(pid->items, 4, "storage size");
    auto cached = storages_.find(key->s);
    if (cached != storages_.end()) return cached->second;

    const at::ScalarType dtype = storage_types().at(cls->s);
    const std::string record = "data/" + key->s;
    if (!reader_.hasRecord(record)) fail("missing storage record " + record);
    auto [ptr, nbytes] = reader_.getRecord(record);
    const size_t element = at::elementSize(dtype);
    if (numel < 0 || static_cast<uint64_t>(numel) > nbytes / element)
      fail("storage " + key->s + " holds " + std::to_string(nbytes) + " bytes, too few for " + std::to_string(numel) +
           " elements of " + std::to_string(element) + " bytes");
    charge(static_cast<uint64_t>(numel) * element);
    auto v = make(pvalue::kind::tensor);
    // Clone: the record buffer dies with the reader.
    v->t = at::from_blob(ptr.get(), {numel}, at::TensorOptions().dtype(dtype)).clone();
    storages_[key->s] = v;
    return v;
  }

  pvalue_ptr reduce(const std::string& fn, const std::vector<pvalue_ptr>& args) {
    if (fn == "collections.OrderedDict") {
      if (!args.empty()) fail("OrderedDict with constructor arguments");
      return make(pvalue::kind::dict);
    }
    if (fn == "torch._utils._rebuild_tensor_v2") {
      // (storage, offset, size, stride, requires_grad, hooks[, metadata])
      if (args.size() < 4 || args[0]->k != pvalue::kind::tensor) fail("_rebuild_tensor_v2 arguments");
      const at::Tensor& storage = args[0]->t;
      const int64_t offset = int_at(args, 1, "tensor offset");
      const auto size = ints(args[2], "tensor size");
      const auto stride = ints(args[3], "tensor stride");
      if (size.size() != stride.size()) fail("tensor size and stride of different ranks");
      if (size.size() > 64) fail("a tensor of " + std::to_string(size.size()) + " dimensions");
      int64_t last = offset;
      bool empty = false;
      for (size_t d = 0; d < size.size(); ++d) {
        if (size[d] < 0 || stride[d] < 0) fail("negative tensor size or stride");
        if (size[d] == 0) empty = true;
        int64_t span = 0;
        if (size[d] > 0 && (__builtin_mul_overflow(size[d] - 1, stride[d], &span) ||
                            __builtin_add_overflow(last, span, &last)))
          fail("tensor size and stride overflow");
      }
      if (offset < 0 || (!empty && last >= storage.numel()))
        fail("tensor view outside its storage of " + std::to_string(storage.numel()) + " elements");
      // A view may repeat its storage's elements (stride 0): what it would
      // take once copied out is checked before the copy is made.
      uint64_t numel = empty ? 0 : 1;
      for (int64_t d : size)
        if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) numel = UINT64_MAX;
      const uint64_t element = storage.element_size();
      charge(numel > UINT64_MAX / element ? UINT64_MAX : numel * element, size);
      auto v = make(pvalue::kind::tensor);
      v->t = empty ? at::empty(size, storage.options())
                   : storage.as_strided(size, stride, offset).clone(at::MemoryFormat::Contiguous);
      return v;
    }
    if (fn == "torch._utils._rebuild_parameter") {  // nn.Parameter: (data, requires_grad, hooks)
      if (args.empty() || args[0]->k != pvalue::kind::tensor) fail("_rebuild_parameter arguments");
      return args[0];
    }
    if (fn == "torch.jit._pickle.restore_type_tag") {  // (value, type string): the value is enough
      if (args.empty()) fail("restore_type_tag arguments");
      return args[0];
    }
    fail("call of " + fn);
  }

  /// Counts `bytes` of tensor data against the budget.
  void charge(uint64_t bytes, c10::IntArrayRef shape = {}) {
    if (bytes <= budget_ - used_) {
      used_ += bytes;
      return;
    }
    fail("tensors of " + std::to_string(used_ + std::min(bytes, UINT64_MAX - used_)) + " bytes" +
         (shape.empty() ? std::string() : " (the last of shape " + c10::str(shape) + ")") +
         ", more than a file of its size can hold (" + std::to_string(budget_) + " bytes)");
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  const char* data_;
  size_t size_;
  uint64_t budget_;
  uint64_t used_ = 0;
  size_t pos_ = 0;
  pvalue_arena& arena_;
  std::vector<pvalue_ptr> stack_;
  std::vector<size_t> marks_;
  std::map<size_t, pvalue_ptr> memo_;
  std::map<std::string, pvalue_ptr> storages_;
};

}  // namespace

pvalue* unpickle(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader, const char* data,
                 size_t size, uint64_t budget, pvalue_arena& arena) {
  return unpickler(path, reader, data, size, budget, arena).run();
}

}  // namespace actorpipe::pickle
