// runtime/dist/transport/shm_ring: one direction of a same-host data
// channel, between this process and a forked one. Records cross in order,
// bit for bit, also when they are far larger than the ring; a peer killed
// mid-record ends the other side's wait with an error that says so; a full
// /dev/shm refuses the ring at creation with why; nothing is left on disk.
#include "runtime/dist/transport/shm_ring.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using clock_type = shm_ring::clock;

fs::path test_dir() { return testing_util::test_dir("actorpipe_shm_ring_test"); }

clock_type::time_point in_s(double s) {
  return clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s));
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

/// A forked child running `body` (its exit code: 0 when it held), killed
/// and reaped in every path.
class child {
public:
  template <class Body>
  explicit child(Body body) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int rc = 1;
      try {
        rc = body();
      } catch (...) {
        rc = 3;
      }
      ::_exit(rc);
    }
  }
  ~child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  /// Its exit code, or 128 + the signal that ended it.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

private:
  pid_t pid_ = -1;
};

const std::vector<size_t> record_sizes = {1, 100, 4096, 65536, 65537, 3 << 20, 7};

TEST(ShmRing, RecordsCrossInOrderBitForBitAlsoFarLargerThanTheRing) {
  const std::string path = (test_dir() / "ring").string();
  std::string why;
  auto ring = shm_ring::create(path, 64 << 10, &why);
  ASSERT_NE(ring, nullptr) << why;
  child reader([&] {
    auto r = shm_ring::open(path, nullptr);
    if (!r) return 10;
    for (size_t k = 0; k < record_sizes.size(); ++k) {
      std::vector<unsigned char> got(record_sizes[k]);
      r->read(got.data(), got.size(), in_s(60));
      if (got != pattern(record_sizes[k], static_cast<unsigned>(k))) return 20 + static_cast<int>(k);
    }
    return 0;
  });
  for (size_t k = 0; k < record_sizes.size(); ++k) {
    const auto bytes = pattern(record_sizes[k], static_cast<unsigned>(k));
    ring->write(bytes.data(), bytes.size(), in_s(60));
  }
  EXPECT_EQ(reader.wait(), 0);
  EXPECT_FALSE(fs::exists(path)) << "the reader removes the file once both ends hold it";
}

/// The reader's end of the ring another process makes at `path`, once it
/// is there (null after 10 s).
std::unique_ptr<shm_ring> open_when_made(const std::string& path) {
  const auto deadline = in_s(10);
  while (clock_type::now() < deadline) {
    if (auto r = shm_ring::open(path, nullptr)) return r;
    ::usleep(2000);
  }
  return nullptr;
}

TEST(ShmRing, AWriterKilledMidRecordEndsTheReadersWaitNamingIt) {
  const std::string path = (test_dir() / "ring").string();
  child writer([&] {
    auto w = shm_ring::create(path, 64 << 10, nullptr);
    if (!w) return 10;
    const auto half = pattern(32 << 10, 1);
    w->write(half.data(), half.size(), in_s(60));
    ::raise(SIGKILL);  // mid-record: the reader wants 64 KiB
    return 0;
  });
  auto ring = open_when_made(path);
  ASSERT_NE(ring, nullptr);
  std::vector<unsigned char> got(64 << 10);
  std::string error;
  try {
    ring->read(got.data(), got.size(), in_s(60));
  } catch (const shm_ring_error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("reading: the writer (pid " + std::to_string(writer.pid()) + ") is gone"), std::string::npos)
      << error;
  EXPECT_EQ(writer.wait(), 128 + SIGKILL);
}

TEST(ShmRing, AReaderKilledWhileTheRingIsFullEndsTheWritersWait) {
  const std::string path = (test_dir() / "ring").string();
  auto ring = shm_ring::create(path, 16 << 10, nullptr);
  ASSERT_NE(ring, nullptr);
  child reader([&] {
    auto r = shm_ring::open(path, nullptr);
    std::vector<unsigned char> some(4096);
    r->read(some.data(), some.size(), in_s(60));
    ::raise(SIGKILL);
    return 0;
  });
  const auto lots = pattern(1 << 20, 2);
  std::string error;
  try {
    ring->write(lots.data(), lots.size(), in_s(60));
  } catch (const shm_ring_error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("writing: the reader (pid " + std::to_string(reader.pid()) + ") is gone"), std::string::npos)
      << error;
}

TEST(ShmRing, AClosedWriterLetsTheReaderTakeWhatWasWrittenThenSaysSo) {
  const std::string path = (test_dir() / "ring").string();
  auto w = shm_ring::create(path, 8 << 10, nullptr);
  auto r = shm_ring::open(path, nullptr);
  ASSERT_TRUE(w && r);
  const auto bytes = pattern(1000, 3);
  w->write(bytes.data(), bytes.size(), in_s(5));
  w->close();
  ASSERT_TRUE(r->readable());
  std::vector<unsigned char> got(1000);
  r->read(got.data(), got.size(), in_s(5));
  EXPECT_EQ(got, bytes);
  EXPECT_THROW(r->read(got.data(), 1, in_s(5)), shm_ring_error);
}

TEST(ShmRing, ADeadlineEndsAWaitForALivePeer) {
  const std::string path = (test_dir() / "ring").string();
  auto w = shm_ring::create(path, 8 << 10, nullptr);
  auto r = shm_ring::open(path, nullptr);
  ASSERT_TRUE(w && r);
  unsigned char byte = 0;
  try {
    r->read(&byte, 1, in_s(0.1));
    ADD_FAILURE() << "read returned with nothing written";
  } catch (const shm_ring_error& e) {
    EXPECT_NE(std::string(e.what()).find("reading: timed out"), std::string::npos) << e.what();
  }
}

TEST(ShmRing, AFileThatIsNotARingIsRefusedWithWhy) {
  const std::string path = testing_util::write(test_dir() / "not_a_ring", std::string(8192, 'x'));
  std::string why;
  EXPECT_EQ(shm_ring::open(path, &why), nullptr);
  EXPECT_EQ(why, path + ": not a shared ring");
  EXPECT_EQ(shm_ring::open((test_dir() / "missing").string(), &why), nullptr);
  EXPECT_NE(why.find("cannot open the shared ring"), std::string::npos) << why;
}

TEST(ShmRing, AFullShmDirectoryRefusesTheRingAtCreationAndLeavesNoFile) {
  const fs::path dir = test_dir() / "small";
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "); a full /dev/shm needs one";
  const std::string path = (dir / "ring").string();
  std::string why;
  auto ring = shm_ring::create(path, 1 << 20, &why);
  EXPECT_EQ(ring, nullptr);
  EXPECT_NE(why.find("no room for a shared ring of 1028 KiB"), std::string::npos) << why;
  EXPECT_NE(why.find(std::strerror(ENOSPC)), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(path));
  auto small = shm_ring::create(path, 64 << 10, &why);
  EXPECT_NE(small, nullptr) << why;
  small.reset();
  ::unlink(path.c_str());
  ::umount(dir.c_str());
}

}  // namespace
}  // namespace actorpipe
