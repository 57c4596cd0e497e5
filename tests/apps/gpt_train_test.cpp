// actorpipe train and simulate on a GPT config, as the real binary: the
// stash peaks the schedules promise for [b, T, dim] activations, the
// held-out loss in nats per byte, the bounding stage named from the model
// alone, and the tie through a zb-v's V (both copies on stage 0).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cpu_only.hpp"
#include "runtime/files/state_dict.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

testing_util::child_result actorpipe(const std::vector<std::string>& args) {
  testing_util::child_limits limits;
  limits.timeout_s = 240;  // a hang fails the test, and the child is killed
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

// Words in a seeded order: enough bytes for several batches.
std::string some_text() {
  const std::vector<std::string> words{"the", "stage", "fires", "a", "ready", "op", "under", "its", "policy",
                                       "and", "sends", "activations", "on", "to", "next", "one"};
  std::string text;
  uint64_t x = 12345;
  while (text.size() < 6000) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    text += words[(x >> 33) % words.size()];
    text += (x >> 20) % 7 == 0 ? ".\n" : " ";
  }
  return text;
}

// 6 layers: embedding, 4 blocks, layernorm, head; T 16, dim 32, b = 1.
std::string gpt_config(const fs::path& dir, const std::string& pipeline) {
  testing_util::write(dir / "text.txt", some_text());
  return testing_util::write(dir / "gpt.yaml", R"(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: gpt_block, dim: 32, heads: 4, mlp_hidden: 64, repeat: 4}
    - {type: layernorm, dim: 32}
    - {type: lm_head, vocab: 256, dim: 32, tie: true}
data: {kind: text, path: text.txt, seq_len: 16, test_fraction: 0.1}
train: {steps: 2, batch_size: 8}
pipeline: )" + pipeline + "\n");
}

nlohmann::json results_of(const fs::path& dir, const std::string& cfg, const std::string& schedule) {
  const std::string results = (dir / ("results_" + schedule + ".json")).string();
  auto r = actorpipe({"train", cfg, "--schedule", schedule, "--results", results, "--quiet"});
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(testing_util::slurp_file(results));
}

TEST(GptTrain, StashPeaksAreStagesFor1f1bAndMicrobatchesForGpipe) {
  const fs::path dir = testing_util::test_dir("actorpipe_gpt_train_test_stash");
  const std::string cfg = gpt_config(dir, "{stages: 4, microbatches: 8, partition: [[0, 1], [2, 2], [3, 3], [4, 6]]}");
  // A stashed microbatch on stage 0 holds the embedding's and the block's
  // outputs: 2 x [1, 16, 32] floats.
  const int64_t per_microbatch = 2 * 16 * 32 * 4;
  for (const auto& [schedule, expected] : std::vector<std::pair<std::string, int>>{{"1f1b", 4}, {"gpipe", 8}}) {
    const auto j = results_of(dir, cfg, schedule);
    const auto& stage0 = j["steps"].back()["stages"][0];
    EXPECT_EQ(stage0["peak_stash"].get<int>(), expected) << schedule;
    EXPECT_EQ(stage0["peak_stash_bytes"].get<int64_t>(), expected * per_microbatch) << schedule;
  }
  fs::remove_all(dir);
}

TEST(GptTrain, PrintsTheHeldOutLossInNatsPerByte) {
  const fs::path dir = testing_util::test_dir("actorpipe_gpt_train_test_loss");
  const std::string cfg = gpt_config(dir, "{stages: 2, microbatches: 4}");
  const std::string results = (dir / "results.json").string();
  auto r = actorpipe({"train", cfg, "--results", results});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(testing_util::slurp_file(results));
  const double loss = j["summary"]["test_loss"].get<double>();
  // Untrained byte-level model: close to ln 256 = 5.545 nats per byte.
  EXPECT_GT(loss, 4.5);
  EXPECT_LT(loss, 6.0);
  char line[128];
  std::snprintf(line, sizeof line, "held-out loss %.4f nats per byte", loss);
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(GptTrain, TheTiedCopiesStayEqualOnOneStageAndAcrossStages) {
  const fs::path dir = testing_util::test_dir("actorpipe_gpt_train_test_tie");
  for (const std::string& pipeline :
       {std::string("{stages: 2, microbatches: 4, schedule: zb-v}"), std::string("{stages: 2, microbatches: 4}"),
        std::string("{stages: 1, microbatches: 2}")}) {
    const std::string cfg = gpt_config(dir, pipeline);
    const std::string save = (dir / "out.pt").string();
    auto r = actorpipe({"train", cfg, "--save", save, "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    std::map<std::string, at::Tensor> w;
    for (auto& [k, t] : load_tensors(save)) w[k] = t;
    ASSERT_TRUE(w.count("0.wte.weight") && w.count("6.weight")) << pipeline;
    EXPECT_TRUE(w["0.wte.weight"].equal(w["6.weight"])) << pipeline;
  }
  fs::remove_all(dir);
}

// The tie's two-rank group formed through the rendezvous store: the same
// bytes as one process, for pp 2 on 2 processes and dp 2 x pp 2 on 4.
TEST(GptTrain, TheTieAcrossProcessesSavesTheOneProcessBytes) {
  const fs::path dir = testing_util::test_dir("actorpipe_gpt_train_test_launch");
  for (const auto& [pipeline, nprocs] :
       std::vector<std::pair<std::string, std::string>>{{"{stages: 2, microbatches: 4}\nparallel: {dp: 1}", "2"},
                                                        {"{stages: 2, microbatches: 2}\nparallel: {dp: 2}", "4"}}) {
    const std::string cfg = gpt_config(dir, pipeline);
    const std::string one = (dir / "one.pt").string(), many = (dir / "many.pt").string();
    auto a = actorpipe({"train", cfg, "--quiet", "--samples", "0", "--save", one});
    ASSERT_EQ(a.code, 0) << a.err;
    auto b = actorpipe({"launch", "--nprocs", nprocs, cfg, "--quiet", "--samples", "0", "--save", many});
    ASSERT_EQ(b.code, 0) << b.err;
    const std::string x = testing_util::slurp_file(one), y = testing_util::slurp_file(many);
    ASSERT_FALSE(x.empty());
    EXPECT_TRUE(x == y) << "launch --nprocs " << nprocs << " saved other bytes than one process";
  }
  fs::remove_all(dir);
}

TEST(GptTrain, SimulateNamesTheStageThatBoundsTheStep) {
  const fs::path dir = testing_util::test_dir("actorpipe_gpt_train_test_sim");
  // Stage 3 holds a block and the 256-way head; the others a block each
  // (stage 0 also the embedding, a gather).
  const std::string cfg =
      gpt_config(dir, "{stages: 4, microbatches: 8, partition: [[0, 1], [2, 2], [3, 3], [4, 6]]}");
  auto r = actorpipe({"simulate", cfg});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stage 3 bounds the step"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// The cost model fitted from the run's own trace: every stage's F and B,
// and the stage that bounds the step, named.
TEST(GptTrain, SimulateFitsTheCostModelToAMeasuredTrace) {
  const fs::path dir = testing_util::test_dir("actorpipe_gpt_train_test_fit");
  const std::string cfg = gpt_config(dir, "{stages: 2, microbatches: 4, schedule: zb-h1}");
  const std::string trace = (dir / "trace.json").string();
  auto r = actorpipe({"train", cfg, "--quiet", "--samples", "0", "--trace", trace});
  ASSERT_EQ(r.code, 0) << r.err;
  auto sim = actorpipe({"simulate", cfg, "--fit", trace});
  ASSERT_EQ(sim.code, 0) << sim.err;
  // 2 steps x 4 microbatches x 3 ops (F, B, W) x 2 stages.
  EXPECT_NE(sim.out.find("fitted from " + trace + " (48 ops)"), std::string::npos) << sim.out;
  EXPECT_NE(sim.out.find("bounds the step"), std::string::npos) << sim.out;
  auto wrong = actorpipe({"simulate", cfg, "--fit", trace, "--stages", "3"});
  EXPECT_EQ(wrong.code, 2) << wrong.out;
  EXPECT_NE(wrong.err.find("was the trace taken with 3 stages?"), std::string::npos) << wrong.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace actorpipe
