#pragma once
// Small text helpers the reports and SVGs share.
#include <cstdio>
#include <string>

namespace actorpipe {

/// One number through a printf format ("%.3f").
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

/// Text safe inside XML / HTML content and attribute values.
inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

}  // namespace actorpipe
