#pragma once
// Tags of point-to-point transfers (runtime/dist/transport/p2p_group.hpp): which
// pipeline transfer a message belongs to, packed into the tag space that
// c10d's Gloo send/recv accept.
#include <cstdint>

namespace actorpipe {

/// Which way a pipeline transfer goes: activations forward, gradients back.
enum class transfer_direction : uint32_t { forward = 0, backward = 1 };

/// Largest tag p2p_group::send() and recv_into() accept. c10d takes a non-negative int
/// (31 bits) and each transfer uses two slots (tag * 2 and tag * 2 + 1), so
/// tags are 30 bits: 0 .. 2^30 - 1.
constexpr uint32_t max_transfer_tag = (uint32_t{1} << 30) - 1;

/// Bit widths of transfer_tag()'s fields; they add up to 30.
constexpr int transfer_tag_step_bits = 12;        ///< step modulo 4096
constexpr int transfer_tag_microbatch_bits = 11;  ///< microbatch 0 .. 2047
constexpr int transfer_tag_chunk_bits = 6;        ///< chunk 0 .. 63
constexpr int transfer_tag_direction_bits = 1;    ///< forward or backward

/// The tag of one pipeline transfer, packed into 30 bits as
/// [step mod 4096 : 12][microbatch : 11][chunk : 6][direction : 1].
/// Distinct (step, microbatch, chunk, direction) give distinct tags as long
/// as the steps in flight at once span fewer than 4096 consecutive steps
/// (the step wraps; a tag is free for reuse once its transfer completed).
/// Throws std::out_of_range for a negative step, a microbatch outside
/// 0 .. 2047 or a chunk outside 0 .. 63.
uint32_t transfer_tag(int64_t step, int64_t microbatch, int64_t chunk, transfer_direction direction);

}  // namespace actorpipe
