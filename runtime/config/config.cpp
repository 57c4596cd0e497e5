// Loading and validating the YAML config.
//
// load_config() reads the file, then every top-level section with its own
// reader (runtime/config/*_section.cpp, on the shared machinery of
// runtime/config/reader.hpp), then runs the named cross-section checks
// (runtime/config/cross_checks.cpp) and fills in the defaults that depend on
// several sections. Every error is one FILE:LINE:COL: KEY: message line.
// No torch here: this file must compile in seconds.
#include "runtime/config/config.hpp"

#include "runtime/config/sections.hpp"
#include "runtime/schedule/policies/registry.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// -- the sections ------------------------------------------------------------

const std::vector<config_detail::top_section>& config_detail::top_sections() {
  static const std::vector<top_section> sections{
      {"model", read_model},           {"data", read_data},          {"train", read_train},
      {"eval", read_eval},             {"parallel", read_parallel},  {"pipeline", read_pipeline},
      {"compare", read_compare},       {"checkpoint", read_checkpoint}, {"supervision", read_supervision},
      {"faults", read_faults}};
  return sections;
}

namespace {

using namespace config_detail;

void read_config(reader& r, const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) r.fail(source_mark{1, 1}, "", "the config is empty; it needs at least model.layers");
  if (!root.IsMap()) r.fail(root, "", "expected a map at the top level, found " + describe(root));
  const section top = r.read_map(root, "");
  for (const auto& s : top_sections()) s.read(r, top.find(s.name));
  for (const auto& check : cross_checks()) check.run(r);
  resolve(r);
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

  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    const source_mark m = to_mark(e.mark);
    throw config_error(path + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) +
                       ": invalid YAML: " + e.msg);
  }
  reader r(cfg, env);
  read_config(r, root);
  return cfg;
}

}  // namespace actorpipe
