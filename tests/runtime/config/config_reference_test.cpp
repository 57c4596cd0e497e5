// runtime/config/schema: the config reference (docs/CONFIG.md, `actorpipe
// keys`) against the reader. Every key it lists is accepted where it says,
// every map it lists refuses a key it does not list, every literal default
// is what a loaded config holds without the key, and docs/CONFIG.md holds
// the table's current rendering.
#include "tests/test_util.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/config/sections.hpp"
#include "runtime/faults/fault_kind.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using config_schema::key_doc;

fs::path test_dir() { return testing_util::test_dir("actorpipe_config_reference_test"); }

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

/// A config that loads: every section a key can sit in is present, with a
/// fault and a dropout layer, so each map's reader runs.
YAML::Node base_config() {
  return YAML::Load(R"(
model:
  layers:
    - {type: linear, in: 4, out: 2}
    - {type: dropout}
checkpoint: {dir: ckpt}
faults:
  inject:
    - {kind: delay}
)");
}

/// The node at a dotted schema path, created where missing; `[]` is the
/// list's first item.
YAML::Node at(YAML::Node root, const std::string& path) {
  YAML::Node n = root;
  std::string rest = path;
  while (!rest.empty()) {
    const size_t cut = rest.find('.');
    std::string part = rest.substr(0, cut);
    rest = cut == std::string::npos ? "" : rest.substr(cut + 1);
    const bool item = part.size() > 2 && part.compare(part.size() - 2, 2, "[]") == 0;
    if (item) part.resize(part.size() - 2);
    n.reset(n[part]);
    if (item) n.reset(n[0]);
  }
  return n;
}

/// What load_config says of `root` ("" when it loads).
std::string load_error(const YAML::Node& root, const std::string& name) {
  const fs::path file = test_dir() / (testing_util::param_name(name) + ".yaml");
  YAML::Emitter out;
  out << root;
  testing_util::write(file, out.c_str());
  try {
    load_config(file.string());
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

/// The path as an error names it: a list item is item 0.
std::string as_written(const std::string& path) { return std::regex_replace(path, std::regex(R"(\[\])"), "[0]"); }

bool is_map(const key_doc& k) {
  const std::string t = k.type;
  return t == "map" || t == "list of maps";
}

/// The map a list of maps holds its items in ("faults.inject[]").
std::string map_path(const key_doc& k) { return std::string(k.path) + (std::string(k.type) == "list of maps" ? "[]" : ""); }

TEST(ConfigReference, TheBaseConfigLoads) { EXPECT_EQ(load_error(base_config(), "base"), ""); }

TEST(ConfigReference, EveryListedKeyIsAcceptedWhereItIsListed) {
  for (const auto& k : config_schema::keys()) {
    const std::string path = k.path;
    if (is_map(k)) continue;  // a map's keys are probed one by one
    YAML::Node root = base_config();
    at(root, path) = "1";
    const std::string err = load_error(root, path);
    EXPECT_EQ(err.find(as_written(path) + ": unknown key"), std::string::npos) << path << ": " << err;
  }
}

TEST(ConfigReference, EveryListedMapRefusesAKeyItDoesNotList) {
  int maps = 0;
  std::vector<std::string> paths{""};
  for (const auto& k : config_schema::keys())
    if (is_map(k)) paths.push_back(map_path(k));
  for (const auto& path : paths) {
    YAML::Node root = base_config();
    const std::string key = path.empty() ? "zz_not_a_key" : path + ".zz_not_a_key";
    YAML::Node m = path.empty() ? root : at(root, path);
    if (!m.IsMap()) m = YAML::Node(YAML::NodeType::Map);
    m["zz_not_a_key"] = 1;
    if (!path.empty()) at(root, path) = m;
    const std::string err = load_error(root, "zz_" + path);
    EXPECT_NE(err.find(as_written(key) + ": unknown key"), std::string::npos) << key << ": " << err;
    ++maps;
  }
  EXPECT_GE(maps, 15);
}

TEST(ConfigReference, EveryTopLevelKeyHasASectionReader) {
  std::set<std::string> listed, read;
  for (const auto& name : config_schema::keys_under("")) listed.insert(name);
  for (const auto& s : config_detail::top_sections()) read.insert(s.name);
  EXPECT_EQ(listed, read);
}

TEST(ConfigReference, FaultKindsAndLayerTypesAreTheReadersOwn) {
  std::vector<std::string> documented, known;
  for (const auto& f : config_schema::fault_kinds()) documented.push_back(f.name);
  for (const auto& f : fault_kinds()) known.push_back(f.name);
  EXPECT_EQ(documented, known);

  // The reader names its layer types when it refuses one.
  YAML::Node root = base_config();
  at(root, "model.layers[].type") = "zz";
  const std::string err = load_error(root, "layer_type");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(\(known: ([^)]*)\))"))) << err;
  std::string listed;
  for (const auto& t : config_schema::layer_types()) listed += (listed.empty() ? "" : ", ") + t.name;
  EXPECT_EQ(m[1].str(), listed);
}

/// How a loaded config shows each key's value, as the reference writes its
/// default. A key whose default is a literal needs a line here.
std::map<std::string, std::function<std::string(const config&)>> values() {
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  auto fault = [](const config& c) -> const fault_spec& { return c.faults.inject.at(0); };
  return {
      {"model.layers[].p", [](const config& c) { return num(c.model.layers.at(1).p); }},
      {"model.layers[].dropout", [](const config& c) { return num(c.model.layers.at(1).p); }},
      {"model.layers[].tie", [b](const config& c) { return b(c.model.layers.at(0).tie); }},
      {"model.layers[].repeat", [](const config& c) { return std::to_string(c.model.layers.size() / 2); }},
      {"model.dtype", [](const config& c) { return c.model.dtype; }},
      {"model.mixed_precision", [](const config& c) { return c.model.mixed_precision; }},
      {"model.layers[].rope_theta", [](const config& c) { return num(c.model.layers.at(0).rope_theta); }},
      {"model.layers[].norm_eps", [](const config& c) { return num(c.model.layers.at(0).eps); }},
      {"model.layers[].eps", [](const config& c) { return num(c.model.layers.at(0).eps); }},
      {"data.dtype", [](const config& c) { return c.data.token_dtype; }},
      {"train.optimizer.decay_1d", [b](const config& c) { return b(c.train.optimizer.decay_1d); }},
      {"train.lr_schedule.warmup_steps", [](const config& c) { return std::to_string(c.train.lr_schedule.warmup_steps); }},
      {"train.lr_schedule.min_lr", [](const config& c) { return num(c.train.lr_schedule.min_lr); }},
      {"data.kind", [](const config& c) { return c.data.kind; }},
      {"data.test_fraction", [](const config& c) { return num(c.data.test_fraction); }},
      {"data.split", [](const config& c) { return c.data.split; }},
      {"data.shuffle", [b](const config& c) { return b(c.data.shuffle); }},
      {"data.normalize", [](const config& c) { return c.data.normalize; }},
      {"data.synthetic.samples", [](const config& c) { return std::to_string(c.data.samples); }},
      {"train.steps", [](const config& c) { return std::to_string(c.train.steps); }},
      {"train.batch_size", [](const config& c) { return std::to_string(c.train.batch_size); }},
      {"train.seed", [](const config& c) { return std::to_string(c.train.seed); }},
      {"train.optimizer.type", [](const config& c) { return c.train.optimizer.type; }},
      {"train.optimizer.lr", [](const config& c) { return num(c.train.optimizer.lr); }},
      {"train.optimizer.betas",
       [](const config& c) { return "[" + num(c.train.optimizer.beta1) + ", " + num(c.train.optimizer.beta2) + "]"; }},
      {"train.optimizer.eps", [](const config& c) { return num(c.train.optimizer.eps); }},
      {"train.optimizer.weight_decay", [](const config& c) { return num(c.train.optimizer.weight_decay); }},
      {"train.optimizer.momentum", [](const config& c) { return num(c.train.optimizer.momentum); }},
      {"train.lr_schedule.type", [](const config& c) { return c.train.lr_schedule.type; }},
      {"train.lr_schedule.step_size", [](const config& c) { return std::to_string(c.train.lr_schedule.step_size); }},
      {"train.lr_schedule.gamma", [](const config& c) { return num(c.train.lr_schedule.gamma); }},
      {"parallel.dp", [](const config& c) { return std::to_string(c.parallel.dp); }},
      {"parallel.allreduce", [](const config& c) { return c.parallel.allreduce; }},
      {"pipeline.stages", [](const config& c) { return std::to_string(c.pipeline.stages); }},
      {"pipeline.schedule", [](const config& c) { return c.pipeline.schedule; }},
      {"pipeline.microbatches", [](const config& c) { return std::to_string(c.pipeline.microbatches); }},
      {"pipeline.devices", [](const config& c) { return std::string(c.pipeline.auto_devices ? "auto" : "a list"); }},
      {"pipeline.intra_op_threads", [](const config& c) { return std::to_string(c.pipeline.intra_op_threads); }},
      {"pipeline.pace_ms", [](const config& c) { return num(c.pipeline.pace_ms); }},
      {"pipeline.lockstep", [b](const config& c) { return b(c.pipeline.lockstep); }},
      {"pipeline.recompute",
       [](const config& c) {
         for (bool r : c.pipeline.recompute)
           if (r) return std::string("some");
         return std::string("none");
       }},
      {"pipeline.sim_ms.F", [](const config& c) { return num(c.pipeline.sim_f_ms); }},
      {"pipeline.sim_ms.B", [](const config& c) { return num(c.pipeline.sim_b_ms); }},
      {"pipeline.sim_ms.W", [](const config& c) { return num(c.pipeline.sim_w_ms); }},
      {"pipeline.rebalance.threshold", [](const config& c) { return num(c.pipeline.rebalance.threshold); }},
      {"checkpoint.every", [](const config& c) { return std::to_string(c.checkpoint.every); }},
      {"checkpoint.keep_last", [](const config& c) { return std::to_string(c.checkpoint.keep_last); }},
      {"supervision.watchdog_s", [](const config& c) { return num(c.supervision.watchdog_s); }},
      {"supervision.on_nonfinite", [](const config& c) { return c.supervision.on_nonfinite; }},
      {"supervision.check_updates", [b](const config& c) { return b(c.supervision.check_updates); }},
      {"supervision.max_skipped_fraction", [](const config& c) { return num(c.supervision.max_skipped_fraction); }},
      {"supervision.max_restarts", [](const config& c) { return std::to_string(c.supervision.max_restarts); }},
      {"supervision.window_steps", [](const config& c) { return std::to_string(c.supervision.window_steps); }},
      {"supervision.copy_every", [](const config& c) { return std::to_string(c.supervision.copy_every); }},
      {"supervision.op_timeout_ms", [](const config& c) { return num(c.supervision.op_timeout_ms); }},
      {"supervision.connect_timeout_s", [](const config& c) { return num(c.supervision.connect_timeout_s); }},
      {"supervision.heartbeat_timeout_s", [](const config& c) { return num(c.supervision.heartbeat_timeout_s); }},
      {"supervision.shrink", [](const config& c) { return c.supervision.shrink; }},
      {"faults.seed", [](const config& c) { return std::to_string(c.faults.seed); }},
      {"faults.inject[].stage", [fault](const config& c) { return std::to_string(fault(c).stage); }},
      {"faults.inject[].step", [fault](const config& c) { return std::to_string(fault(c).step); }},
      {"faults.inject[].microbatch", [fault](const config& c) { return std::to_string(fault(c).microbatch); }},
      {"faults.inject[].where",
       [fault](const config& c) {
         const auto w = fault(c).where;
         return std::string(w == nonfinite_site::grad ? "grad" : w == nonfinite_site::activation ? "activation" : "update");
       }},
      {"faults.inject[].probability", [fault](const config& c) { return num(fault(c).probability); }},
      {"faults.inject[].ms", [fault](const config& c) { return num(fault(c).ms); }},
      {"faults.inject[].factor", [fault](const config& c) { return num(fault(c).factor); }},
  };
}

TEST(ConfigReference, EveryLiteralDefaultIsWhatTheReaderLeaves) {
  const fs::path file = test_dir() / "base.yaml";
  YAML::Emitter out;
  out << base_config();
  testing_util::write(file, out.c_str());
  const config cfg = load_config(file.string());
  const auto shown = values();
  int checked = 0;
  for (const auto& k : config_schema::keys()) {
    const std::string d = k.default_text;
    if (is_map(k) || d == "required" || d.front() == '(') continue;
    auto it = shown.find(k.path);
    if (it == shown.end()) {
      ADD_FAILURE() << k.path << " documents the default " << d
                    << ": give it a line in values() of this test, so the default is checked";
      continue;
    }
    EXPECT_EQ(it->second(cfg), d) << k.path;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(shown.size())) << "values() has a line for a key whose default is not literal";
}

TEST(ConfigReference, DocsConfigMdHoldsTheTablesRendering) {
  const fs::path doc = fs::path(ACTORPIPE_SOURCE_DIR) / "docs" / "CONFIG.md";
  const std::string text = testing_util::slurp_file(doc);
  ASSERT_FALSE(text.empty()) << doc << " is missing";
  const std::string begin = "<!-- generated by `actorpipe keys --markdown`: begin -->\n";
  const std::string end = "<!-- generated: end -->";
  const size_t b = text.find(begin), e = text.find(end);
  ASSERT_NE(b, std::string::npos) << doc << " lacks the line " << begin;
  ASSERT_NE(e, std::string::npos) << doc << " lacks the line " << end;
  EXPECT_TRUE(text.substr(b + begin.size(), e - b - begin.size()) == config_schema::render_markdown())
      << doc << " is not the table's rendering: run scripts/config-reference after changing runtime/config/schema.cpp";
}

}  // namespace
}  // namespace actorpipe
