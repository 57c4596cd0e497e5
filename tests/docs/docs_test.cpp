// The docs' commands run. README.md and every docs/*.md but BENCHMARKS.md:
//
// - a fenced block whose info string is `sh` holds commands a user types,
//   and the line right before its opening fence is `<!-- runs in: PATH -->`,
//   PATH a script under scripts/ or a test source under tests/ that runs
//   them (or the same command with a shorter step count);
// - for a script, each command line of the block appears in the script:
//   comments dropped, `\` continuations joined, and `build/actorpipe`,
//   `actorpipe` and `"$BIN"`-style words (a variable whose name ends in BIN)
//   taken as the same word; the line's words must appear in that order, next
//   to each other, in one line of the script that is not a comment (a
//   wrapper such as `run "$BIN" train ...` is fine). A line that runs the
//   script itself (`scripts/demo --schedule gpipe` under scripts/demo)
//   counts as run by it;
// - for a test source, every `configs/...yaml` path named in the block
//   appears in that file;
// - commands go in ```sh only: a fence without an info string, or with
//   bash / shell / console, is refused (write ```text for output);
// - every relative link (`](docs/X.md)`, `](X.md)`, images) names a file or
//   directory that exists.
//
// Then the commands themselves: scripts/tour (the README's tour) runs with
// ACTORPIPE_TOUR_QUICK=1 and the built binary, and BUILDING.md's install
// and PATH lines run from another directory with HOME set to a test dir.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace {

namespace fs = std::filesystem;
using actorpipe::testing_util::child_limits;
using actorpipe::testing_util::child_result;
using actorpipe::testing_util::run_child;
using actorpipe::testing_util::slurp_file;

const fs::path source_dir = ACTORPIPE_SOURCE_DIR;

// -- the checker ---------------------------------------------------------------

struct fenced_block {
  int line = 0;              ///< 1-based line of the opening fence
  std::string info;          ///< first word of the info string ("" when none)
  std::string runs_in;       ///< PATH of `<!-- runs in: PATH -->` on the line before; "" when none
  bool annotation_malformed = false;  ///< the line before looks like one but does not parse
  std::vector<std::string> lines;
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// Every fenced block of a Markdown text (``` or ~~~, indented or not, as in
/// list items), with the annotation on the line before its opening fence.
std::vector<fenced_block> fenced_blocks(const std::string& text) {
  static const std::regex runs_in(R"(^\s*<!--\s*runs in:\s*(\S+)\s*-->\s*$)");
  std::vector<fenced_block> out;
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (t.rfind("```", 0) != 0 && t.rfind("~~~", 0) != 0) continue;
    const char fence_char = t[0];
    size_t fence_len = t.find_first_not_of(fence_char);
    if (fence_len == std::string::npos) fence_len = t.size();
    fenced_block b;
    b.line = static_cast<int>(i) + 1;
    std::istringstream info(t.substr(fence_len));
    info >> b.info;
    if (i > 0) {
      std::smatch m;
      if (std::regex_match(lines[i - 1], m, runs_in))
        b.runs_in = m[1];
      else if (lines[i - 1].find("runs in") != std::string::npos)
        b.annotation_malformed = true;
    }
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      const std::string c = trim(lines[j]);
      if (c.size() >= fence_len && c.find_first_not_of(fence_char) == std::string::npos) break;
      b.lines.push_back(lines[j]);
    }
    out.push_back(std::move(b));
    i = j;  // past the closing fence (or the end: an unclosed block runs to it)
  }
  return out;
}

/// A shell line without its trailing `# comment` (a # at the start of a word,
/// outside quotes).
std::string drop_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"') ++i;
      continue;
    }
    if (c == '\\') { ++i; continue; }
    if (c == '"' || c == '\'') { quote = c; continue; }
    if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) return line.substr(0, i);
  }
  return line;
}

/// Shell text as command lines: continuations joined, comments and blank
/// lines dropped.
std::vector<std::string> command_lines(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  std::string pending;
  for (const auto& raw : lines) {
    std::string l = drop_comment(raw);
    const std::string t = trim(l);
    if (!t.empty() && t.back() == '\\') {
      pending += t.substr(0, t.size() - 1) + " ";
      continue;
    }
    pending += t;
    if (!trim(pending).empty()) out.push_back(trim(pending));
    pending.clear();
  }
  if (!trim(pending).empty()) out.push_back(trim(pending));
  return out;
}

/// A command line as words, every spelling of the binary as `actorpipe`.
std::vector<std::string> words(const std::string& line) {
  static const std::regex bin_var(R"(^"?\$\{?[A-Za-z_]*[Bb][Ii][Nn]\}?"?$)");
  static const std::regex built(R"(^(\./)?build[A-Za-z0-9_-]*/actorpipe$)");
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) {
    if (std::regex_match(w, bin_var) || std::regex_match(w, built)) w = "actorpipe";
    out.push_back(w);
  }
  return out;
}

bool contains_run(const std::vector<std::string>& hay, const std::vector<std::string>& needle) {
  return !needle.empty() && std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

/// What is wrong with the sh blocks of one Markdown text (`name` is its path
/// relative to the source dir), one message per problem, each starting with
/// name:line. `root` is where the PATHs of the annotations are looked up.
std::vector<std::string> check_commands(const std::string& name, const std::string& text, const fs::path& root) {
  static const std::regex yaml_path(R"(configs/[A-Za-z0-9_./-]+\.yaml)");
  static const std::set<std::string> shell_like = {"bash", "shell", "console", "zsh", "shell-session"};
  std::vector<std::string> problems;
  for (const auto& b : fenced_blocks(text)) {
    const std::string at = name + ":" + std::to_string(b.line) + ": ";
    if (b.info.empty()) {
      problems.push_back(at + "a fenced block without an info string: write ```sh for commands a user types "
                              "(with <!-- runs in: PATH --> on the line before) or ```text for output");
      continue;
    }
    if (shell_like.count(b.info)) {
      problems.push_back(at + "```" + b.info + " block: commands go in ```sh blocks (checked against the script or "
                              "test that runs them); output goes in ```text");
      continue;
    }
    if (b.info != "sh") continue;
    if (b.runs_in.empty()) {
      problems.push_back(at + (b.annotation_malformed
                                   ? "the line before this ```sh block mentions 'runs in' but is not "
                                     "exactly <!-- runs in: PATH -->: fix its spelling"
                                   : "```sh block without <!-- runs in: PATH --> on the line before: name the "
                                     "script under scripts/ or the test under tests/ that runs these commands"));
      continue;
    }
    const std::string& path = b.runs_in;
    const bool script = path.rfind("scripts/", 0) == 0, test = path.rfind("tests/", 0) == 0;
    if (!script && !test) {
      problems.push_back(at + "runs in: " + path + ": PATH must be a script under scripts/ or a test source under tests/");
      continue;
    }
    if (!fs::is_regular_file(root / path)) {
      problems.push_back(at + "runs in: " + path + ": no such file: fix the path, or add the script or test");
      continue;
    }
    const std::string runner = slurp_file(root / path);
    if (test) {
      std::set<std::string> missing;
      for (const auto& l : b.lines)
        for (std::sregex_iterator it(l.begin(), l.end(), yaml_path), end; it != end; ++it)
          if (runner.find(it->str()) == std::string::npos) missing.insert(it->str());
      for (const auto& m : missing)
        problems.push_back(at + m + " is named in this block but not in " + path +
                           ": make that test run it, or annotate the block with the test or script that does");
      continue;
    }
    std::vector<std::vector<std::string>> script_lines;
    for (const auto& l : command_lines(split_lines(runner))) script_lines.push_back(words(l));
    for (const auto& cmd : command_lines(b.lines)) {
      const auto w = words(cmd);
      if (!w.empty() && (w[0] == path || w[0] == "./" + path)) continue;  // the script itself
      const bool found = std::any_of(script_lines.begin(), script_lines.end(),
                                     [&](const std::vector<std::string>& s) { return contains_run(s, w); });
      if (!found)
        problems.push_back(at + "`" + cmd + "` is not run by " + path + ": add the same command to " + path +
                           " (a shorter --steps is fine there), change the block to what " + path +
                           " runs, or annotate it with the script or test that runs it");
    }
  }
  return problems;
}

/// Relative links (`](X.md)`, `](docs/X.md#part)`, `](img/a.svg)`) that name
/// nothing, resolved against the directory of the Markdown file.
std::vector<std::string> check_links(const std::string& name, const std::string& text, const fs::path& root) {
  static const std::regex link(R"(\]\(([^)\s]+)(\s+"[^"]*")?\))");
  std::vector<std::string> problems;
  const auto lines = split_lines(text);
  const fs::path dir = (root / name).parent_path();
  bool in_fence = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (t.rfind("```", 0) == 0 || t.rfind("~~~", 0) == 0) in_fence = !in_fence;
    if (in_fence) continue;
    for (std::sregex_iterator it(lines[i].begin(), lines[i].end(), link), end; it != end; ++it) {
      std::string target = (*it)[1];
      if (target.empty() || target[0] == '#' || target.find("://") != std::string::npos ||
          target.rfind("mailto:", 0) == 0)
        continue;
      if (auto hash = target.find('#'); hash != std::string::npos) target = target.substr(0, hash);
      if (!fs::exists(dir / target)) {
        const std::string where = fs::relative(dir / target, root).lexically_normal().string();
        problems.push_back(name + ":" + std::to_string(i + 1) + ": link to " + target + " (" + where +
                           "), which does not exist: fix the link, or add the page");
      }
    }
  }
  return problems;
}

/// README.md and docs/*.md but BENCHMARKS.md, relative to the source dir.
std::vector<std::string> checked_pages() {
  std::vector<std::string> out = {"README.md"};
  std::vector<std::string> docs;
  for (const auto& e : fs::directory_iterator(source_dir / "docs"))
    if (e.is_regular_file() && e.path().extension() == ".md" && e.path().filename() != "BENCHMARKS.md")
      docs.push_back("docs/" + e.path().filename().string());
  std::sort(docs.begin(), docs.end());
  out.insert(out.end(), docs.begin(), docs.end());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// -- the checker on made-up pages: it finds what it should ---------------------

class CheckerOnMadeUpPages : public ::testing::Test {
protected:
  void SetUp() override {
    root_ = actorpipe::testing_util::test_dir("actorpipe_docs");
    actorpipe::testing_util::write(root_ / "scripts/try",
                                   "#!/bin/bash\n# \"$BIN\" train configs/only_in_a_comment.yaml\n"
                                   "run \"$BIN\" train configs/a.yaml \\\n  --quiet   # the first\n"
                                   "build/actorpipe simulate --stages 4\n");
    actorpipe::testing_util::write(root_ / "tests/x_test.cpp", "// configs/a.yaml\n");
  }
  fs::path root_;
};

TEST_F(CheckerOnMadeUpPages, AnnotatedCommandsThatTheScriptRunsPass) {
  const std::string page =
      "# t\n\n<!-- runs in: scripts/try -->\n```sh\nactorpipe train configs/a.yaml --quiet   # note\n"
      "actorpipe simulate --stages 4\nscripts/try\n```\n\n```text\noutput\n```\n\n"
      "<!-- runs in: tests/x_test.cpp -->\n```sh\nactorpipe train configs/a.yaml --steps 3\n```\n";
  EXPECT_EQ(joined(check_commands("p.md", page, root_)), "");
}

TEST_F(CheckerOnMadeUpPages, EachProblemIsNamedWithItsLine) {
  const std::string page =
      "line 1\n```sh\nactorpipe train configs/a.yaml\n```\n"                          // 2: no annotation
      "<!-- runs in: scripts/try -->\n```sh\nactorpipe train configs/b.yaml\n```\n"  // 6: not in the script
      "<!-- runs in: scripts/try -->\n```sh\nactorpipe train configs/only_in_a_comment.yaml\n```\n"  // 10
      "<!-- runs in: scripts/nope -->\n```sh\nactorpipe bubble\n```\n"              // 14: no such script
      "<!-- runs in: tests/x_test.cpp -->\n```sh\nactorpipe train configs/c.yaml\n```\n"  // 18: not in the test
      "<!-- runs in: apps/main.cpp -->\n```sh\nactorpipe bubble\n```\n"             // 22: not scripts/ or tests/
      "```\nactorpipe bubble\n```\n"                                               // 25: no info string
      "```bash\nactorpipe bubble\n```\n"                                           // 28: bash
      "<!-- runs in scripts/try -->\n```sh\nactorpipe bubble\n```\n";              // 32: malformed
  const auto p = check_commands("p.md", page, root_);
  ASSERT_EQ(p.size(), 9u) << joined(p);
  EXPECT_NE(p[0].find("p.md:2: ```sh block without <!-- runs in: PATH -->"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("p.md:6: `actorpipe train configs/b.yaml` is not run by scripts/try: add"), std::string::npos)
      << p[1];
  EXPECT_NE(p[2].find("p.md:10: `actorpipe train configs/only_in_a_comment.yaml` is not run by scripts/try"),
            std::string::npos)
      << p[2];
  EXPECT_NE(p[3].find("p.md:14: runs in: scripts/nope: no such file"), std::string::npos) << p[3];
  EXPECT_NE(p[4].find("p.md:18: configs/c.yaml is named in this block but not in tests/x_test.cpp"),
            std::string::npos)
      << p[4];
  EXPECT_NE(p[5].find("p.md:22: runs in: apps/main.cpp: PATH must be a script under scripts/"), std::string::npos)
      << p[5];
  EXPECT_NE(p[6].find("p.md:25: a fenced block without an info string"), std::string::npos) << p[6];
  EXPECT_NE(p[7].find("p.md:28: ```bash block"), std::string::npos) << p[7];
  EXPECT_NE(p[8].find("p.md:32: the line before this ```sh block mentions 'runs in'"), std::string::npos) << p[8];
}

TEST_F(CheckerOnMadeUpPages, AMissingLinkTargetIsNamedWithItsLine) {
  actorpipe::testing_util::write(root_ / "docs/THERE.md", "x\n");
  const std::string page = "[a](THERE.md) [b](THERE.md#part) [c](https://example.org/x.md) [d](#top)\n"
                           "text\n[e](MISSING.md) and ![f](img/none.svg)\n```text\n[g](IN_A_FENCE.md)\n```\n";
  const auto p = check_links("docs/P.md", page, root_);
  ASSERT_EQ(p.size(), 2u) << joined(p);
  EXPECT_NE(p[0].find("docs/P.md:3: link to MISSING.md (docs/MISSING.md), which does not exist"), std::string::npos)
      << p[0];
  EXPECT_NE(p[1].find("docs/P.md:3: link to img/none.svg"), std::string::npos) << p[1];
}

// -- the real pages --------------------------------------------------------------

TEST(DocsCommands, EveryShBlockIsAnnotatedAndItsScriptOrTestRunsIt) {
  for (const auto& page : checked_pages()) {
    const std::string text = slurp_file(source_dir / page);
    ASSERT_FALSE(text.empty()) << page << " cannot be read";
    for (const auto& problem : check_commands(page, text, source_dir)) ADD_FAILURE() << problem;
  }
}

TEST(DocsLinks, EveryRelativeLinkNamesAFileThatExists) {
  for (const auto& page : checked_pages())
    for (const auto& problem : check_links(page, slurp_file(source_dir / page), source_dir)) ADD_FAILURE() << problem;
}

// -- the commands themselves -----------------------------------------------------

std::string sh_quoted(const fs::path& p) { return "'" + p.string() + "'"; }

child_result bash(const std::string& script, double timeout_s = 600) {
  child_limits limits;
  limits.timeout_s = timeout_s;
  return run_child("/bin/bash", {"-c", "set -euo pipefail\n" + script}, limits);
}

using actorpipe::testing_util::describe;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// The final-loss column of a comparison table's rows, by schedule.
std::map<std::string, std::string> final_losses(const std::string& table) {
  std::map<std::string, std::string> out;
  for (const auto& l : split_lines(table)) {
    if (l.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream in(l);
    for (std::string c; std::getline(in, c, '|');) cells.push_back(trim(c));
    // "", schedule, S, M, mean step, final loss, ...
    if (cells.size() > 5 && cells[1] != "schedule") out[cells[1]] = cells[5];
  }
  return out;
}

/// Whether scripts/setup.sh has made data/ (a test failure names what is missing).
bool have_data() {
  bool ok = true;
  for (const char* f : {"data/digits.csv.gz", "data/fortunes.txt"})
    if (!fs::exists(source_dir / f)) {
      ADD_FAILURE() << (source_dir / f) << " is missing: run scripts/setup.sh (scripts/demo and scripts/test source it)";
      ok = false;
    }
  return ok;
}

// The README's tour, quick: every command exits 0, both fault scenarios end
// bitwise on their fault-free runs, every synchronous schedule ends on one
// final loss, and the GPT's weights are written and continue the prompt.
TEST(Tour, RunsEveryCommandOfTheReadmeInOrder) {
  if (!have_data()) return;
  const fs::path dir = actorpipe::testing_util::test_dir("actorpipe_docs");
  const auto r = bash("ACTORPIPE_TOUR_QUICK=1 ACTORPIPE_BIN=" + sh_quoted(ACTORPIPE_BIN) +
                      " ACTORPIPE_TOUR_DIR=" + sh_quoted(dir / "tour") + " " + sh_quoted(source_dir / "scripts/tour"));
  ASSERT_EQ(r.code, 0) << "scripts/tour failed; " << describe(r);
  std::vector<std::string> shown;
  for (const auto& l : split_lines(r.out))
    if (l.rfind("$ actorpipe ", 0) == 0) shown.push_back(l.substr(2));
  const std::vector<std::string> want = {
      "actorpipe train configs/digits_mlp.yaml",
      "actorpipe compare configs/schedules_compare.yaml",
      "actorpipe train configs/faults/chaos.yaml --quiet --verify-against-clean",
      "actorpipe launch --nprocs 3 configs/faults/heal_pipeline.yaml --quiet --verify-against-clean",
      "actorpipe train configs/gpt_fortunes.yaml --log-every 250 --save gpt.pt",
      "actorpipe generate configs/gpt_fortunes.yaml --load gpt.pt --prompt \"Q: \" --tokens 160 --seed 7"};
  EXPECT_EQ(shown, want) << r.out;
  EXPECT_EQ(count(r.out, "verify: final weights bitwise equal to a fault-free run"), 2u) << r.out;
  EXPECT_EQ(count(r.out, "restarts: 2,"), 2u) << "the chaos scenario and the heal: two restarts each in 8 steps\n"
                                                << r.out;
  const auto from = r.out.find("$ actorpipe compare"), to = r.out.find("$ actorpipe", from + 1);
  ASSERT_NE(from, std::string::npos);
  const auto losses = final_losses(r.out.substr(from, to == std::string::npos ? std::string::npos : to - from));
  for (const char* s : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "greedy", "async"})
    EXPECT_EQ(losses.count(s), 1u) << "compare printed no row for " << s << "\n" << r.out;
  for (const char* s : {"1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "greedy"})
    EXPECT_EQ(losses.count(s) ? losses.at(s) : "", losses.count("gpipe") ? losses.at("gpipe") : "?")
        << s << " against gpipe: every synchronous schedule ends on the same weights\n" << r.out;
  EXPECT_TRUE(fs::is_regular_file(dir / "tour" / "gpt.pt"));
  EXPECT_NE(r.out.find("\nQ: "), std::string::npos) << "generate prints the prompt first\n" << r.out;
}

/// The ```sh block of docs/BUILDING.md that holds `line`, as its lines.
std::vector<std::string> building_block_with(const std::string& line) {
  const std::string text = slurp_file(source_dir / "docs/BUILDING.md");
  for (const auto& b : fenced_blocks(text))
    if (b.info == "sh")
      for (const auto& l : b.lines)
        if (l.find(line) != std::string::npos) return b.lines;
  ADD_FAILURE() << "docs/BUILDING.md has no ```sh block with `" << line << "`: this test runs that block";
  return {};
}

// BUILDING.md's PATH block, verbatim: from a directory that is not the
// checkout (its `build` a link to this build), HOME a test directory. It
// installs into $HOME/.local and trains the installed config with the
// installed binary, found on PATH. This also runs the plain-CMake block's
// install line.
TEST(BuildingPage, ThePathBlockInstallsAndTheInstalledBinaryTrainsFromAnotherDirectory) {
  if (!have_data()) return;
  const auto block = building_block_with("export PATH=\"$PWD/build:$PATH\"");
  ASSERT_FALSE(block.empty());
  const auto plain = building_block_with("cmake -S . -B build");
  EXPECT_NE(std::find(plain.begin(), plain.end(), "cmake --install build --prefix \"$HOME/.local\""), plain.end())
      << "the plain-CMake block's install line is the one run here";
  const fs::path dir = actorpipe::testing_util::test_dir("actorpipe_docs");
  const fs::path work = dir / "work", home = dir / "home";
  fs::create_directories(work);
  fs::create_directories(home);
  fs::create_directory_symlink(fs::path(ACTORPIPE_BIN).parent_path(), work / "build");
  std::string script = "export HOME=" + sh_quoted(home) + "\ncd " + sh_quoted(work) + "\n";
  for (const auto& l : block) script += l + "\n";
  script += "echo \"on PATH: $(command -v actorpipe)\"\n";
  const auto r = bash(script);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("on PATH: " + (home / ".local/bin/actorpipe").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1f1b "), std::string::npos) << "the final table\n" << r.out;
  for (const char* f : {".local/bin/actorpipe", ".local/share/actorpipe/configs/digits_mlp.yaml",
                        ".local/share/actorpipe/configs/faults/chaos.yaml",
                        ".local/share/actorpipe/data/digits.csv.gz", ".local/share/actorpipe/data/fortunes.txt"})
    EXPECT_TRUE(fs::is_regular_file(home / f)) << f << " was not installed";
}

// The plain-CMake block's configure line, in a fresh build directory (the
// build and ctest lines are what built and runs this test).
TEST(BuildingPage, ThePlainConfigureLineConfiguresAFreshBuildDirectory) {
  const auto block = building_block_with("cmake -S . -B build");
  ASSERT_FALSE(block.empty());
  std::string configure;
  for (const auto& l : block)
    if (l.rfind("cmake -S . -B build ", 0) == 0) configure = drop_comment(l);
  ASSERT_FALSE(configure.empty());
  const fs::path dir = actorpipe::testing_util::test_dir("actorpipe_docs") / "build";
  configure.replace(configure.find(" -B build "), 10, " -B " + sh_quoted(dir) + " ");
  const auto r = bash("cd " + sh_quoted(source_dir) + "\n" + configure);
  ASSERT_EQ(r.code, 0) << configure << "\n" << describe(r);
  EXPECT_TRUE(fs::is_regular_file(dir / "build.ninja")) << r.out;
  EXPECT_TRUE(fs::is_regular_file(dir / "cmake_install.cmake")) << r.out;
}

// BUILDING.md's runtime packages: each is a real package (installed here, as
// the -dev packages depend on it), and every library the binary asks for by
// name comes from one of them, from the C and C++ runtime, or from outside
// the package manager (a CUDA toolkit's NCCL and runtime).
TEST(BuildingPage, TheRuntimePackagesHoldEveryLibraryTheBinaryLinks) {
  if (bash("command -v dpkg-query && command -v readelf && command -v ldd").code != 0)
    GTEST_SKIP() << "not a Debian machine with binutils: dpkg-query, readelf or ldd is missing";
  const auto block = building_block_with("apt-get install");
  ASSERT_FALSE(block.empty());
  std::set<std::string> listed;
  for (const auto& l : block) {
    const auto w = words(drop_comment(l));
    const auto it = std::find(w.begin(), w.end(), "install");
    if (it != w.end())
      for (auto p = it + 1; p != w.end(); ++p)
        if ((*p)[0] != '-') listed.insert(*p);
  }
  ASSERT_FALSE(listed.empty());
  for (const auto& p : listed) {
    const auto q = bash("dpkg-query -W -f='${Status}' " + p);
    EXPECT_EQ(q.out, "install ok installed") << "docs/BUILDING.md names " << p << ", which is not installed here";
  }
  const std::set<std::string> base = {"libc6", "libstdc++6", "libgcc-s1"};
  const auto needed = bash("readelf -d " + sh_quoted(ACTORPIPE_BIN) + " | sed -n 's/.*Shared library: \\[\\(.*\\)\\]/\\1/p'");
  ASSERT_EQ(needed.code, 0) << describe(needed);
  const auto ldd = bash("ldd " + sh_quoted(ACTORPIPE_BIN));
  ASSERT_EQ(ldd.code, 0) << describe(ldd);
  for (const auto& lib : split_lines(needed.out)) {
    std::string path;
    for (const auto& l : split_lines(ldd.out)) {
      const auto arrow = l.find(" => ");
      if (arrow != std::string::npos && trim(l.substr(0, arrow)) == lib) {
        std::istringstream in(l.substr(arrow + 4));
        in >> path;
      }
    }
    ASSERT_FALSE(path.empty() || path == "not") << lib << " does not resolve: " << ldd.out;
    // dpkg knows a merged-/usr file under one of its two names.
    const auto owner = bash("real=$(readlink -f " + sh_quoted(path) + "); for p in " + sh_quoted(path) +
                            " \"$real\" \"/usr$real\" \"${real#/usr}\"; do dpkg-query -S \"$p\" 2>/dev/null && "
                            "exit 0; done; exit 0");
    if (trim(owner.out).empty()) continue;  // not from a package (e.g. /usr/local/cuda): documented separately
    std::string pkg = owner.out.substr(0, owner.out.find(':'));
    EXPECT_TRUE(listed.count(pkg) || base.count(pkg))
        << lib << " (" << path << ") comes from " << pkg
        << ", which docs/BUILDING.md's runtime apt-get line does not name: add it there";
  }
}

}  // namespace
