#pragma once
// Pipeline operations and their compact text form ("F3", "B0.1").
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actorpipe {

/// F: forward. B: backward (full, or input-gradient when W is split off).
/// W: weight-gradient.
enum class op_kind : uint8_t { F, B, W };

/// One operation of one stage within a step.
struct op_id {
  op_kind kind = op_kind::F;
  int32_t mb = 0;     ///< microbatch
  int32_t chunk = 0;  ///< model chunk on this stage (virtual stage index)

  friend bool operator==(const op_id& a, const op_id& b) {
    return a.kind == b.kind && a.mb == b.mb && a.chunk == b.chunk;
  }
  friend bool operator!=(const op_id& a, const op_id& b) { return !(a == b); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_id& x) {
  return f(caf::meta::type_name("op_id"), x.kind, x.mb, x.chunk);
}

/// "F3" for chunk 0, "F3.1" otherwise.
std::string to_string(const op_id& op);
/// Inverse of to_string; nullopt for malformed text.
std::optional<op_id> parse_op(const std::string& text);
/// "F0 F1 B0 ..." for a sequence.
std::string to_string(const std::vector<op_id>& ops);

/// A fired op with its wall-clock span (ns since the run started).
struct op_event {
  op_id op;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t version = -1;  ///< async: the weight version the op computed with
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_event& x) {
  return f(caf::meta::type_name("op_event"), x.op, x.start_ns, x.end_ns, x.version);
}

inline std::string to_string(const op_id& op) {
  std::string s(1, op.kind == op_kind::F ? 'F' : op.kind == op_kind::B ? 'B' : 'W');
  s += std::to_string(op.mb);
  if (op.chunk != 0) s += "." + std::to_string(op.chunk);
  return s;
}

inline std::string to_string(const std::vector<op_id>& ops) {
  std::string s;
  for (const auto& op : ops) {
    if (!s.empty()) s += ' ';
    s += to_string(op);
  }
  return s;
}

inline std::optional<op_id> parse_op(const std::string& text) {
  if (text.size() < 2) return std::nullopt;
  op_id op;
  switch (text[0]) {
    case 'F': op.kind = op_kind::F; break;
    case 'B': op.kind = op_kind::B; break;
    case 'W': op.kind = op_kind::W; break;
    default: return std::nullopt;
  }
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() < 10 &&
           s.find_first_not_of("0123456789") == std::string::npos;
  };
  auto dot = text.find('.');
  auto mb = text.substr(1, dot == std::string::npos ? std::string::npos : dot - 1);
  if (!digits(mb)) return std::nullopt;
  op.mb = std::stoi(mb);
  if (dot != std::string::npos) {
    auto chunk = text.substr(dot + 1);
    if (!digits(chunk)) return std::nullopt;
    op.chunk = std::stoi(chunk);
  }
  return op;
}

}  // namespace actorpipe
