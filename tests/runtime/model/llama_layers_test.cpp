// The LLaMA layers (runtime/model/llama) against the reference's modules
// (tests/reference/llama_reference.py, run by Debian's python3-torch): each
// layer's output, input gradient and every weight's gradient within 1e-6,
// for grouped-query attention with 1, 2 and all key/value heads, an odd
// sequence length, LLaMA 3's rope_theta 500000, RMSNorm and the token
// embedding. One python3 start per case (torch's import is the cost).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/files/state_dict.hpp"
#include "runtime/model/model.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

const std::string python = "/usr/bin/python3";
const std::string script = std::string(ACTORPIPE_SOURCE_DIR) + "/tests/reference/llama_layer_grads.py";

struct layer_case {
  std::string name;
  layer_spec spec;
  std::string json;  ///< the same layer as the config (and the reference) writes it
  int64_t seq = 7;   ///< odd on purpose
};

layer_case block(const std::string& name, int64_t heads, int64_t kv_heads, double theta) {
  layer_case c;
  c.name = name;
  c.spec.type = "llama_block";
  c.spec.dim = 32;
  c.spec.heads = heads;
  c.spec.kv_heads = kv_heads;
  c.spec.ffn_hidden = 48;
  c.spec.rope_theta = theta;
  c.spec.eps = 1e-5;
  std::ostringstream j;
  j << "{\"type\": \"llama_block\", \"dim\": 32, \"heads\": " << heads << ", \"kv_heads\": " << kv_heads
    << ", \"ffn_hidden\": 48, \"rope_theta\": " << theta << ", \"norm_eps\": 1e-05}";
  c.json = j.str();
  return c;
}

bool have_python_torch() {
  return access(python.c_str(), X_OK) == 0 && testing_util::run_child(python, {"-c", "import torch, numpy"}).code == 0;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Runs `c`'s layer here, writes what the reference needs, and returns the
// layer, its input and its output (with gradients), for compare().
struct ran {
  std::unique_ptr<layer> l;
  at::Tensor x, out;
  std::string in_path, out_path;
};

ran run_here(const layer_case& c, const fs::path& dir) {
  torch::manual_seed(11);
  ran r;
  r.l = std::make_unique<layer>(0, c.spec);
  layer& l = *r.l;
  named_tensors in;
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : l.parameters()) {
      // Norm gains near 1 (their gradient then matters), matrices and tables
      // as N(0, 0.02) would make them, scaled up so attention is not flat.
      if (t.dim() == 1)
        t.copy_(1.0 + 0.1 * torch::randn_like(t));
      else
        t.copy_(0.2 * torch::randn_like(t));
      in.emplace_back(name, t.detach().clone());
    }
  }
  at::Tensor x;
  const bool ids = c.spec.type == "token_embedding";
  if (ids)
    x = torch::randint(0, c.spec.vocab, {2, c.seq}, torch::kLong);
  else
    x = torch::randn({2, c.seq, c.spec.dim}).requires_grad_(true);
  const forward_ctx ctx{0, 0, 0, true};
  const at::Tensor out = l.forward(x, ctx);
  const at::Tensor g = torch::randn_like(out);
  out.backward(g);
  in.emplace_back("x", x.detach());
  in.emplace_back("g", g);
  r.in_path = (dir / (c.name + "_in.pt")).string();
  r.out_path = (dir / (c.name + "_out.pt")).string();
  save_tensors(r.in_path, in);
  r.x = x;
  r.out = out;
  return r;
}

void compare(const layer_case& c, const ran& r) {
  SCOPED_TRACE(c.name);
  const layer& l = *r.l;
  const at::Tensor& x = r.x;
  const at::Tensor& out = r.out;
  const bool ids = c.spec.type == "token_embedding";
  std::map<std::string, at::Tensor> want;
  for (auto& [name, t] : load_tensors(r.out_path)) want[name] = t;
  ASSERT_TRUE(want.count("out"));
  EXPECT_LE(max_diff(out.detach(), want["out"]), 1e-6) << "the output";
  if (!ids) {
    ASSERT_TRUE(want.count("x.grad"));
    EXPECT_LE(max_diff(x.grad(), want["x.grad"]), 1e-6) << "the input's gradient";
  }
  for (const auto& [name, t] : l.parameters()) {
    ASSERT_TRUE(want.count("grad." + name)) << name;
    EXPECT_LE(max_diff(t.grad(), want["grad." + name]), 1e-6) << name << "'s gradient";
  }
}

TEST(LlamaLayers, EachLayersForwardAndBackwardMatchTheReference) {
  if (!have_python_torch()) GTEST_SKIP() << python << " cannot import torch; no reference to compare with";
  const fs::path dir = testing_util::test_dir("actorpipe_llama_layers_test");
  std::vector<layer_case> cases = {block("gqa_one_kv_head", 4, 1, 10000.0), block("gqa_two_kv_heads", 4, 2, 10000.0),
                                   block("every_head_its_own_kv", 4, 4, 10000.0),
                                   block("rope_theta_500000", 4, 2, 500000.0)};
  layer_case norm;
  norm.name = "rmsnorm";
  norm.spec.type = "rmsnorm";
  norm.spec.dim = 32;
  norm.spec.eps = 1e-6;
  norm.json = "{\"type\": \"rmsnorm\", \"dim\": 32, \"eps\": 1e-06}";
  cases.push_back(norm);
  layer_case emb;
  emb.name = "token_embedding";
  emb.spec.type = "token_embedding";
  emb.spec.vocab = 50;
  emb.spec.dim = 32;
  emb.json = "{\"type\": \"token_embedding\", \"vocab\": 50, \"dim\": 32}";
  cases.push_back(emb);
  std::vector<ran> runs;
  std::string list = "[";
  for (const auto& c : cases) {
    runs.push_back(run_here(c, dir));
    list += (list.size() > 1 ? ", " : "") + std::string("{\"in\": \"") + runs.back().in_path + "\", \"out\": \"" +
            runs.back().out_path + "\", \"spec\": " + c.json + "}";
  }
  const std::string cases_json = testing_util::write(dir / "cases.json", list + "]");
  auto r = testing_util::run_child(python, {script, cases_json});
  ASSERT_EQ(r.code, 0) << testing_util::describe(r);
  for (size_t i = 0; i < cases.size(); ++i) compare(cases[i], runs[i]);
}

}  // namespace
}  // namespace actorpipe
