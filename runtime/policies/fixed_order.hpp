#pragma once
// Runs a given per-rank op order (e.g. imported from CSV): the next op of a
// rank is the one after the ops it already fired, fired once it is ready.
#include <vector>

#include "runtime/policy.hpp"

namespace actorpipe {

class fixed_order_policy : public policy {
public:
  explicit fixed_order_policy(std::vector<std::vector<op_id>> order);
  std::string name() const override { return "fixed"; }
  std::optional<op_id> next(const stage_view& v) const override;
  /// True when the order holds W ops.
  bool splits_backward() const override { return split_; }

private:
  std::vector<std::vector<op_id>> order_;
  bool split_ = false;
};

}  // namespace actorpipe
