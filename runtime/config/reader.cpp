// The config reader's machinery: positions, failing, maps and scalars.
#include "runtime/config/reader.hpp"

#include "runtime/config/schema.hpp"

#include "runtime/util/text.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace actorpipe::config_detail {

namespace fs = std::filesystem;

// -- text --------------------------------------------------------------------

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto n = nearest(word, candidates);
  return n.empty() ? "" : "; did you mean '" + n + "'?";
}

std::string child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string item(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

source_mark to_mark(const YAML::Mark& m) {
  if (m.line < 0 || m.column < 0) return {1, 1};  // yaml-cpp has no position
  return {m.line + 1, m.column + 1};
}

std::string describe(const Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "no value";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a sequence";
  return quoted_input(n.Scalar());
}

// -- failing -----------------------------------------------------------------

void reader::fail(source_mark at, const std::string& key, const std::string& msg) const {
  std::string out = cfg_.path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
  if (!key.empty()) out += key + ": ";
  throw config_error(out + msg);
}

void reader::fail(const Node& at, const std::string& key, const std::string& msg) const {
  fail(to_mark(at.Mark()), key, msg);
}

void reader::fail_key(const std::string& key, const std::string& msg) const {
  std::string k = key;
  while (!k.empty()) {
    if (auto it = cfg_.marks.find(k); it != cfg_.marks.end()) fail(it->second, key, msg);
    const size_t dot = k.rfind('.'), bracket = k.rfind('[');
    const size_t cut = dot == std::string::npos ? bracket
                       : bracket == std::string::npos ? dot
                                                       : std::max(dot, bracket);
    k = cut == std::string::npos ? "" : k.substr(0, cut);
  }
  fail(source_mark{1, 1}, key, msg);
}

// -- structure ---------------------------------------------------------------

source_mark reader::value_mark(const entry& e) {
  if (!e.value.IsDefined() || e.value.IsNull()) return to_mark(e.key.Mark());
  return to_mark(e.value.Mark());
}

namespace {

/// What config.marks records: the value of a scalar, the key of anything
/// else (a block map's own mark is its first inner key, which reads oddly).
source_mark recorded_mark(const entry& e) {
  return e.value.IsScalar() ? to_mark(e.value.Mark()) : to_mark(e.key.Mark());
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

}  // namespace

section reader::read_map(const Node& node, const std::string& path) {
  return read_map(node, path, config_schema::keys_under(path));
}

section reader::read_map(const Node& node, const std::string& path, const std::vector<std::string>& allowed) {
  section s{path, {}};
  if (!node.IsDefined() || node.IsNull()) return s;
  if (!node.IsMap()) fail(node, path, "expected a map, found " + describe(node));
  for (auto it = node.begin(); it != node.end(); ++it) {
    const Node k = it->first;  // the iterator hands out a temporary pair
    if (!k.IsScalar()) fail(k, path, "expected a key name, found " + describe(k));
    const std::string name = k.Scalar();
    const std::string key = child(path, name);
    // A name not in the schema is the user's text: shown escaped and cut.
    const bool known = contains(allowed, name);
    const std::string shown = known ? key : child(path, quoted_input(name, ""));
    if (auto prev = s.items.find(name); prev != s.items.end())
      fail(k, shown, "duplicate key (first at line " + std::to_string(to_mark(prev->second.key.Mark()).line) + ")");
    if (!known) fail(k, shown, "unknown key" + did_you_mean(name, allowed));
    entry e{k, Node(it->second)};
    cfg_.marks[key] = recorded_mark(e);
    s.items.emplace(name, e);
  }
  return s;
}

void reader::only_keys(const section& s, const std::vector<std::string>& allowed, const std::string& what,
                       const std::function<std::string(const std::string&)>& owner) const {
  for (const auto& [name, e] : s.items)
    if (!contains(allowed, name))
      fail(e.key, child(s.path, name), "'" + name + "' does not apply to " + what + " (only to " + owner(name) + ")");
}

// -- scalars -----------------------------------------------------------------

const Node& reader::scalar(const entry& e, const std::string& key, const std::string& expected) const {
  if (!e.value.IsScalar()) fail(value_mark(e), key, "expected " + expected + ", found " + describe(e.value));
  return e.value;
}

bool reader::read_int(const section& s, const std::string& name, int64_t& out) const {
  const entry* e = s.find(name);
  if (!e) return false;
  out = parse_int(*e, child(s.path, name));
  return true;
}

int64_t reader::parse_int(const entry& e, const std::string& key) const {
  const std::string text = scalar(e, key, "an integer").Scalar();
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0')
    fail(value_mark(e), key, "expected an integer, found " + quoted_input(text));
  if (errno == ERANGE) fail(value_mark(e), key, "integer out of range: " + quoted_input(text));
  return v;
}

bool reader::read_small_int(const section& s, const std::string& name, int& out) const {
  int64_t v = 0;
  if (!read_int(s, name, v)) return false;
  if (v > INT_MAX || v < INT_MIN) fail_key(child(s.path, name), "integer out of range: " + std::to_string(v));
  out = static_cast<int>(v);
  return true;
}

bool reader::read_number(const section& s, const std::string& name, double& out) const {
  const entry* e = s.find(name);
  if (!e) return false;
  out = parse_number(*e, child(s.path, name));
  return true;
}

double reader::parse_number(const entry& e, const std::string& key) const {
  const std::string text = scalar(e, key, "a number").Scalar();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || !std::isfinite(v))
    fail(value_mark(e), key, "expected a number, found " + quoted_input(text));
  return v;
}

bool reader::read_bool(const section& s, const std::string& name, bool& out) const {
  const entry* e = s.find(name);
  if (!e) return false;
  const std::string key = child(s.path, name);
  const Node& n = scalar(*e, key, "a boolean");
  if (!YAML::convert<bool>::decode(n, out)) fail(value_mark(*e), key, "expected a boolean, found " + quoted_input(n.Scalar()));
  return true;
}

bool reader::read_string(const section& s, const std::string& name, std::string& out) const {
  const entry* e = s.find(name);
  if (!e) return false;
  out = scalar(*e, child(s.path, name), "a string").Scalar();
  return true;
}

void reader::read_choice(const section& s, const std::string& name, const std::string& what,
                         const std::vector<std::string>& known, std::string& out) const {
  if (!read_string(s, name, out)) return;
  if (!contains(known, out))
    fail_key(child(s.path, name), "unknown " + what + " " + quoted_input(out) + did_you_mean(out, known) + " (known: " +
                                      join(known) + ")");
}

std::string reader::resolve_path(const std::string& path) const {
  fs::path p(path);
  if (p.is_relative()) p = fs::absolute(fs::path(cfg_.path)).parent_path() / p;
  return p.lexically_normal().string();
}

bool reader::read_file_path(const section& s, const std::string& name, std::string& out) const {
  if (!read_string(s, name, out)) return false;
  const std::string key = child(s.path, name);
  if (out.empty()) fail_key(key, "expected a path, found ''");
  out = resolve_path(out);
  const fs::path p(out);
  std::error_code ec;
  // A path can be long but no longer than the system allows.
  if (!fs::exists(p, ec)) fail_key(key, "file not found: " + quoted_input(out, "", 4096));
  if (fs::is_directory(p, ec)) fail_key(key, "is a directory, not a file: " + quoted_input(out, "", 4096));
  // A FIFO or a device would block the read or never end.
  if (!fs::is_regular_file(p, ec)) fail_key(key, "is not a regular file: " + quoted_input(out, "", 4096));
  return true;
}

// -- table fields ------------------------------------------------------------

void reader::check_integer(const std::string& key, int64_t v, const rule& r) const {
  if (r.k != rule::kind::at_least) return;
  at_least(key, v, static_cast<int64_t>(r.min));
  if (r.max > 0 && v > static_cast<int64_t>(r.max))
    fail_key(key, std::string("must be at most ") +
                      (r.max_text ? r.max_text : std::to_string(static_cast<int64_t>(r.max))) + ", found " +
                      std::to_string(v));
}

void reader::read_field(const section& s, const char* name, int64_t& out, const rule& r) const {
  if (read_int(s, name, out)) check_integer(child(s.path, name), out, r);
}

void reader::read_field(const section& s, const char* name, int& out, const rule& r) const {
  if (read_small_int(s, name, out)) check_integer(child(s.path, name), out, r);
}

void reader::read_field(const section& s, const char* name, uint64_t& out, const rule& r) const {
  int64_t v = 0;
  if (!read_int(s, name, v)) return;
  check_integer(child(s.path, name), v, r);
  out = static_cast<uint64_t>(v);
}

void reader::read_field(const section& s, const char* name, double& out, const rule& r) const {
  if (!read_number(s, name, out)) return;
  const std::string key = child(s.path, name);
  switch (r.k) {
    case rule::kind::at_least:
      if (out < r.min) fail_key(key, "must be at least " + num(r.min) + ", found " + num(out));
      if (r.max > 0 && out > r.max)
        fail_key(key, std::string("must be at most ") + (r.max_text ? r.max_text : num(r.max)) + ", found " + num(out));
      break;
    case rule::kind::positive: positive(key, out); break;
    case rule::kind::fraction: unit_interval(key, out); break;
    case rule::kind::within_unit:
      if (!(out >= 0 && out <= 1)) fail_key(key, "must be within [0, 1], found " + num(out));
      break;
    default: break;
  }
}

void reader::read_field(const section& s, const char* name, bool& out, const rule&) const { read_bool(s, name, out); }

void reader::read_field(const section& s, const char* name, std::string& out, const rule& r) const {
  if (r.k == rule::kind::one_of)
    read_choice(s, name, r.what, r.known, out);
  else
    read_string(s, name, out);
}

// -- range checks ------------------------------------------------------------

void reader::at_least(const std::string& key, int64_t v, int64_t min) const {
  if (v < min) fail_key(key, "must be at least " + std::to_string(min) + ", found " + std::to_string(v));
}

void reader::size_in_range(const std::string& key, int64_t v, int64_t min) const {
  check_integer(key, v, rule::count(min));
}

void reader::ms_in_range(const std::string& key, double v) const {
  non_negative(key, v);
  if (v > max_ms) fail_key(key, std::string("must be at most ") + max_ms_text + ", found " + num(v));
}

void reader::positive(const std::string& key, double v) const {
  if (!(v > 0)) fail_key(key, "must be positive, found " + num(v));
}

void reader::non_negative(const std::string& key, double v) const {
  if (v < 0) fail_key(key, "must be at least 0, found " + num(v));
}

void reader::unit_interval(const std::string& key, double v) const {
  if (v < 0 || v >= 1) fail_key(key, "must be in [0, 1), found " + num(v));
}

}  // namespace actorpipe::config_detail
