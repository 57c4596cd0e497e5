#pragma once
// What a stage computes: F, B (whole, or input-gradient only when the
// schedule splits the backward), W, recomputation, the loss, evaluation
// and the stash that carries F's state to B and W. LibTorch only: no
// actors, no messages, no clock. The stage actor decides when; this says
// what.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/model/model.hpp"

namespace actorpipe {

struct compute_shape {
  std::vector<std::shared_ptr<layer_stack>> layers;  ///< one per chunk
  int microbatches = 1;
  bool split = false;      ///< B computes the input gradient only; W the weights'
  bool recompute = false;  ///< F stashes its input alone; B runs F again
  bool work = true;        ///< false: the null and sim devices (empty tensors, no compute)
  int64_t batch_size = 1;  ///< a microbatch's loss is weighted by its size / batch_size
  /// model.mixed_precision: the layers compute in this type from casts of
  /// their weights (one cast per weight version, reused by every
  /// microbatch: autograd takes each microbatch's gradient back through it
  /// into the weight's own type), and the loss is taken in float32.
  /// Undefined: the weights' own type.
  at::ScalarType compute_dtype = at::ScalarType::Undefined;
  /// Host tensor (targets) to the stage's device, as the given type.
  std::function<at::Tensor(const at::Tensor&, at::ScalarType)> to_device;
};

/// A no-grad forward's numbers on the last chunk (evaluation).
struct eval_numbers {
  int64_t total = 0;
  int64_t correct = 0;
  double loss_sum = 0.0;
};

class stage_compute {
public:
  stage_compute() = default;
  explicit stage_compute(compute_shape shape);

  /// A new step: the stash emptied, the step's loss sums zeroed, the
  /// casts of the weights dropped.
  void begin_step();
  /// The weights were updated (or another version's were let go): their
  /// casts under mixed precision are made again at the next forward.
  void weights_changed();

  struct forward_out {
    at::Tensor out;   ///< what goes to the next chunk; on the last chunk, the logits
    at::Tensor loss;  ///< last chunk: this microbatch's weighted loss
  };
  /// F(mb) on `chunk`. `x`: the input on this stage's device (autograd
  /// leaf unless `first`); `y`: the host targets (used on the last chunk).
  /// `weights`: another weight version (async), or null for the live ones.
  /// `poison` adds a NaN to the output (an injected fault). `tally` adds
  /// the loss and correct count to the step's sums (the synchronous
  /// schedules; async reads `loss` instead).
  forward_out forward(int chunk, int mb, const forward_ctx& ctx, at::Tensor x, const at::Tensor& y, bool first,
                      bool last, const std::vector<at::Tensor>* weights, bool poison, bool tally);
  /// B(mb) on `chunk` with the gradient of its output (undefined on the
  /// last chunk, whose output is the loss). Returns the input's gradient
  /// (undefined on the first chunk, or without work). `poison` puts a NaN
  /// into the incoming gradient (the loss on the last chunk).
  at::Tensor backward(int chunk, int mb, at::Tensor grad_out, bool first, bool last, bool poison);
  /// W(mb) on `chunk`: its weight gradients, accumulated into .grad in the
  /// order W fires, as autograd would.
  void weight(int chunk, int mb);

  /// Evaluation: a no-grad forward of `chunk` (with `weights`, another
  /// weight version, or null for the live ones), and the last chunk's
  /// numbers.
  at::Tensor eval_forward(int chunk, const at::Tensor& x, uint64_t seed,
                          const std::vector<at::Tensor>* weights = nullptr);
  eval_numbers eval_loss(const at::Tensor& logits, const at::Tensor& y) const;

  int stashed() const { return stashed_; }
  int64_t stash_bytes() const { return stash_bytes_; }
  /// The step's summed loss (float64) and correct count, on the device; undefined before the first.
  const at::Tensor& loss_sum() const { return loss_sum_; }
  const at::Tensor& correct_sum() const { return correct_sum_; }
  int64_t samples() const { return samples_; }
  const std::vector<std::vector<at::Tensor>>& chunk_params() const { return chunk_params_; }

private:
  /// What F(mb) left for B(mb) and W(mb).
  struct stash_entry {
    at::Tensor input;
    at::Tensor output;    // or the weighted loss on the last chunk
    at::Tensor grad_out;  // split backward with recompute: W's starting gradient
    // Split backward, per layer with parameters: its output (from F) and
    // the gradient there (from B). W then runs each such layer's weight
    // gradient alone, with no input gradient computed a second time.
    std::vector<at::Tensor> param_outs, param_grads;
    int64_t bytes = 0;
    // Recompute: what B needs to run the forward again (the same dropout
    // masks come back: they depend on ctx, not on order).
    at::Tensor targets;
    forward_ctx ctx;
    const std::vector<at::Tensor>* weights = nullptr;
  };
  int slot(int chunk, int mb) const { return chunk * shape_.microbatches + mb; }
  /// The tensors chunk `chunk`'s layers compute with: `weights` (or the
  /// live parameters), cast to compute_dtype under mixed precision.
  const std::vector<at::Tensor>* compute_weights(int chunk, const std::vector<at::Tensor>* weights);
  at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& y) const;  // y on the device
  void rematerialize(int chunk, stash_entry& e, bool last);
  void input_gradients(stash_entry& e, const at::Tensor& grad_out, bool first, bool last, at::Tensor& grad_in);
  void weight_grads(int chunk, const stash_entry& e) const;

  compute_shape shape_;
  std::vector<std::vector<at::Tensor>> chunk_params_;  // by chunk, layer order
  // Mixed precision, by chunk: the cast weights and the tensors they were
  // cast from, until the weights change (weights_changed).
  struct cast_weights {
    std::vector<const void*> from;
    std::vector<at::Tensor> cast;
  };
  std::vector<cast_weights> casts_;
  std::vector<stash_entry> stash_;                     // by slot = chunk * M + mb
  int stashed_ = 0;
  int64_t stash_bytes_ = 0;
  at::Tensor loss_sum_, correct_sum_;
  int64_t samples_ = 0;
};

}  // namespace actorpipe
