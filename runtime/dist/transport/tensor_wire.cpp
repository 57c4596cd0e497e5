// tensor_wire (messages/wire.hpp): a tensor's bytes for CAF, and back with
// every field checked, since they may come from another process.
#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>

#include <cstring>

#include "messages/wire.hpp"

namespace actorpipe {

tensor_wire to_wire(const at::Tensor& t) {
  tensor_wire w;
  if (!t.defined()) return w;
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  w.dtype = static_cast<int8_t>(c.scalar_type());
  w.shape.assign(c.sizes().begin(), c.sizes().end());
  const size_t n = c.numel() * c.element_size();
  w.bytes.resize(n);
  if (n > 0) std::memcpy(w.bytes.data(), c.data_ptr(), n);
  return w;
}

bool from_wire(const tensor_wire& w, at::Tensor& out, std::string& why) {
  if (w.dtype == -1) {
    if (!w.shape.empty() || !w.bytes.empty()) {
      why = "an undefined tensor with a shape or data";
      return false;
    }
    out = at::Tensor();
    return true;
  }
  if (w.dtype < 0 || w.dtype >= static_cast<int8_t>(c10::ScalarType::NumOptions)) {
    why = "tensor dtype " + std::to_string(w.dtype) + " is unknown";
    return false;
  }
  const auto type = static_cast<c10::ScalarType>(w.dtype);
  if (c10::isQIntType(type) || type == c10::ScalarType::Undefined) {
    why = std::string("tensor dtype ") + c10::toString(type) + " is not sent";
    return false;
  }
  uint64_t bytes = c10::elementSize(type);
  for (int64_t d : w.shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      why = "tensor shape has a negative or overflowing size";
      return false;
    }
  }
  if (bytes != w.bytes.size()) {
    why = "tensor of " + std::to_string(w.bytes.size()) + " bytes, its shape and dtype need " + std::to_string(bytes);
    return false;
  }
  out = at::empty(w.shape, at::TensorOptions().dtype(type));
  if (bytes > 0) std::memcpy(out.data_ptr(), w.bytes.data(), bytes);
  return true;
}

}  // namespace actorpipe
