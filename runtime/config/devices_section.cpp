// pipeline.devices: one device per stage, or one list per replica, or auto.
// Each name is checked here; whether there is one per stage and one list per
// replica is a cross-section check.
#include "runtime/config/sections.hpp"

#include "runtime/util/text.hpp"

#include <algorithm>
#include <cctype>

namespace actorpipe::config_detail {

namespace {

void read_device_name(reader& r, const Node& d, const std::string& key, std::vector<std::string>& out) {
  r.mark(key, d);
  // YAML reads a bare `null` as no value: here it names the null device.
  if (!d.IsScalar() && !d.IsNull()) r.fail(d, key, "expected a device (cpu, cuda:N, null or sim), found " + describe(d));
  const std::string name = d.IsNull() ? "null" : d.Scalar();
  const bool is_cuda = name.size() > 5 && name.compare(0, 5, "cuda:") == 0 &&
                       name.size() <= 9 &&  // keeps stoi in range
                       std::all_of(name.begin() + 5, name.end(), [](char c) { return std::isdigit(c) != 0; });
  if (name != "cpu" && name != "null" && name != "sim" && !is_cuda)
    r.fail(d, key, "unknown device " + quoted_input(name) + "; expected cpu, cuda:N, null or sim");
  const int cuda_devices = r.env().cuda_devices;
  if (is_cuda && std::stoi(name.substr(5)) >= cuda_devices)
    r.fail(d, key, name + " requested but this machine has " + std::to_string(cuda_devices) + " CUDA device" +
                       (cuda_devices == 1 ? "" : "s"));
  out.push_back(name);
}

/// One list per replica, into replica_devices.
void read_device_lists(reader& r, const Node& lists) {
  const std::string path = "pipeline.devices";
  const int stages = r.cfg().pipeline.stages;
  for (size_t i = 0; i < lists.size(); ++i) {
    const Node row = lists[i];
    const std::string rkey = item(path, i);
    r.mark(rkey, row);
    if (!row.IsSequence())
      r.fail(row, rkey, "expected a list of " + std::to_string(stages) + " devices (one per stage), found " + describe(row));
    std::vector<std::string> names;
    for (size_t j = 0; j < row.size(); ++j) read_device_name(r, row[j], item(rkey, j), names);
    r.cfg().replica_devices.push_back(std::move(names));
  }
}

}  // namespace

void read_devices(reader& r, const entry& e) {
  const std::string path = "pipeline.devices";
  auto& p = r.cfg().pipeline;
  if (e.value.IsScalar() && e.value.Scalar() == "auto") return;
  if (!e.value.IsSequence())
    r.fail(reader::value_mark(e), path, "expected 'auto' or a list of devices (one per stage), found " + describe(e.value));
  if (e.value.size() > 0 && e.value[0].IsSequence()) {  // dp x stages
    read_device_lists(r, e.value);
    return;
  }
  r.facts().device_list = true;
  for (size_t i = 0; i < e.value.size(); ++i) read_device_name(r, e.value[i], item(path, i), p.devices);
}

bool devices_auto(const config& cfg, const read_facts& facts) {
  return cfg.replica_devices.empty() && !facts.device_list;
}

std::string auto_device(const load_env& env, int slot) {
  if (env.cuda_devices <= 0) return "cpu";
  return "cuda:" + std::to_string(env.local_rank ? *env.local_rank : slot % env.cuda_devices);
}

std::string first_device(const config& cfg, const load_env& env) {
  if (!cfg.replica_devices.empty()) return cfg.replica_devices.front().front();
  if (!cfg.pipeline.devices.empty()) return cfg.pipeline.devices.front();
  return auto_device(env, 0);
}

std::vector<std::vector<std::string>> planned_devices(const config& cfg, const load_env& env) {
  if (!cfg.replica_devices.empty()) return cfg.replica_devices;
  const int dp = cfg.parallel.dp, stages = cfg.pipeline.stages;
  if (!cfg.pipeline.devices.empty()) return std::vector<std::vector<std::string>>(dp, cfg.pipeline.devices);
  std::vector<std::vector<std::string>> out(dp);
  for (int d = 0; d < dp; ++d)
    for (int i = 0; i < stages; ++i) out[d].push_back(auto_device(env, d * stages + i));
  return out;
}

}  // namespace actorpipe::config_detail

namespace actorpipe {

std::string device_label(const config& cfg, const load_env& env, int replica, int stage, int owner) {
  const std::string& name = cfg.replica_devices.at(static_cast<size_t>(replica)).at(static_cast<size_t>(stage));
  const bool per_rank = cfg.pipeline.auto_devices && env.local_rank && name.rfind("cuda:", 0) == 0;
  if (!per_rank || owner == env.rank) return name;
  return "cuda:" + env.local_rank_variable + " of rank " + std::to_string(owner);
}

}  // namespace actorpipe
