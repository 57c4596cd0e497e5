#pragma once
// A tensor as CAF serializes it: dtype, shape and the raw bytes of a
// contiguous CPU copy, the bytes as one blob (CAF copies a byte sequence
// whole; a std::vector<float> would go element by element). This is the
// fallback for the small tensors of control messages (gradient norms, a
// clipping coefficient, a snapshot); a link that moves activations between
// processes sends their data its own way and the message without it.
//
// at::Tensor gets an inspect() here, found by argument-dependent lookup,
// so every payload holding tensors is inspectable as a whole.
#include <ATen/core/Tensor.h>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace actorpipe {

/// A float or double field as it crosses processes: its bit pattern, as an
/// unsigned integer of its size. CAF 0.17's serializer packs floating
/// values with caf::detail::pack754, which turns a subnormal into -inf
/// (7.12e-309 came back as -inf; a learning rate decayed that far broke
/// every later step). Every floating field of a payload's inspect() goes
/// through exact(): `f(..., exact(x.lr), ...)`. tests/messages/wire_test
/// fails when one does not.
template <class F>
struct exact_float {
  static_assert(std::is_same_v<F, float> || std::is_same_v<F, double>, "exact(): float or double");
  F& value;
};

template <class F>
exact_float<F> exact(F& x) {
  return {x};
}

template <class Inspector, class F>
typename Inspector::result_type inspect(Inspector& f, exact_float<F>& x) {
  using bits_t = std::conditional_t<sizeof(F) == 8, uint64_t, uint32_t>;
  static_assert(sizeof(bits_t) == sizeof(F));
  bits_t bits = 0;
  if constexpr (Inspector::reads_state) std::memcpy(&bits, &x.value, sizeof bits);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    std::memcpy(&x.value, &bits, sizeof bits);
    return caf::none;
  });
  return f(bits, load);
}

struct tensor_wire {
  int8_t dtype = -1;             ///< c10::ScalarType; -1: an undefined tensor
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;    ///< row-major, the dtype's element size each
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_wire& x) {
  return f(caf::meta::type_name("tensor_wire"), x.dtype, x.shape, x.bytes);
}

/// A tensor whose bytes travel beside its control message, over the
/// process's tensor channel (runtime/dist/transport/tensor_channel.hpp): where
/// they come from and what they are.
struct remote_tensor {
  int32_t from = -1;  ///< the sending process's rank; -1: none (the data is in the message)
  uint32_t tag = 0;   ///< the transfer's tag between the two processes
  int8_t dtype = 0;   ///< c10::ScalarType
  std::vector<int64_t> shape;
  bool pending() const { return from >= 0; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, remote_tensor& x) {
  return f(caf::meta::type_name("remote_tensor"), x.from, x.tag, x.dtype, x.shape);
}

/// A contiguous CPU copy of `t` (from any device), or dtype -1 if undefined.
tensor_wire to_wire(const at::Tensor& t);

/// The tensor `w` describes (CPU). False, with `why` set, when `w` is not
/// one: an unknown dtype, a negative or overflowing shape, or a byte count
/// other than the shape times the element size.
bool from_wire(const tensor_wire& w, at::Tensor& out, std::string& why);

}  // namespace actorpipe

namespace at {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Tensor& t) {
  actorpipe::tensor_wire w;
  if constexpr (Inspector::reads_state) w = actorpipe::to_wire(t);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    std::string why;
    if (!actorpipe::from_wire(w, t, why)) return caf::make_error(caf::sec::invalid_argument, why);
    return caf::none;
  });
  return f(caf::meta::type_name("tensor"), w, load);
}

}  // namespace at
