#pragma once
// Writing what a user keeps: every output file and checkpoint goes through
// write_atomic, so a full disk, a crash or a second process never leaves a
// torn or empty file under the final name, and never replaces a device, a
// FIFO or a directory.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace actorpipe {

/// A file could not be read or written. what() names the path and says why
/// (the errno text where there is one).
struct io_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Where a write to `path` lands. A symlink is followed to what it points
/// to (also a dangling one: the write creates its target), so the link
/// stays a link and its target is what changes. Throws io_error when that
/// is anything but a regular file or nothing (a directory, a device, a
/// FIFO, a socket), or when its directory is missing or not writable.
std::string output_target(const std::string& path);

/// Writes `bytes` to `path` atomically: a uniquely named temporary file in
/// the target's directory (`NAME.XXXXXX.tmp`), fsync, a checked close, a
/// rename over the target, then an fsync of the directory. Any failure
/// removes the temporary file and throws io_error naming `path` and the
/// errno text; the previous file (or none) stays under the final name. A
/// replaced file keeps its permission bits.
void write_atomic(const std::string& path, std::string_view bytes);

/// The whole of `path`'s bytes. Throws io_error naming the path and the
/// errno text.
std::string read_file_bytes(const std::string& path);

/// The temporary files write_atomic leaves when the process dies mid-write
/// (`NAME.XXXXXX.tmp` beside a `NAME` that starts with `prefix`), in `dir`.
std::vector<std::string> torn_temporaries(const std::string& dir, const std::string& prefix);

}  // namespace actorpipe
