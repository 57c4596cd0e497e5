#pragma once
// An optimizer's state copied tensor by tensor: the snapshot a supervised
// run keeps in memory at every step boundary, and what a checkpoint file
// stores as plain tensors (runtime/files/checkpoint), without torch::serialize
// archives (which cost more than the copy, and whose loader no hostile
// file should reach).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "messages/payloads.hpp"
#include "runtime/model/tensor_pool.hpp"

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}

namespace actorpipe {

// optimizer_state_copy is declared in messages/payloads.hpp: a snapshot
// travels to the driver (and, across processes, to a peer).

/// Copies the state of `opt` (Adam or SGD) for `params`, its parameters in
/// order, named `names` (global names; may be empty). Throws
/// std::invalid_argument for another optimizer type. With `share`, the
/// copy holds the state's tensors themselves, not clones: right only while
/// every later update goes through step_aside.
std::shared_ptr<const optimizer_state_copy> copy_optimizer_state(const torch::optim::Optimizer& opt,
                                                                 const std::vector<at::Tensor>& params,
                                                                 std::vector<std::string> names = {},
                                                                 bool share = false);

/// The state `opt` holds for parameter `p`, or nullptr before its first
/// step. LibTorch keys it by the tensor's address: as a string up to 1.x,
/// as the pointer from 2.0 on; this hides which.
torch::optim::OptimizerParamState* state_of(const torch::optim::Optimizer& opt, const at::Tensor& p);

/// Whether step_aside can step `opt` (Adam or SGD, one parameter group).
bool steps_aside(const torch::optim::Optimizer& opt);

/// One step of `opt`, to the bit what opt.step() computes (LibTorch's op
/// sequence, the first write into each tensor the same kernel with
/// another output), but every new value of a parameter or of its state
/// goes into another tensor, from `pool` (or new, without one): the
/// parameter points at its new data (set_data), the state at its new
/// tensors, and the tensors from before the step are never written. A
/// boundary copy can then be those tensors themselves, for free. Throws
/// std::invalid_argument where !steps_aside(opt).
///
/// Adam (without amsgrad) on the CPU runs its ops over `block` elements of
/// a parameter at a time, every op on one block before the next block:
/// each element's ops are the same, so are the bits, but the block's
/// tensors stay in the cache between ops, where LibTorch's step streams
/// the whole parameter from memory once per op (on the seed MLP's first
/// stage: 17 ms against LibTorch's 30 ms, optimizer_step_bench). 0: whole
/// tensors, as LibTorch.
constexpr int64_t aside_block = 65536;
void step_aside(torch::optim::Optimizer& opt, tensor_pool* pool = nullptr, int64_t block = aside_block);

/// The first of `params` (named `names`, one each) or of their state in
/// `opt` that holds a NaN or an infinity: "3.weight", or "3.weight
/// (exp_avg_sq)" for its state; "" when every one is finite. Each tensor
/// is summed (a NaN or an infinity makes the sum one), and only a
/// non-finite sum is looked at element by element (a sum can also
/// overflow): one wait for the device, and on the CPU one pass.
std::string first_nonfinite_state(const torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params,
                                  const std::vector<std::string>& names);

/// Gives `opt` (the same type, over `params` of the same shapes and order)
/// a deep copy of `state`; the copy stays usable for another restore.
void restore_optimizer_state(torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params,
                             const optimizer_state_copy& state);

}  // namespace actorpipe
