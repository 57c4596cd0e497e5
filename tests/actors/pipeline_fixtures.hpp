#pragma once
// Shared by the pipeline tests: a small config and the plain single-module
// LibTorch loop that the pipeline's weights are held against.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/config/config.hpp"
#include "runtime/schedule/policies/registry.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/plain_module.hpp"

namespace actorpipe {
namespace {

/// A small model with one linear per stage at S = 4, synthetic data.
inline config small_config(const std::string& schedule, int stages, int microbatches,
                    bool dropout = false) {
  config c;
  c.path = "test.yaml";
  auto lin = [](int64_t in, int64_t out) {
    layer_spec s;
    s.type = "linear";
    s.in = in;
    s.out = out;
    return s;
  };
  auto act = [](const char* t, double p = 0.0) {
    layer_spec s;
    s.type = t;
    s.p = p;
    return s;
  };
  c.model.layers = {lin(16, 32), act("relu"), lin(32, 32), act("tanh")};
  if (dropout) c.model.layers.push_back(act("dropout", 0.25));
  c.model.layers.push_back(lin(32, 32));
  c.model.layers.push_back(act("gelu"));
  c.model.layers.push_back(lin(32, 32));  // enough layers for 4 x 2 virtual stages
  c.model.layers.push_back(act("relu"));
  c.model.layers.push_back(lin(32, 4));
  c.data.kind = "synthetic";
  c.data.samples = 256;
  c.data.features = 16;
  c.data.classes = 4;
  c.data.test_fraction = 0.25;
  c.train.steps = 5;
  c.train.batch_size = 32;
  c.train.optimizer.type = "adam";
  c.train.optimizer.lr = 0.01;
  c.train.lr_schedule.type = "step";
  c.train.lr_schedule.step_size = 2;
  c.train.lr_schedule.gamma = 0.5;
  c.train.clip_grad_norm = 0.05;  // small enough that every step clips
  c.train.seed = 7;
  c.pipeline.stages = stages;
  c.pipeline.schedule = schedule;
  c.pipeline.microbatches = schedule == "naive" ? 1 : microbatches;
  const schedule_traits* traits = find_schedule(schedule);  // its own chunk count (2 for the V)
  c.pipeline.virtual_stages = traits ? std::max(traits->default_chunks, 1) : 1;
  c.pipeline.devices.assign(stages, "cpu");
  c.pipeline.intra_op_threads = 1;
  return c;
}

/// A death at a spot drawn from `r`: the stage, the step (of `steps`) and
/// one of that stage's canonical ops (`canon`, by stage); with replicas,
/// the replica too. `kind` is kill_stage (after the op) or throw (inside it).
inline fault_spec seeded_death(uint64_t r, fault_kind kind, const std::vector<std::vector<op_id>>& canon,
                               int steps, int replicas = 1) {
  fault_spec f;
  f.kind = kind;
  f.stage = static_cast<int>(r % canon.size());
  f.step = static_cast<int64_t>((r >> 8) % static_cast<uint64_t>(steps));
  const auto& ops = canon[f.stage];
  f.op = to_string(ops[(r >> 16) % ops.size()]);
  if (replicas > 1) f.replica = static_cast<int>((r >> 4) % static_cast<uint64_t>(replicas));
  return f;
}

/// "kill_stage replica 1 stage 0 step 2 B3", for failure messages.
inline std::string describe_fault(const fault_spec& f) {
  return to_string(f.kind) + (f.replica >= 0 ? " replica " + std::to_string(f.replica) : std::string()) + " stage " +
         std::to_string(f.stage) + " step " + std::to_string(f.step) + " " + f.op;
}

/// The same names, the same bits.
inline bool bitwise_equal(const std::vector<std::pair<std::string, at::Tensor>>& a,
                          const std::vector<std::pair<std::string, at::Tensor>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !torch::equal(a[i].second, b[i].second)) return false;
  return true;
}

/// The plain single-module loop: same init, same batches, gradient
/// accumulation over the same torch.chunk microbatches, torch's own
/// clip_grad_norm_, Adam and StepLR arithmetic.
inline torch::nn::Sequential reference_net(const config& c) {
  return plain_sequential(build_layers(c));  // the seeded initial weights only
}

/// `skip`: steps whose update is dropped (their batch is consumed, StepLR
/// still counts them), as a run skips a step that saw a NaN.
inline std::map<std::string, at::Tensor> reference_weights(const config& c, std::vector<double>* norms,
                                                           const std::set<int64_t>& skip = {}) {
  auto net = reference_net(c);
  auto data = load_dataset(c);
  std::unique_ptr<torch::optim::Optimizer> made;
  if (c.train.optimizer.type == "sgd")
    made = std::make_unique<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(c.train.optimizer.lr).momentum(c.train.optimizer.momentum));
  else
    made = std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(c.train.optimizer.lr));
  auto& opt = *made;
  double lr = c.train.optimizer.lr;
  for (int64_t step = 0; step < c.train.steps; ++step) {
    if (step > 0 && step % c.train.lr_schedule.step_size == 0) lr *= c.train.lr_schedule.gamma;
    for (auto& g : opt.param_groups()) g.options().set_lr(lr);
    opt.zero_grad();
    if (skip.count(step)) {
      norms->push_back(std::nan(""));
      continue;
    }
    auto b = batch_for_step(data, c, step);
    int m = c.pipeline.microbatches;
    auto xs = b.x.chunk(m);
    auto ys = b.y.chunk(m);
    for (size_t i = 0; i < xs.size(); ++i) {
      auto loss = torch::nn::functional::cross_entropy(net->forward(xs[i]), ys[i]) *
                  (static_cast<double>(xs[i].size(0)) / static_cast<double>(b.x.size(0)));
      loss.backward();
    }
    norms->push_back(torch::nn::utils::clip_grad_norm_(net->parameters(), c.train.clip_grad_norm));
    opt.step();
  }
  std::map<std::string, at::Tensor> out;
  for (auto& p : net->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

/// PipeDream-2BW on one module: step t's gradient is taken at weight
/// version max(t-1, 0) (a second module holds that version) and applied to
/// the latest weights by Adam: W(t+1) = W(t) - step(grad f(W(t-1))).
inline std::map<std::string, at::Tensor> reference_2bw_weights(const config& c) {
  auto net = reference_net(c);
  auto stale = reference_net(c);
  auto data = load_dataset(c);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(c.train.optimizer.lr));
  std::vector<std::vector<at::Tensor>> versions;  // versions[v]: weights after v updates
  auto copy_of = [&] {
    std::vector<at::Tensor> w;
    for (auto& p : net->parameters()) w.push_back(p.detach().clone());
    return w;
  };
  versions.push_back(copy_of());
  double lr = c.train.optimizer.lr;
  for (int64_t step = 0; step < c.train.steps; ++step) {
    if (step > 0 && step % c.train.lr_schedule.step_size == 0) lr *= c.train.lr_schedule.gamma;
    auto params = stale->parameters();
    {
      torch::NoGradGuard g;
      const auto& v = versions[static_cast<size_t>(std::max<int64_t>(step - 1, 0))];
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(v[i]);
    }
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    auto b = batch_for_step(data, c, step);
    auto xs = b.x.chunk(c.pipeline.microbatches);
    auto ys = b.y.chunk(c.pipeline.microbatches);
    for (size_t i = 0; i < xs.size(); ++i)
      (torch::nn::functional::cross_entropy(stale->forward(xs[i]), ys[i]) *
       (static_cast<double>(xs[i].size(0)) / static_cast<double>(b.x.size(0))))
          .backward();
    auto latest = net->parameters();
    for (size_t i = 0; i < latest.size(); ++i) latest[i].mutable_grad() = params[i].grad().clone();
    for (auto& g : opt.param_groups()) g.options().set_lr(lr);
    opt.step();
    versions.push_back(copy_of());
  }
  std::map<std::string, at::Tensor> out;
  for (auto& p : net->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

}  // namespace
}  // namespace actorpipe
