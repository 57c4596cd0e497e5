#pragma once
// torch.save-shaped files written by hand, each built to hurt a loader: a
// nesting that overflows a recursive destructor, dicts that share their
// children 30 levels deep (2^30 paths), a stored float viewed as 3.6e9, a
// checkpoint entry whose name asks for a huge index. Shared by the loader's
// unit test and the CLI test that feeds them to every entry point.
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actorpipe::hostile {

// -- pickle protocol 2, the opcodes torch.save uses --

inline std::string u32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
inline std::string str(const std::string& s) { return "X" + u32(static_cast<uint32_t>(s.size())) + s; }
inline std::string int32(int32_t v) { return "J" + u32(static_cast<uint32_t>(v)); }
inline std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
inline std::string put(uint32_t key) { return "r" + u32(key); }  // LONG_BINPUT
inline std::string get(uint32_t key) { return "j" + u32(key); }  // LONG_BINGET
inline const std::string proto = std::string("\x80\x02", 2);

/// A tuple of ints: MARK, the ints, TUPLE.
inline std::string int_tuple(const std::vector<int64_t>& xs) {
  std::string out = "(";
  for (int64_t x : xs) out += int32(static_cast<int32_t>(x));
  return out + "t";
}

/// _rebuild_tensor_v2(storage `key` of `numel` floats, offset, size, stride,
/// False, OrderedDict()).
inline std::string float_tensor(const std::string& key, int64_t numel, int64_t offset,
                                const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  return global("torch._utils", "_rebuild_tensor_v2") + "(" + "(" + str("storage") +
         global("torch", "FloatStorage") + str(key) + str("cpu") + int32(static_cast<int32_t>(numel)) + "tQ" +
         int32(static_cast<int32_t>(offset)) + int_tuple(size) + int_tuple(stride) + "\x89" +
         global("collections", "OrderedDict") + ")R" + "tR";
}

/// A zip archive in torch.save's layout: data.pkl plus `records` (name
/// under data/, bytes).
inline void write_archive(const std::string& path, const std::string& pickle,
                          const std::vector<std::pair<std::string, std::string>>& records = {}) {
  caffe2::serialize::PyTorchStreamWriter w(path);
  w.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [name, bytes] : records) w.writeRecord("data/" + name, bytes.data(), bytes.size());
  w.writeEndOfFile();
}

// -- the files --

/// A 1-tuple nested `depth` deep (the issue's file: 2,000,000, about 2 MB).
inline void deep_tuple(const std::string& path, int depth = 2000000) {
  write_archive(path, proto + "K\x01" + std::string(static_cast<size_t>(depth), '\x85') + ".");
}

/// d0 = {}; d_i = {"a": d_{i-1}, "b": d_{i-1}}: 2^levels paths in under a KB.
inline void shared_dicts(const std::string& path, int levels = 30) {
  std::string p = proto + "}" + put(0) + "0";
  for (int i = 1; i <= levels; ++i) {
    p += "}" + put(static_cast<uint32_t>(i)) + str("a") + get(static_cast<uint32_t>(i - 1)) + "s" + str("b") +
         get(static_cast<uint32_t>(i - 1)) + "s";
    if (i < levels) p += "0";
  }
  write_archive(path, p + ".");
}

/// {"0.weight": one stored float viewed as [60000, 60000] with stride 0}:
/// 14.4 GB once copied out.
inline void stride_zero_view(const std::string& path, const std::string& name = "0.weight") {
  write_archive(path, proto + "}" + str(name) + float_tensor("0", 1, 0, {60000, 60000}, {0, 0}) + "s.",
                {{"0", std::string(4, '\0')}});
}

/// FNV-1a as actorpipe's checkpoints compute it over (name, bytes) pairs.
inline int64_t checksum(const std::vector<std::pair<std::string, std::string>>& entries) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, bytes] : entries)
    for (const std::string* s : {&name, &bytes})
      for (unsigned char c : *s) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

/// A checkpoint with a valid checksum whose optimizer entry is named
/// `optimizer.100000000.exp_avg`: a loader that sizes a table from the
/// name allocates gigabytes.
inline void huge_optimizer_index(const std::string& path) {
  auto long_tensor = [](const std::string& key) {
    return global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") + global("torch", "LongStorage") +
           str(key) + str("cpu") + int32(1) + "tQ" + int32(0) + int_tuple({1}) + int_tuple({1}) + "\x89" +
           global("collections", "OrderedDict") + ")RtR";
  };
  auto byte_tensor = [](const std::string& key, int64_t n) {
    return global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") + global("torch", "ByteStorage") +
           str(key) + str("cpu") + int32(static_cast<int32_t>(n)) + "tQ" + int32(0) + int_tuple({n}) +
           int_tuple({1}) + "\x89" + global("collections", "OrderedDict") + ")RtR";
  };
  std::string step(8, '\0');
  step[0] = 9;
  const std::string type = "adam", state(4, '\0');
  const int64_t sum =
      checksum({{"meta.step", step}, {"meta.optimizer", type}, {"optimizer.100000000.exp_avg", state}});
  std::string sum_bytes(8, '\0');
  for (int i = 0; i < 8; ++i) sum_bytes[i] = static_cast<char>((static_cast<uint64_t>(sum) >> (8 * i)) & 0xff);
  const std::string p = proto + "}" + str("meta.step") + long_tensor("0") + "s" + str("meta.optimizer") +
                        byte_tensor("1", 4) + "s" + str("optimizer.100000000.exp_avg") +
                        float_tensor("2", 1, 0, {1}, {1}) + "s" + str("meta.checksum") + long_tensor("3") + "s.";
  write_archive(path, p, {{"0", step}, {"1", type}, {"2", state}, {"3", sum_bytes}});
}

}  // namespace actorpipe::hostile
