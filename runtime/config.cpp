// Loading and validating the YAML config.
//
// The reader walks the YAML tree by hand instead of using Node::as<T>(): it
// has to see duplicate keys (yaml-cpp keeps them silently), record where every
// key sits, and say what it expected and what it found. Every error goes
// through fail(), so every message has the same FILE:LINE:COL: KEY: shape.
// No torch here: this file must compile in seconds.
#include "runtime/config.hpp"

#include "runtime/policies/registry.hpp"

#include "messages/ops.hpp"
#include "runtime/text.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace actorpipe {

namespace fs = std::filesystem;

// -- config members ----------------------------------------------------------

std::string config::where(const std::string& key) const {
  std::string out = path;
  if (auto it = marks.find(key); it != marks.end())
    out += ":" + std::to_string(it->second.line) + ":" + std::to_string(it->second.column);
  out += ": ";
  if (!key.empty()) out += key + ": ";
  return out;
}

config_error config::error_at(const std::string& key, const std::string& msg) const {
  return config_error(where(key) + msg);
}

const std::vector<std::string>& known_schedules() {
  static const std::vector<std::string> names = trainable_schedule_names();
  return names;
}

// -- suggestions -------------------------------------------------------------

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  const size_t limit = std::max<size_t>(2, w.size() / 3);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const std::string lc = lower(c);
    // The distance is at least the length difference: a huge input word
    // costs nothing.
    if (std::max(w.size(), lc.size()) - std::min(w.size(), lc.size()) > limit) continue;
    const size_t d = edit_distance(w, lc);
    // Replacing every character of a short word is no resemblance at all.
    if (d > limit || d >= std::max(w.size(), lc.size())) continue;
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

// -- the reader --------------------------------------------------------------

namespace {

using YAML::Node;

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

std::string item(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

source_mark to_mark(const YAML::Mark& m) {
  if (m.line < 0 || m.column < 0) return {1, 1};  // yaml-cpp has no position
  return {m.line + 1, m.column + 1};
}

/// What a node is, for "expected X, found Y".
std::string describe(const Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "no value";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a sequence";
  return quoted_input(n.Scalar());
}

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

/// ceil(n / m) for n >= 0, m > 0, without the n + m - 1 that overflows.
int64_t ceil_div(int64_t n, int64_t m) { return n / m + (n % m != 0); }

/// Torch.chunk(n, m) yields ceil(n / ceil(n / m)) chunks, sometimes fewer than m.
int64_t torch_chunk_count(int64_t n, int64_t m) { return ceil_div(n, ceil_div(n, m)); }

/// The largest count or width a config may give (steps, batch size, layer
/// widths, samples): far beyond a real run, and small enough that the
/// product of two never overflows int64.
constexpr int64_t max_size = int64_t{1} << 31;
const char* const max_size_text = "2147483648 (2^31)";

/// Times in ms (an op's pace, a delay, a timeout): an hour is far beyond a
/// test or a measurement, and keeps every chrono conversion in range.
constexpr double max_ms = 3600000;
const char* const max_ms_text = "3600000 (one hour)";

class reader {
public:
  reader(config& cfg, load_env env) : cfg_(cfg), env_(env) {}

  void load(const Node& root);

private:
  // -- failing --

  [[noreturn]] void fail(source_mark at, const std::string& key, const std::string& msg) const {
    std::string out = cfg_.path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
    if (!key.empty()) out += key + ": ";
    throw config_error(out + msg);
  }

  [[noreturn]] void fail(const Node& at, const std::string& key, const std::string& msg) const {
    fail(to_mark(at.Mark()), key, msg);
  }

  /// Fails at the recorded position of `key`, or of its nearest present
  /// ancestor when the key itself is absent (a missing required key).
  [[noreturn]] void fail_key(const std::string& key, const std::string& msg) const {
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

  // -- structure --

  /// Where an entry's value sits, for "expected X, found Y". A missing value
  /// points at its key: yaml-cpp places it at the start of the next line.
  static source_mark value_mark(const entry& e) {
    if (!e.value.IsDefined() || e.value.IsNull()) return to_mark(e.key.Mark());
    return to_mark(e.value.Mark());
  }

  /// What config.marks records: the value of a scalar, the key of anything
  /// else (a block map's own mark is its first inner key, which reads oddly).
  static source_mark recorded_mark(const entry& e) {
    return e.value.IsScalar() ? to_mark(e.value.Mark()) : to_mark(e.key.Mark());
  }

  /// Checks that `node` is a map (an empty value counts as an empty map),
  /// rejects duplicate and unknown keys in document order, and records the
  /// position of every key.
  section read_map(const Node& node, const std::string& path, const std::vector<std::string>& allowed) {
    section s{path, {}};
    if (!node.IsDefined() || node.IsNull()) return s;
    if (!node.IsMap()) fail(node, path, "expected a map, found " + describe(node));
    for (auto it = node.begin(); it != node.end(); ++it) {
      const Node k = it->first;  // the iterator hands out a temporary pair
      if (!k.IsScalar()) fail(k, path, "expected a key name, found " + describe(k));
      const std::string name = k.Scalar();
      const std::string key = child(path, name);
      // A name not in the schema is the user's text: shown escaped and cut.
      const bool known = std::find(allowed.begin(), allowed.end(), name) != allowed.end();
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

  /// Rejects keys that exist in the schema but not for this variant
  /// (momentum on adam, p on a linear layer).
  void only_keys(const section& s, const std::vector<std::string>& allowed, const std::string& what,
                 const std::function<std::string(const std::string&)>& owner) {
    for (const auto& [name, e] : s.items)
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
        fail(e.key, child(s.path, name), "'" + name + "' does not apply to " + what + " (only to " + owner(name) + ")");
  }

  // -- scalars: each returns false when the key is absent --

  const Node& scalar(const entry& e, const std::string& key, const std::string& expected) {
    if (!e.value.IsScalar()) fail(value_mark(e), key, "expected " + expected + ", found " + describe(e.value));
    return e.value;
  }

  bool read_int(const section& s, const std::string& name, int64_t& out) {
    const entry* e = s.find(name);
    if (!e) return false;
    const std::string key = child(s.path, name);
    out = parse_int(*e, key);
    return true;
  }

  int64_t parse_int(const entry& e, const std::string& key) {
    const std::string text = scalar(e, key, "an integer").Scalar();
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0')
      fail(value_mark(e), key, "expected an integer, found " + quoted_input(text));
    if (errno == ERANGE) fail(value_mark(e), key, "integer out of range: " + quoted_input(text));
    return v;
  }

  /// An int64 that must also fit the int fields of the config.
  bool read_small_int(const section& s, const std::string& name, int& out) {
    int64_t v = 0;
    if (!read_int(s, name, v)) return false;
    if (v > INT_MAX || v < INT_MIN) fail_key(child(s.path, name), "integer out of range: " + std::to_string(v));
    out = static_cast<int>(v);
    return true;
  }

  bool read_number(const section& s, const std::string& name, double& out) {
    const entry* e = s.find(name);
    if (!e) return false;
    out = parse_number(*e, child(s.path, name));
    return true;
  }

  double parse_number(const entry& e, const std::string& key) {
    const std::string text = scalar(e, key, "a number").Scalar();
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || !std::isfinite(v))
      fail(value_mark(e), key, "expected a number, found " + quoted_input(text));
    return v;
  }

  bool read_bool(const section& s, const std::string& name, bool& out) {
    const entry* e = s.find(name);
    if (!e) return false;
    const std::string key = child(s.path, name);
    const Node& n = scalar(*e, key, "a boolean");
    if (!YAML::convert<bool>::decode(n, out)) fail(value_mark(*e), key, "expected a boolean, found " + quoted_input(n.Scalar()));
    return true;
  }

  bool read_string(const section& s, const std::string& name, std::string& out) {
    const entry* e = s.find(name);
    if (!e) return false;
    out = scalar(*e, child(s.path, name), "a string").Scalar();
    return true;
  }

  /// Reads a string that must be one of `known`.
  void read_choice(const section& s, const std::string& name, const std::string& what,
                   const std::vector<std::string>& known, std::string& out) {
    if (!read_string(s, name, out)) return;
    if (std::find(known.begin(), known.end(), out) == known.end())
      fail_key(child(s.path, name), "unknown " + what + " " + quoted_input(out) + did_you_mean(out, known) + " (known: " +
                                        join(known) + ")");
  }

  /// Reads a path, resolves it against the config's directory and checks
  /// that it is a regular file (a symlink to one counts).
  bool read_file_path(const section& s, const std::string& name, std::string& out) {
    if (!read_string(s, name, out)) return false;
    const std::string key = child(s.path, name);
    if (out.empty()) fail_key(key, "expected a path, found ''");
    fs::path p(out);
    if (p.is_relative()) p = fs::absolute(fs::path(cfg_.path)).parent_path() / p;
    out = p.lexically_normal().string();
    std::error_code ec;
    // A path can be long but no longer than the system allows.
    if (!fs::exists(p, ec)) fail_key(key, "file not found: " + quoted_input(out, "", 4096));
    if (fs::is_directory(p, ec)) fail_key(key, "is a directory, not a file: " + quoted_input(out, "", 4096));
    // A FIFO or a device would block the read or never end.
    if (!fs::is_regular_file(p, ec)) fail_key(key, "is not a regular file: " + quoted_input(out, "", 4096));
    return true;
  }

  // -- range checks, at the value's position --

  void at_least(const std::string& key, int64_t v, int64_t min) {
    if (v < min) fail_key(key, "must be at least " + std::to_string(min) + ", found " + std::to_string(v));
  }
  /// A count or width within [min, max_size].
  void size_in_range(const std::string& key, int64_t v, int64_t min) {
    at_least(key, v, min);
    if (v > max_size) fail_key(key, std::string("must be at most ") + max_size_text + ", found " + std::to_string(v));
  }
  /// A time in ms within [0, max_ms].
  void ms_in_range(const std::string& key, double v) {
    non_negative(key, v);
    if (v > max_ms) fail_key(key, std::string("must be at most ") + max_ms_text + ", found " + num(v));
  }
  void positive(const std::string& key, double v) {
    if (!(v > 0)) fail_key(key, "must be positive, found " + num(v));
  }
  void non_negative(const std::string& key, double v) {
    if (v < 0) fail_key(key, "must be at least 0, found " + num(v));
  }
  void unit_interval(const std::string& key, double v) {
    if (v < 0 || v >= 1) fail_key(key, "must be in [0, 1), found " + num(v));
  }

  // -- sections --

  void read_model(const entry* e);
  void read_layer(const Node& node, size_t index);
  void check_layer_shapes();
  void read_data(const entry* e);
  void read_train(const entry* e);
  void read_pipeline(const entry* e);
  void read_parallel(const entry* e);
  void read_checkpoint(const entry* e);
  void read_faults(const entry& e);
  void read_device_name(const Node& d, const std::string& key, std::vector<std::string>& out);
  void read_compare(const entry* e);
  void read_partition(const entry& e);
  void read_devices(const entry& e);
  void resolve_synthetic(const section& synthetic);

  config& cfg_;
  load_env env_;
  // Facts about the model that later sections check against.
  int64_t input_width_ = 0;
  std::string input_key_;
  int64_t output_width_ = 0;
  std::string output_key_;
};

const std::vector<std::string> layer_types{"linear", "relu", "gelu", "tanh", "dropout", "layernorm"};

void reader::load(const Node& root) {
  if (!root.IsDefined() || root.IsNull()) fail(source_mark{1, 1}, "", "the config is empty; it needs at least model.layers");
  if (!root.IsMap()) fail(root, "", "expected a map at the top level, found " + describe(root));
  const section top =
      read_map(root, "",
               {"model", "data", "train", "parallel", "pipeline", "compare", "checkpoint", "supervision", "faults"});
  read_model(top.find("model"));
  read_data(top.find("data"));
  read_train(top.find("train"));
  read_parallel(top.find("parallel"));
  read_pipeline(top.find("pipeline"));
  read_compare(top.find("compare"));
  read_checkpoint(top.find("checkpoint"));
  if (const entry* se = top.find("supervision")) {
    const section s =
        read_map(se->value, "supervision",
                 {"watchdog_s", "on_nonfinite", "max_restarts", "window_steps", "op_timeout_ms",
                  "max_skipped_fraction"});
    if (read_number(s, "op_timeout_ms", cfg_.supervision.op_timeout_ms))
      ms_in_range("supervision.op_timeout_ms", cfg_.supervision.op_timeout_ms);
    if (read_small_int(s, "max_restarts", cfg_.supervision.max_restarts))
      at_least("supervision.max_restarts", cfg_.supervision.max_restarts, 0);
    if (read_small_int(s, "window_steps", cfg_.supervision.window_steps))
      at_least("supervision.window_steps", cfg_.supervision.window_steps, 1);
    if (read_number(s, "watchdog_s", cfg_.supervision.watchdog_s)) {
      non_negative("supervision.watchdog_s", cfg_.supervision.watchdog_s);
      // A day: far beyond any op, and a period the watchdog's timer can hold.
      if (cfg_.supervision.watchdog_s > 86400)
        fail_key("supervision.watchdog_s", "must be at most 86400 (one day), found " + num(cfg_.supervision.watchdog_s));
    }
    read_choice(s, "on_nonfinite", "non-finite policy", {"skip", "stop"}, cfg_.supervision.on_nonfinite);
    if (read_number(s, "max_skipped_fraction", cfg_.supervision.max_skipped_fraction) &&
        !(cfg_.supervision.max_skipped_fraction >= 0 && cfg_.supervision.max_skipped_fraction <= 1))
      fail_key("supervision.max_skipped_fraction",
               "must be within [0, 1], found " + num(cfg_.supervision.max_skipped_fraction));
  }
  if (const entry* fe = top.find("faults")) read_faults(*fe);
}

// -- checkpoint --------------------------------------------------------------

void reader::read_checkpoint(const entry* e) {
  if (!e) return;
  auto& c = cfg_.checkpoint;
  const section s = read_map(e->value, "checkpoint", {"dir", "every", "keep_last"});
  if (!read_string(s, "dir", c.dir) || c.dir.empty()) fail_key("checkpoint.dir", "expected a directory path");
  fs::path p(c.dir);
  if (p.is_relative()) p = fs::absolute(fs::path(cfg_.path)).parent_path() / p;
  c.dir = p.lexically_normal().string();
  c.every = 1;
  if (read_int(s, "every", c.every)) at_least("checkpoint.every", c.every, 1);
  if (read_small_int(s, "keep_last", c.keep_last)) at_least("checkpoint.keep_last", c.keep_last, 0);
  if (const schedule_traits& t = *find_schedule(cfg_.pipeline.schedule); !t.flushes)
    fail_key("checkpoint", t.display + " has no step boundary where every stage's weights are one "
                           "version; checkpoints need a synchronous schedule");
}

// -- faults ------------------------------------------------------------------

void reader::read_faults(const entry& e) {
  auto& f = cfg_.faults;
  const section s = read_map(e.value, "faults", {"seed", "inject"});
  int64_t seed = 0;
  if (read_int(s, "seed", seed)) f.seed = static_cast<uint64_t>(seed);
  const entry* ie = s.find("inject");
  if (!ie) return;
  if (!ie->value.IsSequence())
    fail(value_mark(*ie), "faults.inject", "expected a list of faults, found " + describe(ie->value));
  for (size_t i = 0; i < ie->value.size(); ++i) {
    const Node n = ie->value[i];
    const std::string key = item("faults.inject", i);
    cfg_.marks[key] = to_mark(n.Mark());
    if (!n.IsMap()) fail(n, key, "expected a map such as {kind: nonfinite, stage: 1, step: 5, microbatch: 2}");
    const section fs =
        read_map(n, key, {"kind", "stage", "step", "microbatch", "where", "from", "to", "probability", "ms", "factor",
                          "after_op", "op", "replica"});
    fault_spec spec;
    std::string kind;
    if (!read_string(fs, "kind", kind) || kind.empty()) fail_key(key, "needs a kind");
    if (auto k = fault_kind_named(kind)) {
      spec.kind = *k;
    } else {
      std::vector<std::string> kinds;
      for (const auto& i : fault_kinds()) kinds.push_back(i.name);
      fail_key(key + ".kind", "unknown fault kind " + quoted_input(kind) + did_you_mean(kind, kinds) +
                                  " (known: " + join(kinds) + ")");
    }
    const fault_kind_info& kind_info = info(spec.kind);
    auto stage_index = [&](const char* name, int& out) {
      int64_t x = 0;
      if (!read_int(fs, name, x)) return;
      at_least(key + "." + name, x, 0);
      if (x >= cfg_.pipeline.stages)
        fail_key(key + "." + name, "stage " + std::to_string(x) + " does not exist (pipeline.stages " +
                                       std::to_string(cfg_.pipeline.stages) + ")");
      out = static_cast<int>(x);
    };
    stage_index("from", spec.from);
    stage_index("to", spec.to);
    if (read_number(fs, "probability", spec.probability) && !(spec.probability >= 0 && spec.probability <= 1))
      fail_key(key + ".probability", "must be within [0, 1], found " + std::to_string(spec.probability));
    if (read_number(fs, "ms", spec.ms)) ms_in_range(key + ".ms", spec.ms);
    if (read_number(fs, "factor", spec.factor) && !(spec.factor >= 1.0))
      fail_key(key + ".factor", "must be at least 1 (a slower stage), found " + std::to_string(spec.factor));
    // Every op of the stage sleeps factor - 1 times its own time.
    if (spec.factor > 1000) fail_key(key + ".factor", "must be at most 1000, found " + num(spec.factor));
    if (const char* name = kind_info.op_key) {
      if (!read_string(fs, name, spec.op)) fail_key(key, std::string("needs ") + name + ", e.g. F5 or B2");
      if (!parse_op(spec.op))
        fail_key(key + "." + name, "expected an op such as F5, B2 or W3, found " + quoted_input(spec.op));
    }
    stage_index("stage", spec.stage);
    int64_t v = 0;
    if (read_int(fs, "replica", v)) {
      at_least(key + ".replica", v, 0);
      if (v >= cfg_.parallel.dp)
        fail_key(key + ".replica", "replica " + std::to_string(v) + " does not exist (parallel.dp " +
                                       std::to_string(cfg_.parallel.dp) + ")");
      if (kind_info.picks_messages)
        fail_key(key + ".replica", kind + " picks messages of every replica; replica is for a stage's faults");
      spec.replica = static_cast<int>(v);
    }
    if (read_int(fs, "step", spec.step)) at_least(key + ".step", spec.step, 0);
    if (read_int(fs, "microbatch", v)) {
      at_least(key + ".microbatch", v, 0);
      if (v >= cfg_.pipeline.microbatches)
        fail_key(key + ".microbatch", std::to_string(v) + " is not below pipeline.microbatches " +
                                          std::to_string(cfg_.pipeline.microbatches));
      spec.microbatch = static_cast<int>(v);
    }
    std::string where = "grad";
    read_choice(fs, "where", "place for the value", {"grad", "activation"}, where);
    spec.where = where == "activation" ? nonfinite_site::activation : nonfinite_site::grad;
    f.inject.push_back(spec);
  }
}

// -- parallel ----------------------------------------------------------------

void reader::read_parallel(const entry* e) {
  if (!e) return;
  auto& par = cfg_.parallel;
  const section s = read_map(e->value, "parallel", {"dp", "allreduce"});
  if (read_small_int(s, "dp", par.dp)) {
    at_least("parallel.dp", par.dp, 1);
    if (par.dp > cfg_.train.batch_size)
      fail_key("parallel.dp", std::to_string(par.dp) + " replicas exceed train.batch_size " +
                                  std::to_string(cfg_.train.batch_size) + "; every replica needs a sample");
    if (int64_t n = torch_chunk_count(cfg_.train.batch_size, par.dp); n != par.dp)
      fail_key("parallel.dp", "torch.chunk splits train.batch_size " + std::to_string(cfg_.train.batch_size) +
                                  " into " + std::to_string(n) + " slices, not " + std::to_string(par.dp));
  }
  read_choice(s, "allreduce", "allreduce backend", {"auto", "gloo", "nccl"}, par.allreduce);
}

// -- compare -----------------------------------------------------------------

void reader::read_compare(const entry* e) {
  if (!e) return;
  const section s = read_map(e->value, "compare", {"schedules"});
  const entry* se = s.find("schedules");
  if (!se) return;
  const std::string path = "compare.schedules";
  if (!se->value.IsSequence() || se->value.size() == 0)
    fail(value_mark(*se), path, "expected a non-empty list of schedules, found " + describe(se->value));
  for (size_t i = 0; i < se->value.size(); ++i) {
    const Node n = se->value[i];
    const std::string key = item(path, i);
    cfg_.marks[key] = to_mark(n.Mark());
    if (!n.IsScalar()) fail(n, key, "expected a schedule name, found " + describe(n));
    const std::string name = n.Scalar();
    const auto& known = known_schedules();
    if (std::find(known.begin(), known.end(), name) == known.end())
      fail(n, key, "unknown schedule " + quoted_input(name) + did_you_mean(name, known) + " (known: " + join(known) + ")");
    cfg_.compare_schedules.push_back(name);
  }
}

// -- model -------------------------------------------------------------------

void reader::read_model(const entry* e) {
  if (!e) fail(source_mark{1, 1}, "model.layers", "required: the list of layers");
  const section s = read_map(e->value, "model", {"layers", "init_from", "dtype"});
  const entry* layers = s.find("layers");
  if (!layers) fail_key("model.layers", "required: the list of layers");
  if (!layers->value.IsSequence())
    fail(value_mark(*layers), "model.layers", "expected a list of layers, found " + describe(layers->value));
  if (layers->value.size() == 0) fail_key("model.layers", "is empty; the model needs at least one layer");
  for (size_t i = 0; i < layers->value.size(); ++i) read_layer(layers->value[i], i);
  check_layer_shapes();
  read_file_path(s, "init_from", cfg_.model.init_from);
  std::string dtype;
  if (read_string(s, "dtype", dtype)) {
    // The short names Megatron and DeepSpeed users write mean the same.
    static const std::map<std::string, std::string> known{
        {"float32", "float32"}, {"bfloat16", "bfloat16"}, {"float16", "float16"}, {"bf16", "bfloat16"},
        {"fp16", "float16"},    {"half", "float16"},       {"fp32", "float32"},   {"float", "float32"}};
    auto it = known.find(dtype);
    if (it == known.end())
      fail_key(child(s.path, "dtype"), "unknown parameter type " + quoted_input(dtype) +
                                           " (known: float32, bfloat16, float16; also bf16, fp16, fp32)");
    cfg_.model.dtype = it->second;
  }
}

void reader::read_layer(const Node& node, size_t index) {
  const std::string path = item("model.layers", index);
  cfg_.marks[path] = to_mark(node.Mark());
  if (!node.IsMap()) fail(node, path, "expected a map like {type: relu}, found " + describe(node));
  const section s = read_map(node, path, {"type", "in", "out", "p", "dim"});
  layer_spec layer;
  if (!s.has("type")) fail_key(path + ".type", "required (one of: " + join(layer_types) + ")");
  read_choice(s, "type", "layer type", layer_types, layer.type);

  static const std::map<std::string, std::vector<std::string>> keys{
      {"linear", {"type", "in", "out"}}, {"dropout", {"type", "p"}}, {"layernorm", {"type", "dim"}}};
  auto it = keys.find(layer.type);
  only_keys(s, it == keys.end() ? std::vector<std::string>{"type"} : it->second, "a " + layer.type + " layer",
            [](const std::string& k) { return k == "p" ? "dropout" : k == "dim" ? "layernorm" : "linear"; });

  auto size = [&](const std::string& name, int64_t& out) {
    if (!read_int(s, name, out)) fail_key(path + "." + name, "required for a " + layer.type + " layer");
    if (out <= 0) fail_key(path + "." + name, "must be positive, found " + std::to_string(out));
    size_in_range(path + "." + name, out, 1);
  };
  if (layer.type == "linear") {
    size("in", layer.in);
    size("out", layer.out);
  } else if (layer.type == "layernorm") {
    size("dim", layer.dim);
  } else if (layer.type == "dropout") {
    if (read_number(s, "p", layer.p)) unit_interval(path + ".p", layer.p);
  }
  cfg_.model.layers.push_back(layer);
}

void reader::check_layer_shapes() {
  // Activations (relu, dropout, ...) keep the width; linear and layernorm fix it.
  int64_t width = 0;
  for (size_t i = 0; i < cfg_.model.layers.size(); ++i) {
    const auto& l = cfg_.model.layers[i];
    const std::string path = item("model.layers", i);
    const bool is_linear = l.type == "linear";
    if (!is_linear && l.type != "layernorm") continue;
    const int64_t in = is_linear ? l.in : l.dim;
    const std::string in_key = path + (is_linear ? ".in" : ".dim");
    if (width == 0) {
      input_width_ = in;
      input_key_ = in_key;
    } else if (in != width) {
      fail_key(in_key, std::to_string(in) + " does not match the previous output " + std::to_string(width));
    }
    width = is_linear ? l.out : l.dim;
    if (is_linear) {
      output_width_ = l.out;
      output_key_ = path + ".out";
    }
  }
  if (output_width_ == 0) fail_key("model.layers", "has no linear layer; the model has nothing to train");
}

// -- data --------------------------------------------------------------------

void reader::read_data(const entry* e) {
  auto& d = cfg_.data;
  const section s =
      read_map(e ? e->value : Node(), "data", {"kind", "path", "test_fraction", "split", "shuffle", "normalize", "synthetic"});
  read_choice(s, "kind", "data kind", {"csv", "tensors", "synthetic"}, d.kind);
  const bool from_file = d.kind != "synthetic";
  if (from_file) {
    // The kind is what makes the path required, so point there.
    if (!s.has("path")) fail(cfg_.marks.at("data.kind"), "data.path", "required when data.kind is " + d.kind);
    read_file_path(s, "path", d.path);
    if (s.has("synthetic")) fail_key("data.synthetic", "only used when data.kind is synthetic, not " + d.kind);
  } else if (s.has("path")) {
    fail_key("data.path", "only used when data.kind is csv or tensors, not synthetic");
  }
  if (read_number(s, "test_fraction", d.test_fraction)) unit_interval("data.test_fraction", d.test_fraction);
  read_choice(s, "split", "split mode", {"tail", "random"}, d.split);
  read_bool(s, "shuffle", d.shuffle);
  read_choice(s, "normalize", "normalize mode", {"none", "standard"}, d.normalize);
  if (!from_file) {
    const entry* syn = s.find("synthetic");
    resolve_synthetic(read_map(syn ? syn->value : Node(), "data.synthetic", {"samples", "features", "classes"}));
  }
}

void reader::resolve_synthetic(const section& s) {
  auto& d = cfg_.data;
  if (read_int(s, "samples", d.samples)) size_in_range("data.synthetic.samples", d.samples, 1);
  if (read_int(s, "features", d.features)) {
    at_least("data.synthetic.features", d.features, 1);
    if (d.features != input_width_)
      fail_key("data.synthetic.features", std::to_string(d.features) + " does not match " + input_key_ + " " +
                                              std::to_string(input_width_));
  }
  d.features = input_width_;
  if (read_int(s, "classes", d.classes)) {
    at_least("data.synthetic.classes", d.classes, 2);
    if (d.classes > output_width_)
      fail_key("data.synthetic.classes", std::to_string(d.classes) + " exceeds the " + std::to_string(output_width_) +
                                             " outputs of " + output_key_);
  } else {
    if (output_width_ < 2)
      fail_key(output_key_, "synthetic data needs at least 2 classes, but the model has " +
                                std::to_string(output_width_) + " output");
    d.classes = output_width_;
  }
}

// -- train -------------------------------------------------------------------

void reader::read_train(const entry* e) {
  auto& t = cfg_.train;
  const section s = read_map(e ? e->value : Node(), "train",
                             {"steps", "batch_size", "optimizer", "lr_schedule", "clip_grad_norm", "seed"});
  if (read_int(s, "steps", t.steps)) size_in_range("train.steps", t.steps, 1);
  if (read_int(s, "batch_size", t.batch_size)) size_in_range("train.batch_size", t.batch_size, 1);
  if (read_number(s, "clip_grad_norm", t.clip_grad_norm)) positive("train.clip_grad_norm", t.clip_grad_norm);
  int64_t seed = 0;
  if (read_int(s, "seed", seed)) {
    at_least("train.seed", seed, 0);
    t.seed = static_cast<uint64_t>(seed);
  }

  auto& o = t.optimizer;
  if (const entry* oe = s.find("optimizer")) {
    const std::string p = "train.optimizer";
    const section os = read_map(oe->value, p, {"type", "lr", "betas", "eps", "weight_decay", "momentum"});
    read_choice(os, "type", "optimizer", {"adam", "sgd"}, o.type);
    if (o.type == "adam")
      only_keys(os, {"type", "lr", "betas", "eps", "weight_decay"}, "the adam optimizer", [](auto&) { return "sgd"; });
    else
      only_keys(os, {"type", "lr", "momentum", "weight_decay"}, "the sgd optimizer", [](auto&) { return "adam"; });
    if (read_number(os, "lr", o.lr)) positive(p + ".lr", o.lr);
    if (const entry* be = os.find("betas")) {
      const Node& b = be->value;
      if (!b.IsSequence() || b.size() != 2)
        fail(value_mark(*be), p + ".betas", "expected a list of two numbers [beta1, beta2], found " +
                                                (b.IsSequence() ? "a list of length " + std::to_string(b.size()) : describe(b)));
      double* beta[2] = {&o.beta1, &o.beta2};
      for (size_t i = 0; i < 2; ++i) {
        const std::string key = item(p + ".betas", i);
        const entry be_i{b[i], b[i]};
        cfg_.marks[key] = to_mark(b[i].Mark());
        *beta[i] = parse_number(be_i, key);
        unit_interval(key, *beta[i]);
      }
    }
    if (read_number(os, "eps", o.eps)) positive(p + ".eps", o.eps);
    if (read_number(os, "weight_decay", o.weight_decay)) non_negative(p + ".weight_decay", o.weight_decay);
    if (read_number(os, "momentum", o.momentum)) non_negative(p + ".momentum", o.momentum);
  }

  auto& l = t.lr_schedule;
  if (const entry* le = s.find("lr_schedule")) {
    const std::string p = "train.lr_schedule";
    const section ls = read_map(le->value, p, {"type", "step_size", "gamma"});
    read_choice(ls, "type", "lr schedule", {"none", "step"}, l.type);
    if (l.type == "none") only_keys(ls, {"type"}, "lr_schedule none", [](auto&) { return "step"; });
    if (read_int(ls, "step_size", l.step_size)) at_least(p + ".step_size", l.step_size, 1);
    if (read_number(ls, "gamma", l.gamma)) positive(p + ".gamma", l.gamma);
  }
}

// -- pipeline ----------------------------------------------------------------

void reader::read_pipeline(const entry* e) {
  auto& p = cfg_.pipeline;
  const section s = read_map(e ? e->value : Node(), "pipeline",
                             {"stages", "partition", "schedule", "microbatches", "devices", "intra_op_threads",
                              "pace_ms", "lockstep", "virtual_stages", "max_inflight", "recompute", "sim_ms", "threads"});
  read_choice(s, "schedule", "schedule", known_schedules(), p.schedule);
  const schedule_traits& sched = *find_schedule(p.schedule);
  p.virtual_stages = sched.default_chunks;
  if (read_small_int(s, "virtual_stages", p.virtual_stages)) {
    at_least("pipeline.virtual_stages", p.virtual_stages, 1);
    if (sched.fixed_chunks > 1 && p.virtual_stages != sched.fixed_chunks)
      fail_key("pipeline.virtual_stages", p.schedule + " runs exactly " + std::to_string(sched.fixed_chunks) +
                                              " chunks per stage (" + sched.chunks_why + "), not " +
                                              std::to_string(p.virtual_stages));
    if (sched.fixed_chunks == 1 && p.virtual_stages != 1)
      fail_key("pipeline.virtual_stages",
               "only the " + trainable_schedules_where([](const schedule_traits& t) { return t.fixed_chunks != 1; }) +
                   " schedules run several chunks per stage, not " + p.schedule);
  }
  if (read_small_int(s, "max_inflight", p.max_inflight)) {
    at_least("pipeline.max_inflight", p.max_inflight, 1);
    if (!sched.takes_max_inflight)
      fail_key("pipeline.max_inflight", "only the " +
                                            trainable_schedules_where(
                                                [](const schedule_traits& t) { return t.takes_max_inflight; }) +
                                            " schedule takes a memory bound; " + p.schedule + " sets its own");
  }
  const int v = p.virtual_stages;

  const int layers = static_cast<int>(cfg_.model.layers.size());
  const bool has_stages = read_small_int(s, "stages", p.stages);
  if (has_stages) at_least("pipeline.stages", p.stages, 1);
  if (const entry* pe = s.find("partition")) {
    read_partition(*pe);
    const int ranges = static_cast<int>(p.partition.size());
    if (v == 1 && has_stages && p.stages != ranges)
      fail_key("pipeline.stages", std::to_string(p.stages) + " does not match the " + std::to_string(ranges) +
                                      " ranges of pipeline.partition");
    if (ranges % v != 0 || (has_stages && p.stages * v != ranges))
      fail_key("pipeline.partition", std::to_string(ranges) + " ranges, but " +
                                         (has_stages ? std::to_string(p.stages) : std::string("the")) +
                                         " stages x " + std::to_string(v) +
                                         " virtual stages need one range per virtual stage");
    p.stages = ranges / v;
  } else if (p.stages * v > layers) {
    if (v == 1)
      fail_key("pipeline.stages", std::to_string(p.stages) + " exceeds the " + std::to_string(layers) +
                                      " layers of model.layers");
    fail_key("pipeline.virtual_stages", std::to_string(p.stages) + " stages x " + std::to_string(v) +
                                            " virtual stages exceed the " + std::to_string(layers) +
                                            " layers of model.layers");
  }

  if (read_small_int(s, "microbatches", p.microbatches)) at_least("pipeline.microbatches", p.microbatches, 1);
  const int64_t batch = cfg_.train.batch_size;
  if (sched.one_microbatch) {
    p.microbatches = 1;  // the whole batch as one microbatch
  } else if (p.microbatches > batch) {
    fail_key("pipeline.microbatches",
             std::to_string(p.microbatches) + " exceeds train.batch_size " + std::to_string(batch));
  } else if (int64_t n = torch_chunk_count(batch, p.microbatches); n != p.microbatches) {
    fail_key("pipeline.microbatches", "torch.chunk splits train.batch_size " + std::to_string(batch) + " into " +
                                          std::to_string(n) + " chunks, not " + std::to_string(p.microbatches));
  } else if (sched.microbatches_at_least_stages && p.microbatches < p.stages) {
    fail_key("pipeline.microbatches", sched.display + " needs at least as many microbatches as stages (" +
                                          std::to_string(p.stages) + ") so that two weight versions suffice; got " +
                                          std::to_string(p.microbatches));
  } else if (!sched.flushes && p.microbatches * cfg_.train.steps > INT_MAX) {
    // Both at most 2^31: the product fits int64. The stages count the
    // stream's microbatches in an int.
    fail_key("train.steps", sched.display + " streams every step's microbatches as one: " +
                                std::to_string(cfg_.train.steps) + " steps x " + std::to_string(p.microbatches) +
                                " microbatches exceed " + std::to_string(INT_MAX));
  } else if (sched.microbatches_in_stage_groups && p.microbatches % p.stages != 0) {
    fail_key("pipeline.microbatches", p.schedule + " runs microbatches in groups of pipeline.stages (" +
                                          std::to_string(p.stages) + "); " + std::to_string(p.microbatches) +
                                          " is not a multiple");
  } else if (const int dp = cfg_.parallel.dp; dp > 1) {
    // Each replica splits its own share of the batch (torch.chunk into dp).
    const int64_t share = ceil_div(batch, dp);
    for (int64_t n : {share, batch - share * (dp - 1)})
      if (int64_t k = torch_chunk_count(n, p.microbatches); k != p.microbatches)
        fail_key("pipeline.microbatches", "a replica's share of train.batch_size (" + std::to_string(n) + " of " +
                                              std::to_string(batch) + " over parallel.dp " + std::to_string(dp) +
                                              ") splits into " + std::to_string(k) + " chunks, not " +
                                              std::to_string(p.microbatches));
  }
  if (cfg_.parallel.dp > 1 && !sched.flushes)
    fail_key("parallel.dp", sched.display + " runs one replica; its stages step on their own, with no "
                            "allreduce point");

  if (!sched.flushes && cfg_.train.clip_grad_norm > 0)
    fail_key(cfg_.marks.count("train.clip_grad_norm") ? "train.clip_grad_norm" : "pipeline.schedule",
             sched.display + " steps each stage on its own, with no global gradient norm to clip by; "
             "leave train.clip_grad_norm out");

  if (const entry* de = s.find("devices")) read_devices(*de);
  const int dp = cfg_.parallel.dp;
  if (cfg_.replica_devices.empty()) {
    if (p.devices.empty()) {  // auto: replica d, stage r on GPU (d S + r) mod n
      cfg_.replica_devices.assign(dp, {});
      for (int d = 0; d < dp; ++d)
        for (int i = 0; i < p.stages; ++i)
          cfg_.replica_devices[d].push_back(
              env_.cuda_devices > 0 ? "cuda:" + std::to_string((d * p.stages + i) % env_.cuda_devices) : "cpu");
    } else {
      cfg_.replica_devices.assign(dp, p.devices);  // one list: every replica alike
    }
  }
  p.devices = cfg_.replica_devices.front();
  // A measuring device stands for every stage: a real stage next to one
  // would get empty activations.
  const std::string& first = cfg_.replica_devices.front().front();
  for (const auto& replica : cfg_.replica_devices)
    for (const auto& d : replica)
      if ((is_measuring_device(d) || is_measuring_device(first)) && d != first)
        fail_key("pipeline.devices", "the " + (is_measuring_device(d) ? d : first) +
                                         " device runs every stage or none; found " + first + " next to " + d);
  if (const entry* se = s.find("sim_ms")) {
    const std::string key = "pipeline.sim_ms";
    const section ss = read_map(se->value, key, {"F", "B", "W"});
    if (read_number(ss, "F", p.sim_f_ms)) ms_in_range(key + ".F", p.sim_f_ms);
    if (read_number(ss, "B", p.sim_b_ms)) ms_in_range(key + ".B", p.sim_b_ms);
    if (read_number(ss, "W", p.sim_w_ms)) ms_in_range(key + ".W", p.sim_w_ms);
    if (p.devices.front() != "sim")
      fail_key(key, "only the sim device takes op times; pipeline.devices is " + p.devices.front());
  }
  read_choice(s, "threads", "threads mode", {"dedicated", "shared"}, p.threads);
  if (p.threads.empty()) p.threads = p.devices.front() == "null" && dp == 1 ? "shared" : "dedicated";
  if (p.threads == "shared" && p.devices.front() != "null")
    fail_key("pipeline.threads", "shared runs the stages on CAF's scheduler, which only the null device's ops "
                                 "never block; a stage on " + p.devices.front() + " needs its own thread (dedicated)");
  if (p.threads == "shared" && dp > 1)
    fail_key("pipeline.threads", "shared: the allreduce over parallel.dp " + std::to_string(dp) +
                                     " replicas blocks a stage's thread until its peers join; use dedicated");
  if (cfg_.parallel.allreduce == "nccl")
    for (const auto& replica : cfg_.replica_devices)
      for (const auto& d : replica)
        if (d.rfind("cuda:", 0) != 0)
          fail_key("parallel.allreduce", "nccl sums CUDA tensors only, but a stage is on " + d +
                                             "; use gloo or auto");

  if (read_small_int(s, "intra_op_threads", p.intra_op_threads)) {
    at_least("pipeline.intra_op_threads", p.intra_op_threads, 0);
    // Each stage starts a pool this big; past the cores it only contends.
    if (p.intra_op_threads > 1024)
      fail_key("pipeline.intra_op_threads", "must be at most 1024, found " + std::to_string(p.intra_op_threads));
  }
  if (read_number(s, "pace_ms", p.pace_ms)) ms_in_range("pipeline.pace_ms", p.pace_ms);
  read_bool(s, "lockstep", p.lockstep);
  p.recompute.assign(p.stages, false);
  if (const entry* re = s.find("recompute")) {
    const std::string key = "pipeline.recompute";
    if (re->value.IsScalar() && (re->value.Scalar() == "all" || re->value.Scalar() == "none")) {
      p.recompute.assign(p.stages, re->value.Scalar() == "all");
    } else if (re->value.IsSequence()) {
      if (static_cast<int>(re->value.size()) != p.stages)
        fail_key(key, std::to_string(re->value.size()) + " values for " + std::to_string(p.stages) +
                          " stages; give one true/false per stage, or all / none");
      for (size_t i = 0; i < re->value.size(); ++i) {
        const Node n = re->value[i];
        const std::string k = item(key, i);
        cfg_.marks[k] = to_mark(n.Mark());
        bool on = false;
        if (!n.IsScalar() || !YAML::convert<bool>::decode(n, on))
          fail(n, k, "expected true or false, found " + describe(n));
        p.recompute[i] = on;
      }
    } else {
      fail(value_mark(*re), key,
           "expected all, none or a list of true/false (one per stage), found " +
               describe(re->value));
    }
  }
}

void reader::read_partition(const entry& e) {
  const std::string path = "pipeline.partition";
  const Node& list = e.value;
  const int layers = static_cast<int>(cfg_.model.layers.size());
  if (!list.IsSequence())
    fail(value_mark(e), path, "expected a list of [first, last] layer ranges, found " + describe(list));
  if (list.size() == 0) fail_key(path, "is empty; give one [first, last] range per stage");
  int next = 0;  // the first layer the next range must start at
  for (size_t i = 0; i < list.size(); ++i) {
    const Node r = list[i];
    const std::string key = item(path, i);
    cfg_.marks[key] = to_mark(r.Mark());
    if (!r.IsSequence() || r.size() != 2)
      fail(r, key, "expected a [first, last] layer range, found " +
                       (r.IsSequence() ? "a list of length " + std::to_string(r.size()) : describe(r)));
    int64_t bounds[2];
    for (size_t j = 0; j < 2; ++j) {
      const std::string bkey = item(key, j);
      cfg_.marks[bkey] = to_mark(r[j].Mark());
      bounds[j] = parse_int(entry{r[j], r[j]}, bkey);
    }
    const int64_t first = bounds[0], last = bounds[1];
    if (first != next)
      fail(r, key, i == 0 ? "the first range must start at layer 0, found " + std::to_string(first)
                          : "starts at layer " + std::to_string(first) + " but the previous range ended at layer " +
                                std::to_string(next - 1) + "; ranges must be contiguous");
    if (last < first)
      fail(r, key, "ends at layer " + std::to_string(last) + ", before its start " + std::to_string(first));
    if (last >= layers)
      fail(r, key, "layer " + std::to_string(last) + " does not exist; model.layers has " + std::to_string(layers) +
                       " layers (0.." + std::to_string(layers - 1) + ")");
    cfg_.pipeline.partition.emplace_back(static_cast<int>(first), static_cast<int>(last));
    next = static_cast<int>(last) + 1;
  }
  if (next != layers)
    fail_key(path, "covers layers 0.." + std::to_string(next - 1) + " but model.layers has " + std::to_string(layers) +
                       " layers; the last range must end at layer " + std::to_string(layers - 1));
}

void reader::read_devices(const entry& e) {
  const std::string path = "pipeline.devices";
  auto& p = cfg_.pipeline;
  const int dp = cfg_.parallel.dp;
  if (e.value.IsScalar() && e.value.Scalar() == "auto") return;
  if (!e.value.IsSequence())
    fail(value_mark(e), path, "expected 'auto' or a list of devices (one per stage), found " + describe(e.value));
  if (e.value.size() > 0 && e.value[0].IsSequence()) {  // dp x stages
    if (static_cast<int>(e.value.size()) != dp)
      fail_key(path, std::to_string(e.value.size()) + " device lists for parallel.dp " + std::to_string(dp) +
                         "; give one list per replica (or one flat list for all)");
    for (size_t r = 0; r < e.value.size(); ++r) {
      const Node row = e.value[r];
      const std::string rkey = item(path, r);
      cfg_.marks[rkey] = to_mark(row.Mark());
      if (!row.IsSequence() || static_cast<int>(row.size()) != p.stages)
        fail(row, rkey, "expected a list of " + std::to_string(p.stages) + " devices (one per stage), found " +
                            (row.IsSequence() ? "a list of length " + std::to_string(row.size()) : describe(row)));
      std::vector<std::string> names;
      for (size_t i = 0; i < row.size(); ++i) read_device_name(row[i], item(rkey, i), names);
      cfg_.replica_devices.push_back(std::move(names));
    }
    return;
  }
  if (static_cast<int>(e.value.size()) != p.stages)
    fail_key(path, std::to_string(e.value.size()) + " devices for " + std::to_string(p.stages) +
                       " stages; give one per stage");
  for (size_t i = 0; i < e.value.size(); ++i) read_device_name(e.value[i], item(path, i), p.devices);
}

void reader::read_device_name(const Node& d, const std::string& key, std::vector<std::string>& out) {
  {
    cfg_.marks[key] = to_mark(d.Mark());
    // YAML reads a bare `null` as no value: here it names the null device.
    if (!d.IsScalar() && !d.IsNull()) fail(d, key, "expected a device (cpu, cuda:N, null or sim), found " + describe(d));
    const std::string name = d.IsNull() ? "null" : d.Scalar();
    const bool is_cuda = name.size() > 5 && name.compare(0, 5, "cuda:") == 0 &&
                         name.size() <= 9 &&  // keeps stoi in range
                         std::all_of(name.begin() + 5, name.end(), [](char c) { return std::isdigit(c) != 0; });
    if (name != "cpu" && name != "null" && name != "sim" && !is_cuda)
      fail(d, key, "unknown device " + quoted_input(name) + "; expected cpu, cuda:N, null or sim");
    if (is_cuda) {
      const int n = std::stoi(name.substr(5));
      if (n >= env_.cuda_devices)
        fail(d, key, name + " requested but this machine has " + std::to_string(env_.cuda_devices) + " CUDA device" +
                         (env_.cuda_devices == 1 ? "" : "s"));
    }
    out.push_back(name);
  }
}

}  // namespace

// -- entry point -------------------------------------------------------------

config load_config(const std::string& path, const load_env& env) {
  config cfg;
  cfg.path = path;

  std::error_code ec;
  if (fs::is_directory(path, ec)) throw config_error(path + ": cannot read config file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error(path + ": cannot read config file: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw config_error(path + ": cannot read config file");

  Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    const source_mark m = to_mark(e.mark);
    throw config_error(path + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) +
                       ": invalid YAML: " + e.msg);
  }
  reader(cfg, env).load(root);
  return cfg;
}

}  // namespace actorpipe
