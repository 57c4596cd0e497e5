#include "runtime/optimizer_state.hpp"

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace actorpipe {

namespace {

// LibTorch keys an optimizer's per-parameter state by the tensor's address:
// printed as a string up to LibTorch 1.x, the pointer itself from 2.0 on.
using state_key = std::decay_t<decltype(std::declval<const torch::optim::Optimizer&>().state())>::key_type;

template <class Key>
Key key_for(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << p.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

state_key key_of(const at::Tensor& p) { return key_for<state_key>(p); }

at::Tensor copy_of(const at::Tensor& t) { return t.defined() ? t.detach().clone() : t; }

/// A deep copy on `like`'s device (a checkpoint's state comes from disk).
at::Tensor copy_to(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() ? t.detach().to(like.device(), t.scalar_type(), /*non_blocking=*/false, /*copy=*/true) : t;
}

}  // namespace

std::shared_ptr<const optimizer_state_copy> copy_optimizer_state(const torch::optim::Optimizer& opt,
                                                                 const std::vector<at::Tensor>& params,
                                                                 std::vector<std::string> names) {
  if (!names.empty() && names.size() != params.size())
    throw std::invalid_argument("optimizer state copy: " + std::to_string(names.size()) + " names for " +
                                std::to_string(params.size()) + " parameters");
  auto out = std::make_shared<optimizer_state_copy>();
  out->names = std::move(names);
  torch::NoGradGuard no_grad;
  const auto& state = opt.state();
  for (const auto& p : params) {
    out->steps.push_back(0);
    out->tensors.emplace_back();
    auto it = state.find(key_of(p));
    if (it == state.end()) continue;
    if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get())) {
      out->steps.back() = a->step();
      out->tensors.back() = {copy_of(a->exp_avg()), copy_of(a->exp_avg_sq()), copy_of(a->max_exp_avg_sq())};
    } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
      out->tensors.back() = {copy_of(s->momentum_buffer())};
    } else {
      throw std::invalid_argument("optimizer state copy: only Adam and SGD state is known");
    }
  }
  return out;
}

void restore_optimizer_state(torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params,
                             const optimizer_state_copy& state) {
  if (state.tensors.size() != params.size())
    throw std::invalid_argument("optimizer state copy: " + std::to_string(state.tensors.size()) +
                                " parameters' state for " + std::to_string(params.size()) + " parameters");
  torch::NoGradGuard no_grad;
  const bool adam = dynamic_cast<torch::optim::Adam*>(&opt) != nullptr;
  auto& target = opt.state();
  target.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& t = state.tensors[i];
    if (t.empty()) continue;
    if (adam) {
      auto a = std::make_unique<torch::optim::AdamParamState>();
      a->step(state.steps[i]);
      a->exp_avg(copy_to(t.at(0), params[i]));
      a->exp_avg_sq(copy_to(t.at(1), params[i]));
      a->max_exp_avg_sq(copy_to(t.at(2), params[i]));
      target[key_of(params[i])] = std::move(a);
    } else {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(copy_to(t.at(0), params[i]));
      target[key_of(params[i])] = std::move(s);
    }
  }
}

}  // namespace actorpipe
