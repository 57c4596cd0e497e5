// An optimizer's state copied tensor by tensor (the supervised run's
// in-memory snapshot) continues exactly where the original would have.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/optimizer_state.hpp"

namespace actorpipe {
namespace {

std::vector<at::Tensor> make_params() {
  torch::manual_seed(3);
  return {torch::randn({4, 3}).requires_grad_(true), torch::randn({3}).requires_grad_(true)};
}

std::vector<at::Tensor> clone_params(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

void step(torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params, int seed) {
  torch::manual_seed(seed);
  opt.zero_grad();
  for (const auto& p : params) p.mutable_grad() = torch::randn_like(p);
  opt.step();
}

template <class Opt, class Options>
void expect_restored_run_matches(Options options) {
  auto a = make_params();
  Opt first(a, options);
  for (int s = 0; s < 3; ++s) step(first, a, 10 + s);
  auto b = clone_params(a);
  auto copy = copy_optimizer_state(first, a);
  // The copy is deep: stepping the original further does not reach it.
  step(first, a, 20);
  step(first, a, 21);
  // A fresh optimizer over the weights as they were, given the copy, steps
  // to the same bits as the original did.
  Opt second(b, options);
  restore_optimizer_state(second, b, *copy);
  step(second, b, 20);
  step(second, b, 21);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
  // And the copy serves a second restore too.
  auto c = clone_params(b);
  Opt third(c, options);
  restore_optimizer_state(third, c, *copy);
  EXPECT_EQ(copy->tensors.size(), a.size());
}

TEST(OptimizerStateCopy, AdamContinuesBitwiseWhereTheOriginalWould) {
  expect_restored_run_matches<torch::optim::Adam>(torch::optim::AdamOptions(0.01).amsgrad(true));
}

TEST(OptimizerStateCopy, SgdWithMomentumContinuesBitwiseWhereTheOriginalWould) {
  expect_restored_run_matches<torch::optim::SGD>(torch::optim::SGDOptions(0.05).momentum(0.9));
}

TEST(OptimizerStateCopy, AParameterCountMismatchIsRefused) {
  auto a = make_params();
  torch::optim::Adam opt(a, torch::optim::AdamOptions(0.01));
  step(opt, a, 1);
  auto copy = copy_optimizer_state(opt, a);
  std::vector<at::Tensor> fewer = {a[0]};
  torch::optim::Adam other(fewer, torch::optim::AdamOptions(0.01));
  EXPECT_THROW(restore_optimizer_state(other, fewer, *copy), std::invalid_argument);
}

}  // namespace
}  // namespace actorpipe
