// apps/actorpipe against the plain-PyTorch GPT reference: a small GPT
// (tests/reference/gpt_reference.py, 4 blocks, a tied lm_head) trained 5
// steps by the real binary under every synchronous schedule, 1, 2 and 4
// stages and dp 2 x pp 2, starts from the weights tests/reference/gpt_train.py
// writes and ends within 2e-5 of that script's own training, every key.
// Adam (betas, eps and weight decay off their defaults), a step lr schedule
// and a clip_grad_norm that triggers are all in play. With dropout the schedules are not compared with the reference (its
// masks are its own) but with each other: bitwise. An init_from whose two
// tied copies differ is refused with exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/reference_runs.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

using testing_util::compare_state_dicts;
using testing_util::describe;
using testing_util::gpt_train;
using testing_util::make_text;
using testing_util::python;
using testing_util::run;
using testing_util::write;

struct gpt_case {
  std::string schedule = "1f1b";
  int stages = 2;
  int virtual_stages = 0;  ///< 0: the schedule's default
  int dp = 1;
  bool tie = true;
  double dropout = 0.0;
  /// data.split random and data.shuffle (else the tail split in file order).
  bool shuffle = false;
  int steps = 5;
};

std::string config_yaml(const gpt_case& c, const std::string& text, const std::string& init) {
  std::ostringstream os;
  const std::string drop = c.dropout > 0 ? std::to_string(c.dropout) : "0.0";
  os << "model:\n"
        "  layers:\n"
        "    - {type: embedding, vocab: 256, dim: 32, max_seq: 16, dropout: " << drop << "}\n"
        "    - {type: gpt_block, dim: 32, heads: 4, mlp_hidden: 64, dropout: " << drop << ", repeat: 4}\n"
        "    - {type: layernorm, dim: 32}\n"
        "    - {type: lm_head, vocab: 256, dim: 32, tie: " << (c.tie ? "true" : "false") << "}\n"
        "  init_from: \"" << init << "\"\n"
        "data:\n"
        "  kind: text\n"
        "  path: \"" << text << "\"\n"
        "  seq_len: 16\n"
        "  test_fraction: 0.1\n" << (c.shuffle ? "  split: random\n  shuffle: true\n" : "") <<
        "train:\n"
        "  steps: " << c.steps << "\n"
        "  batch_size: 8\n"
        // Every Adam setting off its default. eps 1e-6: the key part of each
        // attn.qkv.bias has an exactly zero gradient (softmax ignores a shift
        // of every key), so its gradient is rounding noise, which Adam's
        // m / (sqrt(v) + eps) would amplify to ~5e-6 with eps 1e-8 and weight
        // decay; every other weight agrees to ~1e-7 either way.
        "  optimizer: {type: adam, lr: 0.001, betas: [0.85, 0.99], eps: 1.0e-6, weight_decay: 0.01}\n"
        "  lr_schedule: {type: step, step_size: 2, gamma: 0.5}\n"
        "  clip_grad_norm: 0.5\n"
        "  seed: 7\n"
        "pipeline:\n"
        "  stages: " << c.stages << "\n"
        "  schedule: " << c.schedule << "\n"
        "  microbatches: 4\n";
  if (c.virtual_stages > 0) os << "  virtual_stages: " << c.virtual_stages << "\n";
  if (c.dp > 1) os << "parallel:\n  dp: " << c.dp << "\n";
  return os.str();
}

class GptReference : public testing_util::reference_fixture {
protected:
  /// Shared by every test: the text, the two initial weights (tied and
  /// not), and the reference's trained weights per (tie, dp).
  static std::string text_;
  static std::map<std::string, std::string> trained_, trained_log_;

  static void SetUpTestSuite() {
    make_shared_dir("actorpipe_gpt_reference_test");
    text_ = write(shared_ / "text.txt", make_text(4096));
  }

  static void TearDownTestSuite() {
    remove_shared_dir();
    trained_.clear();
    trained_log_.clear();
  }

  void SetUp() override {
    NEED_TORCH();
    reference_fixture::SetUp();
  }

  /// The reference's initial weights for tie / no tie (written once).
  static std::string init_for(bool tie) {
    const std::string key = tie ? "tied" : "untied";
    gpt_case c;
    c.tie = tie;
    return reference_init(key, config_yaml(c, text_, init_path(key)));
  }

  /// The reference's weights after training (once per tie and dp; the
  /// schedule and the stage count do not change its arithmetic).
  static std::string reference_for(const gpt_case& c) {
    const std::string key = std::string(c.tie ? "tied" : "untied") + "_dp" + std::to_string(c.dp) +
                            (c.shuffle ? "_shuffled" : "") + "_steps" + std::to_string(c.steps);
    if (auto it = trained_.find(key); it != trained_.end()) return it->second;
    const std::string init = init_for(c.tie);
    if (init.empty()) return "";
    const std::string cfg = write(shared_ / ("ref_" + key + ".yaml"), config_yaml(c, text_, init));
    const std::string out = (shared_ / ("ref_" + key + ".pt")).string();
    auto r = run(python, {gpt_train, cfg, "--init", init, "--out", out});
    EXPECT_EQ(r.code, 0) << describe(r);
    if (r.code != 0) return "";
    trained_log_[key] = r.out;
    return trained_[key] = out;
  }

  /// actorpipe train on case `c`, starting from `init`; the --save path, or
  /// "" after a failure is recorded.
  std::string train(const gpt_case& c, const std::string& init, const std::string& name) {
    const std::string cfg = write(dir_ / (name + ".yaml"), config_yaml(c, text_, init));
    const std::string save = (dir_ / (name + ".pt")).string();
    auto r = run(ACTORPIPE_BIN, {"train", cfg, "--quiet", "--samples", "0", "--save", save});
    EXPECT_EQ(r.code, 0) << name << ": " << describe(r);
    if (r.code != 0 || !fs::exists(save)) return "";
    return save;
  }

  /// actorpipe's weights against the reference's, every key within 2e-5,
  /// for cases that share one reference (the same tie and dp): each case
  /// trained by actorpipe, then one compare_state_dicts run for them all.
  void expect_match_reference(const std::vector<std::pair<gpt_case, std::string>>& cases) {
    ASSERT_FALSE(cases.empty());
    const std::string ref = reference_for(cases.front().first);
    ASSERT_FALSE(ref.empty());
    std::vector<std::string> args = {compare_state_dicts, ref};
    for (const auto& [c, name] : cases) {
      const std::string got = train(c, init_for(c.tie), name);
      if (!got.empty()) args.push_back(got);
    }
    ASSERT_EQ(args.size(), cases.size() + 2) << "a run failed (above)";
    args.insert(args.end(), {"--tol", "2e-5"});
    auto r = run(python, args);
    EXPECT_EQ(r.code, 0) << "actorpipe vs the reference (" << ref << "):\n" << describe(r);
    // Each comparison's verdict (the largest difference and its key), for the log.
    std::istringstream out(r.out);
    for (std::string l; std::getline(out, l);)
      if (l.rfind("== ", 0) == 0 || l.rfind("overall", 0) == 0) std::cout << "  " << l << "\n";
  }
};

std::string GptReference::text_;
std::map<std::string, std::string> GptReference::trained_, GptReference::trained_log_;

// ctest runs every TEST_F in a process of its own, so the static caches
// hold only within one test: the cases that share a reference (and its
// initial weights) share a test.

TEST_F(GptReference, TextIsDeterministicAndLongerThanTheRunsData) {
  const std::string a = make_text(4096), b = make_text(4096);
  EXPECT_EQ(a, b);
  // 5 steps of 8 windows of 17 bytes, with the 10% tail held out, fit.
  EXPECT_GT(a.size(), static_cast<size_t>(5 * 8 * 16 / 0.9 + 1));
}

// The tied head under every synchronous schedule: with 2 stages the
// embedding and the head sit on different ranks (ZB-V's V puts the first
// and the last layer on stage 0: there the tie is on one rank, as with one
// stage); 1F1B over 4 stages too. First the reference on its own: training
// lowers the loss, clips (the norms are above 0.5), and repeats its bits.
TEST_F(GptReference, EverySynchronousScheduleAndStageCountMatchesTheReference) {
  const gpt_case base;
  const std::string ref = reference_for(base);
  ASSERT_FALSE(ref.empty());
  {
    SCOPED_TRACE("the reference alone");
    const std::string& log_text = trained_log_["tied_dp1_steps5"];
    std::vector<double> losses, norms;
    std::istringstream log(log_text);
    for (std::string l; std::getline(log, l);) {
      if (l.rfind("step ", 0) != 0) continue;
      if (const size_t at = l.find("loss "); at != std::string::npos) losses.push_back(std::stod(l.substr(at + 5)));
      if (const size_t at = l.find("grad_norm "); at != std::string::npos)
        norms.push_back(std::stod(l.substr(at + 10)));
    }
    ASSERT_EQ(losses.size(), 5u) << log_text;
    EXPECT_LT(losses.back(), losses.front()) << log_text;
    ASSERT_EQ(norms.size(), 5u) << log_text;
    for (double n : norms) EXPECT_GT(n, 0.5) << log_text;
    const std::string cfg = write(dir_ / "again.yaml", config_yaml(base, text_, init_for(true)));
    const std::string again = (dir_ / "again.pt").string();
    auto r = run(python, {gpt_train, cfg, "--out", again, "--quiet"});
    ASSERT_EQ(r.code, 0) << describe(r);
    auto same = run(python, {compare_state_dicts, ref, again, "--exact"});
    EXPECT_EQ(same.code, 0) << describe(same);
  }
  expect_match_reference({
      {{"gpipe", 2}, "gpipe_s2"},
      {{"1f1b", 2}, "1f1b_s2"},
      {{"interleaved", 2, 2}, "interleaved_s2_v2"},
      {{"zb-h1", 2}, "zbh1_s2"},
      {{"zb-v", 2}, "zbv_s2"},
      {{"1f1b", 4}, "1f1b_s4"},
      {{"1f1b", 1}, "1f1b_s1"},
  });
}

TEST_F(GptReference, DataParallelTwoByTwoStagesMatchesTheReference) {
  gpt_case c{"1f1b", 2};
  c.dp = 2;
  expect_match_reference({{c, "1f1b_dp2_s2"}});
}

TEST_F(GptReference, UntiedHeadMatchesTheReference) {
  gpt_case c{"1f1b", 2};
  c.tie = false;
  expect_match_reference({{c, "1f1b_s2_untied"}});
}

// split: random and shuffle: true: the held-out windows are a seeded
// sample, every epoch's rows a permutation of its own; the run crosses into
// the second epoch.
TEST_F(GptReference, ShuffledEpochsAndARandomSplitMatchTheReference) {
  gpt_case c{"zb-v", 2};
  c.shuffle = true;
  c.steps = 32;
  const auto windows = static_cast<int64_t>((fs::file_size(text_) - 1) / 16);
  const int64_t per_epoch = (windows - std::llround(0.1 * static_cast<double>(windows))) / 8;
  ASSERT_LT(per_epoch, c.steps);
  ASSERT_GT(per_epoch, c.steps / 2);  // and not past the second
  expect_match_reference({{c, "zbv_s2_shuffled"}});
}

// Dropout 0.1 everywhere: every synchronous schedule's weights are the same
// bits, and not those of the same run without dropout.
TEST_F(GptReference, WithDropoutEverySynchronousScheduleSavesTheSameBits) {
  const std::string init = init_for(true);
  ASSERT_FALSE(init.empty());
  const std::vector<gpt_case> cases = {
      {"gpipe", 2, 0, 1, true, 0.1}, {"1f1b", 2, 0, 1, true, 0.1}, {"interleaved", 2, 2, 1, true, 0.1},
      {"zb-h1", 2, 0, 1, true, 0.1}, {"zb-v", 2, 0, 1, true, 0.1}};
  std::vector<std::string> saved;
  for (const auto& c : cases) saved.push_back(train(c, init, "dropout_" + testing_util::param_name(c.schedule)));
  ASSERT_FALSE(saved.front().empty());
  std::vector<std::string> args = {compare_state_dicts};
  for (const auto& f : saved)
    if (!f.empty()) args.push_back(f);
  ASSERT_EQ(args.size(), cases.size() + 1) << "a run failed (above)";
  args.push_back("--exact");
  auto r = run(python, args);
  EXPECT_EQ(r.code, 0) << "every schedule vs gpipe, dropout 0.1:\n" << describe(r);
  // Dropout is in play: far (beyond 2e-5) from the same run without it.
  const std::string without = train(gpt_case{"gpipe", 2}, init, "no_dropout_gpipe");
  ASSERT_FALSE(without.empty());
  auto dropped = run(python, {compare_state_dicts, saved.front(), without, "--tol", "2e-5"});
  EXPECT_EQ(dropped.code, 1) << "dropout 0.1 ended within 2e-5 of dropout 0:\n" << describe(dropped);
}

// An init_from whose tied copies differ cannot be loaded into one tensor.
TEST_F(GptReference, InitFromWithDifferingTiedCopiesIsRefused) {
  const std::string init = init_for(true);
  ASSERT_FALSE(init.empty());
  const std::string bad = (dir_ / "bad_tie.pt").string();
  auto p = run(python, {"-c",
                        "import sys, torch\n"
                        "sd = torch.load(sys.argv[1])\n"
                        "head = '6.weight'  # the lm_head: layers 0 embedding, 1-4 blocks, 5 layernorm\n"
                        "sd[head] = sd[head].clone()\n"
                        "sd[head][3, 5] += 0.25\n"
                        "assert not torch.equal(sd[head], sd['0.wte.weight'])\n"
                        "torch.save(sd, sys.argv[2])\n",
                        init, bad});
  ASSERT_EQ(p.code, 0) << describe(p);
  const std::string cfg = write(dir_ / "bad.yaml", config_yaml({"1f1b", 2}, text_, bad));
  const std::string save = (dir_ / "out.pt").string();
  auto r = run(ACTORPIPE_BIN, {"train", cfg, "--quiet", "--samples", "0", "--save", save});
  EXPECT_EQ(r.code, 2) << describe(r);
  // Refused for the tie, not for anything else in the config: the line
  // names one of the two keys (or the tie).
  const bool names_tie = r.err.find("6.weight") != std::string::npos ||
                         r.err.find("0.wte.weight") != std::string::npos || r.err.find("tie") != std::string::npos;
  EXPECT_TRUE(names_tie) << describe(r);
  EXPECT_FALSE(fs::exists(save));
  // The reference refuses it too.
  auto ref = run(python, {gpt_train, cfg, "--init", bad, "--out", (dir_ / "ref.pt").string(), "--quiet"});
  EXPECT_EQ(ref.code, 2) << describe(ref);
}

}  // namespace
}  // namespace actorpipe
