#pragma once
// JSON output through nlohmann::json: every string escaped (quotes,
// backslashes, tabs, control characters), non-finite numbers as null, keys
// in the order they were set.
#include <cmath>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/util/text.hpp"

namespace actorpipe {

using ordered_json = nlohmann::ordered_json;

/// `v` with the digits `format` keeps (e.g. "%.9g"), as a JSON number;
/// null for a NaN or an infinity, which JSON has no number for.
inline ordered_json json_number(const char* format, double v) {
  if (!std::isfinite(v)) return nullptr;
  return std::strtod(fmt(format, v).c_str(), nullptr);
}

/// The document as text with a final newline. `indent` < 0: one line.
/// Bytes that are not UTF-8 (a path may hold any) become U+FFFD rather
/// than failing the whole file.
inline std::string json_text(const ordered_json& doc, int indent = -1) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace actorpipe
