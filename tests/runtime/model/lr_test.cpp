// The learning rate of every step against the reference's lr_at
// (tests/reference/llama_reference.py, run by Debian's python3): the same
// double, bit for bit, for each schedule type, warmup, decay and min_lr;
// and StepLR as torch chains it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/model/lr.hpp"
#include "tests/apps/child_process.hpp"

namespace actorpipe {
namespace {

const std::string python = "/usr/bin/python3";

struct schedule_case {
  std::string type;
  int64_t warmup = 0, decay = -1, steps = 40;
  double lr = 3e-4, min_lr = 0.0;
};

train_config train_for(const schedule_case& c) {
  train_config t;
  t.steps = c.steps;
  t.optimizer.lr = c.lr;
  t.lr_schedule.type = c.type;
  t.lr_schedule.warmup_steps = c.warmup;
  t.lr_schedule.decay_steps = c.decay;
  t.lr_schedule.min_lr = c.min_lr;
  return t;
}

// The reference's rates for steps 0 .. steps + 5, as float.hex() strings:
// past the run too, where the decay ends.
std::string hex(double v);

// The reference's rates of every case for steps 0 .. steps + 5 (past the
// run too, where the decay ends), as float.hex() strings, case by case: one
// python3 start for all of them (importing torch takes seconds).
std::vector<std::vector<std::string>> reference_rates(const std::vector<schedule_case>& cases,
                                                      const std::vector<int64_t>& decays) {
  std::ostringstream code;
  code << "import sys; sys.path.insert(0, '" << ACTORPIPE_SOURCE_DIR << "/tests/reference')\n"
       << "from llama_reference import lr_at\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    code << "lr, min_lr = float.fromhex('" << hex(c.lr) << "'), float.fromhex('" << hex(c.min_lr) << "')\n"
         << "print(' '.join(float(lr_at(s, lr, " << c.warmup << ", " << decays[i] << ", min_lr, '" << c.type
         << "')).hex() for s in range(" << c.steps + 5 << ")))\n";
  }
  auto r = testing_util::run_child(python, {"-c", code.str()});
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<std::vector<std::string>> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    out.emplace_back();
    for (std::string w; words >> w;) out.back().push_back(w);
  }
  return out;
}

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

bool have_python_torch() {
  return access(python.c_str(), X_OK) == 0 &&
         testing_util::run_child(python, {"-c", "import torch, numpy"}).code == 0;
}

TEST(LrAt, EveryScheduleTypeGivesTheReferencesRateBitForBit) {
  if (!have_python_torch()) GTEST_SKIP() << python << " cannot import torch; no reference to compare with";
  const std::vector<schedule_case> cases{
      {"cosine", 5, -1, 40, 3e-4, 3e-5},   {"cosine", 0, 17, 40, 1e-3, 0.0},  {"cosine", 3, 10, 40, 6e-4, 6e-5},
      {"linear", 4, -1, 30, 2e-3, 1e-4},   {"linear", 0, 25, 30, 0.1, 0.0},   {"constant", 7, -1, 20, 5e-4, 0.0},
      {"cosine", 12, -1, 10, 1e-3, 0.0}};  // a warmup longer than the run
  std::vector<int64_t> decays;
  for (const auto& c : cases) decays.push_back(decay_steps(train_for(c)));
  const auto all = reference_rates(cases, decays);
  ASSERT_EQ(all.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto t = train_for(c);
    const int64_t decay = decays[i];
    SCOPED_TRACE(c.type + " warmup " + std::to_string(c.warmup) + " decay " + std::to_string(decay));
    if (c.decay < 0) EXPECT_EQ(decay, std::max<int64_t>(0, c.steps - c.warmup)) << "the default decay";
    const auto& expected = all[i];
    ASSERT_EQ(expected.size(), static_cast<size_t>(c.steps + 5));
    for (int64_t s = 0; s < c.steps + 5; ++s) {
      double want = 0;
      ASSERT_EQ(std::sscanf(expected[s].c_str(), "%la", &want), 1) << expected[s];
      EXPECT_EQ(hex(lr_at(t, s)), hex(want)) << "step " << s;
    }
  }
}

TEST(LrAt, StepLrMultipliesByGammaAtEveryBoundaryInOrder) {
  train_config t;
  t.optimizer.lr = 0.1;
  t.lr_schedule.type = "step";
  t.lr_schedule.step_size = 3;
  t.lr_schedule.gamma = 0.7;
  double chained = 0.1;
  for (int64_t s = 0; s < 20; ++s) {
    if (s > 0 && s % 3 == 0) chained *= 0.7;  // torch's StepLR: lr *= gamma at each boundary
    EXPECT_EQ(hex(lr_at(t, s)), hex(chained)) << "step " << s;
  }
  t.lr_schedule.type = "none";
  EXPECT_EQ(lr_at(t, 12), 0.1);
}

}  // namespace
}  // namespace actorpipe
