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

namespace {

at::Tensor as_input(const std::vector<int64_t>& tokens, size_t from, const std::string& device) {
  const auto n = static_cast<int64_t>(tokens.size() - from);
  return torch::tensor(std::vector<int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.end()),
                       torch::kLong)
      .reshape({1, n})
      .to(torch::Device(device));
}

}  // namespace

std::vector<int64_t> generate_tokens(const layer_stack& model, const std::vector<int64_t>& prompt, int64_t count,
                                     int64_t max_seq, const sampling& s, const std::string& device,
                                     const std::function<void(int64_t)>& on_token, bool kv_cache_on) {
  if (prompt.empty()) throw std::invalid_argument("generate_tokens: empty prompt");
  if (max_seq < 1) throw std::invalid_argument("generate_tokens: max_seq must be positive");
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  std::vector<int64_t> seq = prompt, out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  const forward_ctx ctx{s.seed, 0, 0, /*training=*/false};
  kv_cache cache;
  int64_t cached = 0;  // tokens of seq the cache holds (the last ones)
  for (int64_t i = 0; i < count; ++i) {
    const auto size = static_cast<int64_t>(seq.size());
    at::Tensor logits;
    if (!kv_cache_on) {
      const int64_t n = std::min<int64_t>(max_seq, size);
      logits = model.forward(as_input(seq, static_cast<size_t>(size - n), device), ctx, nullptr);
    } else {
      const int64_t fresh = size - (cache.length > 0 ? cached : 0);  // tokens not in the cache yet
      if (cache.length == 0 || cached + fresh > max_seq) {
        // The window from position 0: the prompt, or the window slid past
        // its first token, whose keys and values every later layer's
        // depend on (a dropped position cannot simply leave the cache).
        cache = kv_cache{};
        const int64_t n = std::min<int64_t>(max_seq, size);
        logits = model.forward_cached(as_input(seq, static_cast<size_t>(size - n), device), cache);
        cached = n;
      } else {
        logits = model.forward_cached(as_input(seq, static_cast<size_t>(size - fresh), device), cache);
        cached += fresh;
      }
    }
    const int64_t t = next_token(logits.select(1, logits.size(1) - 1).select(0, 0), s, gen);
    seq.push_back(t);
    out.push_back(t);
    if (on_token) on_token(t);
  }
  return out;
}

}  // namespace actorpipe
