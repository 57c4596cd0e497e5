// What the binary writes and what it keeps: outputs checked before the run,
// never a device, FIFO or directory replaced, a full disk named with its
// errno text and no 0-byte or partial file under the final name, checkpoint
// retention and failures, and resumes that say what differs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runtime/files/checkpoint.hpp"
#include "runtime/files/file_io.hpp"
#include "runtime/files/state_dict.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::child_result;
using testing_util::slurp_file;
using testing_util::write;

child_result actorpipe(const std::vector<std::string>& args) {
  testing_util::child_limits limits;
  limits.timeout_s = 300;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

using testing_util::describe;

fs::path test_dir() { return testing_util::test_dir("actorpipe_saved"); }

const char* const small = R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: dropout, p: 0.2}
    - {type: linear, in: 16, out: 16}
    - {type: tanh}
    - {type: linear, in: 16, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 256}
train:
  steps: 6
  batch_size: 32
pipeline:
  stages: 2
  microbatches: 4
)";

/// A small tmpfs mounted for the test's life; `why` says why not (no root,
/// no CAP_SYS_ADMIN).
struct tmpfs {
  fs::path dir;
  std::string why;
  tmpfs(fs::path d, const std::string& size) : dir(std::move(d)) {
    fs::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0)
      why = std::string("cannot mount a tmpfs here (") + std::strerror(errno) + "); a full disk needs one";
  }
  ~tmpfs() {
    if (why.empty()) ::umount2(dir.c_str(), MNT_DETACH);
  }
  /// Writes a filler file until the disk is full.
  void fill() const {
    std::ofstream f(dir / "filler", std::ios::binary);
    const std::string block(4096, 'f');
    while (f.write(block.data(), block.size())) f.flush();
  }
};

/// Every name left in `dir`.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// -- outputs: checked before the run, never anything but a regular file --

TEST(SavedOutputs, ABadOutputPathStopsTheRunBeforeItStarts) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "c.yaml", small);
  fs::create_directories(dir / "adir");
  const std::string fifo = (dir / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const struct {
    const char* flag;
    std::string path, says;
  } cases[] = {
      {"--save", (dir / "typo" / "w.pt").string(),
       ": the directory " + (dir / "typo").string() + " does not exist (No such file or directory)"},
      {"--results", (dir / "adir").string(), ": is a directory, not a regular file; refusing to replace it"},
      {"--trace", fifo, ": is a FIFO, not a regular file; refusing to replace it"},
      {"--report", (dir / "c.yaml" / "r.html").string(), ": " + (dir / "c.yaml").string() + " is not a directory"},
  };
  for (const auto& c : cases) {
    const auto r = actorpipe({"train", cfg, c.flag, c.path});
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_EQ(r.err, "actorpipe: " + std::string(c.flag) + " " + c.path + c.says + "\n") << describe(r);
    EXPECT_EQ(r.out.find("step "), std::string::npos) << "trained before refusing: " << r.out;
  }
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_directory(dir / "adir"));
}

TEST(SavedOutputs, SaveThroughASymlinkWritesItsTargetAndKeepsTheLink) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "c.yaml", small);
  fs::create_directories(dir / "store");
  write(dir / "store" / "w.pt", "stale");
  fs::create_symlink("store/w.pt", dir / "latest.pt");
  const auto r = actorpipe({"train", cfg, "--quiet", "--save", (dir / "latest.pt").string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(fs::is_symlink(dir / "latest.pt"));
  EXPECT_EQ(load_tensors((dir / "store" / "w.pt").string()).size(), 6u);
  EXPECT_EQ(names_in(dir / "store"), std::vector<std::string>{"w.pt"});
}

// A full disk: the run fails with the path and the errno text, and the
// previous file (or none) is what stays under each final name.
TEST(SavedOutputs, AFullDiskFailsEveryOutputAndKeepsWhatWasThere) {
  const fs::path dir = test_dir();
  tmpfs disk(dir / "disk", "256k");
  if (!disk.why.empty()) GTEST_SKIP() << disk.why;
  const std::string cfg = write(dir / "c.yaml", small);
  write(disk.dir / "results.json", "the previous results");
  disk.fill();
  const std::string results = (disk.dir / "results.json").string(), saved = (disk.dir / "w.pt").string(),
                    timeline = (disk.dir / "t.svg").string();
  const auto r = actorpipe(
      {"train", cfg, "--quiet", "--results", results, "--save", saved, "--timeline", timeline});
  EXPECT_EQ(r.code, 1) << describe(r);
  for (const auto& [flag, path] : {std::pair{"--save", saved}, {"--results", results}, {"--timeline", timeline}})
    EXPECT_NE(r.err.find("actorpipe: " + std::string(flag) + " " + path + ": cannot write"), std::string::npos)
        << describe(r);
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << describe(r);
  EXPECT_EQ(r.out.find("written to"), std::string::npos) << r.out;
  EXPECT_EQ(slurp_file(results), "the previous results");
  EXPECT_EQ(names_in(disk.dir), (std::vector<std::string>{"filler", "results.json"}));
}

// -- checkpoints --

TEST(SavedCheckpoints, AFullDiskStopsTheRunAndTheLastGoodCheckpointLoads) {
  const fs::path dir = test_dir();
  tmpfs disk(dir / "disk", "96k");
  if (!disk.why.empty()) GTEST_SKIP() << disk.why;
  std::string yaml = small;
  yaml.replace(yaml.find("steps: 6"), 8, "steps: 200");
  const std::string cfg = write(dir / "c.yaml", yaml + "checkpoint:\n  dir: " + disk.dir.string() +
                                                    "\n  every: 1\n  keep_last: 0\n");
  const auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 1) << describe(r);
  const auto files = names_in(disk.dir);
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
  const std::string latest = (disk.dir / files.back()).string();
  const int64_t step = load_checkpoint(latest).step;
  EXPECT_EQ(files.size(), static_cast<size_t>(step + 1));
  EXPECT_NE(r.err.find("the checkpoint after step " + std::to_string(step + 1) + " could not be written: "),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.err.find("No space left on device; the latest good one is " + latest), std::string::npos)
      << describe(r);
}

TEST(SavedCheckpoints, KeepLastKeepsTheNewestAndTornWritesAreRemovedAndNamed) {
  const fs::path dir = test_dir();
  const fs::path ck = dir / "ckpt";
  write(ck / "step_00000003.pt.Ab12Cd.tmp", "torn");
  write(ck / "step_00000009.pt", "a later step of another run: left alone");
  const std::string cfg = write(dir / "c.yaml", std::string(small) + "checkpoint:\n  dir: ckpt\n  keep_last: 2\n");
  const auto r = actorpipe({"train", cfg, "--quiet"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("note: removed " + (ck / "step_00000003.pt.Ab12Cd.tmp").string() +
                       ", a checkpoint whose write was interrupted"),
            std::string::npos)
      << describe(r);
  EXPECT_EQ(names_in(ck), (std::vector<std::string>{"step_00000005.pt", "step_00000006.pt", "step_00000009.pt"}));
}

TEST(SavedCheckpoints, AFileWhereTheDirectoryShouldBeIsABadConfig) {
  const fs::path dir = test_dir();
  write(dir / "blocker", "a file");
  const std::string cfg = write(dir / "c.yaml", std::string(small) + "checkpoint:\n  dir: blocker\n");
  const auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find(cfg + ":19:8: checkpoint.dir: " + (dir / "blocker").string() + ": is a file, not a directory\n"),
            std::string::npos)
      << describe(r);
  EXPECT_EQ(slurp_file(dir / "blocker"), "a file");
}

// -- resuming: what differs is said, and a checkpoint fits any split --

TEST(SavedCheckpoints, ResumingUnderAnotherStageSplitIsBitwiseUninterrupted) {
  const fs::path dir = test_dir();
  const std::string ckpt = "checkpoint:\n  dir: ckpt\n  keep_last: 0\n";
  const std::string cfg = write(dir / "c.yaml", std::string(small) + ckpt);
  std::string three = small;
  three.replace(three.find("stages: 2"), 9, "stages: 3");
  const std::string cfg3 = write(dir / "c3.yaml", three + ckpt);
  const std::string clean = (dir / "clean.pt").string(), resumed = (dir / "resumed.pt").string();
  ASSERT_EQ(actorpipe({"train", cfg, "--quiet", "--save", clean}).code, 0);
  for (int s = 4; s < 7; ++s) fs::remove(dir / "ckpt" / ("step_0000000" + std::to_string(s) + ".pt"));
  const auto r = actorpipe({"train", cfg3, "--quiet", "--resume", (dir / "ckpt").string(), "--save", resumed});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("note: resuming after step 2 "), std::string::npos) << r.err;
  const auto a = load_tensors(clean), b = load_tensors(resumed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].second.equal(b[i].second)) << a[i].first;
}

TEST(SavedCheckpoints, ResumingAdamStateIntoSgdSaysWhatDiffers) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "c.yaml", std::string(small) + "checkpoint:\n  dir: ckpt\n");
  ASSERT_EQ(actorpipe({"train", cfg, "--quiet"}).code, 0);
  std::string sgd = small;
  sgd.replace(sgd.find("  batch_size: 32\n"), 16, "  batch_size: 32\n  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}");
  const std::string cfg_sgd = write(dir / "sgd.yaml", sgd);
  const auto r = actorpipe({"train", cfg_sgd, "--quiet", "--steps", "8", "--resume", (dir / "ckpt").string()});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find((dir / "ckpt" / "step_00000006.pt").string() +
                       ": the checkpoint holds adam state (exp_avg, exp_avg_sq, max_exp_avg_sq per parameter), "
                       "but train.optimizer.type is sgd"),
            std::string::npos)
      << describe(r);
  std::string wider = small;
  wider.replace(wider.find("in: 16, out: 4"), 14, "in: 16, out: 5");
  const auto other = actorpipe({"train", write(dir / "w.yaml", wider), "--quiet", "--resume", (dir / "ckpt").string()});
  EXPECT_EQ(other.code, 2) << describe(other);
  EXPECT_NE(other.err.find(": the checkpoint has no 5.weight of shape [5, 16]; it was written for another model"),
            std::string::npos)
      << describe(other);
}

// -- failures that used to look like success --

TEST(SavedFailures, NonFiniteInitialWeightsNameTheKey) {
  const fs::path dir = test_dir();
  named_tensors w = {{"0.weight", at::zeros({16, 8})}, {"0.bias", at::zeros({16})},
                     {"3.weight", at::zeros({16, 16})}, {"3.bias", at::zeros({16})},
                     {"5.weight", at::zeros({4, 16})},  {"5.bias", at::zeros({4})}};
  w[4].second[1][2] = std::numeric_limits<float>::quiet_NaN();
  save_tensors((dir / "init.pt").string(), w);
  std::string yaml = small;
  yaml.replace(yaml.find("  layers:"), 9, "  init_from: init.pt\n  layers:");
  const std::string cfg = write(dir / "c.yaml", yaml);
  const auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(r.err, cfg + ":2:14: model.init_from: " + (dir / "init.pt").string() +
                       ": '5.weight' holds a NaN or an infinity; every step would be skipped\n");
}

TEST(SavedFailures, ARunThatSkipsMostOfItsStepsFails) {
  const fs::path dir = test_dir();
  std::string yaml = small;
  yaml.replace(yaml.find("steps: 6"), 8, "steps: 4");
  const std::string cfg = write(dir / "c.yaml", yaml + R"(faults:
  inject:
    - {kind: nonfinite, stage: 1, step: 0, microbatch: 1}
    - {kind: nonfinite, stage: 1, step: 1, microbatch: 1}
    - {kind: nonfinite, stage: 0, step: 2, microbatch: 0}
)");
  const auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_NE(r.err.find("3 of the run's 4 steps skipped for a NaN or an infinity, more than "
                       "supervision.max_skipped_fraction 0.5 allows; stopping"),
            std::string::npos)
      << describe(r);
  // With the bound at 1 the same run ends, its three skipped steps reported.
  const auto lenient = actorpipe({"train", write(dir / "l.yaml", yaml + R"(supervision:
  max_skipped_fraction: 1
faults:
  inject:
    - {kind: nonfinite, stage: 1, step: 0, microbatch: 1}
    - {kind: nonfinite, stage: 1, step: 1, microbatch: 1}
    - {kind: nonfinite, stage: 0, step: 2, microbatch: 0}
)"), "--quiet"});
  EXPECT_EQ(lenient.code, 0) << describe(lenient);
  EXPECT_NE(lenient.out.find("3 steps skipped for a NaN or an infinity"), std::string::npos) << lenient.out;
}

// -- updates that leave a NaN or an infinity --

// Adam at lr 0.01, and a fault that leaves a NaN in stage 0's first
// parameter ("0.weight") with its update of step `bad_step` (as a faulty
// optimizer or memory would; -1: none).
std::string bad_update_yaml(int steps, int bad_step, const std::string& extra = "") {
  std::string yaml = small;
  yaml.replace(yaml.find("steps: 6"), 8, "steps: " + std::to_string(steps) + "\n  optimizer: {type: adam, lr: 0.01}");
  if (bad_step >= 0)
    yaml += "faults:\n  inject:\n    - {kind: nonfinite, stage: 0, step: " + std::to_string(bad_step) +
            ", where: update}\n";
  return yaml + extra;
}

// The tensors of a checkpoint file but its step and checksum, by name.
named_tensors checkpoint_state(const std::string& path) {
  named_tensors out;
  for (auto& [name, t] : load_tensors(path))
    if (name != "meta.step" && name != "meta.checksum") out.emplace_back(name, t);
  return out;
}

bool same_tensors(const named_tensors& a, const named_tensors& b, std::string& why) {
  if (a.size() != b.size()) return why = std::to_string(a.size()) + " tensors against " + std::to_string(b.size()), false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].second.contiguous(), y = b[i].second.contiguous();
    if (a[i].first != b[i].first || x.scalar_type() != y.scalar_type() || !x.sizes().equals(y.sizes()) ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) != 0)
      return why = a[i].first + " differs", false;
  }
  return true;
}

// The update of step 3 is undone on every stage (and replica): the run goes
// on, and its weights and optimizer state after step 3 are, bit for bit,
// those of the same run stopped after step 2. With on_nonfinite: stop the
// run stops there, exit 1, its newest checkpoint the state after step 2.
TEST(SavedFailures, AnUpdateThatLeavesANaNIsUndoneEverywhereAndTheStepSkipped) {
  const fs::path dir = test_dir();
  for (int dp : {1, 2}) {
    const std::string tag = "dp" + std::to_string(dp);
    const std::string par = dp > 1 ? "parallel: {dp: 2}\n" : "";
    auto ckpt = [&](const std::string& name) {
      return "checkpoint: {every: 1, dir: " + (dir / (tag + name)).string() + "}\n";
    };
    const auto clean = actorpipe({"train", write(dir / (tag + "_3.yaml"), bad_update_yaml(3, -1, par + ckpt("_3"))),
                                  "--quiet", "--save", (dir / (tag + "_3.pt")).string()});
    ASSERT_EQ(clean.code, 0) << describe(clean);
    EXPECT_EQ(clean.err.find("non-finite"), std::string::npos) << describe(clean);
    const auto r = actorpipe({"train", write(dir / (tag + "_4.yaml"), bad_update_yaml(4, 3, par + ckpt("_4"))),
                              "--quiet", "--save", (dir / (tag + "_4.pt")).string()});
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_NE(r.err.find("note: step 3: non-finite value: " + std::string(dp > 1 ? "replica 0 " : "") +
                         "stage 0's update left one in 0.weight; step skipped, weights and optimizer state unchanged"),
              std::string::npos)
        << tag << describe(r);
    EXPECT_NE(r.out.find("1 steps skipped for a NaN or an infinity"), std::string::npos) << tag << describe(r);
    EXPECT_TRUE(slurp_file(dir / (tag + "_3.pt")) == slurp_file(dir / (tag + "_4.pt")))
        << tag << ": the weights after the skipped step 3 are not those after step 2";
    std::string why;
    EXPECT_TRUE(same_tensors(checkpoint_state((dir / (tag + "_3") / "step_00000003.pt").string()),
                             checkpoint_state((dir / (tag + "_4") / "step_00000004.pt").string()), why))
        << tag << ": the state after the skipped step 3 is not the state after step 2: " << why;
  }
  const auto stop = actorpipe({"train", write(dir / "stop.yaml", bad_update_yaml(6, 3, "supervision: {on_nonfinite: stop}\n"
                                                                                     "checkpoint: {every: 1, dir: " +
                                                                                     (dir / "stop").string() + "}\n")),
                               "--quiet"});
  EXPECT_EQ(stop.code, 1) << describe(stop);
  EXPECT_NE(stop.err.find("step 3: non-finite value: stage 0's update left one in 0.weight; stopping "
                          "(supervision.on_nonfinite: stop)"),
            std::string::npos)
      << describe(stop);
  const auto newest = load_latest_checkpoint((dir / "stop").string());
  EXPECT_EQ(newest.step, 3) << "the stop's boundary is checkpointed, with the update undone";
  std::string why;
  EXPECT_TRUE(same_tensors(checkpoint_state((dir / "stop" / "step_00000004.pt").string()),
                           checkpoint_state((dir / "dp1_3" / "step_00000003.pt").string()), why))
      << why;
}

// Async steps overlap: an update cannot be undone, and the run stops.
TEST(SavedFailures, AnAsyncUpdateThatLeavesANaNStopsTheRun) {
  const fs::path dir = test_dir();
  std::string yaml = bad_update_yaml(6, 3);
  yaml.replace(yaml.find("pipeline:\n"), 10, "pipeline:\n  schedule: async\n");
  const auto r = actorpipe({"train", write(dir / "async.yaml", yaml), "--quiet", "--save", (dir / "a.pt").string()});
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_NE(r.err.find("step 3: non-finite value: stage 0's update left one in 0.weight; an async step cannot be "
                       "undone"),
            std::string::npos)
      << describe(r);
  EXPECT_FALSE(fs::exists(dir / "a.pt"));
}

// supervision.check_updates: false applies the update unchecked: the
// infinities stay in the weights, and the run ends with exit 1. --save
// refuses to write them (the file there stays as it was) and says why; the
// final table says so too.
TEST(SavedFailures, UncheckedUpdatesThatLeaveAnInfinityEndWithExit1AndSaveNothing) {
  const fs::path dir = test_dir();
  const std::string out = write(dir / "weights.pt", "what the user saved before");
  const auto r = actorpipe({"train", write(dir / "c.yaml", bad_update_yaml(4, 3, "supervision: {check_updates: false}\n")),
                            "--quiet", "--save", out});
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_NE(r.out.find("final weights: '0.weight' holds a NaN or an infinity: the run failed, and they are not saved"),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.err.find("actorpipe: --save " + out + ": not written: '0.weight' holds a NaN or an infinity"),
            std::string::npos)
      << describe(r);
  EXPECT_EQ(r.out.find("saved "), std::string::npos) << describe(r);
  EXPECT_EQ(slurp_file(out), "what the user saved before");
}

// Nor does a checkpoint hold one: the run stops at the checkpoint that
// would, naming the tensor, and the newest checkpoint on disk is the last
// finite one.
TEST(SavedFailures, ACheckpointThatWouldHoldAnInfinityIsRefusedAndTheLastFiniteOneStays) {
  const fs::path dir = test_dir();
  const std::string ckpt = (dir / "ckpt").string();
  const auto r = actorpipe({"train",
                            write(dir / "c.yaml", bad_update_yaml(6, 3, "supervision: {check_updates: false}\n"
                                                                     "checkpoint: {every: 1, dir: " + ckpt + "}\n")),
                            "--quiet"});
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_NE(r.err.find("the checkpoint after step 3 could not be written: 'model.0.weight' holds a NaN or an "
                       "infinity; the latest good one is " + ckpt + "/step_00000003.pt"),
            std::string::npos)
      << describe(r);
  const auto newest = load_latest_checkpoint(ckpt);
  EXPECT_EQ(newest.step, 2);
  EXPECT_EQ(first_nonfinite(newest.weights), "");
  EXPECT_FALSE(fs::exists(dir / "ckpt" / "step_00000004.pt"));
}

}  // namespace
}  // namespace actorpipe
