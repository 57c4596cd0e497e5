#include "runtime/files/zip_check.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace actorpipe {

namespace {

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": not a torch.save zip archive (" + what + ")");
}

std::string printable(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace

uint64_t check_stored_zip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": " + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(f.tellg());
  auto read_at = [&](uint64_t at, uint64_t n) {
    std::vector<unsigned char> buf(n);
    f.seekg(static_cast<std::streamoff>(at));
    f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n));
    if (!f) refuse(path, "cannot read " + std::to_string(n) + " bytes at byte " + std::to_string(at));
    return buf;
  };
  // The end-of-central-directory record sits in the last 22 + 65535 bytes.
  if (size < 22) refuse(path, "file of " + std::to_string(size) + " bytes is too short");
  const uint64_t tail_len = std::min<uint64_t>(size, 22 + 65535);
  const auto tail = read_at(size - tail_len, tail_len);
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail_len) - 22; i >= 0; --i)
    if (le(&tail[i], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) refuse(path, "no end of central directory");
  uint64_t entries = le(&tail[eocd + 10], 2), cd_size = le(&tail[eocd + 12], 4), cd_at = le(&tail[eocd + 16], 4);
  if (eocd >= 20 && le(&tail[eocd - 20], 4) == 0x07064b50) {  // zip64: the real figures are elsewhere
    const uint64_t at = le(&tail[eocd - 20 + 8], 8);
    if (at > size || size - at < 56) refuse(path, "zip64 record outside the file");
    const auto z = read_at(at, 56);
    if (le(z.data(), 4) != 0x06064b50) refuse(path, "bad zip64 record");
    entries = le(&z[32], 8);
    cd_size = le(&z[40], 8);
    cd_at = le(&z[48], 8);
  }
  if (cd_at > size || cd_size > size - cd_at) refuse(path, "central directory outside the file");
  if (entries > cd_size / 46) refuse(path, std::to_string(entries) + " entries cannot fit the central directory");
  const auto cd = read_at(cd_at, cd_size);
  uint64_t pos = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (cd_size - pos < 46 || le(&cd[pos], 4) != 0x02014b50) refuse(path, "bad central directory entry");
    const unsigned char* h = &cd[pos];
    const uint64_t method = le(h + 10, 2), name_len = le(h + 28, 2), extra_len = le(h + 30, 2),
                   comment_len = le(h + 32, 2);
    uint64_t comp = le(h + 20, 4), uncomp = le(h + 24, 4), local = le(h + 42, 4);
    if (cd_size - pos - 46 < name_len + extra_len + comment_len) refuse(path, "bad central directory entry");
    const std::string name(reinterpret_cast<const char*>(h + 46), name_len);
    // Zip64 sizes live in extra field 0x0001, in this order, only where the
    // 32-bit field is saturated.
    for (uint64_t x = 0; x + 4 <= extra_len;) {
      const unsigned char* xf = h + 46 + name_len + x;
      const uint64_t id = le(xf, 2), len = le(xf + 2, 2);
      if (x + 4 + len > extra_len) break;
      if (id == 0x0001) {
        uint64_t at = 4;
        for (uint64_t* field : {&uncomp, &comp, &local})
          if (*field == 0xffffffffu && at + 8 <= 4 + len) {
            *field = le(xf + at, 8);
            at += 8;
          }
      }
      x += 4 + len;
    }
    if (method != 0)
      refuse(path, "entry " + printable(name) + " is compressed (method " + std::to_string(method) +
                       "); torch.save stores its entries uncompressed");
    if (comp != uncomp || local > size || uncomp > size - local)
      refuse(path, "entry " + printable(name) + " claims " + std::to_string(uncomp) + " bytes, more than the file's " +
                       std::to_string(size));
    pos += 46 + name_len + extra_len + comment_len;
  }
  return size;
}

}  // namespace actorpipe
