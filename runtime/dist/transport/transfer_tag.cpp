// transfer_tag(): the fields of a pipeline transfer packed into 30 bits.
#include "runtime/dist/transport/transfer_tag.hpp"

#include <stdexcept>
#include <string>

namespace actorpipe {

static_assert(transfer_tag_step_bits + transfer_tag_microbatch_bits + transfer_tag_chunk_bits +
                      transfer_tag_direction_bits ==
                  30,
              "transfer tags are 30 bits");

namespace {

void check_field(const char* name, int64_t value, int bits) {
  int64_t limit = int64_t{1} << bits;
  if (value < 0 || value >= limit)
    throw std::out_of_range(std::string("transfer_tag: ") + name + " " + std::to_string(value) +
                            " does not fit (expected 0 .. " + std::to_string(limit - 1) + ")");
}

}  // namespace

uint32_t transfer_tag(int64_t step, int64_t microbatch, int64_t chunk, transfer_direction direction) {
  if (step < 0) throw std::out_of_range("transfer_tag: step " + std::to_string(step) + " is negative");
  check_field("microbatch", microbatch, transfer_tag_microbatch_bits);
  check_field("chunk", chunk, transfer_tag_chunk_bits);
  check_field("direction", static_cast<int64_t>(direction), transfer_tag_direction_bits);
  uint64_t wrapped_step = static_cast<uint64_t>(step) & ((uint64_t{1} << transfer_tag_step_bits) - 1);
  uint64_t tag = wrapped_step;
  tag = (tag << transfer_tag_microbatch_bits) | static_cast<uint64_t>(microbatch);
  tag = (tag << transfer_tag_chunk_bits) | static_cast<uint64_t>(chunk);
  tag = (tag << transfer_tag_direction_bits) | static_cast<uint64_t>(direction);
  return static_cast<uint32_t>(tag);
}

}  // namespace actorpipe
