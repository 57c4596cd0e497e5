#include "runtime/model.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "runtime/seed.hpp"
#include "runtime/state_dict.hpp"
#include "runtime/text.hpp"

namespace actorpipe {

struct layer::impl {
  torch::nn::Linear linear{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};

layer::layer(int index, layer_spec spec)
    : index_(index), spec_(std::move(spec)), impl_(std::make_unique<impl>()) {
  if (spec_.type == "linear")
    impl_->linear = torch::nn::Linear(torch::nn::LinearOptions(spec_.in, spec_.out));
  else if (spec_.type == "layernorm")
    impl_->norm = torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec_.dim}));
}

layer::~layer() = default;
layer::layer(layer&&) noexcept = default;
layer& layer::operator=(layer&&) noexcept = default;

int layer::parameter_tensors() const { return impl_->linear || impl_->norm ? 2 : 0; }

at::Tensor layer::forward(const at::Tensor& x, const forward_ctx& ctx, const at::Tensor* params) const {
  const auto& t = spec_.type;
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
  if (t == "dropout") {
    if (!ctx.training || spec_.p == 0.0) return x;
    uint64_t s = derive_seed(ctx.seed, {static_cast<uint64_t>(ctx.step),
                                        static_cast<uint64_t>(ctx.mb), static_cast<uint64_t>(index_)});
    auto gen = at::make_generator<at::CPUGeneratorImpl>(s);
    auto keep = at::empty(x.sizes(), at::TensorOptions().dtype(x.scalar_type()))
                    .bernoulli_(1.0 - spec_.p, gen);
    // The mask is drawn on the CPU (the same masks on every device). On a
    // GPU it goes up through pinned memory without blocking: a copy from
    // pageable memory would wait for the stream's queued kernels.
    if (x.is_cuda()) return x * keep.pin_memory().to(x.device(), /*non_blocking=*/true) / (1.0 - spec_.p);
    return x * keep / (1.0 - spec_.p);
  }
  throw std::logic_error("unknown layer type " + t);
}

std::vector<std::pair<std::string, at::Tensor>> layer::parameters() const {
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
    x = l.forward(x, ctx, mine);
    if (param_outputs && l.parameter_tensors() > 0) param_outputs->push_back(x);
    if (act_bytes) *act_bytes += static_cast<int64_t>(x.numel() * x.element_size());
  }
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
    else
      counts.push_back(0);
  }
  return counts;
}

std::vector<layer> build_layers(const config& cfg) {
  torch::manual_seed(cfg.train.seed);
  std::vector<layer> layers;
  for (size_t i = 0; i < cfg.model.layers.size(); ++i)
    layers.emplace_back(static_cast<int>(i), cfg.model.layers[i]);
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
  return layers;
}

}  // namespace actorpipe
