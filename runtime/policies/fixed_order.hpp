#pragma once
// Runs a given per-rank op order (e.g. imported from CSV): the next op of a
// rank is the one after the ops it already fired, fired once it is ready.
#include <vector>

#include "runtime/policy.hpp"

namespace actorpipe {

class fixed_order_policy : public policy {
public:
  explicit fixed_order_policy(std::vector<std::vector<op_id>> order) : order_(std::move(order)) {}
  std::string name() const override { return "fixed"; }
  std::optional<op_id> next(const stage_view& v) const override;

private:
  std::vector<std::vector<op_id>> order_;
};

}  // namespace actorpipe
