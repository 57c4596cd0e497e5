#pragma once
// Runs a given per-rank op order (e.g. imported from CSV): the next op of a
// rank is the one after the ops it already fired, fired once it is ready.
#include <vector>

#include "runtime/schedule/policy.hpp"

namespace actorpipe {

/// A rank's program, fired op by op: its next op (the one after the ops
/// already fired) once it is ready; an op that `overlap` flags waits for
/// the B it pairs with too. nullopt: wait. Shared by the fixed order, zb-v
/// and dualpipev.
std::optional<op_id> program_next(const stage_view& v, const std::vector<op_id>& ops,
                                  const std::vector<char>* overlap = nullptr);
/// Whether the program's next op opens an overlapped F and B.
bool program_overlaps(const stage_view& v, const std::vector<char>& overlap);

class fixed_order_policy : public policy {
public:
  /// Chunks are the most any rank's ops name; `placement` maps them to
  /// virtual stages (parse_schedule_csv detects it).
  /// `overlap[r][i]` set: op i of rank r (an F) and op i + 1 (a B) are one
  /// OVERLAP_F_B action. Empty: no overlapped ops.
  explicit fixed_order_policy(std::vector<std::vector<op_id>> order,
                              placement_kind placement = placement_kind::round_robin,
                              std::vector<std::vector<char>> overlap = {});
  std::string name() const override { return "fixed"; }
  std::optional<op_id> next(const stage_view& v) const override;
  /// True when the order holds W ops.
  bool splits_backward() const override { return split_; }
  int chunks() const override { return chunks_; }
  placement_kind placement() const override { return placement_; }
  bool overlaps_next(const stage_view& v) const override;
  const std::vector<std::vector<op_id>>& order() const { return order_; }
  const std::vector<std::vector<char>>& overlap() const { return overlap_; }

private:
  std::vector<std::vector<op_id>> order_;
  placement_kind placement_;
  std::vector<std::vector<char>> overlap_;
  bool split_ = false;
  int chunks_ = 1;
};

}  // namespace actorpipe
