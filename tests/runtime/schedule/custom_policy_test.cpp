// The docs' custom-schedule example (docs/CUSTOM_SCHEDULE.md), as the runtime
// ships it: the registered forward-first policy, driven by the simulator
// like any built-in one. tests/apps/custom_schedule_test trains with it and
// checks the docs show its source verbatim.
#include <gtest/gtest.h>

#include "runtime/schedule/policies/builtin.hpp"
#include "runtime/schedule/policies/registry.hpp"
#include "runtime/schedule/simulator.hpp"

namespace actorpipe {
namespace {

TEST(CustomPolicy, TheDocsExampleRunsInTheSimulatorWithinItsMemoryBound) {
  const int s = 4, m = 8;
  auto r = simulate(forward_first_policy{}, s, m);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  for (int rank = 0; rank < s; ++rank) {
    EXPECT_LE(r.peak_stash[rank], 2 * (s - rank));
    EXPECT_EQ(r.order()[rank].size(), 2u * m);
  }
  // Stage 0 holds more forwards open than 1F1B's S - rank (all 8 here:
  // B0 comes back after 7 op times), so its order is not 1F1B's.
  auto ofob = simulate("1f1b", s, m);
  EXPECT_EQ(ofob.peak_stash[0], s);
  EXPECT_EQ(r.peak_stash[0], 2 * s);
  EXPECT_NE(r.order()[0], ofob.order()[0]);
}

TEST(CustomPolicy, TheDocsExampleIsRegisteredAndTrains) {
  const schedule_traits* t = find_schedule("forward-first");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->trains);
  EXPECT_TRUE(t->flushes);
  EXPECT_EQ(t->make(policy_options{})->name(), "forward-first");
}

}  // namespace
}  // namespace actorpipe
