// Data x pipeline parallelism: dp replicas of the pipeline, each stage's
// gradients summed over its replicas by Gloo, against one module trained on
// the whole global batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <tuple>

#include "actors/trainer.hpp"
#include "runtime/schedule/canonical.hpp"
#include "runtime/util/seed.hpp"
#include "tests/actors/pipeline_fixtures.hpp"

namespace actorpipe {
namespace {

using mesh = std::tuple<std::string, int, int, int>;  // schedule, dp, stages, batch

config hybrid_config(const mesh& m) {
  auto [schedule, dp, stages, batch] = m;
  auto c = small_config(schedule, stages, 4);
  c.parallel.dp = dp;
  c.train.batch_size = batch;
  // SGD with momentum: the replicas sum their shares in another order than
  // one module accumulating microbatches, and Adam divides those rounding
  // differences by sqrt(v), so near-zero gradients turn them into 1e-5-sized
  // weight differences; SGD keeps them at float32 rounding.
  c.train.optimizer.type = "sgd";
  c.train.optimizer.lr = 0.05;
  c.train.optimizer.momentum = 0.9;
  return c;
}

double worst_relative_difference(const named_params& got, const std::map<std::string, at::Tensor>& want) {
  double worst = 0.0;
  for (const auto& [name, w] : got) {
    const auto& r = want.at(name);
    worst = std::max(worst, (w - r).abs().max().item<double>() / r.abs().max().item<double>());
  }
  return worst;
}

class HybridMesh : public ::testing::TestWithParam<mesh> {};

TEST_P(HybridMesh, WeightsEqualOneDeviceOnTheGlobalBatchAndReplicasStayBitwiseEqual) {
  auto c = hybrid_config(GetParam());
  train_options opts;
  opts.verify_replicas = true;  // checksums compared after every step; a difference fails the run
  auto out = run_training(c, opts);
  std::vector<double> norms;
  auto ref = reference_weights(c, &norms);
  ASSERT_EQ(out.weights.size(), ref.size());
  const double worst = worst_relative_difference(out.weights, ref);
  std::printf("worst relative difference from one module: %.3g\n", worst);
  EXPECT_LE(worst, 1e-6);
  ASSERT_EQ(out.result.steps.size(), 5u);
  for (size_t i = 0; i < norms.size(); ++i)  // clipping used the global norm
    EXPECT_NEAR(out.result.steps[i].grad_norm, norms[i], 1e-6 * norms[i]);
  if (c.parallel.dp > 1) {
    EXPECT_TRUE(out.result.replicas_verified);
    EXPECT_EQ(out.result.allreduce, "gloo");
    for (const auto& step : out.result.steps) {
      ASSERT_EQ(step.stages.size(), static_cast<size_t>(c.parallel.dp * c.pipeline.stages));
      for (const auto& st : step.stages) EXPECT_GT(st.allreduce_end_ns, st.allreduce_start_ns);
      EXPECT_GT(step.allreduce_s, 0.0);
    }
  }
}

std::string mesh_name(const ::testing::TestParamInfo<mesh>& info) {
  auto [schedule, dp, stages, batch] = info.param;
  return "dp" + std::to_string(dp) + "_pp" + std::to_string(stages) + "_batch" + std::to_string(batch) + "_" +
         (schedule == "1f1b" ? std::string("OneFOneB") : schedule);
}

INSTANTIATE_TEST_SUITE_P(Meshes, HybridMesh,
                         ::testing::Values(mesh{"gpipe", 2, 2, 32}, mesh{"1f1b", 2, 2, 32}, mesh{"gpipe", 2, 1, 32},
                                           mesh{"1f1b", 2, 1, 32}, mesh{"gpipe", 1, 4, 32}, mesh{"1f1b", 1, 4, 32},
                                           mesh{"gpipe", 3, 2, 32}, mesh{"1f1b", 3, 2, 32}),
                         mesh_name);

// The allreduce is what keeps replicas equal: one replica that adds zeros
// and keeps its own gradient makes the checksums differ at once, and
// replica 0 (half the batch) misses the reference.
TEST(HybridAllreduce, AReplicaThatSkipsItsAllreduceIsCaught) {
  auto c = hybrid_config(mesh{"1f1b", 2, 2, 32});
  train_options opts;
  opts.skip_allreduce_replica = 1;
  opts.verify_replicas = true;
  try {
    run_training(c, opts);
    FAIL() << "diverged replicas went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("replicas diverged after step 0: stage 0 of replica 1 differs from replica 0"),
              std::string::npos)
        << e.what();
  }
  opts.verify_replicas = false;
  auto out = run_training(c, opts);
  std::vector<double> norms;
  EXPECT_GT(worst_relative_difference(out.weights, reference_weights(c, &norms)), 1e-3)
      << "replica 0 alone sees half the batch";
}

TEST(HybridAllreduce, EveryReplicaGetsItsShareOfTheBatchInRankOrder) {
  // dp = 3 over 32 samples: 11, 11 and 10, each cut into 4 microbatches.
  auto c = hybrid_config(mesh{"gpipe", 3, 2, 32});
  auto out = run_training(c);
  const auto& step = out.result.steps.front();
  for (int d = 0; d < 3; ++d) {
    int forwards = 0;
    for (const auto& e : step.stages[d * 2].events) forwards += e.op.kind == op_kind::F;
    EXPECT_EQ(forwards, 4) << "replica " << d;
  }
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// A dp=2 x pp=2 mesh run of 6 steps, checkpointed every 2 into a fresh
// directory `name` (after steps 1, 3 and 5), replicas verified.
struct checkpointed_mesh {
  config c;
  train_options opts;
  std::filesystem::path dir;
  train_output full;
};

checkpointed_mesh run_checkpointed_mesh(const std::string& name) {
  checkpointed_mesh m;
  m.c = hybrid_config(mesh{"1f1b", 2, 2, 32});
  m.c.train.steps = 6;
  m.dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(m.dir);
  m.c.checkpoint.dir = m.dir.string();
  m.c.checkpoint.every = 2;
  m.opts.verify_replicas = true;
  m.full = run_training(m.c, m.opts);
  return m;
}

// Checkpoints of a dp=2 x pp=2 mesh: resuming from one ends bitwise on the
// uninterrupted run's weights.
TEST(HybridCheckpoint, ResumingTheMeshFromACheckpointIsBitwiseUninterrupted) {
  auto [c, opts, dir, full] = run_checkpointed_mesh("actorpipe_hybrid_ckpt");
  ASSERT_EQ(full.result.checkpoints.size(), 3u);  // after steps 1, 3 and 5
  std::filesystem::remove(dir / "step_00000006.pt");
  std::filesystem::remove(dir / "step_00000004.pt");
  opts.resume_dir = dir.string();
  auto resumed = run_training(c, opts);
  EXPECT_EQ(resumed.result.resumed_from, 1);
  EXPECT_EQ(resumed.result.steps.size(), 4u);
  EXPECT_TRUE(resumed.result.replicas_verified);
  ASSERT_EQ(full.weights.size(), resumed.weights.size());
  for (size_t i = 0; i < full.weights.size(); ++i)
    EXPECT_TRUE(torch::equal(full.weights[i].second, resumed.weights[i].second)) << full.weights[i].first;
}

// Supervision under the mesh: a random stage of a random replica dies (or
// throws) at a random op. Its peers may already wait in their allreduce;
// the torn-down attempt calls that off, every replica restarts from the
// last step boundary, and the weights are the fault-free mesh's, bit for bit.
TEST(HybridSupervision, AStageOfOneReplicaKilledAtARandomOpIsRestartedAndLosesNothing) {
  auto clean = hybrid_config(mesh{"1f1b", 2, 2, 32});
  clean.train.steps = 4;
  clean.supervision.max_restarts = 3;
  train_options opts;
  opts.verify_replicas = true;
  const auto want = run_training(clean, opts).weights;
  const auto canon = canonical_order("1f1b", 2, 4);
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const auto kill = seeded_death(derive_seed(seed, {2}), seed % 3 == 0 ? fault_kind::throw_in_op : fault_kind::kill_stage, canon, 4, 2);
    auto c = clean;
    c.faults.inject = {kill};
    auto out = run_training(c, opts);
    const std::string what = describe_fault(kill);
    EXPECT_EQ(out.result.restarts, 1) << what;
    EXPECT_TRUE(out.result.replicas_verified) << what;
    EXPECT_TRUE(bitwise_equal(want, out.weights)) << what;
    EXPECT_EQ(out.result.steps.size(), 4u) << what;
  }
}

// Messages under the mesh: 5 % duplicates, 5 % delays and one dropped
// message, in both replicas; nothing is applied twice or lost.
TEST(HybridMessageFaults, DuplicatesDelaysAndADropLeaveTheWeightsBitwiseEqual) {
  auto clean = hybrid_config(mesh{"1f1b", 2, 2, 32});
  clean.train.steps = 8;
  train_options opts;
  opts.verify_replicas = true;
  const auto want = run_training(clean, opts).weights;
  auto c = clean;
  c.faults.seed = 11;
  c.supervision.op_timeout_ms = 50;
  fault_spec dup, delay, drop;
  dup.kind = fault_kind::duplicate;
  dup.probability = 0.05;
  delay.kind = fault_kind::delay;
  delay.probability = 0.05;
  delay.ms = 5;
  drop.kind = fault_kind::drop;
  drop.step = 2;
  drop.from = 0;
  drop.to = 1;
  drop.op = "F1";
  c.faults.inject = {dup, delay, drop};
  auto out = run_training(c, opts);
  EXPECT_TRUE(bitwise_equal(want, out.weights));
  EXPECT_TRUE(out.result.replicas_verified);
  const auto counts = count_message_faults(out.result);
  EXPECT_GT(counts.sent_twice, 0u);
  EXPECT_GT(counts.held_back, 0u);
  EXPECT_GT(out.result.duplicates, 0u);  // dropped on arrival, and counted
  EXPECT_EQ(counts.dropped, 2u);         // the F1 of step 2, in each replica
  EXPECT_GE(counts.resent, 2u);          // and each sent again on request
}

// A NaN in one replica's gradient: the summed gradient is non-finite in
// both, the step is skipped everywhere, and the mesh ends where a clean mesh
// that skips that step's update ends.
TEST(HybridNonFinite, ANaNInOneReplicaSkipsTheStepEverywhere) {
  auto clean = hybrid_config(mesh{"1f1b", 2, 2, 32});
  clean.train.steps = 4;
  train_options opts;
  opts.verify_replicas = true;
  auto skipping = opts;
  skipping.skip_steps = {2};
  const auto want = run_training(clean, skipping).weights;
  auto c = clean;
  fault_spec nan;
  nan.kind = fault_kind::nonfinite;
  nan.replica = 1;
  nan.stage = 1;
  nan.step = 2;
  nan.microbatch = 1;
  nan.where = nonfinite_site::grad;
  c.faults.inject = {nan};
  auto out = run_training(c, opts);
  EXPECT_EQ(out.result.skipped_steps, std::vector<int64_t>{2});
  EXPECT_TRUE(out.result.replicas_verified);
  EXPECT_TRUE(bitwise_equal(want, out.weights));
}

// A torn newest checkpoint under the mesh: named, skipped, and the one
// before it resumes every replica to the uninterrupted weights.
TEST(HybridCheckpoint, ATornNewestCheckpointFallsBackToTheOneBefore) {
  auto [c, opts, dir, full] = run_checkpointed_mesh("actorpipe_hybrid_torn");
  ASSERT_EQ(full.result.checkpoints.size(), 3u);  // after steps 1, 3 and 5
  const auto torn = dir / "step_00000006.pt";
  std::filesystem::resize_file(torn, std::filesystem::file_size(torn) / 2);
  std::vector<std::string> notices;
  opts.resume_dir = dir.string();
  opts.on_notice = [&notices](const std::string& n) { notices.push_back(n); };
  auto resumed = run_training(c, opts);
  EXPECT_EQ(resumed.result.resumed_from, 3);
  EXPECT_TRUE(resumed.result.replicas_verified);
  bool named = false;
  for (const auto& n : notices) named = named || n.find(torn.string()) != std::string::npos;
  EXPECT_TRUE(named) << "no notice names " << torn;
  EXPECT_TRUE(bitwise_equal(full.weights, resumed.weights));
}

// A policy that never fires stage 1's backwards, in both replicas: the
// watchdog stops the mesh with the op grid of every replica.
TEST(HybridWatchdog, AStageThatNeverFiresBackwardsStopsTheMesh) {
  auto c = hybrid_config(mesh{"1f1b", 2, 2, 32});
  c.supervision.watchdog_s = 1.0;
  train_options opts;
  opts.fixed_order = {{{op_kind::F, 0, 0}, {op_kind::F, 1, 0}, {op_kind::F, 2, 0}, {op_kind::F, 3, 0},
                       {op_kind::B, 0, 0}, {op_kind::B, 1, 0}, {op_kind::B, 2, 0}, {op_kind::B, 3, 0}},
                      {{op_kind::F, 0, 0}, {op_kind::F, 1, 0}, {op_kind::F, 2, 0}, {op_kind::F, 3, 0}}};
  try {
    run_training(c, opts);
    FAIL() << "the hang went unnoticed";
  } catch (const stuck_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("watchdog: no op fired anywhere for 1 s; the op grid:\n", 0), 0u) << what;
    EXPECT_NE(what.find(">> replica 0 stage 1 (step 0): fired [F0 F1 F2 F3]"), std::string::npos) << what;
    EXPECT_NE(what.find(">> replica 1 stage 1 (step 0): fired [F0 F1 F2 F3]"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace actorpipe
