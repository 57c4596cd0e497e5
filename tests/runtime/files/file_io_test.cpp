// write_atomic and output_target: what a write may replace, what it leaves
// behind when it fails, and two writers of one path.
#include "runtime/files/file_io.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::slurp_file;

fs::path dir() { return testing_util::test_dir("actorpipe_file_io"); }

std::string error_of(const std::string& path, const std::string& bytes = "x") {
  try {
    write_atomic(path, bytes);
  } catch (const io_error& e) {
    return e.what();
  }
  return "";
}

TEST(WriteAtomic, WritesAndReplacesARegularFileKeepingItsPermissions) {
  const auto d = dir();
  const std::string p = (d / "out.json").string();
  write_atomic(p, "first");
  EXPECT_EQ(slurp_file(p), "first");
  ::chmod(p.c_str(), 0640);
  write_atomic(p, "second, longer");
  EXPECT_EQ(slurp_file(p), "second, longer");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1) << "a temporary file is left";
}

TEST(WriteAtomic, RefusesADirectoryAndAFifoAndLeavesThemAlone) {
  const auto d = dir();
  fs::create_directories(d / "sub");
  EXPECT_EQ(error_of((d / "sub").string()),
            (d / "sub").string() + ": is a directory, not a regular file; refusing to replace it");
  const std::string fifo = (d / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(error_of(fifo), fifo + ": is a FIFO, not a regular file; refusing to replace it");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_directory(d / "sub"));
}

TEST(WriteAtomic, WritesThroughASymlinkToItsTarget) {
  const auto d = dir();
  fs::create_directories(d / "real");
  const auto target = d / "real" / "weights.pt";
  testing_util::write(target, "old");
  fs::create_symlink("real/weights.pt", d / "link.pt");  // relative, as ln -s makes it
  write_atomic((d / "link.pt").string(), "new");
  EXPECT_TRUE(fs::is_symlink(d / "link.pt"));
  EXPECT_EQ(slurp_file(target), "new");
  // A dangling link: the write creates what it points to.
  fs::create_symlink(d / "real" / "fresh.pt", d / "dangling.pt");
  write_atomic((d / "dangling.pt").string(), "made");
  EXPECT_TRUE(fs::is_symlink(d / "dangling.pt"));
  EXPECT_EQ(slurp_file(d / "real" / "fresh.pt"), "made");
}

TEST(WriteAtomic, AMissingDirectoryIsNamed) {
  const auto d = dir();
  const std::string p = (d / "typo" / "out.pt").string();
  EXPECT_EQ(error_of(p), p + ": the directory " + (d / "typo").string() +
                             " does not exist (No such file or directory)");
  const std::string under_file = (d / "file" / "out.pt").string();
  testing_util::write(d / "file", "a file where a directory should be");
  EXPECT_NE(error_of(under_file).find(" is not a directory"), std::string::npos) << error_of(under_file);
}

// Two writers of one path never collide on a temporary name: the file is
// always one writer's whole content.
TEST(WriteAtomic, TwoWritersOfOnePathLeaveOneWholeFile) {
  const auto d = dir();
  const std::string p = (d / "shared.bin").string();
  const std::string a(100000, 'a'), b(70000, 'b');
  auto writer = [&](const std::string& content) {
    for (int i = 0; i < 100; ++i) write_atomic(p, content);
  };
  std::thread t1(writer, a), t2(writer, b);
  t1.join();
  t2.join();
  const std::string got = slurp_file(p);
  EXPECT_TRUE(got == a || got == b) << got.size() << " bytes";
  EXPECT_TRUE(torn_temporaries(d.string(), "shared").empty());
}

TEST(TornTemporaries, FindsWhatAnInterruptedWriteLeft) {
  const auto d = dir();
  testing_util::write(d / "step_00000003.pt.Ab12Cd.tmp", "torn");
  testing_util::write(d / "step_00000004.pt.tmp", "torn by an older version");
  testing_util::write(d / "step_00000002.pt", "whole");
  testing_util::write(d / "notes.tmp", "not ours");
  auto torn = torn_temporaries(d.string(), "step_");
  std::sort(torn.begin(), torn.end());
  ASSERT_EQ(torn.size(), 2u);
  EXPECT_EQ(torn[0], (d / "step_00000003.pt.Ab12Cd.tmp").string());
  EXPECT_EQ(torn[1], (d / "step_00000004.pt.tmp").string());
}

}  // namespace
}  // namespace actorpipe
