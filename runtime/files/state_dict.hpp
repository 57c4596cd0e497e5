#pragma once
// Reading and writing files that Python's torch.save / torch.load use.
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace actorpipe {

/// Tensors by name, in file order.
using named_tensors = std::vector<std::pair<std::string, at::Tensor>>;

/// Reads a dict of tensors written by Python's torch.save: a plain dict, or
/// an OrderedDict such as model.state_dict() (its _metadata is ignored), or
/// one written by save_tensors(). Throws std::runtime_error naming the file
/// for anything else, within a memory bound: the tensors it returns and
/// what it allocates on the way take a few times the file's size at most,
/// however the file is crafted.
named_tensors load_tensors(const std::string& path);

/// The name of the first floating tensor of `tensors` that holds a NaN or
/// an infinity; "" when there is none. What --save and a checkpoint refuse
/// to write.
std::string first_nonfinite(const named_tensors& tensors);

/// Writes a dict that Python's torch.load reads back as {name: tensor}.
/// Atomic (write_atomic): the previous file or the new one, never a torn one.
void save_tensors(const std::string& path, const named_tensors& tensors);

}  // namespace actorpipe
