#pragma once
// What the tests that hold the real binary against the plain-PyTorch
// reference (tests/reference/gpt_train.py) share: the reference's scripts,
// a child run under a timeout, the text they train on, and a fixture whose
// suite shares one directory (the reference's files, made once per
// process) and whose tests each have one, both kept after a failure.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe::testing_util {

/// The Python that runs the reference (it needs torch and yaml).
inline const std::string python = "/usr/bin/python3";
/// The reference's scripts.
inline const std::string reference_dir = std::string(ACTORPIPE_SOURCE_DIR) + "/tests/reference";
/// Trains a config's model in plain PyTorch (--write-init: writes its initial weights only).
inline const std::string gpt_train = reference_dir + "/gpt_train.py";
/// Compares saved weights key by key: within --tol, or --exact.
inline const std::string compare_state_dicts = reference_dir + "/compare_state_dicts.py";

/// actorpipe against the reference in float32: every key within this.
inline constexpr double kFloat32Tolerance = 1e-5;

/// Runs `program args...`; past `timeout_s` the child is killed and the
/// test fails (on its exit code).
inline child_result run(const std::string& program, const std::vector<std::string>& args, double timeout_s = 180) {
  child_limits limits;
  limits.timeout_s = timeout_s;
  return run_child(program, args, limits);
}

/// Whether `python` imports torch and yaml: whether there is a reference
/// to compare with. Asked once per process.
inline bool have_torch() {
  static const bool has = access(python.c_str(), X_OK) == 0 && run(python, {"-c", "import torch, yaml"}).code == 0;
  return has;
}

/// A few KB of English-like text, the same bytes on every run: words drawn
/// by a fixed LCG, sentences capitalised and punctuated, lines wrapped.
inline std::string make_text(size_t bytes) {
  static const char* const words[] = {
      "the",    "a",      "of",     "and",   "to",     "in",     "is",     "it",    "that",   "was",
      "for",    "on",     "with",   "as",    "his",    "they",   "at",     "be",    "this",   "from",
      "river",  "stone",  "garden", "light", "winter", "morning", "letter", "window", "silver", "market",
      "quietly", "never", "always", "slowly", "bright", "ancient", "small",  "green", "heavy",  "open",
      "walked", "found",  "said",   "held",  "watched", "carried", "forgot", "sang",  "built",  "wondered",
      "fortune", "favors", "the bold", "patience", "time", "friend", "road",  "home",  "sea",    "fire"};
  const size_t n_words = sizeof(words) / sizeof(words[0]);
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&state](uint64_t m) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % m;
  };
  std::string text, line;
  bool sentence_start = true;
  while (text.size() < bytes) {
    std::string w = words[next(n_words)];
    if (sentence_start) w[0] = static_cast<char>(w[0] - 'a' + 'A');
    sentence_start = false;
    const uint64_t p = next(20);
    if (p == 0) {
      w += ".";
      sentence_start = true;
    } else if (p == 1) {
      w += ",";
    } else if (p == 2) {
      w += "?";
      sentence_start = true;
    } else if (p == 3) {
      w += std::to_string(next(100));
    }
    if (line.size() + 1 + w.size() > 64) {
      text += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return text + line + "\n";
}

/// `s` with every regex metacharacter escaped: matches `s` itself.
inline std::string regex_escape(const std::string& s) {
  static const std::string special = R"(\^$.|?*+()[]{})";
  std::string out;
  for (char ch : s) {
    if (special.find(ch) != std::string::npos) out += '\\';
    out += ch;
  }
  return out;
}

/// The JSON in `path` (--results, the reference's --evals); null, and a
/// failure recorded, when it is none.
inline nlohmann::json parse_json_file(const std::string& path) {
  const std::string text = slurp_file(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path << " is no JSON:\n" << text;
  return j.is_discarded() ? nlohmann::json() : j;
}

/// One actorpipe run: its --save and --results, parsed.
struct run_out {
  bool ok = false;
  std::string save, results_path;
  nlohmann::json results;
  child_result r;
};

/// A suite run against the reference. Its SetUpTestSuite calls
/// make_shared_dir(STEM) and its TearDownTestSuite remove_shared_dir();
/// each test has dir_, TempDir/STEM_SUITE_TEST. A failure keeps the files
/// (the messages name them).
class reference_fixture : public ::testing::Test {
protected:
  /// shared_ made afresh, TempDir/STEM_PID; `stem` names dir_ too.
  static void make_shared_dir(const std::string& stem) {
    stem_ = stem;
    shared_ = std::filesystem::path(::testing::TempDir()) / (stem + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(shared_);
    std::filesystem::create_directories(shared_);
  }

  /// shared_ removed unless a test failed; the initial weights forgotten.
  static void remove_shared_dir() {
    std::error_code ec;
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) std::filesystem::remove_all(shared_, ec);
    inits_.clear();
  }

  void SetUp() override { dir_ = test_dir(stem_); }

  void TearDown() override {
    // A failing test's files stay for a look; the others go.
    if (!HasFailure() && !dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  /// Where reference_init writes the initial weights of `key`.
  static std::string init_path(const std::string& key) { return (shared_ / ("init_" + key + ".pt")).string(); }

  /// The reference's initial weights (--write-init, seed 1234) for the
  /// model of `yaml_text`, written once per `key` (init_KEY.yaml and
  /// init_KEY.pt in shared_); "" after a failure.
  static std::string reference_init(const std::string& key, const std::string& yaml_text) {
    if (auto it = inits_.find(key); it != inits_.end()) return it->second;
    const std::string init = init_path(key);
    const std::string cfg = write(shared_ / ("init_" + key + ".yaml"), yaml_text);
    auto r = run(python, {gpt_train, cfg, "--write-init", init, "--seed", "1234"});
    EXPECT_EQ(r.code, 0) << describe(r);
    if (r.code != 0) return "";
    return inits_[key] = init;
  }

  /// actorpipe train (or, with nprocs > 1, launch --nprocs) on `yaml_text`
  /// written to dir_/NAME.yaml, with --save and --results there; `extra`
  /// more flags. Prints the run's wall time.
  run_out train_yaml(const std::string& yaml_text, const std::string& name, const std::vector<std::string>& extra = {},
                     int nprocs = 1) {
    run_out o;
    const std::string cfg = write(dir_ / (name + ".yaml"), yaml_text);
    o.save = (dir_ / (name + ".pt")).string();
    o.results_path = (dir_ / (name + ".json")).string();
    std::vector<std::string> args;
    if (nprocs > 1)
      args = {"launch", "--nprocs", std::to_string(nprocs), cfg};
    else
      args = {"train", cfg};
    args.insert(args.end(), {"--quiet", "--samples", "0", "--save", o.save, "--results", o.results_path});
    args.insert(args.end(), extra.begin(), extra.end());
    o.r = run(ACTORPIPE_BIN, args, 240);
    EXPECT_EQ(o.r.code, 0) << name << ": " << describe(o.r);
    std::cout << "  " << name << ": " << o.r.wall_s << " s\n";
    if (o.r.code != 0 || !std::filesystem::exists(o.save) || !std::filesystem::exists(o.results_path)) return o;
    o.results = parse_json_file(o.results_path);
    o.ok = o.results.is_object();
    return o;
  }

  /// Every key of `got` within `tol` of `want` (compare_state_dicts.py);
  /// `expect_within` false: expects some key beyond it.
  static void expect_close(const std::string& want, const std::string& got, double tol, const std::string& what,
                           bool expect_within = true) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", tol);
    auto r = run(python, {compare_state_dicts, want, got, "--tol", t});
    EXPECT_EQ(r.code, expect_within ? 0 : 1) << what << " (" << want << " vs " << got << "):\n" << describe(r);
    std::istringstream out(r.out);
    for (std::string l; std::getline(out, l);)
      if (l.rfind("overall", 0) == 0) std::cout << "  " << what << ": " << l << "\n";
  }

  /// The same bytes on disk; else the keys that differ, for the message.
  static void expect_same_bytes(const std::string& want, const std::string& got, const std::string& what) {
    const std::string a = slurp_file(want), b = slurp_file(got);
    ASSERT_FALSE(a.empty()) << want;
    if (a == b) return;
    auto r = run(python, {compare_state_dicts, want, got, "--exact"});
    ADD_FAILURE() << what << ": " << got << " is not the bytes of " << want << "\n" << describe(r);
  }

  /// The suite's directory: the reference's files.
  inline static std::filesystem::path shared_;
  /// reference_init's weights by key.
  inline static std::map<std::string, std::string> inits_;
  /// This test's directory.
  std::filesystem::path dir_;

private:
  inline static std::string stem_;
};

}  // namespace actorpipe::testing_util

/// Skips the test where there is no reference to compare with.
#define NEED_TORCH()                             \
  if (!::actorpipe::testing_util::have_torch()) \
  GTEST_SKIP() << ::actorpipe::testing_util::python << " cannot import torch and yaml; no reference to compare with"
