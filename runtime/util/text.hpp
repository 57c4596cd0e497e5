#pragma once
// Small text helpers the reports, SVGs and error messages share.
#include <cstdio>
#include <string>
#include <string_view>

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

/// Input text (a config value, a CSV cell) as an error message echoes it:
/// bytes outside printable ASCII as \xNN (\n, \r, \t as such), so no
/// control sequence reaches the terminal, and at most `limit` characters
/// with "..." and the full length after, so a 10 MB cell is one line. Wrapped
/// in `quote`: 'abc', 'aaa...' (10485760 bytes); a short printable value
/// reads as it was written.
inline std::string quoted_input(std::string_view s, std::string_view quote = "'", size_t limit = 80) {
  std::string body;
  size_t used = 0;  // input bytes shown
  for (; used < s.size(); ++used) {
    const auto c = static_cast<unsigned char>(s[used]);
    std::string one(1, static_cast<char>(c));
    if (c == '\n') one = "\\n";
    else if (c == '\r') one = "\\r";
    else if (c == '\t') one = "\\t";
    else if (c < 0x20 || c > 0x7e) one = "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    if (body.size() + one.size() > limit) break;
    body += one;
  }
  std::string out = std::string(quote) + body;
  if (used < s.size()) return out + "..." + std::string(quote) + " (" + std::to_string(s.size()) + " bytes)";
  return out + std::string(quote);
}

}  // namespace actorpipe
