// The training loop's features through the real binary, each against an
// outcome computed another way: the plain-PyTorch reference
// (tests/reference/gpt_train.py), the same run without the feature, or the
// same run under another schedule or process layout.
//
// A small GPT (embedding, 2 blocks, layernorm, lm_head; 3 stages, 4
// microbatches, clip_grad_norm 0.5 that triggers) starts from the weights the
// reference writes and trains with
// - AdamW (decay_1d on and off, a tied and an untied head) under cosine,
//   linear and constant lr schedules with warmup: within 1e-5 of the
//   reference, every key; gpipe and launch --nprocs 3 bitwise as 1F1B;
// - a run stopped in the middle of its warmup and resumed from its
//   checkpoint: the bytes of the uninterrupted run;
// - eval.every (and eval.batches): the held-out loss after the expected
//   updates, within 1e-5 of the reference's, and not one weight bit changed,
//   in one process, over 3 processes and under async;
// - --tensorboard: one event file whose every record passes both crcs, whose
//   scalars are the --results figures, and which a cut reads up to its last
//   whole record;
// - model.mixed_precision bfloat16: near the reference's bfloat16 training
//   (the tolerance measured, see kMixedTolerance), float32 on disk, and
//   bitwise the same under gpipe and over 3 processes;
// and the configs and flags these features refuse (exit 2, the key named).
//
// ctest runs each test in a process of its own (ACTORPIPE_TESTS_ONE_BY_ONE):
// the caches below (the initial weights, the reference's runs) hold within
// one test, so the cases that share a reference share a test.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/apps/reference_runs.hpp"
#include "tests/cpu_only.hpp"
#include "tests/runtime/observe/tfevents_reader.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using testing_util::describe;
using testing_util::gpt_train;
using testing_util::kFloat32Tolerance;
using testing_util::make_text;
using testing_util::parse_json_file;
using testing_util::python;
using testing_util::regex_escape;
using testing_util::run;
using testing_util::run_out;
using testing_util::slurp_file;
using testing_util::write;

/// actorpipe's bfloat16 mixed-precision training against the reference's
/// (6 steps of kAdamw and kCosine, 3 stages). Both cast the same float32
/// masters to bfloat16 and run the same CPU kernels in the same order, so
/// they can agree to the bit: measured, every key's largest difference was
/// 0 (LibTorch 1.13 CPU against Debian's python3-torch 1.13), where in
/// float32 the same config ends ~7e-9 from the reference's, and bfloat16
/// training ends 6.7e-4 from float32 training. 1e-6 leaves room for
/// a float32 accumulation reordered somewhere (a hundred times the float32
/// cases' gap) while staying 670 times below what bfloat16 itself moves.
constexpr double kMixedTolerance = 1e-6;

// AdamW with every setting off its default and a weight decay large enough
// to matter (lr x weight_decay = 1e-4 a step, ten times the tolerance).
// eps 1e-6: the key part of each attn.qkv.bias has an exactly zero gradient
// (softmax ignores a shift of every key), so its gradient is rounding noise
// that Adam's m / (sqrt(v) + eps) would amplify with a smaller eps.
const std::string kAdamw = "{type: adamw, lr: 0.001, betas: [0.85, 0.99], eps: 1.0e-6, weight_decay: 0.1, decay_1d: true}";
const std::string kCosine = "{type: cosine, warmup_steps: 2, min_lr: 1.0e-4}";

struct loop_case {
  std::string schedule = "1f1b";
  bool tie = true;
  std::string optimizer = kAdamw;
  std::string lr_schedule = kCosine;
  int steps = 6;
  double clip = 0.5;           ///< 0: no clip_grad_norm
  std::string eval;            ///< the eval map ("": no eval key)
  std::string mixed;           ///< model.mixed_precision ("": not set)
  std::string model_extra;     ///< more model lines ("  dtype: bfloat16\n")
  std::string checkpoint_dir;  ///< checkpoint: {dir, every: 1} ("": none)
  double test_fraction = 0.1;
  std::string init;            ///< model.init_from ("": actorpipe's own)
  std::string tail;            ///< more top-level YAML (supervision, faults)
};

std::string config_yaml(const loop_case& c, const std::string& text) {
  std::ostringstream os;
  os << "model:\n"
        "  layers:\n"
        "    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}\n"
        "    - {type: gpt_block, dim: 32, heads: 4, mlp_hidden: 64, repeat: 2}\n"
        "    - {type: layernorm, dim: 32}\n"
        "    - {type: lm_head, vocab: 256, dim: 32, tie: " << (c.tie ? "true" : "false") << "}\n";
  if (!c.init.empty()) os << "  init_from: \"" << c.init << "\"\n";
  if (!c.mixed.empty()) os << "  mixed_precision: " << c.mixed << "\n";
  os << c.model_extra;
  os << "data:\n"
        "  kind: text\n"
        "  path: \"" << text << "\"\n"
        "  seq_len: 16\n"
        "  test_fraction: " << c.test_fraction << "\n"
        "train:\n"
        "  steps: " << c.steps << "\n"
        "  batch_size: 8\n"
        "  optimizer: " << c.optimizer << "\n"
        "  lr_schedule: " << c.lr_schedule << "\n";
  if (c.clip > 0) os << "  clip_grad_norm: " << c.clip << "\n";
  os << "  seed: 7\n";
  if (!c.eval.empty()) os << "eval: " << c.eval << "\n";
  if (!c.checkpoint_dir.empty()) os << "checkpoint: {dir: \"" << c.checkpoint_dir << "\", every: 1}\n";
  os << "pipeline:\n"
        "  stages: 3\n"
        "  schedule: " << c.schedule << "\n"
        "  microbatches: 4\n";
  os << c.tail;
  return os.str();
}

/// The rate of the update of 0-based step `step`, as documented for
/// train.lr_schedule (llama_reference.lr_at), written out here again.
double expected_lr(int64_t step, double lr, int64_t warmup, int64_t decay, double min_lr, const std::string& kind) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (kind == "constant") return lr;
  if (step >= warmup + decay) return min_lr;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(decay);
  const double c = kind == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * r)) : 1.0 - r;
  return min_lr + (lr - min_lr) * c;
}

/// --results prints doubles with 9 significant digits ("%.9g"), TensorBoard
/// keeps float(value): the float nearest the printed number is the one
/// TensorBoard holds, or (when the double lay within the printing's rounding
/// of a midpoint between two floats) its neighbour.
bool same_float(float stored, double printed) {
  const float f = static_cast<float>(printed);
  return stored == f || stored == std::nextafter(f, std::numeric_limits<float>::infinity()) ||
         stored == std::nextafter(f, -std::numeric_limits<float>::infinity());
}

/// Within `tol`, relative to the larger of 1 and |want|.
bool close(double got, double want, double tol) {
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

class TrainingLoop : public testing_util::reference_fixture {
protected:
  static std::string text_;
  /// The reference's trained weights and evaluations by the config text it
  /// ran (its initial weights: reference_init's, by "tied" / "untied").
  static std::map<std::string, std::pair<std::string, json>> references_;

  static void SetUpTestSuite() {
    make_shared_dir("actorpipe_training_loop_test");
    text_ = write(shared_ / "text.txt", make_text(4096));
  }

  static void TearDownTestSuite() {
    remove_shared_dir();
    references_.clear();
  }

  /// The held-out split's size in target positions: the tail
  /// llround(test_fraction x windows) of the file's 16-byte windows.
  static int64_t held_out_rows() {
    const auto windows = static_cast<int64_t>((fs::file_size(text_) - 1) / 16);
    return std::llround(0.1 * static_cast<double>(windows));
  }

  /// The reference's initial weights for a tied or an untied head (written once).
  static std::string init_for(bool tie) {
    loop_case c;
    c.tie = tie;
    return reference_init(tie ? "tied" : "untied", config_yaml(c, text_));
  }

  /// `c` starting from the reference's initial weights.
  static loop_case from_init(loop_case c) {
    c.init = init_for(c.tie);
    return c;
  }

  /// The reference's training of `c` (the schedule and the process layout
  /// do not change its arithmetic): its saved weights ("" after a failure)
  /// and, when `c` evaluates, its evaluations. Run once per config.
  static std::pair<std::string, json> reference(loop_case c) {
    c.schedule = "1f1b";
    c.checkpoint_dir.clear();
    const std::string yaml = config_yaml(c, text_);
    if (auto it = references_.find(yaml); it != references_.end()) return it->second;
    const std::string name = "ref_" + std::to_string(references_.size());
    const std::string cfg = write(shared_ / (name + ".yaml"), yaml);
    const std::string out = (shared_ / (name + ".pt")).string(), evals = (shared_ / (name + "_evals.json")).string();
    std::vector<std::string> args = {gpt_train, cfg, "--out", out, "--quiet"};
    if (!c.eval.empty()) args.insert(args.end(), {"--evals", evals});
    auto r = run(python, args);
    EXPECT_EQ(r.code, 0) << cfg << ": " << describe(r);
    if (r.code != 0) return {"", json()};
    return references_[yaml] = {out, c.eval.empty() ? json() : parse_json_file(evals)};
  }

  /// train_yaml on `c`'s config.
  run_out train_run(const loop_case& c, const std::string& name, const std::vector<std::string>& extra = {},
                    int nprocs = 1) {
    return train_yaml(config_yaml(c, text_), name, extra, nprocs);
  }

  /// The results' evals: after the updates `steps`, each over `positions`
  /// target positions, within 1e-5 of the reference's loss (relative, the
  /// losses are ~5) and within one position of its accuracy (an argmax may
  /// tip between two logits that agree to 1e-7).
  void expect_evals_match(const json& got, const json& want, const std::vector<int64_t>& steps, int64_t positions) {
    ASSERT_TRUE(got.is_array()) << got.dump();
    ASSERT_TRUE(want.is_array()) << want.dump();
    ASSERT_EQ(got.size(), steps.size()) << got.dump(1);
    ASSERT_EQ(want.size(), steps.size()) << want.dump(1);
    for (size_t i = 0; i < steps.size(); ++i) {
      SCOPED_TRACE("eval " + std::to_string(i) + ": " + got[i].dump() + " vs the reference's " + want[i].dump());
      EXPECT_EQ(got[i]["step"].get<int64_t>(), steps[i]);
      EXPECT_EQ(want[i]["step"].get<int64_t>(), steps[i]);
      EXPECT_EQ(got[i]["positions"].get<int64_t>(), positions);
      EXPECT_GE(got[i]["seconds"].get<double>(), 0.0);
      EXPECT_TRUE(close(got[i]["loss"].get<double>(), want[i]["loss"].get<double>(), 1e-5));
      EXPECT_NEAR(got[i]["accuracy"].get<double>(), want[i]["accuracy"].get<double>(),
                  1.5 / static_cast<double>(positions));
    }
  }
};

std::string TrainingLoop::text_;
std::map<std::string, std::pair<std::string, json>> TrainingLoop::references_;

// -- AdamW and the warmup schedules against the reference -----------------------------

// decay_1d true, a tied head (its one weight decayed once), cosine from a
// 2-step warmup down to min_lr 1e-4 over 6 updates. Each update's rate is
// the documented one; clipping is in play; the weights end within 1e-5 of
// the reference's; gpipe and 3 processes save the same bytes as 1F1B.
TEST_F(TrainingLoop, AdamwCosineTiedMatchesTheReferenceUnderEveryLayout) {
  NEED_TORCH();
  const loop_case c = from_init(loop_case{});
  ASSERT_FALSE(c.init.empty());
  const std::string ref = reference(c).first;
  ASSERT_FALSE(ref.empty());
  const run_out one = train_run(c, "adamw_cosine_1f1b");
  ASSERT_TRUE(one.ok);
  {
    const json& steps = one.results["steps"];
    ASSERT_EQ(steps.size(), 6u) << one.results.dump(1);
    for (int64_t s = 0; s < 6; ++s) {
      SCOPED_TRACE("step " + std::to_string(s) + ": " + steps[s].dump());
      EXPECT_EQ(steps[s]["step"].get<int64_t>(), s);
      const double want = expected_lr(s, 1e-3, 2, 4, 1e-4, "cosine");
      EXPECT_NEAR(steps[s]["lr"].get<double>(), want, 1e-8 * want);
      EXPECT_GT(steps[s]["grad_norm"].get<double>(), 0.5) << "clip_grad_norm 0.5 should trigger";
    }
  }
  expect_close(ref, one.save, kFloat32Tolerance, "adamw cosine tied, 1f1b vs the reference");
  const run_out gpipe = train_run(c, "adamw_cosine_gpipe", {"--schedule", "gpipe"});
  ASSERT_TRUE(gpipe.ok);
  EXPECT_EQ(gpipe.results["schedule"].get<std::string>().rfind("gpipe", 0), 0u) << gpipe.results["schedule"];
  expect_same_bytes(one.save, gpipe.save, "--schedule gpipe vs 1f1b");
  const run_out three = train_run(c, "adamw_cosine_launch3", {}, 3);
  ASSERT_TRUE(three.ok);
  expect_same_bytes(one.save, three.save, "launch --nprocs 3 vs one process");
}

// decay_1d false exempts the biases and the norm gains, an untied head is a
// parameter of its own; a linear decay after a 1-step warmup. Within 1e-5
// of the reference, and beyond it of the reference with decay_1d true (the
// flag is what makes the difference).
TEST_F(TrainingLoop, AdamwWithoutDecayOn1dParametersUntiedLinearMatchesTheReference) {
  NEED_TORCH();
  loop_case c;
  c.tie = false;
  c.optimizer = "{type: adamw, lr: 0.001, betas: [0.85, 0.99], eps: 1.0e-6, weight_decay: 0.1, decay_1d: false}";
  c.lr_schedule = "{type: linear, warmup_steps: 1}";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const std::string ref = reference(c).first;
  ASSERT_FALSE(ref.empty());
  const run_out got = train_run(c, "adamw_linear_untied");
  ASSERT_TRUE(got.ok);
  const json& steps = got.results["steps"];
  ASSERT_EQ(steps.size(), 6u);
  for (int64_t s = 0; s < 6; ++s) {
    const double want = expected_lr(s, 1e-3, 1, 5, 0.0, "linear");
    EXPECT_NEAR(steps[s]["lr"].get<double>(), want, 1e-8 * want) << steps[s].dump();
  }
  expect_close(ref, got.save, kFloat32Tolerance, "adamw decay_1d false, linear, untied vs the reference");
  loop_case decayed = c;
  decayed.optimizer = kAdamw;
  const std::string ref_decayed = reference(decayed).first;
  ASSERT_FALSE(ref_decayed.empty());
  expect_close(ref_decayed, got.save, kFloat32Tolerance, "decay_1d false vs the reference with decay_1d true",
               /*expect_within=*/false);
}

// A constant rate after a 3-step warmup, AdamW's defaults (betas, weight
// decay 0.01) otherwise.
TEST_F(TrainingLoop, AdamwConstantAfterWarmupMatchesTheReference) {
  NEED_TORCH();
  loop_case c;
  c.optimizer = "{type: adamw, lr: 0.001, eps: 1.0e-6}";
  c.lr_schedule = "{type: constant, warmup_steps: 3}";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const std::string ref = reference(c).first;
  ASSERT_FALSE(ref.empty());
  const run_out got = train_run(c, "adamw_constant");
  ASSERT_TRUE(got.ok);
  const json& steps = got.results["steps"];
  ASSERT_EQ(steps.size(), 6u);
  for (int64_t s = 0; s < 6; ++s) {
    const double want = expected_lr(s, 1e-3, 3, 0, 0.0, "constant");
    EXPECT_NEAR(steps[s]["lr"].get<double>(), want, 1e-8 * want) << steps[s].dump();
  }
  expect_close(ref, got.save, kFloat32Tolerance, "adamw constant after warmup vs the reference");
}

// -- resume -------------------------------------------------------------------------

// A 4-step warmup with an explicit decay_steps (so --steps 2 does not move
// the schedule): stopped after 2 updates, in the warmup, and resumed from
// its checkpoint: the uninterrupted run's bytes (that run writes no
// checkpoint at all), and its rates and losses for the steps it ran.
TEST_F(TrainingLoop, ResumedInTheMiddleOfTheWarmupSavesTheUninterruptedBytes) {
  NEED_TORCH();
  loop_case c;
  c.lr_schedule = "{type: cosine, warmup_steps: 4, decay_steps: 2, min_lr: 1.0e-4}";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const run_out whole = train_run(c, "uninterrupted");
  ASSERT_TRUE(whole.ok);
  const json& all = whole.results["steps"];
  ASSERT_EQ(all.size(), 6u);
  for (int64_t s = 0; s < 6; ++s) {
    const double want = expected_lr(s, 1e-3, 4, 2, 1e-4, "cosine");
    EXPECT_NEAR(all[s]["lr"].get<double>(), want, 1e-8 * want) << all[s].dump();
  }

  loop_case ck = c;
  ck.checkpoint_dir = (dir_ / "ckpt").string();
  const run_out first = train_run(ck, "first_two", {"--steps", "2"});
  ASSERT_TRUE(first.ok);
  ASSERT_EQ(first.results["steps"].size(), 2u) << first.results.dump(1);
  for (int64_t s = 0; s < 2; ++s) {
    // Still the warmup of 4 (not one of 2 steps' schedule), bit for bit.
    EXPECT_EQ(first.results["steps"][s]["lr"].dump(), all[s]["lr"].dump());
    EXPECT_EQ(first.results["steps"][s]["loss"].dump(), all[s]["loss"].dump());
  }
  ASSERT_TRUE(fs::is_directory(ck.checkpoint_dir));
  ASSERT_FALSE(fs::is_empty(ck.checkpoint_dir)) << "no checkpoint written";

  const run_out resumed = train_run(ck, "resumed", {"--resume", ck.checkpoint_dir});
  ASSERT_TRUE(resumed.ok);
  const json& rest = resumed.results["steps"];
  ASSERT_EQ(rest.size(), 4u) << "the resumed run should run steps 2..5 only:\n" << resumed.results.dump(1);
  for (size_t i = 0; i < rest.size(); ++i) {
    SCOPED_TRACE(rest[i].dump() + " vs the uninterrupted " + all[i + 2].dump());
    EXPECT_EQ(rest[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 2));
    EXPECT_EQ(rest[i]["lr"].dump(), all[i + 2]["lr"].dump());
    EXPECT_EQ(rest[i]["loss"].dump(), all[i + 2]["loss"].dump());
  }
  expect_same_bytes(whole.save, resumed.save, "stopped after 2 updates and resumed vs uninterrupted");
}

// -- validation during training -------------------------------------------------------

// eval every 2 of 5 updates: after 2, 4 and 5, over the whole held-out
// split, as the reference evaluates; the last one is the run's held-out
// figure; not one weight bit moves. Over 3 processes: the same evaluations
// (within 1e-9) and the same bytes.
TEST_F(TrainingLoop, EvalEveryTwoMatchesTheReferenceAndChangesNoWeight) {
  NEED_TORCH();
  loop_case c;
  c.steps = 5;
  c.eval = "{every: 2}";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const json want = reference(c).second;
  ASSERT_TRUE(want.is_array());
  const int64_t positions = held_out_rows() * 16;

  const run_out with = train_run(c, "with_eval");
  ASSERT_TRUE(with.ok);
  expect_evals_match(with.results["evals"], want, {2, 4, 5}, positions);
  ASSERT_EQ(with.results["evals"].size(), 3u);
  // The last evaluation covers the whole split: the run's held-out loss.
  EXPECT_EQ(with.results["evals"][2]["loss"].dump(), with.results["summary"]["test_loss"].dump());

  loop_case without = c;
  without.eval.clear();
  const run_out plain = train_run(without, "without_eval");
  ASSERT_TRUE(plain.ok);
  EXPECT_TRUE(plain.results["evals"].empty()) << plain.results["evals"];
  expect_same_bytes(plain.save, with.save, "eval every 2 vs no eval");

  const run_out three = train_run(c, "with_eval_launch3", {}, 3);
  ASSERT_TRUE(three.ok);
  expect_same_bytes(plain.save, three.save, "eval every 2 under launch --nprocs 3 vs one process without eval");
  const json& e3 = three.results["evals"];
  ASSERT_EQ(e3.size(), 3u) << three.results.dump(1);
  for (size_t i = 0; i < 3; ++i) {
    const json& e1 = with.results["evals"][i];
    EXPECT_EQ(e3[i]["step"], e1["step"]);
    EXPECT_EQ(e3[i]["positions"], e1["positions"]);
    EXPECT_NEAR(e3[i]["loss"].get<double>(), e1["loss"].get<double>(), 1e-9) << e3[i] << " vs " << e1;
    EXPECT_NEAR(e3[i]["accuracy"].get<double>(), e1["accuracy"].get<double>(), 1e-9) << e3[i] << " vs " << e1;
  }
}

// eval.batches 1: the first batch of 8 held-out rows only, as the
// reference; the run's held-out figure still covers the whole split.
TEST_F(TrainingLoop, EvalOfOneBatchMatchesTheReference) {
  NEED_TORCH();
  loop_case c;
  c.steps = 5;
  c.eval = "{every: 2, batches: 1}";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const json want = reference(c).second;
  ASSERT_TRUE(want.is_array());
  const run_out got = train_run(c, "eval_one_batch");
  ASSERT_TRUE(got.ok);
  expect_evals_match(got.results["evals"], want, {2, 4, 5}, std::min<int64_t>(8, held_out_rows()) * 16);
  // The reference's whole-split evaluation after the last update.
  loop_case whole = c;
  whole.eval = "{every: 5}";
  const json all = reference(whole).second;
  ASSERT_TRUE(all.is_array() && all.size() == 1u) << all.dump();
  EXPECT_TRUE(close(got.results["summary"]["test_loss"].get<double>(), all[0]["loss"].get<double>(), 1e-5))
      << got.results["summary"].dump() << " vs " << all.dump();
}

// Async (PipeDream-2BW; no flush, so no clipping and no tie across stages):
// the stream goes on while the kept weights are evaluated; the evaluations
// come after the expected updates, and the weights are those of the run
// without them.
TEST_F(TrainingLoop, AsyncEvalReportsTheExpectedStepsAndChangesNoWeight) {
  loop_case c;
  c.schedule = "async";
  c.tie = false;
  c.clip = 0;
  c.steps = 5;
  c.eval = "{every: 2}";
  const run_out with = train_run(c, "async_eval");
  ASSERT_TRUE(with.ok);
  const json& evals = with.results["evals"];
  ASSERT_EQ(evals.size(), 3u) << with.results.dump(1);
  const std::vector<int64_t> steps = {2, 4, 5};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(evals[i]["step"].get<int64_t>(), steps[i]) << evals[i];
    EXPECT_EQ(evals[i]["positions"].get<int64_t>(), held_out_rows() * 16) << evals[i];
    const double loss = evals[i]["loss"].get<double>();
    EXPECT_TRUE(loss > 4.0 && loss < 6.0) << evals[i] << " (ln 256 = 5.55 untrained)";
  }
  EXPECT_EQ(evals[2]["loss"].dump(), with.results["summary"]["test_loss"].dump());
  loop_case without = c;
  without.eval.clear();
  const run_out plain = train_run(without, "async_no_eval");
  ASSERT_TRUE(plain.ok);
  expect_same_bytes(plain.save, with.save, "async with eval every 2 vs without");
}

// -- TensorBoard ------------------------------------------------------------------------

TEST_F(TrainingLoop, TensorboardHoldsTheResultsFiguresAndACutFileReadsUpToItsLastRecord) {
  loop_case c;
  c.steps = 5;
  c.eval = "{every: 2}";
  const std::string tb = (dir_ / "tb").string();
  const run_out got = train_run(c, "tensorboard", {"--tensorboard", tb, "--peak-tflops", "1"});
  ASSERT_TRUE(got.ok);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tb)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one event file in " << tb;
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u) << files[0];

  const auto read = tfevents::read_event_file(files[0].string());
  EXPECT_TRUE(read.crc_failures.empty());
  EXPECT_TRUE(read.decode_errors.empty());
  EXPECT_TRUE(read.clean_end) << read.leftover << " bytes after the last record";
  ASSERT_TRUE(read.ok());
  ASSERT_FALSE(read.events.empty());
  EXPECT_EQ(read.events[0].file_version.rfind("brain.Event:", 0), 0u) << read.events[0].file_version;

  // tag -> (step, value) in file order.
  std::map<std::string, std::vector<std::pair<int64_t, float>>> points;
  for (const auto& e : read.events)
    for (const auto& v : e.values) {
      EXPECT_TRUE(v.has_simple_value) << v.tag;
      points[v.tag].push_back({e.step, v.simple_value});
    }
  const json& steps = got.results["steps"];
  ASSERT_EQ(steps.size(), 5u);
  std::vector<std::string> per_step = {"train/loss",          "train/lr",     "train/grad_norm",
                                       "train/step_ms",       "train/bubble", "train/tokens_per_s",
                                       "train/mfu"};
  for (int i = 0; i < 3; ++i) {
    per_step.push_back("stages/" + std::to_string(i) + "/busy_ms");
    per_step.push_back("stages/" + std::to_string(i) + "/peak_activation_bytes");
  }
  for (const auto& tag : per_step) {
    SCOPED_TRACE(tag);
    ASSERT_EQ(points.count(tag), 1u) << "missing";
    const auto& p = points[tag];
    ASSERT_EQ(p.size(), 5u) << "one point per step";
    for (int64_t s = 0; s < 5; ++s) EXPECT_EQ(p[s].first, s + 1) << "event step = updates done";
  }
  for (int64_t s = 0; s < 5; ++s) {
    SCOPED_TRACE("step " + std::to_string(s) + ": " + steps[s].dump());
    EXPECT_TRUE(same_float(points["train/loss"][s].second, steps[s]["loss"].get<double>()))
        << points["train/loss"][s].second;
    EXPECT_TRUE(same_float(points["train/lr"][s].second, steps[s]["lr"].get<double>()))
        << points["train/lr"][s].second;
    EXPECT_TRUE(same_float(points["train/grad_norm"][s].second, steps[s]["grad_norm"].get<double>()))
        << points["train/grad_norm"][s].second;
    EXPECT_TRUE(same_float(points["train/step_ms"][s].second, steps[s]["step_s"].get<double>() * 1e3) ||
                close(points["train/step_ms"][s].second, steps[s]["step_s"].get<double>() * 1e3, 1e-6))
        << points["train/step_ms"][s].second;
    EXPECT_TRUE(same_float(points["train/tokens_per_s"][s].second, steps[s]["tokens_per_s"].get<double>()))
        << points["train/tokens_per_s"][s].second;
    ASSERT_TRUE(steps[s]["mfu"].is_number()) << "--peak-tflops 1 gives an MFU";
    EXPECT_TRUE(same_float(points["train/mfu"][s].second, steps[s]["mfu"].get<double>()))
        << points["train/mfu"][s].second;
    // The results print the bubble with 6 decimals.
    EXPECT_NEAR(points["train/bubble"][s].second, steps[s]["bubble"].get<double>(), 6e-7);
    const json& stages = steps[s]["stages"];
    ASSERT_EQ(stages.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const std::string at = "stages/" + std::to_string(i) + "/";
      EXPECT_EQ(points[at + "peak_activation_bytes"][s].second,
                static_cast<float>(stages[i]["peak_stash_bytes"].get<int64_t>()))
          << at;
      EXPECT_TRUE(close(points[at + "busy_ms"][s].second, stages[i]["busy_s"].get<double>() * 1e3, 1e-6))
          << at << " " << points[at + "busy_ms"][s].second;
    }
  }
  const json& evals = got.results["evals"];
  ASSERT_EQ(evals.size(), 3u) << got.results.dump(1);
  for (const std::string tag : {"val/loss", "val/accuracy"}) {
    SCOPED_TRACE(tag);
    ASSERT_EQ(points.count(tag), 1u) << "missing";
    const auto& p = points[tag];
    ASSERT_EQ(p.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(p[i].first, evals[i]["step"].get<int64_t>());
      EXPECT_TRUE(same_float(p[i].second, evals[i][tag == "val/loss" ? "loss" : "accuracy"].get<double>()))
          << p[i].second << " vs " << evals[i];
    }
  }

  // The file cut 7 bytes short: every record but the last, each valid.
  const fs::path cut = dir_ / "cut.tfevents";
  fs::copy_file(files[0], cut);
  const auto size = fs::file_size(cut);
  ASSERT_GT(read.records, 1u);
  ASSERT_EQ(read.record_ends.back(), size);
  fs::resize_file(cut, size - 7);
  const auto part = tfevents::read_event_file(cut.string());
  EXPECT_EQ(part.records, read.records - 1);
  EXPECT_TRUE(part.crc_failures.empty());
  EXPECT_TRUE(part.decode_errors.empty());
  EXPECT_FALSE(part.clean_end);
  EXPECT_EQ(part.leftover, size - 7 - read.record_ends[read.records - 2]);
  ASSERT_EQ(part.events.size(), read.events.size() - 1);
  for (size_t i = 0; i < part.events.size(); ++i) {
    EXPECT_EQ(part.events[i].step, read.events[i].step);
    ASSERT_EQ(part.events[i].values.size(), read.events[i].values.size());
    for (size_t k = 0; k < part.events[i].values.size(); ++k) {
      EXPECT_EQ(part.events[i].values[k].tag, read.events[i].values[k].tag);
      EXPECT_EQ(part.events[i].values[k].simple_value, read.events[i].values[k].simple_value);
    }
  }
}

// -- mixed precision ---------------------------------------------------------------------

// bfloat16 compute, float32 masters: near the reference's bfloat16
// training (kMixedTolerance), far from float32 training, float32 on disk;
// gpipe and 3 processes the same bytes as 1F1B.
TEST_F(TrainingLoop, MixedPrecisionBfloat16MatchesTheReferenceAndSavesFloat32) {
  NEED_TORCH();
  loop_case c;
  c.mixed = "bfloat16";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const std::string ref = reference(c).first;
  ASSERT_FALSE(ref.empty());
  const run_out one = train_run(c, "bf16_1f1b");
  ASSERT_TRUE(one.ok);
  expect_close(ref, one.save, kMixedTolerance, "bfloat16 mixed precision, 1f1b vs the reference");

  auto dtypes = run(python, {"-c",
                             "import sys, torch\n"
                             "sd = torch.load(sys.argv[1])\n"
                             "bad = [(k, str(t.dtype)) for k, t in sd.items() if t.dtype != torch.float32]\n"
                             "print(len(sd), 'tensors', bad)\n"
                             "sys.exit(1 if bad or not sd else 0)\n",
                             one.save});
  EXPECT_EQ(dtypes.code, 0) << "every saved tensor float32:\n" << describe(dtypes);

  // bfloat16 is in play: float32 training of the same config ends far away.
  loop_case f32 = c;
  f32.mixed.clear();
  const run_out full = train_run(f32, "f32_1f1b");
  ASSERT_TRUE(full.ok);
  expect_close(full.save, one.save, 1e-4, "bfloat16 mixed vs float32 training (should differ)",
               /*expect_within=*/false);

  loop_case gp = c;
  gp.schedule = "gpipe";
  const run_out gpipe = train_run(gp, "bf16_gpipe");
  ASSERT_TRUE(gpipe.ok);
  expect_same_bytes(one.save, gpipe.save, "bfloat16 gpipe vs 1f1b");
  const run_out three = train_run(c, "bf16_launch3", {}, 3);
  ASSERT_TRUE(three.ok);
  expect_same_bytes(one.save, three.save, "bfloat16 launch --nprocs 3 vs one process");
}

// -- refused input ---------------------------------------------------------------------

struct bad_case {
  std::string name;
  loop_case c;
  std::string key;      ///< the key the message names
  std::string also;     ///< more text the message holds ("": none)
};

// Each bad config exits 2 before any work, with one line on stderr:
// FILE:LINE:COL: KEY: message.
TEST_F(TrainingLoop, BadConfigsExitTwoNamingTheKey) {
  std::vector<bad_case> cases;
  auto add = [&cases](const std::string& name, const std::string& key, auto edit, const std::string& also = "") {
    bad_case b{name, loop_case{}, key, also};
    edit(b.c);
    cases.push_back(b);
  };
  // The configs these features refuse at load are rows of the bad-config
  // table (tests/runtime/config/bad_configs.hpp: DecayOneDOnAdam,
  // WarmupOnStepSchedule, MinLrAboveLr, EvalEveryZero, EvalWithoutEvery,
  // EvalWithoutHeldOutSplit, MixedPrecision*, LrPastFloat, ...), run by the
  // config test and the CLI's bad-config test against their exact messages.
  // Here: what only the data's loading finds.
  // 26 held-out rows: 4 batches of 8.
  add("eval_batches_past_the_split", "eval.batches", [](loop_case& c) { c.eval = "{every: 2, batches: 5}"; });
  ASSERT_EQ(held_out_rows(), 26) << "the eval.batches case assumes 4 held-out batches";

  for (const auto& b : cases) {
    SCOPED_TRACE(b.name);
    const std::string cfg = write(dir_ / (b.name + ".yaml"), config_yaml(b.c, text_));
    const std::string save = (dir_ / (b.name + ".pt")).string();
    auto r = run(ACTORPIPE_BIN, {"train", cfg, "--quiet", "--samples", "0", "--save", save}, 60);
    EXPECT_EQ(r.code, 2) << describe(r);
    const std::string line = testing_util::first_line(r.err);
    EXPECT_EQ(r.err, line + "\n") << "one line on stderr";
    const std::regex form("^" + regex_escape(cfg) + ":[0-9]+:[0-9]+: " + regex_escape(b.key) + ": ");
    EXPECT_TRUE(std::regex_search(line, form)) << "wanted " << cfg << ":LINE:COL: " << b.key << ": ...\n" << describe(r);
    if (!b.also.empty()) {
      EXPECT_NE(line.find(b.also), std::string::npos) << describe(r);
    }
    EXPECT_FALSE(fs::exists(save));
  }
}

// --tensorboard naming a directory under a regular file: exit 2 before any
// step, the path named.
TEST_F(TrainingLoop, TensorboardUnderARegularFileExitsTwoNamingThePath) {
  loop_case c;
  c.steps = 2;
  const std::string cfg = write(dir_ / "ok.yaml", config_yaml(c, text_));
  const std::string file = write(dir_ / "plain_file", "not a directory\n");
  const std::string tb = file + "/tb";
  const std::string save = (dir_ / "out.pt").string();
  auto r = run(ACTORPIPE_BIN, {"train", cfg, "--quiet", "--samples", "0", "--save", save, "--tensorboard", tb}, 60);
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find(tb), std::string::npos) << "the message names " << tb << "\n" << describe(r);
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step should run\n" << describe(r);
  EXPECT_FALSE(fs::exists(save));
  EXPECT_TRUE(fs::is_regular_file(file));
}

// -- all of it under launch, through a heal --------------------------------------------

// AdamW with a warmup and cosine decay, bfloat16 compute, an evaluation
// every 2 updates and a TensorBoard file, over 3 processes, with stage 2's
// process killed at step 3 and healed from its keeper's memory: the
// weights end on the bytes of the same run without the fault (AdamW's
// state travels and restores as Adam's); one process writes the event
// file, and it holds every step and every evaluation, a re-run step's
// point the last one written.
TEST_F(TrainingLoop, AHealUnderLaunchWithEveryFeatureEndsOnTheFaultFreeBytes) {
  loop_case c;
  c.steps = 6;
  c.eval = "{every: 2}";
  c.mixed = "bfloat16";
  c.tail =
      "supervision: {max_restarts: 2, window_steps: 10, heartbeat_timeout_s: 2}\n"
      "faults:\n"
      "  inject:\n"
      "    - {kind: kill_process, stage: 2, step: 3, after_op: B1}\n";
  const std::string tb = (dir_ / "tb").string();
  const run_out healed = train_run(c, "healed", {"--tensorboard", tb}, 3);
  ASSERT_TRUE(healed.ok);
  EXPECT_EQ(healed.results["supervision"]["restarts"].get<int>(), 1) << healed.results["supervision"].dump();
  loop_case clean = c;
  clean.tail.clear();
  const run_out plain = train_run(clean, "clean");
  ASSERT_TRUE(plain.ok);
  expect_same_bytes(plain.save, healed.save, "healed under launch vs fault-free in one process");

  const json& evals = healed.results["evals"];
  ASSERT_EQ(evals.size(), 3u) << healed.results.dump(1);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(evals[i]["step"], plain.results["evals"][i]["step"]);
    EXPECT_NEAR(evals[i]["loss"].get<double>(), plain.results["evals"][i]["loss"].get<double>(), 1e-9);
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tb)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one process writes the event file";
  const auto read = tfevents::read_event_file(files[0].string());
  ASSERT_TRUE(read.ok());
  std::map<int64_t, float> loss, val;  // the last point written for each step
  for (const auto& e : read.events)
    for (const auto& v : e.values) {
      if (v.tag == "train/loss") loss[e.step] = v.simple_value;
      if (v.tag == "val/loss") val[e.step] = v.simple_value;
    }
  ASSERT_EQ(loss.size(), 6u);
  for (int64_t s = 0; s < 6; ++s)
    EXPECT_TRUE(same_float(loss[s + 1], healed.results["steps"][s]["loss"].get<double>())) << "step " << s;
  ASSERT_EQ(val.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(same_float(val[evals[i]["step"].get<int64_t>()], evals[i]["loss"].get<double>())) << evals[i];
}

// --report: the validation loss drawn beside the training loss.
TEST_F(TrainingLoop, TheReportPlotsTheValidationLossBesideTheTrainingLoss) {
  loop_case c;
  c.steps = 4;
  c.eval = "{every: 2}";
  const std::string report = (dir_ / "report.html").string();
  const run_out got = train_run(c, "report", {"--report", report});
  ASSERT_TRUE(got.ok);
  const std::string html = slurp_file(report);
  EXPECT_NE(html.find("training and validation loss"), std::string::npos);
  EXPECT_NE(html.find("<polyline class=\"train\""), std::string::npos);
  EXPECT_NE(html.find("<polyline class=\"val\""), std::string::npos);
  size_t markers = 0;
  for (size_t at = html.find("<circle class=\"val\""); at != std::string::npos;
       at = html.find("<circle class=\"val\"", at + 1))
    ++markers;
  EXPECT_EQ(markers, 2u) << "one marker per evaluation (after 2 and 4 updates)";
}

// configs/gpt_recipe.yaml, the recipe docs/TRAINING.md walks through, runs
// (a few steps, its evaluation every 2 and its checkpoints redirected).
TEST_F(TrainingLoop, TheShippedRecipeTrains) {
  const std::string recipe = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/gpt_recipe.yaml";
  std::string yaml = slurp_file(recipe);
  ASSERT_FALSE(yaml.empty()) << recipe;
  // Its data and checkpoints relative to a copy here.
  const std::string data = std::string(ACTORPIPE_SOURCE_DIR) + "/data/fortunes.txt";
  if (!fs::exists(data)) GTEST_SKIP() << data << " is made by scripts/setup.sh";
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"../data/fortunes.txt", data},
                                                         {"../checkpoints/gpt_recipe", (dir_ / "ck").string()},
                                                         {"every: 250", "every: 2"},
                                                         {"batches: 20", "batches: 2"}}) {
    const auto at = yaml.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    yaml.replace(at, from.size(), to);
  }
  const std::string cfg = write(dir_ / "recipe.yaml", yaml);
  const std::string results = (dir_ / "recipe.json").string();
  auto r = run(ACTORPIPE_BIN, {"train", cfg, "--steps", "4", "--log-every", "2", "--samples", "0", "--results", results},
               240);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("eval after 2/4  val loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  const json j = parse_json_file(results);
  ASSERT_EQ(j["evals"].size(), 2u) << j.dump(1);
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "step_00000004.pt")) << "the last step's checkpoint";
}

}  // namespace
}  // namespace actorpipe
