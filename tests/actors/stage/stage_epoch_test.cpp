// One stage actor driven by hand: a message of another epoch is dropped and
// counted; a message of a step the stage has not begun waits for the
// driver's close of the step before (after its apply), then runs.
#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <torch/torch.h>

#include "actors/stage/stage_actor.hpp"
#include "messages/atoms.hpp"
#include "messages/payloads.hpp"
#include "runtime/schedule/policy.hpp"

namespace actorpipe {
namespace {

stage_setup one_stage(uint32_t epoch) {
  stage_setup st;
  st.rank = 0;
  st.stages = 1;
  st.microbatches = 1;
  st.steps = 2;
  st.device = "null";
  st.devices = {"null"};
  st.work = stage_setup::work_kind::none;
  st.shared_thread = true;
  st.pol = make_policy("gpipe");
  layer_spec lin;
  lin.type = "linear";
  lin.in = 2;
  lin.out = 2;
  std::vector<layer> ls;
  ls.emplace_back(0, lin);
  st.layers = {std::make_shared<layer_stack>(std::move(ls))};
  st.optimizer.type = "sgd";
  st.optimizer.lr = 0.1;
  st.origin = std::chrono::steady_clock::now();
  st.epoch = epoch;
  return st;
}

activation_msg input(uint32_t epoch, int64_t step) {
  return activation_msg{{epoch, step, 0, 0, 0}, at::empty({0}), at::empty({0}), nullptr};
}

TEST(StageEpoch, AMessageOfAnotherEpochIsDroppedAndCountedAndALaterStepWaitsForTheClose) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor driver{sys};
  auto stage = spawn_stage(sys, one_stage(7));
  driver->request(stage, caf::infinite, wire_atom::value, std::vector<caf::actor>{stage}, caf::actor{driver})
      .receive([] {}, [](caf::error& e) { FAIL() << to_string(e); });
  driver->send(stage, fwd_atom::value, input(6, 0));  // an earlier attempt's
  driver->send(stage, fwd_atom::value, input(8, 0));  // a later one's
  driver->send(stage, fwd_atom::value, input(7, 0));
  driver->send(stage, fwd_atom::value, input(7, 1));  // step 1 before step 0's apply: waits
  grads_report first;
  driver->receive([&](grads_atom, grads_report& r) { first = std::move(r); });
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(first.stats.stale_epochs, 2u);
  EXPECT_EQ(first.stats.duplicates, 0u);
  ASSERT_EQ(first.stats.events.size(), 2u);  // F0 B0 of step 0 only

  apply_msg m;
  m.step = 0;
  m.lr = 0.1;
  driver->send(stage, apply_atom::value, m);
  driver->receive([](applied_atom, int, int64_t step, uint64_t, int64_t, int64_t, const std::string& nonfinite) {
    EXPECT_EQ(step, 0);
    EXPECT_EQ(nonfinite, "");
  });
  // Applied but not closed: step 1 still waits.
  bool early = false;
  driver->receive([&](grads_atom, grads_report&) { early = true; },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
  EXPECT_FALSE(early) << "step 1 ran before the driver closed step 0";
  driver->send(stage, close_atom::value, int64_t{0}, false);
  grads_report second;
  driver->receive([&](grads_atom, grads_report& r) { second = std::move(r); });
  EXPECT_EQ(second.step, 1);
  EXPECT_EQ(second.stats.stale_epochs, 0u);
  EXPECT_EQ(second.stats.events.size(), 2u);
  driver->send_exit(stage, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace actorpipe
