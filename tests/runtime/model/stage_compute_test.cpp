// The stage's compute without actors: F then B (and W when split) on a
// two-layer stage equals autograd run by hand on copies of the same layers.
#include "runtime/model/stage_compute.hpp"

#include <gtest/gtest.h>

#include "runtime/config/config.hpp"

namespace actorpipe {
namespace {

layer_spec linear(int64_t in, int64_t out) {
  layer_spec s;
  s.type = "linear";
  s.in = in;
  s.out = out;
  return s;
}

layer_spec tanh_layer() {
  layer_spec s;
  s.type = "tanh";
  return s;
}

struct fixture {
  std::shared_ptr<layer_stack> stack;
  std::vector<at::Tensor> copies;  // W1, b1, W2, b2, detached, as leaves
};

fixture two_layers() {
  torch::manual_seed(3);
  std::vector<layer> ls;
  ls.emplace_back(0, linear(6, 5));
  ls.emplace_back(1, tanh_layer());
  ls.emplace_back(2, linear(5, 3));
  fixture f{std::make_shared<layer_stack>(std::move(ls)), {}};
  for (const auto& p : f.stack->parameters()) f.copies.push_back(p.detach().clone().requires_grad_(true));
  return f;
}

at::Tensor by_hand(const std::vector<at::Tensor>& w, const at::Tensor& x) {
  namespace F = torch::nn::functional;
  return F::linear(torch::tanh(F::linear(x, w[0], w[1])), w[2], w[3]);
}

compute_shape shape_of(const fixture& f, bool split, bool recompute) {
  compute_shape s;
  s.layers = {f.stack};
  s.microbatches = 2;
  s.split = split;
  s.recompute = recompute;
  s.batch_size = 8;
  return s;
}

void expect_grads_equal(const fixture& f) {
  auto params = f.stack->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << i;
    EXPECT_TRUE(torch::allclose(params[i].grad(), f.copies[i].grad(), 1e-6, 1e-7)) << "parameter " << i;
  }
}

class StageCompute : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(StageCompute, AMiddleStagesForwardAndBackwardEqualAutogradOnTheSameLayers) {
  const auto [split, recompute] = GetParam();
  auto f = two_layers();
  stage_compute c(shape_of(f, split, recompute));
  c.begin_step();
  auto x = torch::randn({4, 6});
  auto g = torch::randn({4, 3});
  auto leaf = x.clone().requires_grad_(true);
  auto out = c.forward(0, 1, forward_ctx{1, 0, 1, true}, leaf, at::Tensor(), false, false, nullptr, false, true);
  EXPECT_EQ(c.stashed(), 1);
  auto grad_in = c.backward(0, 1, g, false, false, false);
  if (split) c.weight(0, 1);
  EXPECT_EQ(c.stashed(), 0);
  EXPECT_EQ(c.stash_bytes(), 0);

  auto ref_x = x.clone().requires_grad_(true);
  auto ref = by_hand(f.copies, ref_x);
  ref.backward(g);
  EXPECT_TRUE(torch::allclose(out.out, ref, 1e-6, 1e-7));
  ASSERT_TRUE(grad_in.defined());
  EXPECT_TRUE(torch::allclose(grad_in, ref_x.grad(), 1e-6, 1e-7));
  expect_grads_equal(f);
}

TEST_P(StageCompute, TheLastStagesLossIsWeightedByItsShareOfTheBatchAndBackpropagates) {
  const auto [split, recompute] = GetParam();
  auto f = two_layers();
  stage_compute c(shape_of(f, split, recompute));
  c.begin_step();
  auto x = torch::randn({4, 6});
  auto y = torch::tensor({0, 2, 1, 2}, torch::kLong);
  auto leaf = x.clone().requires_grad_(true);
  auto r = c.forward(0, 0, forward_ctx{1, 0, 0, true}, leaf, y, false, true, nullptr, false, true);
  auto grad_in = c.backward(0, 0, at::Tensor(), false, true, false);
  if (split) c.weight(0, 0);

  auto ref_x = x.clone().requires_grad_(true);
  auto ref = torch::nn::functional::cross_entropy(by_hand(f.copies, ref_x), y) * (4.0 / 8.0);
  ref.backward();
  EXPECT_NEAR(r.loss.item<double>(), ref.item<double>(), 1e-7);
  EXPECT_NEAR(c.loss_sum().item<double>(), ref.item<double>(), 1e-7);
  EXPECT_EQ(c.samples(), 4);
  EXPECT_TRUE(torch::allclose(grad_in, ref_x.grad(), 1e-6, 1e-7));
  expect_grads_equal(f);
}

INSTANTIATE_TEST_SUITE_P(Backwards, StageCompute,
                         ::testing::Values(std::make_pair(false, false), std::make_pair(true, false),
                                           std::make_pair(false, true), std::make_pair(true, true)),
                         [](const auto& info) {
                           return std::string(info.param.first ? "split" : "whole") +
                                  (info.param.second ? "_recompute" : "");
                         });

TEST(StageCompute, APoisonedGradientReachesTheInputGradient) {
  auto f = two_layers();
  stage_compute c(shape_of(f, false, false));
  c.begin_step();
  auto leaf = torch::randn({2, 6}).requires_grad_(true);
  c.forward(0, 0, forward_ctx{1, 0, 0, true}, leaf, at::Tensor(), false, false, nullptr, false, true);
  auto grad_in = c.backward(0, 0, torch::ones({2, 3}), false, false, true);
  EXPECT_FALSE(torch::isfinite(grad_in).all().item<bool>());
}

}  // namespace
}  // namespace actorpipe
