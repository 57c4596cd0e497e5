#include "runtime/data/tokens.hpp"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/files/file_io.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

namespace fs = std::filesystem;

// Little-endian fields, read from a byte string at an offset that is checked.
struct reader {
  const std::string& bytes;
  const std::string& name;
  size_t at = 0;

  template <class T>
  T take(const char* what) {
    if (at + sizeof(T) > bytes.size())
      throw token_file_error(name + ": ends at byte " + std::to_string(bytes.size()) + " inside its " + what);
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof(T));  // x86 and ARM: little-endian, as the file
    at += sizeof(T);
    return v;
  }
};

// Widens `n` ids of `width` bytes (unsigned, or int32) to int64.
at::Tensor widen(const char* data, int64_t n, at::ScalarType type) {
  const at::Tensor raw = at::from_blob(const_cast<char*>(data), {n}, at::TensorOptions().dtype(type));
  if (type == at::kInt) return raw.to(at::kLong);
  if (type == at::kShort) return raw.to(at::kInt).bitwise_and(0xFFFF).to(at::kLong);  // uint16 as int16's bits
  // uint32: int32's bits, masked into an int64.
  return raw.to(at::kLong).bitwise_and(int64_t{0xFFFFFFFF});
}

at::Tensor read_flat(const std::string& path, const std::string& dtype) {
  const std::string bytes = read_file_bytes(path);
  const int64_t width = dtype == "uint32" ? 4 : 2;
  const auto size = static_cast<int64_t>(bytes.size());
  if (size % width != 0)
    throw token_file_error(quoted_input(path, "", 4096) + ": " + std::to_string(size) + " bytes is not a whole number of " +
                           dtype + " tokens (" + std::to_string(width) + " bytes each)");
  return widen(bytes.data(), size / width, width == 4 ? at::kInt : at::kShort).clone();
}

at::Tensor read_megatron(const std::string& bin, const std::string& idx) {
  const std::string shown = quoted_input(idx, "", 4096);
  const std::string index = read_file_bytes(idx);
  reader r{index, shown};
  static const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  if (index.size() < 9 || std::memcmp(index.data(), magic, 9) != 0)
    throw token_file_error(shown + ": not a Megatron index (it does not start with MMIDIDX)");
  r.at = 9;
  const auto version = r.take<uint64_t>("version");
  if (version != 1) throw token_file_error(shown + ": index version " + std::to_string(version) + " (only 1 is known)");
  const auto code = r.take<uint8_t>("dtype code");
  if (code != 4 && code != 8)
    throw token_file_error(shown + ": dtype code " + std::to_string(code) +
                           " (known: 4 int32, 8 uint16; Megatron's others are not token ids this reads)");
  const int64_t width = code == 4 ? 4 : 2;
  const auto sequences = r.take<uint64_t>("sequence count");
  const auto documents = r.take<uint64_t>("document count");
  const uint64_t expected = 34 + sequences * 12 + documents * 8;
  if (sequences > (uint64_t{1} << 40) || documents > (uint64_t{1} << 40) || index.size() != expected)
    throw token_file_error(shown + ": " + std::to_string(index.size()) + " bytes, but " + std::to_string(sequences) +
                           " sequences and " + std::to_string(documents) + " documents take " +
                           std::to_string(expected));
  std::vector<int32_t> lengths(sequences);
  std::vector<int64_t> offsets(sequences);
  for (auto& l : lengths) l = r.take<int32_t>("sequence lengths");
  for (auto& o : offsets) o = r.take<int64_t>("sequence offsets");
  const std::string data = read_file_bytes(bin);
  const std::string bin_shown = quoted_input(bin, "", 4096);
  std::vector<at::Tensor> parts;
  for (uint64_t i = 0; i < sequences; ++i) {
    const int64_t begin = offsets[i], len = lengths[i];
    if (len < 0 || begin < 0 || begin % width != 0 || begin + len * width > static_cast<int64_t>(data.size()))
      throw token_file_error(shown + ": sequence " + std::to_string(i) + " (" + std::to_string(len) +
                             " tokens at byte " + std::to_string(begin) + ") lies outside " + bin_shown + " (" +
                             std::to_string(data.size()) + " bytes)");
    parts.push_back(widen(data.data() + begin, len, width == 4 ? at::kInt : at::kShort));
  }
  return parts.empty() ? at::empty({0}, at::kLong) : at::cat(parts);
}

}  // namespace

std::string megatron_index_for(const std::string& path) {
  const fs::path p(path);
  if (p.extension() != ".bin") return {};
  fs::path idx = p;
  idx.replace_extension(".idx");
  std::error_code ec;
  return fs::exists(idx, ec) ? idx.string() : std::string();
}

at::Tensor read_token_file(const std::string& path, const std::string& dtype) {
  try {
    const std::string idx = megatron_index_for(path);
    return idx.empty() ? read_flat(path, dtype) : read_megatron(path, idx);
  } catch (const io_error& e) {
    throw token_file_error(e.what());
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const token_file_error*>(&e)) throw;
    throw token_file_error(e.what());
  }
}

std::string first_token_outside(const at::Tensor& tokens, int64_t vocab, const std::string& path) {
  if (tokens.numel() == 0) return {};
  const at::Tensor bad = at::logical_or(tokens >= vocab, tokens < 0).nonzero();
  if (bad.size(0) == 0) return {};
  const int64_t at_pos = bad[0][0].item<int64_t>();
  return quoted_input(path, "", 4096) + ": token id " + std::to_string(tokens[at_pos].item<int64_t>()) +
         " at position " + std::to_string(at_pos) + " is at or past the embedding's vocab " + std::to_string(vocab);
}

}  // namespace actorpipe
