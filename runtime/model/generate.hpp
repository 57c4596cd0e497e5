#pragma once
// Autoregressive decoding with a model's layers (embedding or
// token_embedding ... lm_head): `actorpipe generate`, and the samples a
// language model's training ends with. No gradients, no dropout.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model/model.hpp"

namespace actorpipe {

/// How the next token is drawn from the last position's logits.
struct sampling {
  double temperature = 0.8;  ///< 0: greedy (argmax), no randomness
  int64_t top_k = 40;        ///< keep the k largest logits; 0: keep all
  uint64_t seed = 1;         ///< the generator's seed: the same seed, the same text
};

/// The next token from `logits` [V] (any device and float type): greedy at
/// temperature 0; otherwise logits / temperature, the top-k filter, softmax
/// and torch::multinomial with `gen` (a CPU generator; the draw is on the CPU).
int64_t next_token(const at::Tensor& logits, const sampling& s, at::Generator& gen);

/// Generates `count` tokens after `prompt` (not empty): each from the model's
/// logits at the last position of the last `max_seq` tokens so far. The model
/// takes int64 tokens [1, T] and returns logits [1, T, V]; it runs on
/// `device`. `on_token` sees each new token as it is drawn. Returns the new
/// tokens.
///
/// With `kv_cache` (the default) the prompt runs once and each new token
/// costs one position's work: the attention layers keep every position's
/// keys and values (kv_cache in model.hpp). Once the window holds max_seq
/// tokens it slides, and each token runs the last max_seq again from
/// position 0, as the cache-less path does: a deeper layer's keys depend
/// on every position before, so a dropped one cannot just leave the
/// cache. Without, every token runs the whole window again.
std::vector<int64_t> generate_tokens(const layer_stack& model, const std::vector<int64_t>& prompt, int64_t count,
                                     int64_t max_seq, const sampling& s, const std::string& device = "cpu",
                                     const std::function<void(int64_t)>& on_token = {}, bool kv_cache = true);

}  // namespace actorpipe
