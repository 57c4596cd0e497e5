#include "runtime/policy.hpp"

#include <utility>

#include "runtime/policies/builtin.hpp"

namespace actorpipe {

namespace {

/// The registry: adding a policy is one line here plus its own file.
const std::vector<std::pair<std::string, policy_factory>>& registry() {
  static const std::vector<std::pair<std::string, policy_factory>> r = {
      {"naive", [](const policy_options&) { return std::make_unique<gpipe_policy>("naive"); }},
      {"gpipe", [](const policy_options&) { return std::make_unique<gpipe_policy>(); }},
      {"1f1b", [](const policy_options&) { return std::make_unique<one_f_one_b_policy>(); }},
      {"interleaved",
       [](const policy_options& o) { return std::make_unique<interleaved_policy>(o.virtual_stages); }},
      {"zb-h1", [](const policy_options&) { return std::make_unique<zb_h1_policy>(); }},
      {"zb-v", [](const policy_options&) { return std::make_unique<zb_v_policy>(); }},
      {"async", [](const policy_options&) { return std::make_unique<async_policy>(); }},
      {"greedy",
       [](const policy_options& o) { return std::make_unique<greedy_policy>(o.virtual_stages, o.max_inflight); }},
      {"interleaved-greedy",
       [](const policy_options& o) { return std::make_unique<interleaved_greedy_policy>(o.virtual_stages); }},
  };
  return r;
}

}  // namespace

std::unique_ptr<policy> make_policy(const std::string& name, const policy_options& opts) {
  for (const auto& [n, make] : registry())
    if (n == name) return make(opts);
  return nullptr;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace actorpipe
