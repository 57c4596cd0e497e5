// TensorBoard event files: the crc, what a writer's file reads back as, a
// file cut mid-record or corrupted, and directories that cannot be written.
#include "runtime/observe/tensorboard.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/files/file_io.hpp"
#include "runtime/util/crc32c.hpp"
#include "tests/runtime/observe/tfevents_reader.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::slurp_file;

fs::path dir() { return testing_util::test_dir("actorpipe_tensorboard"); }

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

/// The message of the io_error `f` throws ("" when it throws none).
template <typename F>
std::string io_error_of(F f) {
  try {
    f();
  } catch (const io_error& e) {
    return e.what();
  }
  return "";
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0').data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff').data(), 32), 0x62A8AB43u);  // RFC 3720, B.4
  EXPECT_EQ(crc32c("", 0), 0u);
  // A continued crc is the crc of the concatenation.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

/// An event's values as (tag, simple_value).
using values = std::vector<std::pair<std::string, float>>;
values values_of(const tfevents::event& e) {
  values out;
  for (const auto& v : e.values) out.emplace_back(v.tag, v.has_simple_value ? v.simple_value : NAN);
  return out;
}

TEST(TensorboardWriter, FileReadsBackWithVersionScalarsAndWallTimes) {
  const auto d = dir();
  const double before = tensorboard_writer::now();
  std::string path;
  {
    tensorboard_writer w((d / "run").string());
    path = w.path();
    w.scalar("loss", 1, 2.5, 1000.25);
    w.scalars(2, {{"loss", 0.1}, {"lr", 3e-4}}, 1001.5);
    w.scalar("neg", -7, -1.0);  // a negative step: ten varint bytes
    w.flush();
  }
  const double after = tensorboard_writer::now();

  const auto r = tfevents::read_event_file(path);
  EXPECT_TRUE(r.ok());  // every crc valid, every record whole
  ASSERT_EQ(r.records, 4u);
  ASSERT_EQ(r.events.size(), 4u);
  const auto& e = r.events;
  EXPECT_EQ(e[0].file_version, "brain.Event:2");
  EXPECT_FALSE(e[0].has_summary);
  EXPECT_TRUE(e[0].wall_time >= std::floor(before) && e[0].wall_time <= after) << e[0].wall_time;
  EXPECT_EQ(e[1].step, 1);
  EXPECT_EQ(e[1].wall_time, 1000.25);
  EXPECT_EQ(values_of(e[1]), (values{{"loss", 2.5f}}));
  EXPECT_EQ(e[2].step, 2);
  EXPECT_EQ(e[2].wall_time, 1001.5);
  EXPECT_EQ(values_of(e[2]), (values{{"loss", 0.1f}, {"lr", 3e-4f}}));  // stored as floats
  EXPECT_EQ(e[3].step, -7);
  EXPECT_EQ(values_of(e[3]), (values{{"neg", -1.0f}}));
  EXPECT_TRUE(e[3].wall_time >= before && e[3].wall_time <= after) << e[3].wall_time;  // default: now
}

/// The seconds in `name` when it is `events.out.tfevents.<seconds>.<this
/// host>`, optionally followed by `.<n>`; -1 otherwise.
long long seconds_in(const std::string& name) {
  const auto number = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == s.npos; };
  const std::string prefix = "events.out.tfevents.", h = host();
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t dot = name.find('.', prefix.size());
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  const std::string rest = dot == name.npos ? "" : name.substr(dot + 1);  // host, or host.<n>
  const bool host_ok = rest == h || (rest.rfind(h + ".", 0) == 0 && number(rest.substr(h.size() + 1)));
  return number(digits) && host_ok ? std::stoll(digits) : -1;
}

TEST(TensorboardWriter, CreatesItsDirectoryAndNamesTheFileAsTensorflowDoes) {
  const auto d = dir() / "a" / "b";
  tensorboard_writer::check_writable(d.string());
  EXPECT_TRUE(fs::is_directory(d));
  EXPECT_TRUE(fs::is_empty(d));  // check_writable creates no file
  const auto seconds = static_cast<long long>(tensorboard_writer::now());
  tensorboard_writer w(d.string() + "/");
  const fs::path p = w.path();
  EXPECT_EQ(p.parent_path(), d);
  EXPECT_EQ(p.filename().string(), "events.out.tfevents." + std::to_string(seconds_in(p.filename())) + "." + host());
  EXPECT_LE(std::llabs(seconds_in(p.filename()) - seconds), 2) << p;
}

TEST(TensorboardWriter, SecondWriterInTheSameSecondGetsItsOwnFile) {
  const auto d = dir();
  tensorboard_writer a(d.string()), b(d.string()), c(d.string());
  EXPECT_TRUE(a.path() != b.path() && b.path() != c.path() && a.path() != c.path());
  for (const auto* w : {&a, &b, &c}) EXPECT_GT(seconds_in(fs::path(w->path()).filename()), 0) << w->path();
  a.scalar("x", 1, 1.0);
  b.scalar("x", 1, 2.0);
  EXPECT_EQ(tfevents::read_event_file(a.path()).events.at(1).values.at(0).simple_value, 1.0f);
  EXPECT_EQ(tfevents::read_event_file(b.path()).events.at(1).values.at(0).simple_value, 2.0f);
  EXPECT_EQ(tfevents::read_event_file(c.path()).records, 1u);
}

/// A file of four records, the last with two scalars; `last` is where
/// that one begins.
std::string four_records(const fs::path& d, size_t& last) {
  std::string path;
  {
    tensorboard_writer w(d.string());
    path = w.path();
    w.scalar("a", 1, 1.0, 10.0);
    w.scalar("b", 2, 2.0, 11.0);
    last = fs::file_size(path);
    w.scalars(3, {{"c", 3.0}, {"d", 4.0}}, 12.0);
  }
  return path;
}

TEST(TfeventsReader, FileCutAtEveryByteReadsUpToItsLastWholeRecord) {
  size_t last = 0;
  const std::string path = four_records(dir(), last);
  const std::string bytes = slurp_file(path);
  const std::vector<size_t> ends = tfevents::read_event_bytes(bytes).record_ends;
  ASSERT_EQ(ends.size(), 4u);
  ASSERT_EQ(ends[2], last);
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    const auto r = tfevents::read_event_bytes(std::string_view(bytes).substr(0, cut));
    const size_t n = std::upper_bound(ends.begin(), ends.end(), cut) - ends.begin();  // whole records
    const size_t end = n == 0 ? 0 : ends[n - 1];
    EXPECT_EQ(r.records, n);
    EXPECT_EQ(r.events.size(), n);
    EXPECT_EQ(r.leftover, cut - end);
    EXPECT_EQ(r.clean_end, cut == end);
    EXPECT_TRUE(r.crc_failures.empty());
    EXPECT_TRUE(r.decode_errors.empty());
  }
  fs::resize_file(path, last + 13);  // the file itself, cut inside the last record's data
  const auto r = tfevents::read_event_file(path);
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.leftover, 13u);
  EXPECT_TRUE(!r.clean_end && r.crc_failures.empty());
}

TEST(TfeventsReader, FlippedDataByteIsACrcFailureOfThatRecord) {
  const auto d = dir();
  size_t last = 0;
  std::string bytes = slurp_file(four_records(d, last));
  const std::string clean = bytes;
  bytes[last + 12 + 2] ^= 0x40;  // inside the last record's data
  auto r = tfevents::read_event_bytes(bytes);
  ASSERT_EQ(r.crc_failures.size(), 1u);
  EXPECT_EQ(r.crc_failures[0].record, 3u);
  EXPECT_EQ(r.crc_failures[0].which, "data");
  EXPECT_EQ(r.crc_failures[0].offset, last);
  EXPECT_EQ(r.records, 4u);
  EXPECT_EQ(r.events.size(), 3u);  // the bad one is not decoded
  EXPECT_TRUE(r.clean_end);
  bytes = clean;
  bytes[last + 1] ^= 0x01;  // the last record's length
  r = tfevents::read_event_bytes(bytes);
  ASSERT_EQ(r.crc_failures.size(), 1u);
  EXPECT_EQ(r.crc_failures[0].record, 3u);
  EXPECT_EQ(r.crc_failures[0].which, "length");
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.leftover, bytes.size() - last);

  // Every single-byte corruption is caught, and none crashes the reader.
  for (size_t i = 0; i < clean.size(); ++i) {
    bytes = clean;
    bytes[i] ^= 0x10;
    r = tfevents::read_event_bytes(bytes);
    EXPECT_FALSE(r.ok()) << "byte " << i;
  }
}

TEST(TfeventsReader, SkipsUnknownFieldsOfEveryWireType) {
  using namespace std::string_literals;
  // step 5; field 7 varint 300; field 8 fixed64; field 9 bytes "xyz";
  // field 10 fixed32; then summary {value {tag "t", field 3 varint, simple_value 1.0}}.
  const std::string event = "\x10\x05"s + "\x38\xac\x02"s + "\x41"s + std::string(8, '\x7f') +
                            "\x4a\x03xyz"s + "\x55"s + std::string(4, '\x01') +
                            "\x2a\x0c\x0a\x0a\x0a\x01t\x18\x01\x15\x00\x00\x80\x3f"s;
  const auto r = tfevents::read_event_bytes(tfevents::frame_record(event));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].step, 5);
  EXPECT_EQ(values_of(r.events[0]), (values{{"t", 1.0f}}));
  // A group (wire type 3) or a length past the end is no Event.
  EXPECT_EQ(tfevents::read_event_bytes(tfevents::frame_record("\x1b")).decode_errors.size(), 1u);
  EXPECT_EQ(tfevents::read_event_bytes(tfevents::frame_record("\x1a\x05" "ab")).decode_errors.size(), 1u);
}

TEST(TfeventsReader, GarbagePayloadsWithValidCrcsNeverCrashTheReader) {
  // The crcs keep corrupted bytes from the decoder; these reach it.
  uint64_t x = 88172645463325252ull;
  const auto next = [&x] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
  std::string file;
  for (int i = 0; i < 2000; ++i) {
    std::string payload(next() % 40, '\0');
    for (auto& c : payload) c = static_cast<char>(next());
    file += tfevents::frame_record(payload);
  }
  const auto r = tfevents::read_event_bytes(file);
  EXPECT_EQ(r.records, 2000u);
  EXPECT_TRUE(r.crc_failures.empty() && r.clean_end);
  EXPECT_EQ(r.events.size() + r.decode_errors.size(), r.records);
}

TEST(TensorboardWriter, ProcessKilledMidRunLeavesOnlyValidRecords) {
  const auto d = dir();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    tensorboard_writer w(d.string());
    for (int64_t step = 0;; ++step) w.scalars(step, {{"loss", 1.0 / (step + 1)}, {"step", double(step)}});
  }
  // Wait for a few records, then kill it where it is.
  std::string path;
  for (int i = 0; i < 500 && path.empty(); ++i) {
    ::usleep(10000);
    for (const auto& e : fs::directory_iterator(d))
      if (fs::file_size(e.path()) > 4096) path = e.path().string();
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_FALSE(path.empty()) << "the child wrote nothing";
  const auto r = tfevents::read_event_file(path);
  EXPECT_TRUE(r.crc_failures.empty() && r.decode_errors.empty());
  ASSERT_GT(r.events.size(), 10u);
  EXPECT_EQ(r.events[0].file_version, "brain.Event:2");
  for (size_t i = 1; i < r.events.size(); ++i) EXPECT_EQ(r.events[i].step, int64_t(i - 1));
}

TEST(TensorboardWriter, PathUnderARegularFileThrowsNamingTheDirectory) {
  const auto d = dir();
  const std::string file = testing_util::write(d / "plain", "x");
  for (const std::string& bad : {file + "/tb", file}) {
    const std::string ctor = io_error_of([&] { tensorboard_writer w(bad); });
    EXPECT_NE(ctor.find(bad), std::string::npos) << ctor;
    EXPECT_NE(ctor.find("Not a directory"), std::string::npos) << ctor;
    const std::string check = io_error_of([&] { tensorboard_writer::check_writable(bad); });
    EXPECT_EQ(check, ctor);
  }
  EXPECT_NE(io_error_of([] { tensorboard_writer w(""); }), "");
  EXPECT_EQ(slurp_file(file), "x");
}

TEST(TensorboardWriter, ReadOnlyDirectoryThrowsNamingTheDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permission bits do not stop a write";
  const auto d = dir() / "ro";
  fs::create_directories(d);
  ::chmod(d.c_str(), 0555);
  const std::string ctor = io_error_of([&] { tensorboard_writer w(d.string()); });
  const std::string check = io_error_of([&] { tensorboard_writer::check_writable(d.string()); });
  const std::string below = io_error_of([&] { tensorboard_writer w((d / "sub").string()); });
  ::chmod(d.c_str(), 0755);
  EXPECT_NE(ctor.find(d.string()), std::string::npos) << ctor;
  EXPECT_NE(ctor.find("Permission denied"), std::string::npos) << ctor;
  EXPECT_EQ(check, ctor);
  EXPECT_NE(below.find((d / "sub").string()), std::string::npos) << below;
  EXPECT_TRUE(fs::is_empty(d));
}

}  // namespace
}  // namespace actorpipe
