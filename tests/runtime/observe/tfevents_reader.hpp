#pragma once
// A reader of TensorBoard event files, for the tests only: walks the
// TFRecord frames, checks both crcs of every record and decodes the Event
// fields we write, skipping any other field by its wire type. Every read
// is bounds-checked: a cut or corrupted file is reported, never trusted.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/util/crc32c.hpp"

namespace actorpipe::tfevents {

/// One Summary.Value.
struct value {
  std::string tag;
  float simple_value = 0.0f;
  bool has_simple_value = false;
};

/// One Event, as far as we write it.
struct event {
  double wall_time = 0.0;
  int64_t step = 0;
  std::string file_version;
  std::vector<value> values;  ///< summary.value, in order
  bool has_summary = false;
};

/// A record whose crc did not match.
struct crc_failure {
  size_t record = 0;   ///< 0-based index among the records of the file
  std::string which;   ///< "length" (then reading stops) or "data"
  size_t offset = 0;   ///< where the record starts in the file
};

/// What a file held.
struct read_result {
  std::vector<event> events;   ///< decoded from the records whose crcs matched
  size_t records = 0;          ///< whole records walked (including crc failures)
  std::vector<size_t> record_ends;  ///< the offset just past each of them
  bool clean_end = true;       ///< the last record ended exactly at the end of the file
  size_t leftover = 0;         ///< bytes after the last whole record (a cut record)
  std::vector<crc_failure> crc_failures;
  std::vector<std::string> decode_errors;  ///< "record N: why" for a payload that is no Event
  bool ok() const { return clean_end && crc_failures.empty() && decode_errors.empty(); }
};

namespace detail {

/// A bounds-checked cursor over protobuf bytes.
struct cursor {
  std::string_view s;
  size_t pos = 0;
  bool failed = false;

  bool done() const { return failed || pos >= s.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= s.size()) break;
      const auto b = static_cast<unsigned char>(s[pos++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    failed = true;  // cut, or longer than ten bytes
    return 0;
  }
  uint64_t fixed(int bytes) {
    if (s.size() - pos < static_cast<size_t>(bytes)) {
      failed = true;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[pos++])) << (8 * i);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (failed || n > s.size() - pos) {
      failed = true;
      return {};
    }
    const std::string_view out = s.substr(pos, n);
    pos += n;
    return out;
  }
  /// Skips a field of `wire_type`; groups (3, 4) and unknown types fail.
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: fixed(8); break;
      case 2: bytes(); break;
      case 5: fixed(4); break;
      default: failed = true;
    }
  }
};

inline double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

inline float as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline bool decode_value(std::string_view s, value& v) {
  cursor c{s};
  while (!c.done()) {
    const uint64_t key = c.varint();
    if (key == (1 << 3 | 2)) {
      v.tag = std::string(c.bytes());
    } else if (key == (2 << 3 | 5)) {
      v.simple_value = as_float(static_cast<uint32_t>(c.fixed(4)));
      v.has_simple_value = true;
    } else {
      c.skip(key & 7);
    }
  }
  return !c.failed;
}

inline bool decode_summary(std::string_view s, event& e) {
  cursor c{s};
  while (!c.done()) {
    const uint64_t key = c.varint();
    if (key == (1 << 3 | 2)) {
      const std::string_view bytes = c.bytes();
      value v;
      if (c.failed || !decode_value(bytes, v)) return false;
      e.values.push_back(v);
    } else {
      c.skip(key & 7);
    }
  }
  return !c.failed;
}

inline bool decode_event(std::string_view s, event& e) {
  cursor c{s};
  while (!c.done()) {
    const uint64_t key = c.varint();
    if (key == (1 << 3 | 1)) e.wall_time = as_double(c.fixed(8));
    else if (key == (2 << 3 | 0)) e.step = static_cast<int64_t>(c.varint());
    else if (key == (3 << 3 | 2)) e.file_version = std::string(c.bytes());
    else if (key == (5 << 3 | 2)) {
      const std::string_view bytes = c.bytes();
      e.has_summary = true;
      if (c.failed || !decode_summary(bytes, e)) return false;
    } else {
      c.skip(key & 7);
    }
  }
  return !c.failed;
}

inline uint32_t le32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

}  // namespace detail

/// Reads the records in `bytes`, the content of an event file.
inline read_result read_event_bytes(std::string_view bytes) {
  read_result r;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t left = bytes.size() - pos;
    if (left < 12) break;  // not even a whole length and its crc
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[pos + i])) << (8 * i);
    if (detail::le32(bytes, pos + 8) != masked_crc32c(bytes.data() + pos, 8)) {
      r.crc_failures.push_back({r.records, "length", pos});
      break;  // the length cannot be trusted: nothing after it can be found
    }
    const size_t body = left - 12;  // a record needs length + 4 more bytes
    if (length > body || body - length < 4) break;
    const std::string_view data = bytes.substr(pos + 12, length);
    const size_t index = r.records++;
    if (detail::le32(bytes, pos + 12 + length) != masked_crc32c(data.data(), data.size())) {
      r.crc_failures.push_back({index, "data", pos});
    } else {
      event e;
      if (detail::decode_event(data, e)) r.events.push_back(e);
      else r.decode_errors.push_back("record " + std::to_string(index) + ": not a valid Event");
    }
    pos += 16 + length;
    r.record_ends.push_back(pos);
  }
  r.leftover = bytes.size() - pos;
  r.clean_end = r.leftover == 0;
  return r;
}

/// `payload` in TFRecord framing, with valid crcs: for building test files.
inline std::string frame_record(std::string_view payload) {
  std::string r;
  const auto put = [&r](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) r += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(payload.size(), 8);
  put(masked_crc32c(r.data(), 8), 4);
  r += payload;
  put(masked_crc32c(payload.data(), payload.size()), 4);
  return r;
}

/// Reads the event file at `path` (an unreadable file reads as empty).
inline read_result read_event_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return read_event_bytes(bytes);
}

}  // namespace actorpipe::tfevents
