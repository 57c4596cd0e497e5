#pragma once
// The LLaMA-family layers of tests/reference/llama_reference.py, op for op:
// RMSNorm in float32, rotary positions in the interleaved layout (Meta's and
// torchtitan's), grouped key/value heads, a SwiGLU feed-forward, no biases.
// model.cpp's layer dispatches to these; they hold no tensors of their own.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/config.hpp"

namespace actorpipe::llama {

/// A layer's parameters (token_embedding, llama_block, rmsnorm), zeros, in
/// the order its forward first uses them: a llama_block's are
/// attention_norm, attention.wq, wk, wv, wo, ffn_norm, feed_forward.w1, w3,
/// w2 (w3 before w2: the split backward takes each one's gradient where it
/// enters, in this order). Their names are the reference's state-dict keys.
std::vector<std::pair<std::string, at::Tensor>> parameters(const layer_spec& s);

/// x * rsqrt(mean(x^2) + eps) * weight over the last dimension, computed in
/// float32 and returned in x's type.
at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// cos and sin [t, head_dim / 2] (float32) of positions [start, start + t):
/// angle(p, i) = p * theta^(-2i / head_dim).
std::pair<at::Tensor, at::Tensor> rope_tables(int64_t head_dim, int64_t start, int64_t t, double theta,
                                              c10::Device device);

/// x [b, t, heads, hd]: each pair (x[2i], x[2i+1]) rotated by its angle.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// Causal attention of t queries, the last t positions, to n keys and values
/// (a KV cache's and their own): query i sees keys 0 .. n - t + i.
/// q [b, h, t, hd], k and v [b, h, n, hd].
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

/// What a block's forward reads and writes besides its input.
struct block_io {
  /// The i-th parameter (in parameters() order): the layer's own, another
  /// weight version, or their casts under mixed precision.
  std::function<const at::Tensor&(size_t)> weight;
  /// Where each parameter enters, in order (a split backward's W starts
  /// there); returns its argument.
  std::function<at::Tensor(at::Tensor)> entered;
  /// Generation: the keys and values of the positions before x's
  /// [b, kv_heads, start, hd] (undefined: none), extended with x's. Null in
  /// training.
  std::pair<at::Tensor, at::Tensor>* cache = nullptr;
  int64_t start = 0;  ///< x's first position
};

/// {type: llama_block}: h = x + attention(attention_norm(x));
/// out = h + feed_forward(ffn_norm(h)).
at::Tensor block(const layer_spec& s, const at::Tensor& x, const block_io& io);

/// Multiply-adds per token of a llama_block: its projections and, for
/// attention, 2 seq_len dim (q k^T and att v).
int64_t block_costs(const layer_spec& s, int64_t seq_len);

}  // namespace actorpipe::llama
