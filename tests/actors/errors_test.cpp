// Errors as values: the exit code of each run error, the error category's
// round trip through caf::error, what the driver makes of a stage going
// down, and supervision's restart decision, taken from the code alone.
#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>

#include <chrono>

#include "actors/driver/driver_logic.hpp"
#include "actors/attempt/restart_ledger.hpp"
#include "actors/trainer.hpp"
#include "messages/errors.hpp"

namespace actorpipe {
namespace {

// docs/EXIT_CODES.md: 0 done, 1 the run failed, 2 bad config or
// arguments, 3 a hang or a deadlocking order, 4 more restarts than allowed.
TEST(ExitCodes, EveryRunErrorMapsToTheDocumentedCode) {
  static_assert(exit_code_for(run_errc::hang) == 3, "usable in constant expressions");
  EXPECT_EQ(exit_code_for(run_errc::none), 0);
  EXPECT_EQ(exit_code_for(run_errc::stage_died), 1);
  EXPECT_EQ(exit_code_for(run_errc::op_threw), 1);
  EXPECT_EQ(exit_code_for(run_errc::nonfinite_stop), 1);
  EXPECT_EQ(exit_code_for(run_errc::checkpoint_write), 1);
  EXPECT_EQ(exit_code_for(run_errc::replicas_diverged), 1);
  EXPECT_EQ(exit_code_for(run_errc::failed), 1);
  EXPECT_EQ(exit_code_for(run_errc::bad_config), 2);
  EXPECT_EQ(exit_code_for(run_errc::hang), 3);
  EXPECT_EQ(exit_code_for(run_errc::coordinator_lost), 5);
  EXPECT_EQ(exit_code_for(run_errc::deadlock), 3);
  EXPECT_EQ(exit_code_for(run_errc::restart_limit), 4);
}

TEST(ExitCodes, TheLinePrintedIsTheOneTheCommandLinePrintsToday) {
  EXPECT_EQ(failure_line(run_errc::hang, "watchdog: no op fired anywhere for 1 s; the op grid:\n>> stage 0\n"),
            "actorpipe: watchdog: no op fired anywhere for 1 s; the op grid:\n>> stage 0\n");
  EXPECT_EQ(failure_line(run_errc::restart_limit, "stage 2 stopped at step 2: x"),
            "actorpipe: gave up: stage 2 stopped at step 2: x\n");
  EXPECT_EQ(failure_line(run_errc::checkpoint_write, "the checkpoint after step 1 could not be written"),
            "actorpipe: error: the checkpoint after step 1 could not be written\n");
}

TEST(RunErrors, TravelInACafErrorWithTheirContext) {
  run_failure f{run_errc::stage_died, 3, 1, 2, "replica 1 stage 2 stopped at step 3: exit_reason(kill)"};
  caf::error err = to_error(f);
  EXPECT_EQ(err.category(), caf::atom("actorpipe"));
  EXPECT_EQ(err.category(), error_category<run_errc>::value);
  EXPECT_EQ(err.code(), static_cast<uint8_t>(run_errc::stage_died));
  run_failure back;
  ASSERT_TRUE(read_failure(err, back));
  EXPECT_EQ(back.code, run_errc::stage_died);
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(back.replica, 1);
  EXPECT_EQ(back.stage, 2);
  EXPECT_EQ(back.text, f.text);
  EXPECT_EQ(render_run_error(err.code(), err.category(), err.context()), f.text);
  {
    caf::actor_system_config cfg;
    add_run_error_category(cfg);
    caf::actor_system sys{cfg};
    EXPECT_EQ(sys.render(err), f.text);
  }
  // Implicit construction the CAF way, and an error of another category.
  caf::error bare = run_errc::hang;
  ASSERT_TRUE(read_failure(bare, back));
  EXPECT_EQ(back.code, run_errc::hang);
  EXPECT_EQ(back.step, -1);
  run_failure untouched;
  EXPECT_FALSE(read_failure(caf::make_error(caf::sec::runtime_error, "stage: boom"), untouched));
  EXPECT_FALSE(read_failure(caf::error{}, untouched));
  EXPECT_EQ(untouched.code, run_errc::failed);
}

TEST(RunErrors, AKilledStageDiedAndAThrowingOneThrew) {
  auto killed = stage_down(2, 3, 1, 3, caf::make_error(caf::exit_reason::kill), "exit_reason(kill)");
  EXPECT_EQ(killed.code, run_errc::stage_died);
  EXPECT_EQ(killed.step, 3);
  EXPECT_EQ(killed.stage, 2);
  EXPECT_EQ(killed.replica, -1);
  EXPECT_EQ(killed.text, "stage 2 stopped at step 3: exit_reason(kill)");
  // Replica 1, rank 0 of a 2 x 3 mesh is index 3.
  auto threw = stage_down(3, 3, 2, 1, caf::make_error(caf::sec::runtime_error, "stage: injected"), "R");
  EXPECT_EQ(threw.code, run_errc::op_threw);
  EXPECT_EQ(threw.replica, 1);
  EXPECT_EQ(threw.stage, 0);
  EXPECT_EQ(threw.text, "replica 1 stage 0 stopped at step 1: R");
  EXPECT_TRUE(restartable(killed.code));
  EXPECT_TRUE(restartable(threw.code));
}

TEST(RunErrors, ThrownAsTheTypeTheirCodeCallsFor) {
  EXPECT_THROW(throw_run_error({run_errc::hang, 0, -1, -1, "watchdog: x"}), stuck_error);
  EXPECT_THROW(throw_run_error({run_errc::restart_limit, 2, -1, 1, "gave up"}), restart_limit_error);
  try {
    throw_run_error({run_errc::checkpoint_write, 4, -1, -1, "the checkpoint after step 4 could not be written"});
    FAIL() << "nothing thrown";
  } catch (const stuck_error&) {
    FAIL() << "a write failure is no hang";
  } catch (const restart_limit_error&) {
    FAIL() << "a write failure is no give-up";
  } catch (const run_error& e) {
    EXPECT_EQ(e.code(), run_errc::checkpoint_write);
    EXPECT_EQ(e.failure().step, 4);
    EXPECT_STREQ(e.what(), "the checkpoint after step 4 could not be written");
  }
}

config supervised(int max_restarts, int window_steps) {
  config c;
  c.supervision.max_restarts = max_restarts;
  c.supervision.window_steps = window_steps;
  return c;
}

fault_spec fault(fault_kind kind, int64_t step) {
  fault_spec f;
  f.kind = kind;
  f.step = step;
  return f;
}

// A stage that died at step 3 with the boundary after step 2 kept: retry
// from there, without the faults that ended a stage up to step 3.
TEST(RestartDecision, AStageThatDiedIsRetriedFromTheLastGoodBoundary) {
  auto c = supervised(1, 10);
  c.faults.inject = {fault(fault_kind::kill_stage, 3), fault(fault_kind::throw_in_op, 2),
                     fault(fault_kind::kill_stage, 5), fault(fault_kind::nonfinite, 1)};
  restart_ledger ledger;
  auto d = ledger.decide({run_errc::stage_died, 3, -1, 1, "stage 1 stopped at step 3: exit_reason(kill)"}, c, 2);
  ASSERT_TRUE(d.retry);
  EXPECT_EQ(d.resume_after, 2);
  EXPECT_EQ(ledger.count(), 1);
  ASSERT_EQ(d.faults.size(), 2u);
  EXPECT_EQ(d.faults[0].kind, fault_kind::kill_stage);
  EXPECT_EQ(d.faults[0].step, 5);
  EXPECT_EQ(d.faults[1].kind, fault_kind::nonfinite);
  EXPECT_EQ(restart_notice(ledger.count(), d.failure, d.resume_after, 0.0123),
            "restart 1: stage 1 stopped at step 3: exit_reason(kill); rolled back to after step 2 and re-ran "
            "from step 3 (12.3 ms of work lost)");
}

TEST(RestartDecision, AnOpThatThrewIsRetriedToo) {
  restart_ledger ledger;
  auto d = ledger.decide({run_errc::op_threw, 0, -1, 0, "stage 0 stopped at step 0: x"}, supervised(2, 10), -1);
  ASSERT_TRUE(d.retry);
  EXPECT_EQ(d.resume_after, -1);  // no boundary yet: from the start
}

// The second death within the window exceeds max_restarts 1: give up,
// saying what failed; the code is restart_limit (exit 4).
TEST(RestartDecision, TooManyRestartsWithinTheWindowGiveUp) {
  auto c = supervised(1, 10);
  restart_ledger ledger;
  ASSERT_TRUE(ledger.decide({run_errc::stage_died, 1, -1, 0, "stage 0 stopped at step 1: k"}, c, 0).retry);
  auto d = ledger.decide({run_errc::stage_died, 2, -1, 1, "stage 1 stopped at step 2: exit_reason(kill)"}, c, 1);
  EXPECT_FALSE(d.retry);
  EXPECT_EQ(d.failure.code, run_errc::restart_limit);
  EXPECT_EQ(d.failure.step, 2);
  EXPECT_EQ(d.failure.stage, 1);
  EXPECT_EQ(d.failure.text,
            "stage 1 stopped at step 2: exit_reason(kill); 2 restarts within 10 steps exceed supervision.max_restarts 1");
  EXPECT_EQ(exit_code_for(d.failure.code), 4);
  EXPECT_EQ(ledger.count(), 1);
  c.checkpoint.every = 2;
  c.checkpoint.dir = "ckpt/";
  d = ledger.decide({run_errc::stage_died, 2, -1, 1, "x"}, c, 1);
  EXPECT_EQ(d.failure.text,
            "x; 2 restarts within 10 steps exceed supervision.max_restarts 1; the last good checkpoint is in ckpt/");
}

TEST(RestartDecision, DeathsFartherApartThanTheWindowAreEachRetried) {
  auto c = supervised(1, 2);
  restart_ledger ledger;
  EXPECT_TRUE(ledger.decide({run_errc::stage_died, 1, -1, 0, "a"}, c, 0).retry);
  EXPECT_TRUE(ledger.decide({run_errc::stage_died, 3, -1, 0, "b"}, c, 2).retry);
  EXPECT_FALSE(ledger.decide({run_errc::stage_died, 4, -1, 0, "c"}, c, 3).retry);
}

TEST(RestartDecision, OtherFailuresEndTheRunAsTheyCame) {
  auto c = supervised(5, 10);
  for (auto code : {run_errc::hang, run_errc::restart_limit, run_errc::nonfinite_stop, run_errc::checkpoint_write,
                    run_errc::replicas_diverged, run_errc::failed}) {
    restart_ledger ledger;
    auto d = ledger.decide({code, 2, -1, -1, "why"}, c, 1);
    EXPECT_FALSE(d.retry) << to_string(code);
    EXPECT_EQ(d.failure.code, code) << to_string(code);
    EXPECT_EQ(d.failure.text, "why");
    EXPECT_EQ(ledger.count(), 0);
  }
}

TEST(DriverLogic, DivergedReplicasAreNamed) {
  EXPECT_EQ(replica_divergence({7, 8, 7, 8}, 2, 0).code, run_errc::none);
  auto f = replica_divergence({7, 8, 7, 9}, 2, 4);
  EXPECT_EQ(f.code, run_errc::replicas_diverged);
  EXPECT_EQ(f.replica, 1);
  EXPECT_EQ(f.stage, 1);
  EXPECT_EQ(f.text, "replicas diverged after step 4: stage 1 of replica 1 differs from replica 0 (weight checksums 9 and 8)");
}

TEST(DriverLogic, TheWatchdogCallsAHangOnlyAfterTheLimitWithoutProgress) {
  using namespace std::chrono_literals;
  watchdog_ledger w;
  const auto t0 = driver_clock::now();
  w.progress_at = t0;
  std::vector<stage_status> rows(2);
  std::vector<char> answered(2, 1);
  rows[0].fired = 3;
  EXPECT_FALSE(w.hung(rows, answered, t0 + 100ms, 1.0));  // progress: 0 -> 3
  EXPECT_FALSE(w.hung(rows, answered, t0 + 900ms, 1.0));  // none, but 0.8 s since
  EXPECT_TRUE(w.hung(rows, answered, t0 + 1100ms, 1.0));
  rows[1].fired = 1;
  answered[1] = 0;  // a count that moved without every stage answering is no progress
  EXPECT_TRUE(w.hung(rows, answered, t0 + 1200ms, 1.0));
  rows[0].done = true;
  rows[0].grid = "stage 0 (step 0): fired [F0]";
  EXPECT_EQ(op_grid(1.0, rows, answered, 1),
            "watchdog: no op fired anywhere for 1 s; the op grid:\n"
            "   stage 0 (step 0): fired [F0]\n"
            ">> stage 1: does not answer (blocked inside an op)\n");
  EXPECT_EQ(hang_failure(0, "g").code, run_errc::hang);
}

TEST(DriverLogic, CheckpointsAreDueEveryNStepsAtTheEndAndOnAStop) {
  config c;
  c.train.steps = 7;
  c.checkpoint.every = 3;
  EXPECT_FALSE(checkpoint_due(c, 2, false));
  EXPECT_TRUE(checkpoint_due(c, 3, false));
  EXPECT_TRUE(checkpoint_due(c, 7, false));
  EXPECT_TRUE(checkpoint_due(c, 5, true));
  c.checkpoint.every = 0;
  EXPECT_FALSE(checkpoint_due(c, 3, true));
}

}  // namespace
}  // namespace actorpipe
