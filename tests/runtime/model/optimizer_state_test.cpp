// An optimizer's state copied tensor by tensor (the supervised run's
// in-memory snapshot) continues exactly where the original would have.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/model/adamw.hpp"
#include "runtime/model/optimizer_state.hpp"

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

// step_aside against LibTorch's own step, over tensors whose sizes leave
// vectorised bodies, scalar tails and (past 32768 elements) parallel
// chunks: the same bits, step after step; and a copy that shares the
// tensors from before a step still holds them after it. With a pool, the
// buffers of a dropped copy serve again: two sets in all.
// `make(params)`: a new optimizer over them.
template <class Make>
void expect_aside_matches(Make make, bool pooled = true, int64_t block = aside_block) {
  tensor_pool pool;
  size_t per_set = 0;
  torch::manual_seed(5);
  std::vector<at::Tensor> a = {torch::randn({300, 211}).requires_grad_(true), torch::randn({37}).requires_grad_(true),
                               torch::randn({5, 3}).requires_grad_(true), torch::randn({700, 301}).requires_grad_(true)};
  auto b = clone_params(a);
  auto ours_made = make(a), theirs_made = make(b);
  auto& ours = *ours_made;
  auto& theirs = *theirs_made;
  for (int s = 0; s < 4; ++s) {
    // A rate that changes every step, as a schedule's does.
    for (auto* o : {&ours, &theirs})
      for (auto& g : o->param_groups()) g.options().set_lr(0.01 / (s + 1));
    torch::manual_seed(40 + s);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].mutable_grad() = torch::randn_like(a[i]);
      b[i].mutable_grad() = a[i].grad().clone();
    }
    const auto* impl = a[0].unsafeGetTensorImpl();
    auto shared = copy_optimizer_state(ours, a, {}, /*share=*/true);
    auto deep = copy_optimizer_state(ours, a);
    std::vector<at::Tensor> before_shared, before_deep;
    for (const auto& p : a) {
      before_shared.push_back(p.detach());
      before_deep.push_back(p.detach().clone());
    }
    step_aside(ours, pooled ? &pool : nullptr, block);
    theirs.step();
    EXPECT_EQ(a[0].unsafeGetTensorImpl(), impl) << "the parameter is the same tensor, with new data";
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "step " << s << ", parameter " << i;
      EXPECT_FALSE(torch::equal(a[i], before_deep[i])) << "the step moved parameter " << i;
      EXPECT_TRUE(torch::equal(before_shared[i], before_deep[i])) << "the shared copy of parameter " << i;
      for (size_t k = 0; k < deep->tensors[i].size(); ++k) {
        const auto& was = deep->tensors[i][k];
        const auto& kept = shared->tensors[i][k];
        ASSERT_EQ(was.defined(), kept.defined());
        if (was.defined()) {
          EXPECT_TRUE(torch::equal(was, kept)) << "the shared state " << k << " of " << i;
        }
      }
    }
    auto mine = copy_optimizer_state(ours, a), reference = copy_optimizer_state(theirs, b);
    ASSERT_EQ(mine->tensors.size(), reference->tensors.size());
    per_set = a.size();
    for (const auto& ts : mine->tensors)
      for (const auto& t : ts) per_set += t.defined() ? 1 : 0;
    for (size_t i = 0; i < mine->tensors.size(); ++i) {
      EXPECT_EQ(mine->steps[i], reference->steps[i]);
      ASSERT_EQ(mine->tensors[i].size(), reference->tensors[i].size());
      for (size_t k = 0; k < mine->tensors[i].size(); ++k) {
        ASSERT_EQ(mine->tensors[i][k].defined(), reference->tensors[i][k].defined());
        if (mine->tensors[i][k].defined()) {
          EXPECT_TRUE(torch::equal(mine->tensors[i][k], reference->tensors[i][k])) << "state " << k << " of " << i;
        }
      }
    }
  }
  if (pooled) {
    EXPECT_GT(pool.size(), 0u);
    EXPECT_LE(pool.size(), 2 * per_set) << "the pool took more than two sets of buffers";
  } else {
    EXPECT_EQ(pool.size(), 0u);
  }
}

template <class Opt, class Options>
void expect_aside_matches_step(Options options, bool pooled = true, int64_t block = aside_block) {
  expect_aside_matches([&](const std::vector<at::Tensor>& p) { return std::make_unique<Opt>(p, options); }, pooled,
                       block);
}

// AdamW with a decay per parameter: 0.1 on the matrices, none on the 1-D
// one (decay_1d false), as the stage makes it.
std::unique_ptr<torch::optim::Optimizer> make_adamw(const std::vector<at::Tensor>& p, bool decay_1d = false) {
  optimizer_config o;
  o.type = "adamw";
  o.weight_decay = 0.1;
  o.decay_1d = decay_1d;
  return std::make_unique<adamw>(p, torch::optim::AdamOptions(0.01).betas({0.9, 0.95}).eps(1e-8),
                                 adamw_decays(o, p));
}

TEST(StepAside, AdamWStepsToTheBitsOfItsOwnStepInBlocksOfAnySize) {
  for (int64_t block : {int64_t{0}, int64_t{1000}, aside_block}) {
    SCOPED_TRACE("block " + std::to_string(block));
    expect_aside_matches([](const std::vector<at::Tensor>& p) { return make_adamw(p); }, true, block);
    expect_aside_matches([](const std::vector<at::Tensor>& p) { return make_adamw(p, true); }, false, block);
  }
}

// Ours against LibTorch's own AdamW (another implementation of torch's
// algorithm), its parameters in two groups as decay_1d false makes them:
// the same bits after every step, the rate changing each step.
TEST(AdamW, StepsToTheBitsOfLibTorchsAdamWWithItsParameterGroups) {
  torch::manual_seed(9);
  std::vector<at::Tensor> a = {torch::randn({64, 33}).requires_grad_(true), torch::randn({33}).requires_grad_(true),
                               torch::randn({700, 100}).requires_grad_(true)};
  auto b = clone_params(a);
  auto ours = make_adamw(a);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{b[0], b[2]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(std::vector<at::Tensor>{b[1]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW theirs(std::move(groups), torch::optim::AdamWOptions(0.01));
  for (int s = 0; s < 5; ++s) {
    torch::manual_seed(60 + s);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].mutable_grad() = torch::randn_like(a[i]);
      b[i].mutable_grad() = a[i].grad().clone();
    }
    const double lr = 0.02 * (s + 1) / 6;
    for (auto& g : ours->param_groups()) g.options().set_lr(lr);
    for (auto& g : theirs.param_groups()) g.options().set_lr(lr);
    if (s % 2 == 0)
      step_aside(*ours);
    else
      ours->step();
    theirs.step();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "step " << s << ", parameter " << i;
  }
  // Its state is Adam's: a copy restores into another adamw and goes on alike.
  auto copy = copy_optimizer_state(*ours, a);
  auto c = clone_params(a);
  auto again = make_adamw(c);
  restore_optimizer_state(*again, c, *copy);
  for (auto* o : {ours.get(), again.get()})
    for (auto& g : o->param_groups()) g.options().set_lr(0.005);
  torch::manual_seed(99);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i].mutable_grad() = torch::randn_like(a[i]);
    c[i].mutable_grad() = a[i].grad().clone();
  }
  ours->step();
  again->step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], c[i])) << "restored, parameter " << i;
}

TEST(StepAside, AdamStepsToTheBitsOfLibTorchsStepAndLeavesTheOldTensors) {
  expect_aside_matches_step<torch::optim::Adam>(torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6));
  expect_aside_matches_step<torch::optim::Adam>(torch::optim::AdamOptions(0.01), /*pooled=*/false);
}

// Adam's blocks (step_aside's `block`): whole tensors, blocks that are
// no multiple of a vector's width (1000), and the default, over one, two
// and three threads: LibTorch's bits every time.
TEST(StepAside, AdamInBlocksOfAnySizeOnAnyThreadsStepsToTheSameBits) {
  const int threads = at::get_num_threads();
  for (int t : {1, 2, 3}) {
    at::set_num_threads(t);
    for (int64_t block : {int64_t{0}, int64_t{1000}, int64_t{4096}, aside_block}) {
      SCOPED_TRACE("threads " + std::to_string(t) + ", block " + std::to_string(block));
      expect_aside_matches_step<torch::optim::Adam>(torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6),
                                                    true, block);
      expect_aside_matches_step<torch::optim::Adam>(torch::optim::AdamOptions(0.003).weight_decay(0.1), true, block);
    }
  }
  at::set_num_threads(threads);
}

TEST(StepAside, AdamWithWeightDecayAndAmsgradToo) {
  expect_aside_matches_step<torch::optim::Adam>(torch::optim::AdamOptions(0.003).weight_decay(0.1).amsgrad(true));
}

TEST(StepAside, SgdPlainWithMomentumAndNesterov) {
  expect_aside_matches_step<torch::optim::SGD>(torch::optim::SGDOptions(0.05));
  expect_aside_matches_step<torch::optim::SGD>(
      torch::optim::SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01));
  expect_aside_matches_step<torch::optim::SGD>(torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
}

TEST(StepAside, AnotherOptimizerIsRefused) {
  auto a = make_params();
  torch::optim::RMSprop opt(a, torch::optim::RMSpropOptions(0.01));
  EXPECT_FALSE(steps_aside(opt));
  EXPECT_THROW(step_aside(opt), std::invalid_argument);
}

}  // namespace
}  // namespace actorpipe
