#include "runtime/model/generate.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace actorpipe {

int64_t next_token(const at::Tensor& logits, const sampling& s, at::Generator& gen) {
  at::Tensor l = logits.detach().to(torch::kCPU, torch::kFloat).reshape({-1});
  if (s.temperature == 0.0) return l.argmax().item<int64_t>();
  l = l / s.temperature;
  if (s.top_k > 0 && s.top_k < l.numel()) {
    auto [values, indices] = l.topk(s.top_k);
    l = torch::full_like(l, -std::numeric_limits<float>::infinity()).scatter(0, indices, values);
  }
  const at::Tensor probs = torch::softmax(l, 0);
  return torch::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
}

std::vector<int64_t> generate_tokens(const layer_stack& model, const std::vector<int64_t>& prompt, int64_t count,
                                     int64_t max_seq, const sampling& s, const std::string& device,
                                     const std::function<void(int64_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate_tokens: empty prompt");
  if (max_seq < 1) throw std::invalid_argument("generate_tokens: max_seq must be positive");
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  std::vector<int64_t> seq = prompt, out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  const forward_ctx ctx{s.seed, 0, 0, /*training=*/false};
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = std::min<int64_t>(max_seq, static_cast<int64_t>(seq.size()));
    at::Tensor context = torch::tensor(std::vector<int64_t>(seq.end() - n, seq.end()), torch::kLong)
                             .reshape({1, n})
                             .to(torch::Device(device));
    const at::Tensor logits = model.forward(context, ctx, nullptr);
    const int64_t t = next_token(logits.select(1, n - 1).select(0, 0), s, gen);
    seq.push_back(t);
    out.push_back(t);
    if (on_token) on_token(t);
  }
  return out;
}

}  // namespace actorpipe
