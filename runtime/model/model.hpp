#pragma once
// Layer specs -> torch modules, and the slice of them a stage owns.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/config.hpp"

namespace actorpipe {

/// Where a forward happens; dropout masks depend on it and on nothing else
/// (not on execution order), so every schedule draws the same masks.
struct forward_ctx {
  uint64_t seed = 0;
  int64_t step = 0;
  int32_t mb = 0;
  bool training = true;
};

/// model.dtype as a tensor type.
at::ScalarType parameter_dtype(const model_config& m);

/// softmax(q k^T / sqrt(d) + causal mask) v over [b, heads, T, d/heads];
/// `drop_probs`, when given, is applied to the attention probabilities.
/// LibTorch 2.x runs the fused scaled_dot_product_attention when there is
/// no dropout; 1.13 (CPU, CI) the explicit matmul, mask and softmax.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::function<at::Tensor(const at::Tensor&)>& drop_probs);

/// Generation with a KV cache: the keys and values of every position of
/// the sequences so far, by attention layer, so that each new token costs
/// one position's work, not the whole prefix's.
struct kv_cache {
  int64_t length = 0;  ///< positions held
  /// By layer index: keys and values [b, kv heads, length, head dim].
  std::map<int, std::pair<at::Tensor, at::Tensor>> kv;
};

/// One layer of the network with its global index.
class layer {
public:
  /// `uninitialised`: a linear layer's weight and bias are allocated but
  /// not initialised (a heal overwrites them at once).
  layer(int index, layer_spec spec, bool uninitialised = false);
  ~layer();
  layer(layer&&) noexcept;
  layer& operator=(layer&&) noexcept;

  int index() const { return index_; }
  const layer_spec& spec() const { return spec_; }
  /// With `params` (this layer's parameters() in order), runs with those
  /// tensors instead of its own: an older weight version.
  /// `param_outputs`, when given, receives the outputs at which this
  /// layer's parameters enter, one per parameter_groups() entry.
  at::Tensor forward(const at::Tensor& x, const forward_ctx& ctx, const at::Tensor* params = nullptr,
                     std::vector<at::Tensor>* param_outputs = nullptr) const;
  /// Inference on positions [cache.length, cache.length + x.size(1)) of
  /// sequences whose earlier positions `cache` holds: an attention layer
  /// attends to them and appends its own keys and values (the caller
  /// advances cache.length once every layer ran). The same as forward()
  /// over the whole prefix, position for position, up to float rounding.
  at::Tensor forward_cached(const at::Tensor& x, kv_cache& cache) const;
  /// (local name, tensor): "weight", "bias"; empty for parameterless layers.
  std::vector<std::pair<std::string, at::Tensor>> parameters() const;
  int64_t parameter_count() const;
  /// Number of parameter tensors (0; 2 for weight and bias; a transformer
  /// layer's: 2 embedding, 12 gpt_block, 1 lm_head).
  int parameter_tensors() const;
  /// How parameter_tensors() split into groups that each enter at one
  /// output (what a split backward's weight pass starts from): a gpt_block's
  /// six weight-and-bias pairs (ln1, qkv, proj, ln2, fc1, fc2); one group of
  /// all of them for any other layer with parameters; none without.
  std::vector<int> parameter_groups() const;
  void to(const std::string& device, at::ScalarType dtype = at::kFloat);

private:
  at::Tensor transformer_forward(const at::Tensor& x, const forward_ctx& ctx, const at::Tensor* params,
                                 std::vector<at::Tensor>* param_outputs, kv_cache* cache = nullptr) const;
  struct impl;
  int index_;
  layer_spec spec_;
  std::unique_ptr<impl> impl_;
};

/// A contiguous run of layers: what one stage (or chunk) owns.
class layer_stack {
public:
  layer_stack() = default;
  explicit layer_stack(std::vector<layer> layers) : layers_(std::move(layers)) {}

  /// Runs every layer; adds each intermediate output's bytes to *act_bytes
  /// (what autograd keeps alive for the backward).
  /// `params`, when given, replaces parameters() (same order and shapes).
  /// `param_outputs`, when given, receives, in order, every output at which
  /// a group of parameters enters (layer::parameter_groups): a split
  /// backward takes the gradient at each of them, so that its weight pass
  /// needs no input gradient again. For a layer with one group that is the
  /// layer's output; a gpt_block gives the outputs of its six inner
  /// parameterised ops, so that W runs none of its attention again.
  at::Tensor forward(at::Tensor x, const forward_ctx& ctx, int64_t* act_bytes,
                     const std::vector<at::Tensor>* params = nullptr,
                     std::vector<at::Tensor>* param_outputs = nullptr) const;
  /// Global names ("2.weight") in layer order.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  void to(const std::string& device, at::ScalarType dtype = at::kFloat);
  const std::vector<layer>& layers() const { return layers_; }
  /// Every layer's forward_cached over x's positions, then cache.length
  /// advanced past them (no grad, no dropout).
  at::Tensor forward_cached(at::Tensor x, kv_cache& cache) const;

private:
  std::vector<layer> layers_;
};

/// Whether the model has a transformer layer (embedding, gpt_block,
/// lm_head): it then starts from GPT-2's initial weights.
bool has_transformer_layers(const model_config& m);

/// Builds every layer of cfg.model in order, on the CPU, after seeding
/// torch with train.seed, so initial weights depend only on the config; then
/// loads model.init_from when given. Throws config_error for a state dict
/// whose keys or shapes do not match.
std::vector<layer> build_layers(const config& cfg);

/// The layers of cfg.model for stages about to be given their weights and
/// optimizer state from memory (a heal): only the layers `needed` says are
/// built, a linear layer's tensors uninitialised and the others with
/// LibTorch's own initialisation (no seeding, no GPT-2 init, no init_from:
/// all of it is overwritten); each other index holds a
/// parameterless stand-in, never given to a stage. A fraction of
/// build_layers' time for a stage of a large model.
std::vector<layer> stand_in_layers(const config& cfg, const std::function<bool(int index)>& needed);

/// Orders parameters named by global layer index ("3.weight") in model
/// order, whichever stage or chunk held them; stable within a layer.
void sort_by_layer(std::vector<std::pair<std::string, at::Tensor>>& params);

/// Parameter count of each layer spec (without building anything).
std::vector<int64_t> layer_parameter_counts(const std::vector<layer_spec>& specs);

/// Multiply-adds per token (per sample for an MLP) of each layer: what the
/// default partition balances. A linear or layernorm costs its parameter
/// count; an embedding a gather (2 dim), whatever its table's size; a
/// gpt_block its matmuls plus attention's 2 seq_len dim.
std::vector<int64_t> layer_compute_costs(const std::vector<layer_spec>& specs, int64_t seq_len);

}  // namespace actorpipe
