// The real actors, end to end: weights against a plain LibTorch loop,
// bitwise equality across schedules and runs, emergent op order against
// the canonical order, and the activation memory bound.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <tuple>

#include "actors/stage/stage_actor.hpp"
#include "actors/trainer.hpp"
#include "runtime/observe/metrics.hpp"
#include "runtime/schedule/canonical.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"
#include "runtime/util/seed.hpp"
#include "runtime/schedule/simulator.hpp"
#include "tests/actors/pipeline_fixtures.hpp"

namespace actorpipe {
namespace {

fault_spec nonfinite_fault(int stage, int64_t step, int microbatch, nonfinite_site where) {
  fault_spec f;
  f.kind = fault_kind::nonfinite;
  f.stage = stage;
  f.step = step;
  f.microbatch = microbatch;
  f.where = where;
  return f;
}

using case_t = std::tuple<std::string, int, int>;

std::string case_name(const ::testing::TestParamInfo<case_t>& info) {
  const auto& schedule = std::get<0>(info.param);
  return "S" + std::to_string(std::get<1>(info.param)) + "M" +
         std::to_string(std::get<2>(info.param)) + "_" +
         (schedule == "1f1b"    ? std::string("OneFOneB")
          : schedule == "zb-h1" ? std::string("ZbH1")
          : schedule == "zb-v"  ? std::string("ZbV")
                                : schedule);
}

class PipelineMatchesPlainLoop : public ::testing::TestWithParam<case_t> {};

TEST_P(PipelineMatchesPlainLoop, EveryParameterAfterFiveAdamStepsWithClipping) {
  auto [schedule, s, m] = GetParam();
  auto c = small_config(schedule, s, m);
  auto out = run_training(c);
  std::vector<double> ref_norms;
  auto ref = reference_weights(c, &ref_norms);
  ASSERT_EQ(out.weights.size(), ref.size());
  for (auto& [name, w] : out.weights) {
    ASSERT_TRUE(ref.count(name)) << name;
    auto& r = ref[name];
    double scale = r.abs().max().item<double>();
    double diff = (w - r).abs().max().item<double>();
    EXPECT_LE(diff, 1e-6 * scale) << name << " differs by " << diff << " (scale " << scale << ")";
  }
  // The global norm is the one torch computes, and clipping really engaged.
  ASSERT_EQ(out.result.steps.size(), ref_norms.size());
  bool clipped = false;
  for (size_t i = 0; i < ref_norms.size(); ++i) {
    EXPECT_NEAR(out.result.steps[i].grad_norm, ref_norms[i], 1e-6 * ref_norms[i]);
    clipped |= ref_norms[i] > c.train.clip_grad_norm;
  }
  EXPECT_TRUE(clipped) << "the test should exercise clipping";
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesAndShapes, PipelineMatchesPlainLoop,
    ::testing::Values(case_t{"naive", 1, 1}, case_t{"naive", 2, 1}, case_t{"naive", 4, 1},
                      case_t{"gpipe", 1, 1}, case_t{"gpipe", 2, 4}, case_t{"gpipe", 4, 8},
                      case_t{"gpipe", 4, 3}, case_t{"1f1b", 1, 1}, case_t{"1f1b", 2, 4},
                      case_t{"1f1b", 4, 8}, case_t{"1f1b", 4, 3}, case_t{"interleaved", 1, 2},
                      case_t{"interleaved", 2, 4}, case_t{"interleaved", 4, 8}, case_t{"zb-h1", 1, 1},
                      case_t{"zb-h1", 2, 4}, case_t{"zb-h1", 4, 8}, case_t{"zb-h1", 4, 3},
                      case_t{"zb-v", 1, 1}, case_t{"zb-v", 2, 4}, case_t{"zb-v", 4, 8},
                      case_t{"zb-v", 4, 3}, case_t{"dualpipev", 2, 4}, case_t{"dualpipev", 4, 8},
                      case_t{"greedy", 2, 4}, case_t{"greedy", 4, 8}, case_t{"greedy", 4, 3}),
    case_name);

TEST(Schedules, GpipeAndOneFOneBGiveBitwiseIdenticalWeights) {
  auto g = run_training(small_config("gpipe", 4, 8));
  auto f = run_training(small_config("1f1b", 4, 8));
  EXPECT_TRUE(bitwise_equal(g.weights, f.weights));
}

TEST(Schedules, GpipeAndOneFOneBGiveBitwiseIdenticalWeightsWithDropout) {
  auto g = run_training(small_config("gpipe", 4, 8, true));
  auto f = run_training(small_config("1f1b", 4, 8, true));
  EXPECT_TRUE(bitwise_equal(g.weights, f.weights));
  // Dropout really acts: without it the weights differ.
  auto plain = run_training(small_config("1f1b", 4, 8, false));
  EXPECT_FALSE(bitwise_equal(plain.weights, f.weights));
}

TEST(Schedules, TwoRunsWithTheSameSeedAreBitwiseIdentical) {
  auto a = run_training(small_config("1f1b", 4, 3, true));
  auto b = run_training(small_config("1f1b", 4, 3, true));
  EXPECT_TRUE(bitwise_equal(a.weights, b.weights));
  auto other = small_config("1f1b", 4, 3, true);
  other.train.seed = 8;
  EXPECT_FALSE(bitwise_equal(a.weights, run_training(other).weights));
}

class EmergentOrder : public ::testing::TestWithParam<case_t> {};

// On the lock-step test device every op takes one round, so the order that
// emerges from dependency firing is the uniform-cost order.
TEST_P(EmergentOrder, EqualsTheCanonicalOrderOnEveryStageAndStep) {
  auto [schedule, s, m] = GetParam();
  auto c = small_config(schedule, s, m);
  c.train.steps = 2;
  c.pipeline.lockstep = true;
  auto out = run_training(c);
  const int v = c.pipeline.virtual_stages;
  auto canon = canonical_order(schedule, s, c.pipeline.microbatches, v);
  auto simulated = simulate(schedule, s, c.pipeline.microbatches, {}, v).order();
  ASSERT_EQ(simulated, canon);  // the three views agree: simulator = canonical = actors
  for (const auto& step : out.result.steps) {
    ASSERT_EQ(step.stages.size(), static_cast<size_t>(s));
    for (int r = 0; r < s; ++r) {
      std::vector<op_id> fired;
      for (const auto& e : step.stages[r].events) fired.push_back(e.op);
      EXPECT_EQ(to_string(fired), to_string(canon[r]))
          << schedule << " step " << step.step << " stage " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesAndShapes, EmergentOrder,
    ::testing::Values(case_t{"naive", 4, 1}, case_t{"gpipe", 2, 4}, case_t{"gpipe", 4, 8},
                      case_t{"gpipe", 4, 3}, case_t{"1f1b", 2, 4}, case_t{"1f1b", 4, 8},
                      case_t{"1f1b", 4, 3}, case_t{"interleaved", 2, 4},
                      case_t{"interleaved", 4, 8}, case_t{"zb-h1", 2, 4}, case_t{"zb-h1", 4, 8},
                      case_t{"zb-h1", 4, 3}, case_t{"zb-v", 2, 4}, case_t{"zb-v", 4, 8},
                      case_t{"zb-v", 4, 3}, case_t{"dualpipev", 2, 4}, case_t{"dualpipev", 4, 8},
                      case_t{"dualpipev", 4, 16}),
    case_name);

TEST(Schedules, ZeroBubbleH1GivesWeightsBitwiseIdenticalToOneFOneB) {
  auto f = run_training(small_config("1f1b", 4, 8, true));
  auto z = run_training(small_config("zb-h1", 4, 8, true));
  EXPECT_TRUE(bitwise_equal(f.weights, z.weights));
}

// model.dtype: the weights are bfloat16 from the start (the inputs are cast
// at stage 0), every schedule still sums the same gradients bit for bit, and
// they stay within bfloat16's rounding of the float32 run (SGD: Adam would
// turn rounding noise in near-zero gradients into whole steps).
TEST(Dtype, BFloat16WeightsAreBitwiseEqualAcrossSchedulesAndCloseToFloat32) {
  auto g = small_config("gpipe", 4, 8);
  auto z = small_config("zb-h1", 4, 8);
  auto f32 = small_config("gpipe", 4, 8);
  for (auto* c : {&g, &z, &f32}) {
    c->train.optimizer.type = "sgd";
    c->train.optimizer.lr = 0.05;
  }
  g.model.dtype = z.model.dtype = "bfloat16";
  auto a = run_training(g);
  auto b = run_training(z);
  EXPECT_TRUE(bitwise_equal(a.weights, b.weights));
  auto ref = run_training(f32);
  ASSERT_EQ(a.weights.size(), ref.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].second.scalar_type(), at::kBFloat16) << a.weights[i].first;
    const auto& r = ref.weights[i].second;
    const double diff = (a.weights[i].second.to(at::kFloat) - r).abs().max().item<double>();
    EXPECT_LE(diff, 0.02 * r.abs().max().item<double>()) << a.weights[i].first;
  }
}

TEST(Schedules, ZeroBubbleVGivesWeightsBitwiseIdenticalToOneFOneB) {
  auto f = run_training(small_config("1f1b", 4, 8, true));
  auto z = run_training(small_config("zb-v", 4, 8, true));
  EXPECT_TRUE(bitwise_equal(f.weights, z.weights));
}

// DualPipeV: the V of zb-v, the reference's order with its overlapped F and
// B pairs, and W split off or not per backward; the sums still go in 1F1B's
// order, dropout masks included.
TEST(Schedules, DualPipeVGivesWeightsBitwiseIdenticalToOneFOneB) {
  auto f = run_training(small_config("1f1b", 4, 8, true));
  auto d = run_training(small_config("dualpipev", 4, 8, true));
  EXPECT_TRUE(bitwise_equal(f.weights, d.weights));
  auto d2 = run_training(small_config("dualpipev", 2, 4, true));
  auto f2 = run_training(small_config("1f1b", 2, 4, true));
  EXPECT_TRUE(bitwise_equal(f2.weights, d2.weights));
  // On a CPU a pair runs in turn, on no second stream.
  for (const auto& step : d.result.steps)
    for (const auto& st : step.stages) EXPECT_EQ(st.two_stream_pairs, 0u);
}

// Rank 0 holds the first and the last virtual stage (the V), and computes
// the loss: its second chunk runs the model's last layers.
TEST(Schedules, ZeroBubbleVPlacesChunksInAV) {
  auto out = run_training(small_config("zb-v", 4, 8));
  const auto& p = out.result.partition;
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(out.result.placement, placement_kind::v_shape);
  const placement plc{placement_kind::v_shape, 4, 2};
  EXPECT_EQ(plc.virtual_stage(0, 1), 7);
  EXPECT_EQ(plc.virtual_stage(3, 0), 3);
  EXPECT_EQ(plc.virtual_stage(3, 1), 4);
  // Stage 0's trace runs the last virtual stage's backward first: 7I0 = B0.1.
  const auto& ev = out.result.steps.front().stages[0].events;
  auto first_b = std::find_if(ev.begin(), ev.end(), [](const op_event& e) { return e.op.kind == op_kind::B; });
  ASSERT_NE(first_b, ev.end());
  EXPECT_EQ(first_b->op.chunk, 1);
}

// Greedy has no textbook order; on the lock-step device the actors' order
// is the simulator's, here with two chunks and a tight bound.
TEST(Schedules, GreedyActorsFireTheSimulatorsOrderAndMatchOneFOneBBitwise) {
  for (int bound : {0, 2}) {
    auto c = small_config("greedy", 4, 8, true);
    c.pipeline.virtual_stages = 2;
    c.pipeline.max_inflight = bound;
    c.pipeline.lockstep = true;
    c.train.steps = 2;
    auto out = run_training(c);
    auto sim = simulate("greedy", 4, 8, {}, 2, bound).order();
    for (const auto& step : out.result.steps)
      for (int r = 0; r < 4; ++r) {
        std::vector<op_id> fired;
        for (const auto& e : step.stages[r].events) fired.push_back(e.op);
        EXPECT_EQ(to_string(fired), to_string(sim[r])) << "bound " << bound << " stage " << r;
      }
    auto f = small_config("1f1b", 4, 8, true);
    f.train.steps = 2;
    EXPECT_TRUE(bitwise_equal(run_training(f).weights, out.weights)) << "bound " << bound;
  }
}

class AsyncPipeline : public ::testing::TestWithParam<std::pair<int, int>> {};

// No flush, stale by one: the weights equal PipeDream-2BW computed on one
// module, and the trace shows every op of step t on version t-1.
TEST_P(AsyncPipeline, MatchesTheTwoVersionReferenceAndIsNeverMoreThanOneStepStale) {
  auto [s, m] = GetParam();
  auto c = small_config("async", s, m);
  c.train.clip_grad_norm = 0.0;  // no global norm without a flush
  c.train.steps = 6;
  auto out = run_training(c);
  auto ref = reference_2bw_weights(c);
  ASSERT_EQ(out.weights.size(), ref.size());
  for (auto& [name, w] : out.weights) {
    auto& r = ref.at(name);
    double scale = r.abs().max().item<double>();
    EXPECT_LE((w - r).abs().max().item<double>(), 1e-6 * scale) << name;
  }
  // The synchronous answer is different: staleness really acts.
  auto sync = small_config("1f1b", s, m);
  sync.train.clip_grad_norm = 0.0;
  sync.train.steps = 6;
  EXPECT_GT((run_training(sync).weights[0].second - out.weights[0].second).abs().max().item<double>(), 1e-6);

  ASSERT_EQ(out.result.steps.size(), 6u);
  for (const auto& step : out.result.steps) {
    ASSERT_EQ(step.stages.size(), static_cast<size_t>(s));
    for (int r = 0; r < s; ++r) {
      const auto& st = step.stages[r];
      EXPECT_LE(st.peak_versions, 2) << "stage " << r;
      EXPECT_EQ(st.events.size(), static_cast<size_t>(2 * m)) << "every F and B of the step, on its stage";
      std::map<int, int> fwd_version;
      for (const auto& e : st.events) {
        EXPECT_GE(e.version, 0);
        EXPECT_LE(step.step - e.version, 1) << "staleness, step " << step.step << " stage " << r;
        EXPECT_EQ(e.version, std::max<int64_t>(step.step - 1, 0));
        if (e.op.kind == op_kind::F)
          fwd_version[e.op.mb] = e.version;
        else
          EXPECT_EQ(e.version, fwd_version.at(e.op.mb)) << "B uses its F's version";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AsyncPipeline,
                         ::testing::Values(std::pair<int, int>{1, 1}, std::pair<int, int>{2, 4},
                                           std::pair<int, int>{4, 8}, std::pair<int, int>{4, 4}));

// No flush: stage 0 starts step t+1's forwards before step t's last
// backward, which a synchronous schedule never does.
TEST(AsyncPipelineOverlap, NextStepsForwardsStartBeforeThisStepsLastBackward) {
  auto c = small_config("async", 4, 8);
  c.train.clip_grad_norm = 0.0;
  c.pipeline.pace_ms = 1.0;  // ops long enough that the order is the schedule's, not the mailbox's
  auto out = run_training(c);
  int overlaps = 0;
  for (size_t t = 0; t + 1 < out.result.steps.size(); ++t) {
    const auto& now = out.result.steps[t].stages[0].events;
    const auto& next = out.result.steps[t + 1].stages[0].events;
    int64_t last_b = 0, first_f = INT64_MAX;
    for (const auto& e : now)
      if (e.op.kind == op_kind::B) last_b = std::max(last_b, e.end_ns);
    for (const auto& e : next)
      if (e.op.kind == op_kind::F) first_f = std::min(first_f, e.start_ns);
    overlaps += first_f < last_b;
  }
  EXPECT_EQ(overlaps, static_cast<int>(out.result.steps.size()) - 1);
}

TEST(AsyncDigits, TrainsToAtLeastNinetyThreePercentHeldOut) {
  auto c = load_config(std::string(ACTORPIPE_SOURCE_DIR) + "/configs/schedules/async.yaml");
  c.pipeline.intra_op_threads = 1;
  auto out = run_training(c);
  EXPECT_GE(out.result.test_accuracy, 0.93);
  int max_stale = 0;
  for (const auto& step : out.result.steps)
    for (const auto& st : step.stages)
      for (const auto& e : st.events) max_stale = std::max<int>(max_stale, static_cast<int>(step.step - e.version));
  EXPECT_EQ(max_stale, 1);
}

TEST(Schedules, InterleavedGivesWeightsBitwiseIdenticalToOneFOneB) {
  auto f = run_training(small_config("1f1b", 4, 8, true));
  auto i = run_training(small_config("interleaved", 4, 8, true));
  EXPECT_TRUE(bitwise_equal(f.weights, i.weights));
}

// Exactly S and M on the lock-step device; free-running, a backward that
// comes back before stage 0's S-th forward (its thread descheduled on a
// busy machine) fires first, so S is the bound there, not the value.
TEST(ActivationMemory, StageZeroStashesSUnderOneFOneBAndMUnderGpipe) {
  const int s = 4, m = 8;
  for (const std::string schedule : {"1f1b", "gpipe"})
    for (bool lockstep : {true, false}) {
      auto c = small_config(schedule, s, m);
      c.pipeline.lockstep = lockstep;
      auto out = run_training(c);
      for (const auto& step : out.result.steps) {
        const int bound = schedule == "1f1b" ? s : m;
        if (lockstep)
          EXPECT_EQ(step.stages[0].peak_stash, bound) << schedule;
        else
          EXPECT_LE(step.stages[0].peak_stash, bound) << schedule;
      }
    }
}

// GPipe's re-materialisation: a recomputing stage stashes each forward's
// input alone and runs the forward again in B. The masks of dropout depend
// on (seed, step, microbatch, layer), so the weights stay bitwise the same.
TEST(Recompute, WeightsAreBitwiseIdenticalAndStashedBytesDropToTheInputs) {
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    auto plain = small_config(schedule, 4, 8, true);
    auto re = plain;
    re.pipeline.recompute.assign(4, true);
    auto a = run_training(plain), b = run_training(re);
    EXPECT_TRUE(bitwise_equal(a.weights, b.weights)) << schedule;
    if (schedule == "interleaved") continue;  // two chunks per stage: checked by the bitwise test only
    // Each stage's input: a [rows, width] float32 per stashed microbatch.
    const auto& layers = re.model.layers;
    for (int r = 0; r < 4; ++r) {
      const int first = b.result.partition[r].first;
      int64_t width = 0;
      for (int i = first; i >= 0 && width == 0; --i)
        if (layers[i].type == "linear") width = i == first ? layers[i].in : layers[i].out;
      const int64_t rows = re.train.batch_size / 8;
      for (size_t t = 0; t < b.result.steps.size(); ++t) {
        const auto& got = b.result.steps[t].stages[r];
        EXPECT_EQ(got.peak_stash_bytes, got.peak_stash * rows * width * 4) << schedule << " stage " << r;
        EXPECT_LT(got.peak_stash_bytes, a.result.steps[t].stages[r].peak_stash_bytes) << schedule << " stage " << r;
      }
    }
  }
}

TEST(Recompute, PerStageListRecomputesOnlyThoseStages) {
  auto plain = small_config("1f1b", 4, 8);
  // Lock-step: both runs fire the same order whatever the machine's load, so
  // the stages that do not recompute hold the same peaks.
  plain.pipeline.lockstep = true;
  auto re = plain;
  re.pipeline.recompute = {true, false, false, true};
  auto a = run_training(plain), b = run_training(re);
  EXPECT_TRUE(bitwise_equal(a.weights, b.weights));
  const auto& sa = a.result.steps.back().stages, &sb = b.result.steps.back().stages;
  EXPECT_LT(sb[0].peak_stash_bytes, sa[0].peak_stash_bytes);
  EXPECT_EQ(sb[1].peak_stash_bytes, sa[1].peak_stash_bytes);
  EXPECT_EQ(sb[2].peak_stash_bytes, sa[2].peak_stash_bytes);
  EXPECT_LT(sb[3].peak_stash_bytes, sa[3].peak_stash_bytes);
}

TEST(StepReport, LossIsTheBatchMeanCrossEntropy) {
  auto c = small_config("1f1b", 2, 4);
  c.train.steps = 1;
  auto out = run_training(c);
  // Step 0's loss with the initial weights, computed on one module.
  auto layers = build_layers(c);
  layer_stack net(std::move(layers));
  auto data = load_dataset(c);
  auto b = batch_for_step(data, c, 0);
  torch::NoGradGuard g;
  auto logits = net.forward(b.x, forward_ctx{c.train.seed, 0, 0, true}, nullptr);
  double expect = torch::nn::functional::cross_entropy(logits, b.y).item<double>();
  EXPECT_NEAR(out.result.steps[0].loss, expect, 1e-6);
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// A stage that never fires its backwards: nothing moves, and the watchdog
// stops the run within watchdog_s (plus a check period) naming the stuck ops.
TEST(Watchdog, AStageThatNeverFiresBackwardsStopsTheRunWithTheOpGrid) {
  auto c = small_config("1f1b", 2, 2);
  c.supervision.watchdog_s = 1.0;
  train_options opts;
  // Rank 1 runs its forwards and then nothing: its backwards are not in its order.
  opts.fixed_order = {{{op_kind::F, 0, 0}, {op_kind::F, 1, 0}, {op_kind::B, 0, 0}, {op_kind::B, 1, 0}},
                      {{op_kind::F, 0, 0}, {op_kind::F, 1, 0}}};
  const auto begin = std::chrono::steady_clock::now();
  try {
    run_training(c, opts);
    FAIL() << "the hang went unnoticed";
  } catch (const stuck_error& e) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_LT(took, c.supervision.watchdog_s + 2.0);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("watchdog: no op fired anywhere for 1 s; the op grid:\n", 0), 0u) << what;
    EXPECT_NE(what.find(">> stage 0 (step 0): fired [F0 F1]  ready, not chosen: []; B0 waits for its gradient from stage 1"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(">> stage 1 (step 0): fired [F0 F1]  ready, not chosen: [B0]  in order after them: [B1]"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// A NaN injected into one gradient of step 5: the global check sees it
// before the optimizer step, the step is skipped on every stage, and the
// run equals a fault-free one that drops step 5's update.
TEST(NonFinite, ANaNAtStepFiveSkipsThatStepAndNamesWhereItAppeared) {
  for (const std::string where : {"grad", "activation"}) {
    auto c = small_config("1f1b", 4, 8, true);
    c.train.steps = 8;
    const auto site = where == "grad" ? nonfinite_site::grad : nonfinite_site::activation;
    c.faults.inject.push_back(nonfinite_fault(1, 5, 2, site));
    auto out = run_training(c);
    std::vector<double> norms;
    // The reference: the same run without the fault, minus step 5's update
    // (no dropout, so the plain loop can be the reference).
    auto plain = small_config("1f1b", 4, 8, false);
    plain.train.steps = 8;
    auto want = reference_weights(plain, &norms, {5});
    auto mine = small_config("1f1b", 4, 8, false);
    mine.train.steps = 8;
    mine.faults.inject.push_back(nonfinite_fault(1, 5, 2, site));
    auto got = run_training(mine);
    ASSERT_EQ(got.result.skipped_steps, std::vector<int64_t>{5});
    for (auto& [name, w] : got.weights) {
      const auto& r = want.at(name);
      EXPECT_LE((w - r).abs().max().item<double>(), 1e-6 * r.abs().max().item<double>()) << where << " " << name;
    }
    ASSERT_EQ(got.result.notices.size(), 1u);
    EXPECT_EQ(got.result.notices[0], "step 5: non-finite value first seen on stage 1, microbatch 2, in a" +
                                         std::string(where == "grad" ? " gradient" : "n activation") +
                                         "; step skipped, weights and optimizer state unchanged");
    EXPECT_TRUE(got.result.steps[5].skipped);
    // With dropout too the step is skipped and every weight stays finite.
    ASSERT_EQ(out.result.skipped_steps, std::vector<int64_t>{5});
    for (auto& [name, w] : out.weights) EXPECT_TRUE(torch::isfinite(w).all().item<bool>()) << name;
  }
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// The step's training accuracy is what its forward saw: step 0 with the
// initial weights equals one module's forward on the same batch.
TEST(StepReport, TrainingAccuracyIsTheForwardsOnTheStepsBatch) {
  auto c = small_config("gpipe", 4, 8);
  c.train.steps = 1;
  auto out = run_training(c);
  auto net = reference_net(c);
  auto b = batch_for_step(load_dataset(c), c, 0);
  torch::NoGradGuard no_grad;
  const double want = net->forward(b.x).argmax(1).eq(b.y).sum().item<double>() / static_cast<double>(b.y.size(0));
  ASSERT_EQ(out.result.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(out.result.steps[0].train_accuracy, want);
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

fault_spec message_fault(fault_kind kind, double p, double ms = 0.0, int from = -1, int to = -1) {
  fault_spec f;
  f.kind = kind;
  f.probability = p;
  f.ms = ms;
  f.from = from;
  f.to = to;
  return f;
}

uint64_t injected_duplicates(const train_result& r) { return count_message_faults(r).sent_twice; }

// Duplicated and delayed messages change timing only: every duplicate is
// dropped and counted, and the weights are the clean run's, bit for bit.
TEST(MessageFaults, DuplicatesAndDelaysLeaveTheWeightsBitwiseEqualAndAreCounted) {
  for (const std::string schedule : {"1f1b", "zb-h1", "interleaved"}) {
    auto clean = small_config(schedule, 4, 8, true);
    auto faulty = clean;
    faulty.faults.seed = 11;
    faulty.faults.inject = {message_fault(fault_kind::duplicate, 0.05), message_fault(fault_kind::delay, 0.05, 2.0)};
    auto a = run_training(clean), b = run_training(faulty);
    EXPECT_TRUE(bitwise_equal(a.weights, b.weights)) << schedule;
    EXPECT_GT(injected_duplicates(b.result), 0u) << schedule;
    // Every duplicate that arrived before the run ended was dropped and
    // counted; one sent during the last step may land after it.
    EXPECT_GT(b.result.duplicates, 0u) << schedule;
    EXPECT_LE(b.result.duplicates, injected_duplicates(b.result)) << schedule;
    EXPECT_EQ(a.result.duplicates, 0u);
  }
}

// The same fault seed picks the same messages: the injected counts repeat.
TEST(MessageFaults, TheFaultSeedPicksTheSameMessagesEveryRun) {
  auto c = small_config("1f1b", 4, 8);
  c.faults.seed = 3;
  c.faults.inject = {message_fault(fault_kind::duplicate, 0.2)};
  auto a = run_training(c), b = run_training(c);
  ASSERT_EQ(a.result.steps.size(), b.result.steps.size());
  for (size_t t = 0; t < a.result.steps.size(); ++t)
    for (size_t r = 0; r < a.result.steps[t].stages.size(); ++r)
      EXPECT_EQ(a.result.steps[t].stages[r].injected_duplicates, b.result.steps[t].stages[r].injected_duplicates);
  c.faults.seed = 4;
  EXPECT_NE(injected_duplicates(run_training(c).result), injected_duplicates(a.result));
}

// A stage slowed 3x scores about 0.33 against the median stage.
TEST(Stragglers, AStageSlowedThreeTimesScoresAboutAThird) {
  auto c = small_config("1f1b", 4, 4);
  c.train.steps = 3;
  // Ops long enough that sleeping scales them, and that a loaded machine's
  // wake-up delays (added to every op alike) stay small beside them.
  c.pipeline.pace_ms = 10.0;
  fault_spec slow;
  slow.kind = fault_kind::slow_stage;
  slow.stage = 2;
  slow.factor = 3.0;
  c.faults.inject = {slow};
  auto speeds = stage_speeds(run_training(c).result);
  ASSERT_EQ(speeds.size(), 4u);
  EXPECT_NEAR(speeds[2], 1.0 / 3.0, 0.06);
  for (int r : {0, 1, 3}) EXPECT_NEAR(speeds[r], 1.0, 0.15) << r;
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// 20 seeded runs: a random stage dies right after a random op of a random
// step. Supervision restarts the pipeline from the last step boundary, and
// the final weights are the fault-free run's, bit for bit.
TEST(Supervision, AStageKilledAtARandomOpIsRestartedAndLosesNothing) {
  auto clean = small_config("1f1b", 4, 4, true);
  clean.train.steps = 4;
  clean.supervision.max_restarts = 3;
  const auto want = run_training(clean).weights;
  const auto canon = canonical_order("1f1b", 4, 4);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto kill = seeded_death(derive_seed(seed, {1}), seed % 4 == 0 ? fault_kind::throw_in_op : fault_kind::kill_stage, canon, 4);
    auto c = clean;
    c.faults.inject = {kill};
    auto out = run_training(c);
    EXPECT_EQ(out.result.restarts, 1) << describe_fault(kill);
    EXPECT_TRUE(bitwise_equal(want, out.weights)) << describe_fault(kill);
    EXPECT_EQ(out.result.steps.size(), 4u);
  }
}

// A restart starts a new generation of stage actors only after the old one
// is gone: at every step boundary exactly S stages are alive, and none once
// the run returned. (So no message of the old generation can arrive.)
TEST(Supervision, AfterARestartNoActorOfTheOldGenerationIsAlive) {
  auto c = small_config("1f1b", 4, 4);
  c.train.steps = 4;
  c.supervision.max_restarts = 2;
  fault_spec kill;
  kill.kind = fault_kind::kill_stage;
  kill.stage = 2;
  kill.step = 2;
  kill.op = "B1";
  c.faults.inject = {kill};
  std::vector<int> alive;
  train_options opts;
  opts.on_step = [&alive](const step_record&) { alive.push_back(live_stages()); };
  auto out = run_training(c, opts);
  EXPECT_EQ(out.result.restarts, 1);
  EXPECT_EQ(alive, std::vector<int>(alive.size(), 4));
  EXPECT_GE(alive.size(), 4u);  // steps 0, 1 (first generation), 2, 3 (second)
  EXPECT_EQ(live_stages(), 0);
}

// Deterministic simulation testing: with the lock-step device, the same
// config and fault seed give the same event trace (its hash) and the same
// weights, run after run, through duplicates, a NaN, a death and a throw;
// another fault seed picks other messages, and the trace says so.
TEST(Reproducibility, TheSameConfigAndFaultSeedGiveTheSameEventTrace) {
  auto c = small_config("1f1b", 4, 8, true);
  c.train.steps = 6;
  c.pipeline.lockstep = true;
  c.supervision.max_restarts = 3;
  c.faults.seed = 7;
  fault_spec dup, nan, kill, boom;
  dup.kind = fault_kind::duplicate;
  dup.probability = 0.1;
  nan.kind = fault_kind::nonfinite;
  nan.stage = 1;
  nan.step = 1;
  nan.microbatch = 3;
  kill.kind = fault_kind::kill_stage;
  kill.stage = 2;
  kill.step = 2;
  kill.op = "F5";
  boom.kind = fault_kind::throw_in_op;
  boom.stage = 1;
  boom.step = 4;
  boom.op = "B2";
  c.faults.inject = {dup, nan, kill, boom};
  auto a = run_training(c), b = run_training(c);
  EXPECT_EQ(a.result.restarts, 2);
  EXPECT_EQ(a.result.skipped_steps, std::vector<int64_t>{1});
  // Step 1's NaN was seen by the first attempt; the report still says where.
  bool named = false;
  for (const auto& n : a.result.notices) named = named || n.rfind("step 1: non-finite value first seen on stage 1", 0) == 0;
  EXPECT_TRUE(named);
  EXPECT_GT(count_message_faults(a.result).sent_twice, 0u);
  EXPECT_EQ(trace_hash(a.result, true), trace_hash(b.result, true));
  EXPECT_TRUE(bitwise_equal(a.weights, b.weights));
  auto other = c;
  other.faults.seed = 8;
  EXPECT_NE(trace_hash(run_training(other).result), trace_hash(a.result));
}

// Too many deaths within the window: the run gives up, saying what failed.
TEST(Supervision, RestartsBeyondTheLimitGiveUp) {
  auto c = small_config("1f1b", 2, 2);
  c.train.steps = 4;
  c.supervision.max_restarts = 1;
  c.supervision.window_steps = 10;
  fault_spec a, b;
  a.kind = b.kind = fault_kind::kill_stage;
  a.stage = 0, a.step = 1, a.op = "F0";
  b.stage = 1, b.step = 2, b.op = "B1";
  c.faults.inject = {a, b};
  try {
    run_training(c);
    FAIL() << "no give-up";
  } catch (const restart_limit_error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 stopped at step 2: exit_reason(kill); 2 restarts within 10 steps "
                                         "exceed supervision.max_restarts 1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// One dropped message: the receiver waits op_timeout, asks the sender again,
// gets it, and the weights are the clean run's, bit for bit.
TEST(MessageFaults, ADroppedMessageIsRequestedAgainAndNothingIsLost) {
  for (const char* op : {"F3", "B1"}) {
    auto clean = small_config("1f1b", 4, 8, true);
    auto c = clean;
    c.supervision.op_timeout_ms = 50;
    fault_spec drop;
    drop.kind = fault_kind::drop;
    drop.step = 2;
    drop.op = op;
    drop.from = op[0] == 'F' ? 1 : 2;
    drop.to = op[0] == 'F' ? 2 : 1;
    c.faults.inject = {drop};
    auto a = run_training(clean), b = run_training(c);
    EXPECT_TRUE(bitwise_equal(a.weights, b.weights)) << op;
    const auto faults = count_message_faults(b.result);
    EXPECT_EQ(faults.dropped, 1u) << op;
    EXPECT_GE(faults.asked_again, 1u) << op;
    EXPECT_GE(faults.resent, 1u) << op;
  }
}

}  // namespace
}  // namespace actorpipe
