// docs/CUSTOM_SCHEDULE.md's "write your own policy" example, compiled and
// run: the same class as on that page, driven by the simulator like any
// built-in policy.
#include <gtest/gtest.h>

#include "runtime/schedule/policy.hpp"
#include "runtime/schedule/simulator.hpp"

namespace actorpipe {
namespace {

// --- docs/CUSTOM_SCHEDULE.md example begins ---
/// 1F1B's memory bound, but forwards first: a stage runs ahead while it
/// may and only then turns to its backwards.
class forward_first_policy : public policy {
public:
  std::string name() const override { return "forward-first"; }

  std::optional<op_id> next(const stage_view& v) const override {
    const int bound = v.stages - v.rank;  // 1F1B's in-flight limit
    if (!v.fwd_ready->empty() && v.in_flight() < bound)
      return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
    if (!v.bwd_ready->empty())  // lowest first: accumulation stays in order
      return op_id{op_kind::B, v.bwd_ready->lowest(), 0};
    return std::nullopt;  // wait for a message
  }
};
// --- docs/CUSTOM_SCHEDULE.md example ends ---

TEST(CustomPolicy, ReadmeExampleRunsInTheSimulatorWithinTheMemoryBound) {
  const int s = 4, m = 8;
  auto r = simulate(forward_first_policy{}, s, m);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  for (int rank = 0; rank < s; ++rank) {
    EXPECT_LE(r.peak_stash[rank], s - rank);
    EXPECT_EQ(r.order()[rank].size(), 2u * m);
  }
  // With equal costs the forward-first rule lands on 1F1B's makespan.
  EXPECT_DOUBLE_EQ(r.makespan, simulate("1f1b", s, m).makespan);
}

}  // namespace
}  // namespace actorpipe
