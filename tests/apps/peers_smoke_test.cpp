// bench/peers.sh's torch pieces still run (no timing is checked: the
// benchmark measures speed, this only that its parts work): peers_torch.py
// writes the shared init and data, trains 2 steps of the plain loop and of
// torch's Pipe, and refuses a chunk count that does not divide the batch;
// actorpipe trains on peers_mlp.yaml pointed at that init and data, as
// peers_run.py derives it. Skipped where /usr/bin/python3 has no torch.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::child_result;

const std::string python = "/usr/bin/python3";
const std::string bench = std::string(ACTORPIPE_SOURCE_DIR) + "/bench";

child_result run(const std::string& program, const std::vector<std::string>& args) {
  testing_util::child_limits limits;
  limits.timeout_s = 180;
  return testing_util::run_child(program, args, limits);
}

using testing_util::describe;

TEST(PeersSmoke, TorchPiecesAndActorpipeRunOnTheSharedInitAndData) {
  if (run(python, {"-c", "import torch"}).code != 0) GTEST_SKIP() << python << " cannot import torch";
  const std::string dir = testing_util::test_dir("actorpipe_peers_smoke_test");
  const std::string torch_py = bench + "/peers_torch.py";
  auto r = run(python, {torch_py, "prepare", dir, "--samples", "512"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(fs::exists(dir + "/init.pt") && fs::exists(dir + "/data.pt"));

  r = run(python, {torch_py, "plain", dir, "--steps", "2"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("\"step_ms\""), std::string::npos) << r.out;

  if (run(python, {"-c", "import torch.distributed.pipeline.sync"}).code == 0) {
    r = run(python, {torch_py, "pipe", dir, "--chunks", "8", "--steps", "2"});
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_NE(r.out.find("\"partitions\": 2"), std::string::npos) << r.out;
  }

  r = run(python, {torch_py, "plain", dir, "--chunks", "3"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find("--chunks must divide the batch"), std::string::npos) << r.err;

  // The config peers_run.py gives actorpipe, through its own derive().
  const std::string cfg = dir + "/m8.yaml";
  r = run(python, {"-c", "import sys; sys.path.insert(0, '" + bench + "'); import peers_run; "
                   "peers_run.derive('" + bench + "/peers_mlp.yaml', '" + cfg + "', '" + dir + "', 8)"});
  ASSERT_EQ(r.code, 0) << describe(r);
  r = run(ACTORPIPE_BIN, {"train", cfg, "--steps", "2", "--quiet"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("stages 2  microbatches 8"), std::string::npos) << r.out;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace actorpipe
