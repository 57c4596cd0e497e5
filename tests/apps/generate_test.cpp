// actorpipe generate as a child process: greedy text equal to the reference
// model's (tests/reference/gpt_generate.py) for a short prompt and for one
// longer than max_seq, the same seed giving the same sampled text, different
// seeds different text, and bad command lines exiting 2 with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

using testing_util::write;
using run_result = testing_util::child_result;

const std::string python = "/usr/bin/python3";
const std::string reference_dir = std::string(ACTORPIPE_SOURCE_DIR) + "/tests/reference";

run_result actorpipe(const std::vector<std::string>& args) { return testing_util::run_child(ACTORPIPE_BIN, args); }

using testing_util::describe;

bool python_has_torch() {
  if (access(python.c_str(), X_OK) != 0) return false;
  return testing_util::run_child(python, {"-c", "import torch, yaml"}).code == 0;
}

// vocab 256 (bytes), dim 32, 4 heads, max_seq 16, 2 blocks, the head tied
// to the embedding. Dropout is on in the config: generate must not use it.
const char* const tiny_gpt = R"(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16, dropout: 0.1}
    - {type: gpt_block, dim: 32, heads: 4, mlp_hidden: 128, dropout: 0.1, repeat: 2}
    - {type: layernorm, dim: 32}
    - {type: lm_head, vocab: 256, dim: 32, tie: true}
data: {kind: text, path: text.txt, seq_len: 16, test_fraction: 0.1}
)";

// The reference model built with a seed, its matrices drawn wider than
// GPT-2's init and the embedding rows all of one norm, so that greedy
// decoding does not settle on one byte at once (a tied head favours the
// embedding rows with the largest norm). torch.save of its state_dict().
const char* const make_state = R"(import sys
sys.path.insert(0, sys.argv[1])
import torch, gpt_generate, gpt_reference
torch.manual_seed(int(sys.argv[4]))
model = gpt_reference.build(gpt_generate.expanded_layers(sys.argv[2]))
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() == 2:
            p.normal_(0.0, 0.3)
    wte = model[0].wte.weight
    wte.copy_(wte / wte.norm(dim=1, keepdim=True) * 4.0)
torch.save(model.state_dict(), sys.argv[3])
)";

class Generate : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = testing_util::test_dir("actorpipe_generate_test");
    // The data section names a file; generate reads none of it, but the
    // config must load.
    write(dir_ / "text.txt", std::string(4096, 'a'));
    config_ = write(dir_ / "tiny.yaml", tiny_gpt);
  }

  /// Writes the reference model's state dict (seeded); skips the test if
  /// python3 cannot import torch (the caller returns on IsSkipped()).
  void make_state_dict(int seed = 3) {
    if (!python_has_torch()) GTEST_SKIP() << python << " cannot import torch and yaml; no reference state dict";
    state_ = (dir_ / "state.pt").string();
    const std::string script = write(dir_ / "make_state.py", make_state);
    auto r = testing_util::run_child(python, {script, reference_dir, config_, state_, std::to_string(seed)});
    ASSERT_EQ(r.code, 0) << describe(r);
    ASSERT_TRUE(fs::exists(state_));
  }

  run_result reference_greedy(const std::string& prompt, int tokens) {
    return testing_util::run_child(python,
                                   {reference_dir + "/gpt_generate.py", config_, state_, prompt, std::to_string(tokens)});
  }

  fs::path dir_;
  std::string config_, state_;
};

TEST_F(Generate, GreedyTextIsTheReferenceModels) {
  make_state_dict();
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string prompt = "Hello, world";
  const int tokens = 48;
  auto r = actorpipe({"generate", config_, "--load", state_, "--prompt", prompt, "--tokens", std::to_string(tokens),
                      "--temperature", "0"});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto py = reference_greedy(prompt, tokens);
  ASSERT_EQ(py.code, 0) << describe(py);
  EXPECT_EQ(r.out.size(), prompt.size() + tokens + 1) << describe(r);
  EXPECT_EQ(r.out.rfind(prompt, 0), 0u) << "the output starts with the prompt\n" << describe(r);
  EXPECT_EQ(r.out, py.out) << "actorpipe:\n" << describe(r) << "\nreference:\n" << describe(py);
  EXPECT_EQ(r.err.find("note"), std::string::npos) << "no note for a prompt within max_seq\n" << describe(r);
}

TEST_F(Generate, PromptLongerThanMaxSeqKeepsItsLastBytes) {
  make_state_dict();
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string prompt = "The quick brown fox jumps over the lazy dog";  // 43 bytes, max_seq 16
  const int tokens = 40;
  auto r = actorpipe({"generate", config_, "--load", state_, "--prompt", prompt, "--tokens", std::to_string(tokens),
                      "--temperature", "0"});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto py = reference_greedy(prompt, tokens);
  ASSERT_EQ(py.code, 0) << describe(py);
  const std::string kept = prompt.substr(prompt.size() - 16);
  EXPECT_EQ(r.out.rfind(kept, 0), 0u) << "the output starts with the prompt's last 16 bytes\n" << describe(r);
  EXPECT_EQ(r.out.size(), kept.size() + tokens + 1) << describe(r);
  EXPECT_EQ(r.out, py.out) << "actorpipe:\n" << describe(r) << "\nreference:\n" << describe(py);
  EXPECT_NE(r.err.find("note: the prompt is 43 bytes, longer than max_seq 16; it keeps its last 16 bytes"),
            std::string::npos)
      << describe(r);
}

TEST_F(Generate, TheSameSeedGivesTheSameTextAndOtherSeedsOtherText) {
  make_state_dict();
  if (IsSkipped() || HasFatalFailure()) return;
  auto sample = [&](const std::string& seed) {
    return actorpipe({"generate", config_, "--load", state_, "--prompt", "Once upon a time", "--tokens", "64",
                      "--temperature", "0.8", "--top-k", "40", "--seed", seed});
  };
  auto a = sample("7"), b = sample("7"), c = sample("8");
  ASSERT_EQ(a.code, 0) << describe(a);
  ASSERT_EQ(b.code, 0) << describe(b);
  ASSERT_EQ(c.code, 0) << describe(c);
  EXPECT_EQ(a.out.size(), std::string("Once upon a time").size() + 64 + 1) << describe(a);
  EXPECT_EQ(a.out, b.out) << "the same seed\n" << describe(a) << "\n" << describe(b);
  // 64 draws among up to 40 bytes each: equal texts from two seeds would
  // take a near-deterministic model, which this one is not.
  EXPECT_NE(a.out, c.out) << "seeds 7 and 8\n" << describe(a) << "\n" << describe(c);
  // Sampling differs from greedy decoding (the same prompt, temperature 0).
  auto greedy = actorpipe({"generate", config_, "--load", state_, "--prompt", "Once upon a time", "--tokens", "64",
                           "--temperature", "0"});
  ASSERT_EQ(greedy.code, 0) << describe(greedy);
  EXPECT_NE(a.out, greedy.out) << describe(a) << "\n" << describe(greedy);
}

// The whole flow: train --save writes the state dict (the tied head's weight
// under both keys), generate runs it, and its greedy text is the reference
// model's with those weights.
TEST_F(Generate, RunsWhatTrainSaved) {
  if (!python_has_torch()) GTEST_SKIP() << python << " cannot import torch and yaml; no reference to compare with";
  std::string corpus;
  for (int i = 0; i < 100; ++i) corpus += "the cat sat on the mat. the dog ate the log.\n";
  write(dir_ / "text.txt", corpus);
  const std::string cfg = write(dir_ / "train.yaml", std::string(tiny_gpt) + R"(train: {steps: 40, batch_size: 16, optimizer: {type: adam, lr: 0.003}}
pipeline: {stages: 2, microbatches: 4}
)");
  state_ = (dir_ / "trained.pt").string();
  auto t = actorpipe({"train", cfg, "--save", state_, "--quiet"});
  ASSERT_EQ(t.code, 0) << describe(t);
  config_ = cfg;
  auto r = actorpipe({"generate", cfg, "--load", state_, "--prompt", "the cat ", "--tokens", "40", "--temperature", "0"});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto py = reference_greedy("the cat ", 40);
  ASSERT_EQ(py.code, 0) << describe(py);
  EXPECT_EQ(r.out, py.out) << "actorpipe:\n" << describe(r) << "\nreference:\n" << describe(py);
}

TEST_F(Generate, RefusesAStateDictOfAnotherShape) {
  make_state_dict();
  if (IsSkipped() || HasFatalFailure()) return;
  std::string wider = tiny_gpt;
  for (size_t at; (at = wider.find("dim: 32")) != std::string::npos;) wider.replace(at, 7, "dim: 64");
  const std::string cfg = write(dir_ / "wider.yaml", wider);
  auto r = actorpipe({"generate", cfg, "--load", state_, "--prompt", "hi"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find("--load: " + state_ + ": '0.wte.weight' has shape [256, 32], the model expects [256, 64]"),
            std::string::npos)
      << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

TEST_F(Generate, BadCommandLinesExit2WithAMessage) {
  const std::string any_state = write(dir_ / "not_a_state.pt", "not a zip file");
  struct bad_case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<bad_case> cases = {
      {{"generate", config_, "--prompt", "hi"}, "needs --load"},
      {{"generate", config_, "--load", any_state, "--prompt", ""}, "--prompt is empty"},
      {{"generate", config_, "--load", any_state}, "needs --prompt"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--tokens", "-1"},
       "--tokens expects a positive integer, got '-1'"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--tokens", "many"},
       "--tokens expects a positive integer"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--temperature", "-0.5"},
       "--temperature expects a number >= 0"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--top-k", "-3"},
       "--top-k expects a non-negative integer"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--seed", "x"},
       "--seed expects a non-negative integer"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--device", "tpu"},
       "--device expects cpu or cuda:N"},
      {{"generate", "--load", any_state, "--prompt", "hi"}, "generate takes one CONFIG"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi", "--bogus"}, "unknown option --bogus"},
      // The state dict is read after the config: a missing or unreadable one.
      {{"generate", config_, "--load", (dir_ / "missing.pt").string(), "--prompt", "hi"}, "missing.pt"},
      {{"generate", config_, "--load", any_state, "--prompt", "hi"}, "not_a_state.pt"},
  };
  for (const auto& c : cases) {
    auto r = actorpipe(c.args);
    std::string cmd;
    for (const auto& a : c.args) cmd += " '" + a + "'";
    EXPECT_EQ(r.code, 2) << cmd << "\n" << describe(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << cmd << "\nexpected: " << c.message << "\n" << describe(r);
    EXPECT_TRUE(r.out.empty()) << cmd << "\n" << describe(r);
  }
}

TEST_F(Generate, RefusesAModelThatIsNotAGpt) {
  const std::string mlp = write(dir_ / "mlp.yaml", R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 4}
data:
  kind: synthetic
)");
  const std::string any_state = write(dir_ / "state.pt", "unused");
  auto r = actorpipe({"generate", mlp, "--load", any_state, "--prompt", "hi"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find("must start with an embedding or a token_embedding and end with an lm_head (layer 0 is a "
                       "linear)"),
            std::string::npos)
      << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

TEST_F(Generate, HelpSaysItRunsTheLayersInOneProcess) {
  auto r = actorpipe({"generate", "--help"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("usage: actorpipe generate CONFIG --load STATE --prompt TEXT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("runs the layers in one process"), std::string::npos) << r.out;
  for (const char* flag : {"--load", "--prompt", "--tokens", "--temperature", "--top-k", "--seed", "--device"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
  auto top = actorpipe({"--help"});
  EXPECT_NE(top.out.find("generate CONFIG"), std::string::npos) << top.out;
}

}  // namespace
}  // namespace actorpipe
