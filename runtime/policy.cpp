#include "runtime/policy.hpp"

#include <utility>

#include "runtime/policies/builtin.hpp"

namespace actorpipe {

namespace {

/// The registry: adding a policy is one line here plus its own file.
const std::vector<std::pair<std::string, policy_factory>>& registry() {
  static const std::vector<std::pair<std::string, policy_factory>> r = {
      {"naive", [] { return std::make_unique<gpipe_policy>("naive"); }},
      {"gpipe", [] { return std::make_unique<gpipe_policy>(); }},
      {"1f1b", [] { return std::make_unique<one_f_one_b_policy>(); }},
  };
  return r;
}

}  // namespace

std::unique_ptr<policy> make_policy(const std::string& name) {
  for (const auto& [n, make] : registry())
    if (n == name) return make();
  return nullptr;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace actorpipe
