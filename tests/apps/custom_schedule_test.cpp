// docs/CUSTOM_SCHEDULE.md's recipe, as the runtime holds it: every code
// block the page shows is in the source file it names, verbatim, and the
// registered example trains through the real binary (`train --schedule
// forward-first`) to the same bytes as 1F1B.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

const fs::path source_dir = ACTORPIPE_SOURCE_DIR;

struct shown_block {
  std::string file;  ///< the source it says it is from
  std::string code;
  int line = 0;
};

/// Every ```cpp block of the page that follows a `<!-- from: PATH -->` line.
std::vector<shown_block> blocks_from(const std::string& page) {
  std::vector<shown_block> out;
  const std::regex from(R"(<!-- from: (\S+) -->\n```cpp\n([\s\S]*?)```)");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), from); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    const int line = 1 + static_cast<int>(std::count(page.begin(), page.begin() + m.position(0), '\n'));
    out.push_back({m[1].str(), m[2].str(), line});
  }
  return out;
}

TEST(CustomSchedule, EveryCodeBlockOfTheDocsIsInItsSourceVerbatim) {
  const std::string page = testing_util::slurp_file(source_dir / "docs" / "CUSTOM_SCHEDULE.md");
  ASSERT_FALSE(page.empty());
  std::set<std::string> files;
  for (const auto& b : blocks_from(page)) {
    const std::string source = testing_util::slurp_file(source_dir / b.file);
    ASSERT_FALSE(source.empty()) << "docs/CUSTOM_SCHEDULE.md:" << b.line << ": " << b.file << " does not exist";
    EXPECT_NE(source.find(b.code), std::string::npos)
        << "docs/CUSTOM_SCHEDULE.md:" << b.line << ": this block is not in " << b.file
        << " as written; copy the source into the page:\n" << b.code;
    files.insert(b.file);
  }
  // The class, its rule and its registry entry: the whole recipe.
  EXPECT_EQ(files, (std::set<std::string>{"runtime/schedule/policies/builtin.hpp",
                                          "runtime/schedule/policies/forward_first.cpp",
                                          "runtime/schedule/policies/registry.cpp"}));
}

TEST(CustomSchedule, TrainsWithItsNameToTheBytesOf1F1B) {
  const fs::path dir = testing_util::test_dir("actorpipe_custom_schedule_test");
  const std::string config = (source_dir / "configs/schedules/1f1b.yaml").string();
  const std::string ff = (dir / "ff.pt").string(), ofob = (dir / "1f1b.pt").string();
  auto a = testing_util::run_child(ACTORPIPE_BIN, {"train", config, "--schedule", "forward-first", "--steps", "20",
                                                   "--quiet", "--save", ff});
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  EXPECT_NE(a.out.find("forward-first"), std::string::npos) << a.out;
  auto b = testing_util::run_child(ACTORPIPE_BIN, {"train", config, "--steps", "20", "--quiet", "--save", ofob});
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  const std::string x = testing_util::slurp_file(ff), y = testing_util::slurp_file(ofob);
  ASSERT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << "forward-first and 1f1b saved different weights";

  auto sim = testing_util::run_child(ACTORPIPE_BIN,
                                     {"simulate", "--schedule", "forward-first", "--stages", "4", "--microbatches", "8"});
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_NE(sim.out.find("| 0     | 16.000 | 0.2727 | 8          |"), std::string::npos) << sim.out;
}

}  // namespace
}  // namespace actorpipe
