#include "runtime/model/llama.hpp"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "runtime/model/model.hpp"

namespace actorpipe::llama {

namespace {

at::Tensor zeros(std::initializer_list<int64_t> shape) {
  return torch::zeros(shape, torch::kFloat).requires_grad_(true);
}

int64_t kv_heads_of(const layer_spec& s) { return s.kv_heads > 0 ? s.kv_heads : s.heads; }

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> parameters(const layer_spec& s) {
  const int64_t d = s.dim;
  if (s.type == "token_embedding") return {{"weight", zeros({s.vocab, d})}};
  if (s.type == "rmsnorm") return {{"weight", zeros({d})}};
  const int64_t hd = d / s.heads, kv = kv_heads_of(s) * hd, f = s.ffn_hidden;
  return {{"attention_norm.weight", zeros({d})},      {"attention.wq.weight", zeros({s.heads * hd, d})},
          {"attention.wk.weight", zeros({kv, d})},     {"attention.wv.weight", zeros({kv, d})},
          {"attention.wo.weight", zeros({d, s.heads * hd})}, {"ffn_norm.weight", zeros({d})},
          {"feed_forward.w1.weight", zeros({f, d})},   {"feed_forward.w3.weight", zeros({f, d})},
          {"feed_forward.w2.weight", zeros({d, f})}};
}

at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor n = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return n.to(x.scalar_type()) * weight;
}

std::pair<at::Tensor, at::Tensor> rope_tables(int64_t head_dim, int64_t start, int64_t t, double theta,
                                              c10::Device device) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  // As the reference writes it: 1.0 / (theta ** (arange / hd)), where
  // Python's theta ** tensor is torch.tensor(theta, float32) ** tensor and
  // 1.0 / tensor is tensor.reciprocal() * 1.0.
  const at::Tensor exponents = at::arange(0, head_dim, 2, f32) / head_dim;
  const at::Tensor inv = at::pow(at::scalar_tensor(theta, f32), exponents).reciprocal() * 1.0;
  const at::Tensor angles = at::outer(at::arange(start, start + t, f32), inv);
  return {angles.cos(), angles.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = x.size(3);
  const at::Tensor pairs = x.to(at::kFloat).reshape({b, t, h, d / 2, 2});
  const at::Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  const at::Tensor c = cos.slice(0, 0, t).view({1, t, 1, d / 2}), s = sin.slice(0, 0, t).view({1, t, 1, d / 2});
  const at::Tensor out = at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1);
  return out.reshape({b, t, h, d}).to(x.scalar_type());
}

at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(-2), total = k.size(-2);
  auto att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (t > 1) {
    const auto opts = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor rows = at::arange(total - t, total, opts).unsqueeze(1);
    const at::Tensor cols = at::arange(total, opts).unsqueeze(0);
    att = att.masked_fill(cols > rows, -std::numeric_limits<double>::infinity());
  }
  return at::matmul(att.softmax(-1), v);
}

at::Tensor block(const layer_spec& s, const at::Tensor& x, const block_io& io) {
  const auto& w = io.weight;
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / s.heads, kv = kv_heads_of(s);
  const at::Tensor a = io.entered(rmsnorm(x, w(0), s.eps));
  at::Tensor q = io.entered(at::linear(a, w(1))).view({b, t, s.heads, hd});
  at::Tensor k = io.entered(at::linear(a, w(2))).view({b, t, kv, hd});
  at::Tensor v = io.entered(at::linear(a, w(3))).view({b, t, kv, hd});
  const auto [cos, sin] = rope_tables(hd, io.start, t, s.rope_theta, x.device());
  q = apply_rope(q, cos, sin).transpose(1, 2);  // [b, heads, t, hd]
  k = apply_rope(k, cos, sin).transpose(1, 2);  // [b, kv, t, hd]
  v = v.transpose(1, 2);
  if (io.cache) {
    auto& [ck, cv] = *io.cache;
    ck = ck.defined() ? at::cat({ck, k}, 2) : k;
    cv = cv.defined() ? at::cat({cv, v}, 2) : v;
    k = ck;
    v = cv;
  }
  // Query head h reads key/value head h / (heads / kv_heads).
  const int64_t rep = s.heads / kv;
  if (rep > 1) {
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
  }
  const at::Tensor y = (io.cache ? cached_attention(q, k, v) : causal_attention(q, k, v, {}))
                           .transpose(1, 2)
                           .reshape({b, t, s.heads * hd});
  const at::Tensor h = x + io.entered(at::linear(y, w(4)));
  const at::Tensor n = io.entered(rmsnorm(h, w(5), s.eps));
  const at::Tensor gate = at::silu(io.entered(at::linear(n, w(6))));
  const at::Tensor up = io.entered(at::linear(n, w(7)));
  return h + io.entered(at::linear(gate * up, w(8)));
}

int64_t block_costs(const layer_spec& s, int64_t seq_len) {
  const int64_t d = s.dim, hd = d / s.heads, kv = kv_heads_of(s) * hd;
  return 2 * d + d * s.heads * hd + 2 * d * kv + s.heads * hd * d + 3 * d * s.ffn_hidden + 2 * seq_len * d;
}

}  // namespace actorpipe::llama
