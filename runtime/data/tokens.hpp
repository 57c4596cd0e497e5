#pragma once
// Token files, as language-model recipes bring them: nanoGPT's flat
// train.bin (little-endian uint16 or uint32 ids, nothing else) and
// Megatron's indexed pair, a .bin of the sequences' ids beside a .idx that
// says where each sequence lies. Every problem is one line naming the file
// and the place.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace actorpipe {

/// A token file that is not one: the message names the file and the place.
class token_file_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The ids of `path` as one int64 stream: when `path` is a .bin with a .idx
/// beside it, Megatron's sequences concatenated in order (the .idx names
/// their type: int32 or uint16); otherwise a flat file of `dtype` ("uint16"
/// or "uint32") ids. Throws token_file_error for a length that is not a
/// whole number of ids, an .idx that does not match its .bin, or a read
/// error.
at::Tensor read_token_file(const std::string& path, const std::string& dtype);

/// The Megatron index beside `path` (PATH.bin -> PATH.idx), or "" when there
/// is none.
std::string megatron_index_for(const std::string& path);

/// The first id of `tokens` at or past `vocab`, or below 0: "PATH: token id
/// 70000 at position 12345 is at or past the embedding's vocab 32000"; ""
/// when every id fits.
std::string first_token_outside(const at::Tensor& tokens, int64_t vocab, const std::string& path);

}  // namespace actorpipe
