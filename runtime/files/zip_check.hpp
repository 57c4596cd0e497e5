#pragma once
// A look at a zip archive's central directory before LibTorch's reader
// allocates what its entries claim: torch.save writes every entry stored
// (uncompressed), so an entry larger than the file itself, or a compressed
// one (a zip bomb's way to claim gigabytes), is refused up front.
#include <cstdint>
#include <string>

namespace actorpipe {

/// Throws std::runtime_error ("PATH: ...") unless every entry of the zip
/// archive at `path` is stored uncompressed and lies inside the file.
/// Returns the file's size in bytes.
uint64_t check_stored_zip(const std::string& path);

}  // namespace actorpipe
