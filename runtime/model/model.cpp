#include "runtime/model/model.hpp"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "runtime/model/llama.hpp"
#include "runtime/util/seed.hpp"
#include "runtime/files/state_dict.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

struct layer::impl {
  torch::nn::Linear linear{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  // The transformer layers hold their tensors directly, named as
  // tests/reference/gpt_reference.py's state dict names them.
  std::vector<std::pair<std::string, at::Tensor>> own;
};

namespace {

bool is_llama(const std::string& t) { return t == "token_embedding" || t == "llama_block" || t == "rmsnorm"; }
bool is_transformer(const std::string& t) {
  return t == "embedding" || t == "gpt_block" || t == "lm_head" || is_llama(t);
}

at::Tensor new_param(std::initializer_list<int64_t> shape) {
  return torch::zeros(shape, torch::kFloat).requires_grad_(true);
}

// The parameters of a transformer layer, in the reference module's order.
std::vector<std::pair<std::string, at::Tensor>> transformer_params(const layer_spec& s) {
  if (is_llama(s.type)) return llama::parameters(s);
  const int64_t d = s.dim;
  if (s.type == "embedding") return {{"wte.weight", new_param({s.vocab, d})}, {"wpe.weight", new_param({s.max_seq, d})}};
  if (s.type == "lm_head") return {{"weight", new_param({s.vocab, d})}};
  const int64_t h = s.mlp_hidden;
  return {{"ln1.weight", new_param({d})},           {"ln1.bias", new_param({d})},
          {"attn.qkv.weight", new_param({3 * d, d})}, {"attn.qkv.bias", new_param({3 * d})},
          {"attn.proj.weight", new_param({d, d})},    {"attn.proj.bias", new_param({d})},
          {"ln2.weight", new_param({d})},           {"ln2.bias", new_param({d})},
          {"mlp.fc.weight", new_param({h, d})},       {"mlp.fc.bias", new_param({h})},
          {"mlp.proj.weight", new_param({d, h})},     {"mlp.proj.bias", new_param({d})}};
}

// Dropout whose mask depends on (seed, step, microbatch, layer, site) and on
// nothing else: every schedule draws the same masks. The mask is drawn on
// the CPU (the same masks on every device) and goes up through pinned memory
// without blocking.
at::Tensor drop(const at::Tensor& x, double p, const forward_ctx& ctx, int index, uint64_t site) {
  if (!ctx.training || p == 0.0) return x;
  const uint64_t s =
      site == 0 ? derive_seed(ctx.seed, {static_cast<uint64_t>(ctx.step), static_cast<uint64_t>(ctx.mb),
                                         static_cast<uint64_t>(index)})
                : derive_seed(ctx.seed, {static_cast<uint64_t>(ctx.step), static_cast<uint64_t>(ctx.mb),
                                         static_cast<uint64_t>(index), site});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(s);
  auto keep = at::empty(x.sizes(), at::TensorOptions().dtype(x.scalar_type())).bernoulli_(1.0 - p, gen);
  if (x.is_cuda()) return x * keep.pin_memory().to(x.device(), /*non_blocking=*/true) / (1.0 - p);
  return x * keep / (1.0 - p);
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
}

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::function<at::Tensor(const at::Tensor&)>& drop_probs) {
#if TORCH_VERSION_MAJOR >= 2
  // The fused kernel where LibTorch has it; its own dropout would draw
  // masks that depend on order, so with dropout the explicit form runs.
  if (!drop_probs) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#endif
  const int64_t t = q.size(-2);
  auto att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  auto mask = at::ones({t, t}, at::TensorOptions().dtype(at::kBool).device(q.device())).tril();
  att = att.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity()).softmax(-1);
  if (drop_probs) att = drop_probs(att);
  return at::matmul(att, v);
}

layer::layer(int index, layer_spec spec, bool uninitialised)
    : index_(index), spec_(std::move(spec)), impl_(std::make_unique<impl>()) {
  if (spec_.type == "linear" && uninitialised) {
    // A 1 x 1 layer (its initialisation costs nothing), then tensors of
    // the real shape put in place of its own.
    impl_->linear = torch::nn::Linear(torch::nn::LinearOptions(1, 1));
    torch::NoGradGuard no_grad;
    impl_->linear->weight.set_(at::empty({spec_.out, spec_.in}));
    impl_->linear->bias.set_(at::empty({spec_.out}));
    impl_->linear->options.in_features(spec_.in).out_features(spec_.out);
  } else if (spec_.type == "linear")
    impl_->linear = torch::nn::Linear(torch::nn::LinearOptions(spec_.in, spec_.out));
  else if (spec_.type == "layernorm")
    impl_->norm = torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec_.dim}));
  else if (is_transformer(spec_.type))
    impl_->own = transformer_params(spec_);
}

layer::~layer() = default;
layer::layer(layer&&) noexcept = default;
layer& layer::operator=(layer&&) noexcept = default;

int layer::parameter_tensors() const {
  if (!impl_->own.empty()) return static_cast<int>(impl_->own.size());
  return impl_->linear || impl_->norm ? 2 : 0;
}

std::vector<int> layer::parameter_groups() const {
  const int n = parameter_tensors();
  if (spec_.type == "gpt_block") return std::vector<int>(static_cast<size_t>(n / 2), 2);
  if (spec_.type == "llama_block") return std::vector<int>(static_cast<size_t>(n), 1);
  return n > 0 ? std::vector<int>{n} : std::vector<int>{};
}

at::Tensor layer::transformer_forward(const at::Tensor& x, const forward_ctx& ctx, const at::Tensor* params,
                                      std::vector<at::Tensor>* param_outputs, kv_cache* cache) const {
  auto w = [&](size_t i) -> const at::Tensor& { return params ? params[i] : impl_->own[i].second; };
  // Where a group of parameters enters: kept for a split backward's W.
  auto entered = [&](at::Tensor t) {
    if (param_outputs) param_outputs->push_back(t);
    return t;
  };
  const auto& s = spec_;
  const int64_t start = cache ? cache->length : 0;
  if (s.type == "embedding") {
    auto pos = at::arange(start, start + x.size(1), at::TensorOptions().dtype(at::kLong).device(x.device()));
    return entered(drop(at::embedding(w(0), x) + at::embedding(w(1), pos), s.p, ctx, index_, 0));
  }
  if (s.type == "lm_head") return entered(at::matmul(x, w(0).t()));
  if (s.type == "token_embedding") return entered(at::embedding(w(0), x));
  if (s.type == "rmsnorm") return entered(llama::rmsnorm(x, w(0), s.eps));
  if (s.type == "llama_block") {
    llama::block_io io;
    io.weight = w;
    io.entered = entered;
    io.cache = cache ? &cache->kv[index_] : nullptr;
    io.start = start;
    return llama::block(s, x, io);
  }
  // gpt_block: pre-LayerNorm attention and MLP, each on a residual branch.
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / s.heads;
  auto qkv = entered(at::linear(entered(layer_norm(x, w(0), w(1))), w(2), w(3))).split(d, 2);
  auto heads = [&](const at::Tensor& z) { return z.view({b, t, s.heads, hd}).transpose(1, 2); };
  std::function<at::Tensor(const at::Tensor&)> drop_probs;
  if (ctx.training && s.p > 0.0) drop_probs = [&](const at::Tensor& a) { return drop(a, s.p, ctx, index_, 1); };
  at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  at::Tensor attended;
  if (cache) {  // generation: this layer's keys and values of the positions before
    auto& [ck, cv] = cache->kv[index_];
    ck = ck.defined() ? at::cat({ck, k}, 2) : k;
    cv = cv.defined() ? at::cat({cv, v}, 2) : v;
    attended = llama::cached_attention(q, ck, cv);
  } else {
    attended = causal_attention(q, k, v, drop_probs);
  }
  auto y = attended.transpose(1, 2).reshape({b, t, d});
  auto h = x + drop(entered(at::linear(y, w(4), w(5))), s.p, ctx, index_, 2);
  auto m = entered(at::linear(at::gelu(entered(at::linear(entered(layer_norm(h, w(6), w(7))), w(8), w(9)))), w(10), w(11)));
  return h + drop(m, s.p, ctx, index_, 3);
}

at::Tensor layer::forward_cached(const at::Tensor& x, kv_cache& cache) const {
  const forward_ctx ctx{0, -1, 0, false};
  if (is_transformer(spec_.type)) return transformer_forward(x, ctx, nullptr, nullptr, &cache);
  return forward(x, ctx);
}

at::Tensor layer::forward(const at::Tensor& x, const forward_ctx& ctx, const at::Tensor* params,
                          std::vector<at::Tensor>* param_outputs) const {
  const auto& t = spec_.type;
  if (is_transformer(t)) return transformer_forward(x, ctx, params, param_outputs);
  if (param_outputs && parameter_tensors() > 0) {
    at::Tensor out = forward(x, ctx, params);
    param_outputs->push_back(out);
    return out;
  }
  if (params && t == "linear") return torch::nn::functional::linear(x, params[0], params[1]);
  if (params && t == "layernorm")
    return torch::nn::functional::layer_norm(
        x, torch::nn::functional::LayerNormFuncOptions({spec_.dim})
               .weight(params[0])
               .bias(params[1])
               .eps(impl_->norm->options.eps()));
  if (t == "linear") return impl_->linear->forward(x);
  if (t == "relu") return torch::relu(x);
  if (t == "gelu") return torch::gelu(x);
  if (t == "tanh") return torch::tanh(x);
  if (t == "layernorm") return impl_->norm->forward(x);
  if (t == "dropout") return drop(x, spec_.p, ctx, index_, 0);
  throw std::logic_error("unknown layer type " + t);
}

std::vector<std::pair<std::string, at::Tensor>> layer::parameters() const {
  if (!impl_->own.empty()) return impl_->own;
  std::vector<std::pair<std::string, at::Tensor>> out;
  torch::nn::Module* m = impl_->linear ? static_cast<torch::nn::Module*>(impl_->linear.get())
                         : impl_->norm ? static_cast<torch::nn::Module*>(impl_->norm.get())
                                       : nullptr;
  if (m == nullptr) return out;
  for (const auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

int64_t layer::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.second.numel();
  return n;
}

void layer::to(const std::string& device, at::ScalarType dtype) {
  if (impl_->linear) impl_->linear->to(torch::Device(device), dtype);
  if (impl_->norm) impl_->norm->to(torch::Device(device), dtype);
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : impl_->own) t.set_data(t.to(torch::Device(device), dtype));
}

at::ScalarType parameter_dtype(const model_config& m) {
  if (m.dtype == "bfloat16") return at::kBFloat16;
  if (m.dtype == "float16") return at::kHalf;
  return at::kFloat;
}

at::Tensor layer_stack::forward(at::Tensor x, const forward_ctx& ctx, int64_t* act_bytes,
                                const std::vector<at::Tensor>* params,
                                std::vector<at::Tensor>* param_outputs) const {
  size_t next = 0;
  for (const auto& l : layers_) {
    const at::Tensor* mine = params ? params->data() + next : nullptr;
    next += static_cast<size_t>(l.parameter_tensors());
    x = l.forward(x, ctx, mine, param_outputs);
    if (act_bytes) *act_bytes += static_cast<int64_t>(x.numel() * x.element_size());
  }
  return x;
}

at::Tensor layer_stack::forward_cached(at::Tensor x, kv_cache& cache) const {
  for (const auto& l : layers_) x = l.forward_cached(x, cache);
  cache.length += x.size(1);
  return x;
}

std::vector<std::pair<std::string, at::Tensor>> layer_stack::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& l : layers_)
    for (auto& [name, t] : l.parameters()) out.emplace_back(std::to_string(l.index()) + "." + name, t);
  return out;
}

std::vector<at::Tensor> layer_stack::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void layer_stack::to(const std::string& device, at::ScalarType dtype) {
  for (auto& l : layers_) l.to(device, dtype);
}

void sort_by_layer(std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::stable_sort(params.begin(), params.end(),
                   [](const auto& a, const auto& b) { return std::stoi(a.first) < std::stoi(b.first); });
}

std::vector<int64_t> layer_parameter_counts(const std::vector<layer_spec>& specs) {
  std::vector<int64_t> counts;
  for (const auto& s : specs) {
    if (s.type == "linear")
      counts.push_back(s.in * s.out + s.out);
    else if (s.type == "layernorm")
      counts.push_back(2 * s.dim);
    else if (s.type == "embedding")
      counts.push_back((s.vocab + s.max_seq) * s.dim);
    else if (s.type == "lm_head")
      counts.push_back(s.vocab * s.dim);
    else if (s.type == "gpt_block")
      counts.push_back(4 * s.dim + 4 * s.dim * s.dim + 4 * s.dim + 2 * s.dim * s.mlp_hidden + s.mlp_hidden + s.dim);
    else if (is_llama(s.type)) {
      int64_t n = 0;
      for (const auto& [name, t] : llama::parameters(s)) n += t.numel();
      counts.push_back(n);
    } else
      counts.push_back(0);
  }
  return counts;
}

std::vector<int64_t> layer_compute_costs(const std::vector<layer_spec>& specs, int64_t seq_len) {
  auto costs = layer_parameter_counts(specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    if (s.type == "embedding")
      costs[i] = 2 * s.dim;  // a gather and an add per token: nothing like its parameter count
    else if (s.type == "token_embedding")
      costs[i] = s.dim;  // a gather
    else if (s.type == "rmsnorm")
      costs[i] = 2 * s.dim;
    else if (s.type == "gpt_block")
      costs[i] += 2 * seq_len * s.dim;  // q k^T and att v: each token meets every position
    else if (s.type == "llama_block")
      costs[i] = llama::block_costs(s, seq_len);
  }
  return costs;
}

bool has_transformer_layers(const model_config& m) {
  return std::any_of(m.layers.begin(), m.layers.end(), [](const layer_spec& s) { return is_transformer(s.type); });
}

std::vector<layer> stand_in_layers(const config& cfg, const std::function<bool(int index)>& needed) {
  std::vector<layer> layers;
  for (size_t i = 0; i < cfg.model.layers.size(); ++i) {
    layer_spec spec = cfg.model.layers[i];
    if (!needed(static_cast<int>(i))) spec.type = "relu";
    layers.emplace_back(static_cast<int>(i), std::move(spec), /*uninitialised=*/true);
  }
  return layers;
}

std::vector<layer> build_layers(const config& cfg) {
  torch::manual_seed(cfg.train.seed);
  std::vector<layer> layers;
  for (size_t i = 0; i < cfg.model.layers.size(); ++i)
    layers.emplace_back(static_cast<int>(i), cfg.model.layers[i]);
  const auto& m = cfg.model;
  auto tied = [&](int index) { return layers[static_cast<size_t>(index)].parameters().front().second; };
  if (has_transformer_layers(m)) {
    // GPT-2's initial weights (the reference's init_gpt2): N(0, 0.02) for
    // every linear, embedding and head weight, zero biases, LayerNorm at
    // (1, 0); in layer order, from train.seed.
    torch::NoGradGuard no_grad;
    for (auto& l : layers)
      for (auto& [name, t] : l.parameters()) {
        const bool norm = l.spec().type == "layernorm" || l.spec().type == "rmsnorm" || name.rfind("ln", 0) == 0 ||
                          name.find("norm.") != std::string::npos;
        const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
        if (bias)
          t.zero_();
        else if (norm)
          t.fill_(1.0);
        else
          t.normal_(0.0, 0.02);
      }
    // The tied head's copy starts equal to the embedding's table.
    if (m.tie_head >= 0) tied(m.tie_head).copy_(tied(m.tie_embedding));
  }
  if (cfg.model.init_from.empty()) return layers;

  named_tensors loaded;
  try {
    loaded = load_tensors(cfg.model.init_from);
  } catch (const std::exception& e) {
    throw cfg.error_at("model.init_from", e.what());
  }
  std::map<std::string, at::Tensor> params;
  for (auto& l : layers)
    for (auto& [name, t] : l.parameters()) params[std::to_string(l.index()) + "." + name] = t;
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (auto& [name, value] : loaded) {
    auto it = params.find(name);
    if (it == params.end())
      throw cfg.error_at("model.init_from", cfg.model.init_from + ": unexpected key " + quoted_input(name) +
                                                " (the model has no such parameter)");
    if (it->second.sizes() != value.sizes())
      throw cfg.error_at("model.init_from",
                         cfg.model.init_from + ": " + quoted_input(name) + " has shape " +
                             c10::str(value.sizes()) + ", the model expects " +
                             c10::str(it->second.sizes()));
    if (!value.is_floating_point())
      throw cfg.error_at("model.init_from", cfg.model.init_from + ": " + quoted_input(name) + " is " +
                                                std::string(c10::toString(value.scalar_type())) +
                                                ", not a floating-point tensor");
    if (!at::isfinite(value).all().item<bool>())
      throw cfg.error_at("model.init_from", cfg.model.init_from + ": " + quoted_input(name) +
                                                " holds a NaN or an infinity; every step would be skipped");
    it->second.copy_(value.to(it->second.scalar_type()));
    seen.insert(name);
  }
  for (auto& [name, t] : params)
    if (!seen.count(name))
      throw cfg.error_at("model.init_from",
                         cfg.model.init_from + ": missing key '" + name + "'");
  if (m.tie_head >= 0 && !tied(m.tie_head).equal(tied(m.tie_embedding)))
    throw cfg.error_at("model.init_from",
                       cfg.model.init_from + ": the tied '" + std::to_string(m.tie_embedding) + "." +
                           layers[static_cast<size_t>(m.tie_embedding)].parameters().front().first + "' and '" +
                           std::to_string(m.tie_head) + ".weight' differ (max |a - b| = " +
                           std::to_string((tied(m.tie_head) - tied(m.tie_embedding)).abs().max().item<double>()) +
                           "); a tied model saves one tensor under both keys");
  return layers;
}

}  // namespace actorpipe
