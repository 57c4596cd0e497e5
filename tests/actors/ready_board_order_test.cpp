// The stage actors and the simulator decide with the same ready_board. Fed
// the same delayed, duplicated message sequence (lock-step delay faults,
// counted in rounds, replayed in the simulator as per-message latency),
// they fire the same ops in the same order on every stage.
#include <gtest/gtest.h>

#include <cmath>

#include "actors/trainer.hpp"
#include "runtime/faults/fault_plan.hpp"
#include "runtime/observe/metrics.hpp"
#include "runtime/schedule/policy.hpp"
#include "runtime/schedule/simulator.hpp"
#include "tests/actors/pipeline_fixtures.hpp"

namespace actorpipe {
namespace {

struct order_case {
  const char* schedule;
  int stages, microbatches;
  uint64_t fault_seed;
  int chunks = 0;        ///< 0: the schedule's own
  bool dynamic = false;  ///< the policy reacts to arrival order, so delays change the order itself
};

class SameBoard : public ::testing::TestWithParam<order_case> {};

TEST_P(SameBoard, StagesAndSimulatorFireTheSameOrderUnderDelayedAndDuplicatedMessages) {
  const auto [schedule, s, m, seed, chunks, dynamic] = GetParam();
  auto c = small_config(schedule, s, m);
  if (chunks > 0) c.pipeline.virtual_stages = chunks;
  c.train.steps = 1;
  c.pipeline.lockstep = true;
  c.faults.seed = seed;
  fault_spec delay, dup;
  delay.kind = fault_kind::delay;
  delay.probability = 0.3;
  delay.ms = 3;  // three rounds late
  dup.kind = fault_kind::duplicate;
  dup.probability = 0.2;
  c.faults.inject = {delay, dup};
  auto out = run_training(c);
  const auto counts = count_message_faults(out.result);
  ASSERT_GT(counts.held_back, 0u);
  ASSERT_GT(counts.sent_twice, 0u);

  const int v = c.pipeline.virtual_stages;
  auto pol = make_policy(schedule, policy_options{v});
  std::vector<fault_plan> plans;
  for (int r = 0; r < s; ++r) plans.emplace_back(c.faults.inject, seed, r, 0);
  cost_model cost;
  cost.w = pol->splits_backward() ? 1.0 : 0.0;  // every op one round
  cost.message_delay = [&](int from, int to, op_id input) {
    return std::ceil(plans[from].on_send(0, input, to).delay_ms);
  };
  const auto sim = simulate(*pol, s, c.pipeline.microbatches, cost);
  ASSERT_FALSE(sim.deadlock) << sim.diagnosis;

  ASSERT_EQ(out.result.steps.size(), 1u);
  const auto& step = out.result.steps[0];
  cost_model undelayed = cost;
  undelayed.message_delay = nullptr;
  const auto plain = simulate(*pol, s, c.pipeline.microbatches, undelayed);
  bool reordered = false;
  for (int r = 0; r < s; ++r) {
    std::vector<op_id> fired;
    for (const auto& e : step.stages[r].events) fired.push_back(e.op);
    EXPECT_EQ(to_string(fired), to_string(sim.order()[r])) << schedule << " stage " << r;
    reordered = reordered || fired != plain.order()[r];
  }
  // The delays bit: the step took more rounds than without them, and a
  // policy that reacts to arrivals fired in another order.
  EXPECT_GT(sim.makespan, plain.makespan) << schedule;
  if (dynamic) {
    EXPECT_TRUE(reordered) << schedule;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, SameBoard,
                         ::testing::Values(order_case{"gpipe", 4, 8, 3}, order_case{"1f1b", 4, 8, 5},
                                           order_case{"interleaved", 2, 4, 11}, order_case{"zb-h1", 3, 6, 2},
                                           order_case{"zb-v", 2, 4, 9}, order_case{"dualpipev", 2, 4, 6},
                                           order_case{"greedy", 4, 8, 1, 2, true}),
                         [](const auto& info) {
                           std::string n = info.param.schedule;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace actorpipe
