// The driver's end when a stage is lost before the run was asked for (the
// supervisor still wiring the stages): no promise waits yet, so the run's
// error leaves as the driver's exit reason, which the supervisor reads as
// it would the answer. (Before, the driver quit with no reason, and the
// supervisor failed the generation with "the driver stopped: none".)
#include "actors/driver/driver_actor.hpp"

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "messages/errors.hpp"

namespace actorpipe {
namespace {

caf::behavior idle_stage() {
  return {[](int) {}};
}

TEST(DriverActor, AStageLostBeforeTheRunIsAskedForIsTheDriversExitReason) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor watcher{sys};
  driver_setup setup;
  setup.cfg.pipeline.stages = 2;
  setup.stages = {sys.spawn(idle_stage), sys.spawn(idle_stage)};
  setup.plc.stages = 2;
  auto driver = spawn_driver(sys, setup);
  watcher->monitor(driver);
  caf::anon_send_exit(setup.stages[1], caf::exit_reason::kill);
  std::optional<caf::error> reason;
  watcher->receive([&](caf::down_msg& dm) { reason = dm.reason; },
                   caf::after(std::chrono::seconds(10)) >> [] {});
  ASSERT_TRUE(reason.has_value()) << "the driver did not end";
  run_failure f;
  ASSERT_TRUE(read_failure(*reason, f)) << "its exit reason is not the run's error: " << sys.render(*reason);
  EXPECT_EQ(f.code, run_errc::stage_died);
  EXPECT_EQ(f.stage, 1);
  EXPECT_EQ(f.text, "stage 1 stopped at step 0: exit_reason(kill)");
  caf::anon_send_exit(setup.stages[0], caf::exit_reason::kill);
}

}  // namespace
}  // namespace actorpipe
