#pragma once
// The config reader's machinery, shared by every section's reader.
//
// The reader walks the YAML tree by hand instead of using Node::as<T>(): it
// has to see duplicate keys (yaml-cpp keeps them silently), record where every
// key sits, and say what it expected and what it found. Every error goes
// through fail(), so every message has the same FILE:LINE:COL: KEY: shape.
// A section's reader (sections.hpp) checks only its own keys; rules between
// sections are the named checks of checks.hpp, run once every section is
// read, and point at their key through the marks recorded here.
// No torch here: these files must compile in seconds.
#include "runtime/config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace actorpipe::config_detail {

using YAML::Node;

// -- text --------------------------------------------------------------------

std::string join(const std::vector<std::string>& xs);
/// "; did you mean 'x'?" or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
/// "path.key", or "key" at the top level.
std::string child(const std::string& path, const std::string& key);
/// "path[i]".
std::string item(const std::string& path, size_t i);
/// A double as an error message shows it (ostream's default format).
std::string num(double v);
source_mark to_mark(const YAML::Mark& m);
/// What a node is, for "expected X, found Y".
std::string describe(const Node& n);

// -- sizes -------------------------------------------------------------------

/// ceil(n / m) for n >= 0, m > 0, without the n + m - 1 that overflows.
inline int64_t ceil_div(int64_t n, int64_t m) { return n / m + (n % m != 0); }

/// Torch.chunk(n, m) yields ceil(n / ceil(n / m)) chunks, sometimes fewer than m.
inline int64_t torch_chunk_count(int64_t n, int64_t m) { return ceil_div(n, ceil_div(n, m)); }

/// The largest count or width a config may give (steps, batch size, layer
/// widths, samples): far beyond a real run, and small enough that the
/// product of two never overflows int64.
constexpr int64_t max_size = int64_t{1} << 31;
constexpr const char* max_size_text = "2147483648 (2^31)";

/// Times in ms (an op's pace, a delay, a timeout): an hour is far beyond a
/// test or a measurement, and keeps every chrono conversion in range.
constexpr double max_ms = 3600000;
constexpr const char* max_ms_text = "3600000 (one hour)";

// -- the YAML structure --------------------------------------------------------

/// One key of a YAML map.
struct entry {
  Node key;
  Node value;
};

/// A YAML map whose keys have been checked and recorded.
struct section {
  std::string path;
  std::map<std::string, entry> items;

  const entry* find(const std::string& name) const {
    auto it = items.find(name);
    return it == items.end() ? nullptr : &it->second;
  }
  bool has(const std::string& name) const { return items.count(name) > 0; }
};

// -- table fields ------------------------------------------------------------

/// What a table field accepts besides its type. Integers and numbers share
/// the bounds; a number's message shows it as num() does.
struct rule {
  enum class kind { any, at_least, positive, fraction, within_unit, one_of };
  kind k = kind::any;
  double min = 0;
  double max = 0;                  ///< at most this when > 0
  const char* max_text = nullptr;  ///< how a message names max (null: the number)
  const char* what = nullptr;      ///< one_of: what the names are ("data kind")
  std::vector<std::string> known;  ///< one_of

  /// At least `min` and, when `max` > 0, at most `max`.
  static rule at_least(double min, double max = 0, const char* max_text = nullptr) {
    return {kind::at_least, min, max, max_text, nullptr, {}};
  }
  /// A count or width within [min, 2^31].
  static rule count(int64_t min = 1) { return at_least(static_cast<double>(min), max_size, max_size_text); }
  /// A time in ms within [0, one hour].
  static rule ms() { return at_least(0, max_ms, max_ms_text); }
  static rule positive() { return {kind::positive, 0, 0, nullptr, nullptr, {}}; }
  /// Within [0, 1).
  static rule fraction() { return {kind::fraction, 0, 0, nullptr, nullptr, {}}; }
  /// Within [0, 1].
  static rule within_unit() { return {kind::within_unit, 0, 0, nullptr, nullptr, {}}; }
  static rule one_of(const char* what, std::vector<std::string> known) {
    return {kind::one_of, 0, 0, nullptr, what, std::move(known)};
  }
};

/// One scalar key of a section struct S: its name, the member it fills and
/// its rule. An int member must also fit an int; a uint64_t one is read as
/// an int64.
template <class S>
struct field {
  const char* name;
  std::variant<int64_t S::*, int S::*, uint64_t S::*, double S::*, bool S::*, std::string S::*> member;
  rule check = {};
};

// -- what the sections leave for the cross-section checks ----------------------

/// A fault's indices as the config wrote them, before they are known to fit
/// pipeline.stages, parallel.dp and pipeline.microbatches.
struct fault_indices {
  std::optional<int64_t> from, to, stage, replica, microbatch;
};

struct read_facts {
  /// The model's first width (and the key that sets it) and its last
  /// linear's output width, for the synthetic data.
  int64_t input_width = 0;
  std::string input_key;
  int64_t output_width = 0;
  std::string output_key;
  /// pipeline.stages as written; with a partition the stage count is its
  /// ranges over the virtual stages.
  std::optional<int> written_stages;
  /// pipeline.partition as written; pipeline.partition once it fits the model.
  std::vector<std::pair<int64_t, int64_t>> partition;
  /// pipeline.devices was one flat list (pipeline.devices, maybe empty).
  bool device_list = false;
  /// pipeline.recompute was a list (pipeline.recompute, maybe empty);
  /// otherwise all or none, applied once the stage count is final.
  bool recompute_list = false;
  bool recompute_all = false;
  /// One per faults.inject item.
  std::vector<fault_indices> faults;
};

// -- the reader --------------------------------------------------------------

class reader {
public:
  reader(config& cfg, load_env env) : cfg_(cfg), env_(env) {}

  config& cfg() { return cfg_; }
  const config& cfg() const { return cfg_; }
  const load_env& env() const { return env_; }
  read_facts& facts() { return facts_; }
  const read_facts& facts() const { return facts_; }

  // -- failing --

  [[noreturn]] void fail(source_mark at, const std::string& key, const std::string& msg) const;
  [[noreturn]] void fail(const Node& at, const std::string& key, const std::string& msg) const;
  /// Fails at the recorded position of `key`, or of its nearest present
  /// ancestor when the key itself is absent (a missing required key).
  [[noreturn]] void fail_key(const std::string& key, const std::string& msg) const;

  // -- structure --

  /// Where an entry's value sits, for "expected X, found Y". A missing value
  /// points at its key: yaml-cpp places it at the start of the next line.
  static source_mark value_mark(const entry& e);
  /// Records the position of a list item (or of anything not a map's key).
  void mark(const std::string& key, const Node& n) { cfg_.marks[key] = to_mark(n.Mark()); }
  /// Checks that `node` is a map (an empty value counts as an empty map),
  /// rejects duplicate and unknown keys in document order, and records the
  /// position of every key.
  section read_map(const Node& node, const std::string& path, const std::vector<std::string>& allowed);
  /// read_map with the keys runtime/config/schema.cpp lists under `path`:
  /// what every section reader uses, so the reference lists every key.
  section read_map(const Node& node, const std::string& path);
  /// Rejects keys that exist in the schema but not for this variant
  /// (momentum on adam, p on a linear layer).
  void only_keys(const section& s, const std::vector<std::string>& allowed, const std::string& what,
                 const std::function<std::string(const std::string&)>& owner) const;

  // -- scalars: each returns false when the key is absent --

  const Node& scalar(const entry& e, const std::string& key, const std::string& expected) const;
  bool read_int(const section& s, const std::string& name, int64_t& out) const;
  int64_t parse_int(const entry& e, const std::string& key) const;
  /// An int64 that must also fit the int fields of the config.
  bool read_small_int(const section& s, const std::string& name, int& out) const;
  bool read_number(const section& s, const std::string& name, double& out) const;
  double parse_number(const entry& e, const std::string& key) const;
  bool read_bool(const section& s, const std::string& name, bool& out) const;
  bool read_string(const section& s, const std::string& name, std::string& out) const;
  /// Reads a string that must be one of `known`.
  void read_choice(const section& s, const std::string& name, const std::string& what,
                   const std::vector<std::string>& known, std::string& out) const;
  /// `p` against the config's directory when relative, normalized.
  std::string resolve_path(const std::string& p) const;
  /// Reads a path, resolves it against the config's directory and checks
  /// that it is a regular file (a symlink to one counts).
  bool read_file_path(const section& s, const std::string& name, std::string& out) const;

  /// Reads every field of `table` that `s` has, in table order, into `out`.
  template <class S>
  void read_fields(const section& s, S& out, const std::vector<field<S>>& table) const {
    for (const auto& f : table)
      std::visit([&](auto member) { read_field(s, f.name, out.*member, f.check); }, f.member);
  }

  // -- range checks, at the value's position --

  void at_least(const std::string& key, int64_t v, int64_t min) const;
  /// A count or width within [min, max_size].
  void size_in_range(const std::string& key, int64_t v, int64_t min) const;
  /// A time in ms within [0, max_ms].
  void ms_in_range(const std::string& key, double v) const;
  void positive(const std::string& key, double v) const;
  void non_negative(const std::string& key, double v) const;
  void unit_interval(const std::string& key, double v) const;

private:
  void read_field(const section& s, const char* name, int64_t& out, const rule& r) const;
  void read_field(const section& s, const char* name, int& out, const rule& r) const;
  void read_field(const section& s, const char* name, uint64_t& out, const rule& r) const;
  void read_field(const section& s, const char* name, double& out, const rule& r) const;
  void read_field(const section& s, const char* name, bool& out, const rule& r) const;
  void read_field(const section& s, const char* name, std::string& out, const rule& r) const;
  void check_integer(const std::string& key, int64_t v, const rule& r) const;

  config& cfg_;
  load_env env_;
  read_facts facts_;
};

}  // namespace actorpipe::config_detail
