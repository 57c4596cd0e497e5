#pragma once
// TensorBoard event files, written by hand: TFRecord framing around
// protobuf-encoded Event messages, with neither TensorFlow nor protobuf
// (TensorBoard is not packaged in Debian; its file format is small).
//
// A file is named `events.out.tfevents.<unix seconds>.<hostname>`, as
// TensorFlow names them. When that name is taken (a second writer in the
// same directory in the same second) the writer adds `.1`, `.2`, ...: any
// name containing "tfevents" is an event file to TensorBoard, and these
// sort after the plain name, in the order they were made.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actorpipe {

/// Appends scalar summaries to a new TensorBoard event file.
///
/// Each record is framed in memory and handed to the kernel with one
/// write(2) on a file opened O_APPEND, so it is visible to TensorBoard at
/// once, records from several threads never interleave, and a process
/// killed mid-run leaves a file whose complete records are all valid (at
/// most the last one is cut). Nothing is fsynced per record; flush() and
/// the destructor do.
class tensorboard_writer {
public:
  /// Creates `dir` if missing (like mkdir -p) and a new event file in it,
  /// whose first record is the Event {wall_time, file_version
  /// "brain.Event:2"}. Throws io_error naming `dir` and the reason when
  /// the directory cannot be created, is not a directory, is not
  /// writable, or the file cannot be created or written.
  explicit tensorboard_writer(const std::string& dir);
  ~tensorboard_writer();
  tensorboard_writer(const tensorboard_writer&) = delete;
  tensorboard_writer& operator=(const tensorboard_writer&) = delete;

  /// The checks of the constructor, without creating a file (the directory
  /// is created when missing): lets a command refuse a bad --tensorboard
  /// before any work. Throws io_error naming `dir` and the reason.
  static void check_writable(const std::string& dir);

  /// Seconds since the Unix epoch, with a fraction: an Event's wall_time.
  static double now();

  /// Appends one Event {wall_time, step, summary {value {tag,
  /// simple_value}}}. The value is stored as a float, as TensorBoard
  /// keeps it. Throws io_error naming the file when the write fails.
  void scalar(const std::string& tag, int64_t step, double value, double wall_time = now());

  /// Appends one Event holding all `values` of `step` (tag, value); none:
  /// nothing is written.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
               double wall_time = now());

  /// Makes what was written durable (fdatasync). Records already reach the
  /// kernel when written; this guards against a power loss, not a crash.
  void flush();

  /// The event file: `dir/events.out.tfevents.<seconds>.<hostname>[.<n>]`.
  const std::string& path() const { return path_; }

private:
  void append(const std::string& event);

  std::string path_;
  int fd_ = -1;
};

}  // namespace actorpipe
