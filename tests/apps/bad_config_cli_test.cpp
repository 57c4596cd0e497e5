// The bad-config table (tests/runtime/config/bad_configs.hpp) through the
// command line: `actorpipe train CONFIG` exits 2 with the exact message as
// the one line on stderr, and prints nothing before. Each case runs the
// command dispatch that the program runs (run_command, apps/commands.cpp)
// in a forked process: an exec would load LibTorch again, 0.77 s a case.
// A sample runs the real binary too, and prints what the fork printed.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/runtime/config/bad_configs.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

using testing_util::child_result;
using testing_util::describe;

fs::path test_dir() { return testing_util::test_dir("actorpipe_bad_config_cli_test"); }

using testing_util::first_line;

child_result forked(const std::vector<std::string>& args) {
  return testing_util::run_in_fork(ACTORPIPE_BIN, args, [](int argc, char** argv) { return run_command(argc, argv); });
}

class BadConfigCli : public ::testing::TestWithParam<tests::bad_config> {};

TEST_P(BadConfigCli, ExitsTwoWithTheExactMessageOnStderr) {
  const auto& c = GetParam();
  if (c.assumes_no_cuda && torch::cuda::is_available())
    GTEST_SKIP() << "the config's device exists on a machine with CUDA";
  const std::string file = testing_util::write(test_dir() / "config.yaml", c.yaml);
  auto r = forked({"train", file});
  EXPECT_EQ(r.code, 2) << describe(r);
  std::string want = tests::expected_message(c, file), got = first_line(r.err);
  {
    // A message may count this machine's GPUs (for a device beyond them):
    // the rest must match exactly.
    const std::regex count("has [0-9]+ CUDA devices?$");
    want = std::regex_replace(want, count, "has N CUDA devices");
    got = std::regex_replace(got, count, "has N CUDA devices");
  }
  EXPECT_EQ(got, want) << describe(r);
  EXPECT_EQ(r.err, first_line(r.err) + "\n") << "one line";
  EXPECT_EQ(r.out, "") << "nothing should run before the config is valid";
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfigCli, ::testing::ValuesIn(tests::bad_configs()),
                         [](const auto& info) { return std::string(info.param.name); });

// Every 12th case (the first included) through the real binary: the same
// exit code, stdout and stderr as its forked run.
TEST(BadConfigCliBinary, PrintsWhatTheForkedDispatchPrints) {
  const auto& table = tests::bad_configs();
  int compared = 0;
  for (size_t i = 0; i < table.size(); i += 12) {
    const auto& c = table[i];
    if (c.assumes_no_cuda && torch::cuda::is_available()) continue;
    const std::string file = testing_util::write(test_dir() / "config.yaml", c.yaml);
    const auto binary = testing_util::run_child(ACTORPIPE_BIN, {"train", file});
    const auto fork = forked({"train", file});
    EXPECT_EQ(binary.code, fork.code) << c.name << "\n" << describe(binary) << describe(fork);
    EXPECT_EQ(binary.out, fork.out) << c.name;
    EXPECT_EQ(binary.err, fork.err) << c.name;
    EXPECT_EQ(binary.code, 2) << c.name << "\n" << describe(binary);
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

}  // namespace
}  // namespace actorpipe
