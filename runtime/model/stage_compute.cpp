#include "runtime/model/stage_compute.hpp"

#include <limits>
#include <stdexcept>

namespace actorpipe {

namespace {

int64_t bytes_of(const at::Tensor& t) { return static_cast<int64_t>(t.numel() * t.element_size()); }

// Weight gradient of a split backward: accumulated into .grad in the
// order W fires, ascending microbatches per chunk, like autograd would.
void accumulate(const at::Tensor& param, const at::Tensor& grad) {
  if (!grad.defined()) return;
  torch::NoGradGuard no_grad;
  auto& g = param.mutable_grad();
  if (g.defined())
    g.add_(grad);
  else
    g = grad;
}

}  // namespace

stage_compute::stage_compute(compute_shape shape) : shape_(std::move(shape)) {
  if (!shape_.to_device) shape_.to_device = [](const at::Tensor& t, at::ScalarType type) { return t.to(type); };
  for (const auto& chunk : shape_.layers) chunk_params_.push_back(chunk->parameters());
  casts_.resize(shape_.layers.size());
}

const std::vector<at::Tensor>* stage_compute::compute_weights(int chunk, const std::vector<at::Tensor>* weights) {
  if (shape_.compute_dtype == at::ScalarType::Undefined) return weights;
  const auto& from = weights ? *weights : chunk_params_[chunk];
  auto& c = casts_[chunk];
  bool same = c.from.size() == from.size();
  for (size_t i = 0; same && i < from.size(); ++i) same = c.from[i] == from[i].unsafeGetTensorImpl();
  if (same) return &c.cast;
  // In the graph even when the forward runs without it (recompute, a
  // no-grad F): a later forward with autograd reuses these casts, and
  // its gradients must reach the weights through them.
  at::AutoGradMode grad_on(true);
  c.from.clear();
  c.cast.clear();
  for (const auto& w : from) {
    c.from.push_back(w.unsafeGetTensorImpl());
    c.cast.push_back(w.is_floating_point() ? w.to(shape_.compute_dtype) : w);
  }
  return &c.cast;
}

void stage_compute::weights_changed() {
  for (auto& c : casts_) c = cast_weights{};
}

void stage_compute::begin_step() {
  weights_changed();
  stash_.assign(static_cast<size_t>(shape_.microbatches) * shape_.layers.size(), stash_entry{});
  stashed_ = 0;
  stash_bytes_ = 0;
  loss_sum_ = at::Tensor();
  correct_sum_ = at::Tensor();
  samples_ = 0;
}

// Mean cross-entropy over every position of the microbatch (a language
// model's logits are [b, T, V]), weighted by its share of the batch.
at::Tensor stage_compute::loss_of(const at::Tensor& out, const at::Tensor& y) const {
  const double weight = static_cast<double>(out.size(0)) / static_cast<double>(shape_.batch_size);
  // Mixed precision takes the loss of bfloat16 logits in float32.
  const at::Tensor logits = shape_.compute_dtype == at::ScalarType::Undefined ? out : out.to(at::kFloat);
  if (logits.dim() > 2)
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1})) * weight;
  return torch::nn::functional::cross_entropy(logits, y) * weight;
}

stage_compute::forward_out stage_compute::forward(int chunk, int mb, const forward_ctx& ctx, at::Tensor x,
                                                  const at::Tensor& y, bool first, bool last,
                                                  const std::vector<at::Tensor>* weights, bool poison, bool tally) {
  const int k = slot(chunk, mb);
  stash_entry e;
  e.input = x;
  forward_out r;
  if (!shape_.work) {
    r.out = x;
  } else if (shape_.recompute) {
    // Keep the input alone; B runs this forward again with autograd on.
    const std::vector<at::Tensor>* use = compute_weights(chunk, weights);
    torch::NoGradGuard no_grad;
    r.out = shape_.layers[chunk]->forward(x, ctx, nullptr, use);
    e.bytes = bytes_of(x);
    e.ctx = ctx;
    e.weights = weights;
    if (last) e.targets = y;
  } else {
    r.out = shape_.layers[chunk]->forward(x, ctx, &e.bytes, compute_weights(chunk, weights),
                                          shape_.split ? &e.param_outs : nullptr);
    if (!first) e.bytes += bytes_of(x);
  }
  if (poison) r.out = r.out + std::numeric_limits<float>::quiet_NaN();
  if (last && shape_.work) {
    auto yd = shape_.to_device(y, y.scalar_type());
    r.loss = loss_of(r.out, yd);
    if (tally) {
      auto l = r.loss.detach().to(torch::kDouble, /*non_blocking=*/false, /*copy=*/true);
      auto c = r.out.argmax(-1).eq(yd).sum();
      // In place: on CUDA this F may run on a second stream of the stage's,
      // and a replaced sum's memory would go back to the other stream's pool
      // while this one has yet to read it.
      if (loss_sum_.defined()) {
        loss_sum_.add_(l);
        correct_sum_.add_(c);
      } else {
        loss_sum_ = l;
        correct_sum_ = c;
      }
      samples_ += yd.numel();  // positions: a sequence predicts each of its tokens
    }
    e.output = shape_.recompute ? at::Tensor() : r.loss;
  } else if (!shape_.recompute) {
    e.output = r.out;
  }
  stash_[k] = std::move(e);
  ++stashed_;
  stash_bytes_ += stash_[k].bytes;
  return r;
}

// Recompute: the forward again, with autograd, from the stashed input.
void stage_compute::rematerialize(int chunk, stash_entry& e, bool last) {
  at::Tensor out = shape_.layers[chunk]->forward(e.input, e.ctx, nullptr, compute_weights(chunk, e.weights));
  e.output = last ? loss_of(out, shape_.to_device(e.targets, e.targets.scalar_type())) : out;
}

at::Tensor stage_compute::backward(int chunk, int mb, at::Tensor grad_out, bool first, bool last, bool poison) {
  const int k = slot(chunk, mb);
  if (!shape_.work) {
    if (!shape_.split) --stashed_;
    return at::Tensor();
  }
  if (shape_.recompute) rematerialize(chunk, stash_[k], last);
  if (poison) {
    if (last)
      stash_[k].output = stash_[k].output * std::numeric_limits<float>::quiet_NaN();
    else
      grad_out = grad_out + std::numeric_limits<float>::quiet_NaN();
  }
  at::Tensor grad_in;
  if (!shape_.split) {
    auto e = std::move(stash_[k]);
    if (last)
      e.output.backward();
    else
      torch::autograd::backward({e.output}, {grad_out});
    if (!first) grad_in = e.input.grad();
    --stashed_;
    stash_bytes_ -= e.bytes;
  } else {
    input_gradients(stash_[k], grad_out, first, last, grad_in);
  }
  return grad_in;
}

// Split backward: the input gradient only; the graph stays for W. Along the
// way B takes the gradient at each parameterised layer's output, which is
// all W needs besides the graph (autograd computes no weight gradient here:
// no weight is asked for). Without those outputs (recompute), W needs the
// gradient of the stage's output, and runs the input gradients again.
void stage_compute::input_gradients(stash_entry& e, const at::Tensor& grad_out, bool first, bool last,
                                    at::Tensor& grad_in) {
  if (e.param_outs.empty() && !last) e.grad_out = grad_out;
  std::vector<at::Tensor> wrt;
  if (!first) wrt.push_back(e.input);
  for (const auto& h : e.param_outs) wrt.push_back(h);
  if (!wrt.empty()) {
    std::vector<at::Tensor> grad_outputs;
    if (!last) grad_outputs.push_back(grad_out);
    auto grads = torch::autograd::grad({e.output}, wrt, grad_outputs, /*retain_graph=*/true,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    size_t i = 0;
    if (!first) grad_in = grads[i++];
    e.param_grads.assign(grads.begin() + static_cast<std::ptrdiff_t>(i), grads.end());
  }
  if (!e.param_outs.empty()) {
    int64_t held = 0;
    for (const auto& g : e.param_grads)
      if (g.defined()) held += bytes_of(g);
    e.bytes += held;  // W frees them with the rest
    stash_bytes_ += held;
  }
}

void stage_compute::weight_grads(int chunk, const stash_entry& e) const {
  const auto& params = chunk_params_[chunk];
  if (params.empty() || !shape_.work) return;
  if (e.param_outs.empty()) {  // recompute: from the stage's output, input gradients again
    std::vector<at::Tensor> grad_outputs;
    if (e.grad_out.defined()) grad_outputs.push_back(e.grad_out);
    auto grads = torch::autograd::grad({e.output}, params, grad_outputs, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < params.size(); ++i) accumulate(params[i], grads[i]);
    return;
  }
  // Group by group (a layer's parameters, or a gpt_block's inner op's):
  // each one's weight gradient from the output it enters at and the
  // gradient B left there.
  size_t p = 0, j = 0;
  for (const auto& l : shape_.layers[chunk]->layers())
    for (const int group : l.parameter_groups()) {
      const auto n = static_cast<size_t>(group);
      const std::vector<at::Tensor> mine(params.begin() + static_cast<std::ptrdiff_t>(p),
                                         params.begin() + static_cast<std::ptrdiff_t>(p + n));
      if (e.param_grads.at(j).defined()) {
        auto grads = torch::autograd::grad({e.param_outs[j]}, mine, {e.param_grads[j]}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
        for (size_t i = 0; i < n; ++i) accumulate(params[p + i], grads[i]);
      }
      p += n;
      ++j;
    }
}

void stage_compute::weight(int chunk, int mb) {
  auto e = std::move(stash_[slot(chunk, mb)]);
  weight_grads(chunk, e);
  --stashed_;
  stash_bytes_ -= e.bytes;
}

at::Tensor stage_compute::eval_forward(int chunk, const at::Tensor& x, uint64_t seed,
                                       const std::vector<at::Tensor>* weights) {
  if (!shape_.work) return x;
  const std::vector<at::Tensor>* use = compute_weights(chunk, weights);
  torch::NoGradGuard no_grad;
  forward_ctx ctx{seed, -1, 0, false};
  return shape_.layers[chunk]->forward(x, ctx, nullptr, use);
}

eval_numbers stage_compute::eval_loss(const at::Tensor& logits, const at::Tensor& y_host) const {
  torch::NoGradGuard no_grad;
  auto y = shape_.to_device(y_host, y_host.scalar_type());
  eval_numbers r;
  r.total = y.numel();  // positions: the loss is per token (per byte for text)
  r.correct = logits.argmax(-1).eq(y).sum().item<int64_t>();
  const at::Tensor l = shape_.compute_dtype == at::ScalarType::Undefined ? logits : logits.to(at::kFloat);
  r.loss_sum = torch::nn::functional::cross_entropy(
                   l.reshape({-1, l.size(-1)}), y.reshape({-1}),
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
  return r;
}

}  // namespace actorpipe
