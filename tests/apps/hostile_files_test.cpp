// Hostile .pt files through every door the binary opens to one: init_from,
// data.kind: tensors, and each step_*.pt that --resume tries. Each must give
// one line naming the file, exit 2, well within the time limit, and use no
// more memory than a run that loads nothing at all (plus a few MB).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/hostile_files.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::child_limits;
using testing_util::child_result;
using testing_util::run_child;
using testing_util::write;

#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t address_space = 0;  // ASan reserves terabytes of shadow
#else
constexpr uint64_t address_space = uint64_t(2) << 30;  // a run of this model needs far less
#endif

const char* const model = R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 4}
)";
const char* const rest = R"(train:
  steps: 3
  batch_size: 32
pipeline:
  stages: 2
  microbatches: 4
)";

child_result actorpipe(const std::vector<std::string>& args) {
  child_limits limits;
  limits.timeout_s = 60;  // a hang; the cases take about a second, most of it LibTorch's start
  limits.address_space = address_space;
  return run_child(ACTORPIPE_BIN, args, limits);
}

/// What a run that fails before loading anything takes: the binary and
/// LibTorch themselves.
const child_result& baseline() {
  static const child_result r = [] {
    const fs::path dir = testing_util::test_dir("actorpipe_hostile_baseline");
    const std::string cfg = write(dir / "c.yaml", std::string(model) + "trian: {}\n");
    return actorpipe({"train", cfg});
  }();
  return r;
}
int64_t baseline_rss_kb() { return baseline().max_rss_kb; }

struct hostile_case {
  const char* name;
  void (*make)(const std::string&);
  const char* says;  ///< in the message, after the file's name
};

void deep(const std::string& p) { hostile::deep_tuple(p); }
void shared(const std::string& p) { hostile::shared_dicts(p); }
void stride0(const std::string& p) { hostile::stride_zero_view(p); }
void optimizer_index(const std::string& p) { hostile::huge_optimizer_index(p); }

const hostile_case cases[] = {
    {"DeepTuple", deep, "values nested deeper than 100"},
    {"SharedDicts", shared, "the same dict is stored under"},
    {"StrideZeroView", stride0, "more than a file of its size can hold"},
    {"HugeOptimizerIndex", optimizer_index, ""},
};

enum class door { init_from, tensors, resume };

std::string door_name(door d) {
  return d == door::init_from ? "InitFrom" : d == door::tensors ? "DataTensors" : "Resume";
}

class HostileFile : public ::testing::TestWithParam<std::tuple<hostile_case, door>> {};

TEST_P(HostileFile, OneLineNamingTheFileExitTwoInBoundedMemory) {
  const auto& [c, d] = GetParam();
  const fs::path dir = testing_util::test_dir("actorpipe_hostile");
  std::string file = (dir / "hostile.pt").string();
  std::vector<std::string> extra;
  std::string yaml;
  if (d == door::init_from) {
    yaml = std::string(model) + "  init_from: hostile.pt\ndata:\n  kind: synthetic\n  synthetic: {samples: 64}\n";
  } else if (d == door::tensors) {
    yaml = std::string(model) + "data:\n  kind: tensors\n  path: hostile.pt\n";
  } else {
    yaml = std::string(model) + "data:\n  kind: synthetic\n  synthetic: {samples: 64}\n";
    fs::create_directories(dir / "ckpt");
    file = (dir / "ckpt" / "step_00000002.pt").string();
    extra = {"--resume", (dir / "ckpt").string()};
  }
  c.make(file);
  const std::string cfg = write(dir / "c.yaml", yaml + rest);
  std::vector<std::string> args = {"train", cfg, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = actorpipe(args);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  // One line, the file named, and what is wrong with it.
  std::string last = r.err;
  while (!last.empty() && last.back() == '\n') last.pop_back();
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  EXPECT_NE(last.find(file + ": "), std::string::npos) << r.err;
  EXPECT_NE(last.find(c.says), std::string::npos) << r.err;
  // The figures docs/BENCHMARKS.md quotes (no timing is asserted).
  std::printf("figures: exit %d in %.2f s, peak RSS %lld MB; a run that loads nothing: %.2f s, %lld MB\n", r.code,
              r.wall_s, static_cast<long long>(r.max_rss_kb / 1024), baseline().wall_s,
              static_cast<long long>(baseline_rss_kb() / 1024));
  EXPECT_LT(r.max_rss_kb, baseline_rss_kb() + 32 * 1024)
      << "peak RSS " << r.max_rss_kb << " KB against " << baseline_rss_kb() << " KB loading nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Doors, HostileFile,
    ::testing::Combine(::testing::ValuesIn(cases), ::testing::Values(door::init_from, door::tensors, door::resume)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + door_name(std::get<1>(info.param));
    });

// --resume names every file it tried and why each failed, and exits 2.
TEST(HostileResume, NoLoadableCheckpointNamesEachFileAndItsReason) {
  const fs::path dir = testing_util::test_dir("actorpipe_hostile_resume");
  const fs::path ck = dir / "ckpt";
  fs::create_directories(ck);
  hostile::deep_tuple((ck / "step_00000007.pt").string(), 1000);
  write(ck / "step_00000003.pt", "not a zip archive");
  const std::string cfg =
      write(dir / "c.yaml", std::string(model) + "data:\n  kind: synthetic\n  synthetic: {samples: 64}\n" + rest);
  const auto r = actorpipe({"train", cfg, "--quiet", "--resume", ck.string()});
  EXPECT_EQ(r.code, 2) << r.err;
  const std::string want = ck.string() + ": no loadable checkpoint (2 step_*.pt files); " +
                           (ck / "step_00000007.pt").string() +
                           ": unsupported pickle content: values nested deeper than 100 at byte ";
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; " + (ck / "step_00000003.pt").string() + ": not a torch.save zip archive"),
            std::string::npos)
      << r.err;
}

// A FIFO would block the read forever (nothing writes to it): refused at
// load like a directory.
TEST(HostileInputs, AFifoAsDataOrInitFromIsRefusedNotReadForever) {
  const fs::path dir = testing_util::test_dir("actorpipe_hostile_fifo");
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (const std::string& yaml :
       {std::string(model) + "data:\n  kind: csv\n  path: fifo\n" + rest,
        std::string(model) + "  init_from: fifo\ndata:\n  kind: synthetic\n" + rest}) {
    const std::string cfg = write(dir / "c.yaml", yaml);
    const auto r = actorpipe({"train", cfg, "--quiet"});
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(": is not a regular file: " + fifo + "\n"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace actorpipe
