#include "runtime/model/optimizer_state.hpp"

#include "runtime/model/adamw.hpp"

#include <ATen/ScalarOps.h>
#include <torch/torch.h>

#include <cmath>
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

torch::optim::OptimizerParamState* state_of(const torch::optim::Optimizer& opt, const at::Tensor& p) {
  const auto& state = opt.state();
  auto it = state.find(key_of(p));
  return it == state.end() ? nullptr : it->second.get();
}

std::shared_ptr<const optimizer_state_copy> copy_optimizer_state(const torch::optim::Optimizer& opt,
                                                                 const std::vector<at::Tensor>& params,
                                                                 std::vector<std::string> names, bool share) {
  if (!names.empty() && names.size() != params.size())
    throw std::invalid_argument("optimizer state copy: " + std::to_string(names.size()) + " names for " +
                                std::to_string(params.size()) + " parameters");
  auto out = std::make_shared<optimizer_state_copy>();
  out->names = std::move(names);
  torch::NoGradGuard no_grad;
  const auto take = [share](const at::Tensor& t) { return share && t.defined() ? t.detach() : copy_of(t); };
  const auto& state = opt.state();
  for (const auto& p : params) {
    out->steps.push_back(0);
    out->tensors.emplace_back();
    auto it = state.find(key_of(p));
    if (it == state.end()) continue;
    if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get())) {
      out->steps.back() = a->step();
      out->tensors.back() = {take(a->exp_avg()), take(a->exp_avg_sq()), take(a->max_exp_avg_sq())};
    } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
      out->tensors.back() = {take(s->momentum_buffer())};
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

std::string first_nonfinite_state(const torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params,
                                  const std::vector<std::string>& names) {
  if (names.size() != params.size())
    throw std::invalid_argument("first_nonfinite_state: " + std::to_string(names.size()) + " names for " +
                                std::to_string(params.size()) + " parameters");
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  std::vector<std::string> labels;
  auto add = [&](const at::Tensor& t, std::string label) {
    if (!t.defined() || t.numel() == 0 || !t.is_floating_point()) return;
    tensors.push_back(t.detach());
    labels.push_back(std::move(label));
  };
  for (size_t i = 0; i < params.size(); ++i) {
    add(params[i], names[i]);
    const auto* st = state_of(opt, params[i]);
    if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(st)) {
      add(a->exp_avg(), names[i] + " (exp_avg)");
      add(a->exp_avg_sq(), names[i] + " (exp_avg_sq)");
      add(a->max_exp_avg_sq(), names[i] + " (max_exp_avg_sq)");
    } else if (const auto* m = dynamic_cast<const torch::optim::SGDParamState*>(st)) {
      add(m->momentum_buffer(), names[i] + " (momentum_buffer)");
    }
  }
  if (tensors.empty()) return {};
  // One sum per tensor, in float (double stays double), read back at once.
  std::vector<at::Tensor> sums;
  for (const auto& t : tensors)
    sums.push_back(t.sum(t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).to(at::kDouble));
  const at::Tensor finite = at::isfinite(at::stack(sums)).to(at::kCPU);
  const bool* ok = finite.data_ptr<bool>();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!ok[i] && !at::isfinite(tensors[i]).all().item<bool>()) return labels[i];
  return {};
}

bool steps_aside(const torch::optim::Optimizer& opt) {
  return opt.param_groups().size() == 1 && (dynamic_cast<const torch::optim::Adam*>(&opt) != nullptr ||
                                            dynamic_cast<const torch::optim::SGD*>(&opt) != nullptr);
}

namespace {

at::Tensor fresh_like(tensor_pool* pool, const at::Tensor& t) {
  return pool ? pool->like(t) : at::empty(t.sizes(), t.options());
}

// t.mul(x) (Tensor::mul wraps the scalar the same way) into `out`.
at::Tensor mul_into(at::Tensor out, const at::Tensor& t, double x) {
  at::mul_out(out, t, at::native::wrapped_scalar_tensor(x));
  return out;
}

// AdamW's last two ops on a block of float32, in one pass: out = from *
// decay, then out + value * m / d, each op rounded to float as torch's
// param.mul_(decay) and param.addcdiv_(m, d, value) round it (ATen's CPU
// kernels compute these in float, left to right). No contraction into a
// fused multiply-add, which would round once where torch rounds twice.
__attribute__((optimize("fp-contract=off"))) void decayed_addcdiv(float* out, const float* from, const float* m,
                                                                 const float* d, int64_t n, float decay, float value) {
  for (int64_t i = 0; i < n; ++i) {
    const float decayed = from[i] * decay;
    const float step = value * m[i];
    out[i] = decayed + step / d[i];
  }
}

// Adam's step after the bias corrections, block by block (step_aside):
// per element, the ops and operands of the whole-tensor code below.
// `decay` (AdamW's 1 - lr * weight_decay; 1: none) scales the parameter
// first, as torch's param.mul_ does.
void adam_blocked(torch::optim::AdamParamState& st, const at::Tensor& p, const at::Tensor& grad, tensor_pool* pool,
                  int64_t block, double beta1, double beta2, double step_size, double root_correction2, double eps,
                  double decay) {
  const int64_t n = p.numel();
  auto flat = [n](const at::Tensor& t) { return t.view({n}); };  // contiguous, as step_aside checked
  const at::Tensor g = flat(grad), m = flat(st.exp_avg()), v = flat(st.exp_avg_sq()), from = flat(p.detach());
  at::Tensor exp_avg = fresh_like(pool, st.exp_avg()), exp_avg_sq = fresh_like(pool, st.exp_avg_sq());
  at::Tensor moved = fresh_like(pool, p);
  const at::Tensor m_out = exp_avg.view({n}), v_out = exp_avg_sq.view({n}), p_out = moved.view({n});
  at::Tensor denom = at::empty({std::min(block, n)}, p.options());
  const at::Tensor root = at::native::wrapped_scalar_tensor(root_correction2);
  for (int64_t at = 0; at < n; at += block) {
    const int64_t len = std::min(block, n - at);
    const at::Tensor gb = g.narrow(0, at, len);
    at::Tensor mb = m_out.narrow(0, at, len), vb = v_out.narrow(0, at, len), pb = p_out.narrow(0, at, len);
    mul_into(mb, m.narrow(0, at, len), beta1).add_(gb, 1 - beta1);
    mul_into(vb, v.narrow(0, at, len), beta2).addcmul_(gb, gb, 1 - beta2);
    // (exp_avg_sq.sqrt() / root_correction2).add_(eps)
    at::Tensor db = denom.narrow(0, 0, len);
    at::sqrt_out(db, vb);
    at::div_out(db, db, root);
    db.add_(eps);
    if (decay != 1 && pb.scalar_type() == at::kFloat && db.is_contiguous()) {
      decayed_addcdiv(pb.data_ptr<float>(), from.data_ptr<float>() + at, mb.data_ptr<float>(), db.data_ptr<float>(),
                      len, static_cast<float>(decay), static_cast<float>(-step_size));
    } else if (decay != 1) {
      mul_into(pb, from.narrow(0, at, len), decay);
      at::addcdiv_out(pb, pb, mb, db, -step_size);
    } else {
      at::addcdiv_out(pb, from.narrow(0, at, len), mb, db, -step_size);
    }
  }
  p.set_data(moved);
  st.exp_avg(exp_avg);
  st.exp_avg_sq(exp_avg_sq);
}

}  // namespace

// LibTorch 1.13's Adam::step and SGD::step (and torch's AdamW: the decay
// first), op for op; where they write
// into a tensor (mul_, add_, addcdiv_), the first write here is the same
// op into another tensor (mul_out, add_out, addcdiv_out: one kernel either
// way) and the rest land in that tensor. optimizer_state_test holds the
// two to the bit.
void step_aside(torch::optim::Optimizer& opt, tensor_pool* pool, int64_t block) {
  if (!steps_aside(opt)) throw std::invalid_argument("step_aside: only Adam and SGD with one parameter group");
  torch::NoGradGuard no_grad;
  auto& group = opt.param_groups().front();
  auto& state = opt.state();
  if (dynamic_cast<torch::optim::Adam*>(&opt) != nullptr) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const auto* decoupled = dynamic_cast<const adamw*>(&opt);
    size_t index = 0;
    for (auto& p : group.params()) {
      const double weight_decay = decoupled ? decoupled->decay(index) : 0.0;
      ++index;
      if (!p.grad().defined()) continue;
      const double decay = weight_decay != 0 ? 1 - o.lr() * weight_decay : 1.0;
      auto grad = p.grad();
      auto& slot = state[key_of(p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (o.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& st = static_cast<torch::optim::AdamParamState&>(*slot);
      st.step(st.step() + 1);
      const double beta1 = std::get<0>(o.betas());
      const double beta2 = std::get<1>(o.betas());
      const double bias_correction1 = 1 - std::pow(beta1, st.step());
      const double bias_correction2 = 1 - std::pow(beta2, st.step());
      if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
      if (block > 0 && !o.amsgrad() && p.is_cpu() && p.is_contiguous() && grad.is_contiguous() &&
          st.exp_avg().is_contiguous() && st.exp_avg_sq().is_contiguous()) {
        adam_blocked(st, p, grad, pool, block, beta1, beta2, o.lr() / bias_correction1, std::sqrt(bias_correction2),
                     o.eps(), decay);
        continue;
      }
      auto exp_avg = mul_into(fresh_like(pool, st.exp_avg()), st.exp_avg(), beta1);
      exp_avg.add_(grad, 1 - beta1);
      auto exp_avg_sq = mul_into(fresh_like(pool, st.exp_avg_sq()), st.exp_avg_sq(), beta2);
      exp_avg_sq.addcmul_(grad, grad, 1 - beta2);
      at::Tensor denom;
      if (o.amsgrad()) {
        auto max_exp_avg_sq = fresh_like(pool, st.max_exp_avg_sq());
        at::maximum_out(max_exp_avg_sq, exp_avg_sq, st.max_exp_avg_sq());
        denom = (max_exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
        st.max_exp_avg_sq(max_exp_avg_sq);
      } else {
        denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
      }
      const double step_size = o.lr() / bias_correction1;
      auto moved = fresh_like(pool, p);
      if (decay != 1) {
        mul_into(moved, p.detach(), decay);
        at::addcdiv_out(moved, moved, exp_avg, denom, -step_size);
      } else {
        at::addcdiv_out(moved, p.detach(), exp_avg, denom, -step_size);
      }
      p.set_data(moved);
      st.exp_avg(exp_avg);
      st.exp_avg_sq(exp_avg_sq);
    }
    return;
  }
  const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto d_p = p.grad().data();
    if (o.weight_decay() != 0) d_p = d_p.add(p.data(), o.weight_decay());
    if (o.momentum() != 0) {
      at::Tensor buf;
      auto& slot = state[key_of(p)];
      if (!slot) {
        buf = torch::clone(d_p).detach();
        auto fresh = std::make_unique<torch::optim::SGDParamState>();
        fresh->momentum_buffer(buf);
        slot = std::move(fresh);
      } else {
        auto& st = static_cast<torch::optim::SGDParamState&>(*slot);
        buf = mul_into(fresh_like(pool, st.momentum_buffer()), st.momentum_buffer(), o.momentum());
        buf.add_(d_p, 1 - o.dampening());
        st.momentum_buffer(buf);
      }
      d_p = o.nesterov() ? d_p.add(buf, o.momentum()) : buf;
    }
    auto moved = fresh_like(pool, p);
    at::add_out(moved, p.detach(), d_p, -1 * o.lr());
    p.set_data(moved);
  }
}

}  // namespace actorpipe
