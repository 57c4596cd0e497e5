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
//
// And the facts that have one source, each against the places that repeat it:
//
// - exit codes: docs/EXIT_CODES.md's table is the source. README.md's
//   "Exit codes:" paragraph lists every code of the table and no other, and
//   says of each what the table's row says (a word in common). Each command
//   of `actorpipe --help` has an entry under EXIT_CODES.md's "By command";
//   where `actorpipe CMD --help` has an "exit codes:" paragraph, it lists the
//   same codes as that entry, each a code of the table, with a word in common
//   with the entry's or the table's words for it;
// - environment variables: every variable the code under apps/, actors/,
//   runtime/ and messages/ reads (getenv with the name written at the call,
//   or, in a file whose getenv takes a name from elsewhere, each string
//   literal spelled like a variable) is named in docs/ENVIRONMENT.md; every
//   ACTORPIPE_* variable the page names is read by that code or by a script
//   (scripts/*, bench/*.sh: `$NAME`, `${NAME...}`); every ACTORPIPE_*
//   variable a script reads is named on the page;
// - packages: docs/BUILDING.md's package table names the packages of
//   scripts/setup.sh's PACKAGES list (with its `PACKAGES+=`), no more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
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
using actorpipe::testing_util::first_line;
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
  for (const char* f : {"data/digits.csv.gz", "data/fortunes.txt", "data/fortunes_spm.model"})
    if (!fs::exists(source_dir / f)) {
      ADD_FAILURE() << (source_dir / f) << " is missing: run scripts/setup.sh (scripts/demo and scripts/test source it)";
      ok = false;
    }
  return ok;
}

// The README's tour, quick: every command exits 0, both fault scenarios end
// bitwise on their fault-free runs, every synchronous schedule ends on one
// final loss, and the GPT's and the LLaMA's weights are written and
// continue their prompts.
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
      "actorpipe generate configs/gpt_fortunes.yaml --load gpt.pt --prompt \"Q: \" --tokens 160 --seed 7",
      "actorpipe train configs/llama_fortunes.yaml --log-every 250 --save llama.pt",
      "actorpipe generate configs/llama_fortunes.yaml --load llama.pt --prompt \"A programmer is\" --tokens 60 --seed 7"};
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
  EXPECT_TRUE(fs::is_regular_file(dir / "tour" / "llama.pt"));
  EXPECT_NE(r.out.find("\nA programmer is"), std::string::npos) << "the LLaMA's generate prints the prompt first\n"
                                                                << r.out;
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

// -- facts with one source: exit codes ---------------------------------------------

/// The paragraph of `text` that starts with a line starting with `start`
/// (without `start`), to the next blank line; "" when no line starts so.
std::string paragraph_from(const std::string& text, const std::string& start) {
  std::string out;
  bool in = false;
  for (const auto& l : split_lines(text)) {
    if (!in) {
      if (l.rfind(start, 0) == 0) {
        in = true;
        out = l.substr(start.size());
      }
      continue;
    }
    if (trim(l).empty()) break;
    out += "\n" + l;
  }
  return out;
}

struct listed_code {
  int code = 0;
  std::string phrase;  ///< what follows the code, up to the next code
};

/// The exit codes a text lists, in order: a number at the start of the text
/// (after an optional ':') or of a list item (`- 5: ...`), or right after
/// `,`, `;`, `(`, `and` or `or`, and not part of a word: `rank 0's`, `5e7`,
/// `1/4`, `exits 1` are not codes.
std::vector<listed_code> listed_codes(const std::string& text) {
  static const std::regex code(R"((^[:\s]*|\n\s*-\s+|[,;(]\s*|\s(?:and|or)\s+)(\d{1,3})(?![\w/'-]|\.\d))");
  std::vector<listed_code> out;
  std::vector<std::pair<size_t, size_t>> spans;  // where each phrase starts, where the next match starts
  for (std::sregex_iterator it(text.begin(), text.end(), code), end; it != end; ++it) {
    const auto at = static_cast<size_t>(it->position(0));
    if (!spans.empty()) spans.back().second = at;
    out.push_back({std::stoi((*it)[2]), ""});
    spans.emplace_back(at + static_cast<size_t>(it->length(0)), text.size());
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].phrase = trim(text.substr(spans[i].first, spans[i].second - spans[i].first));
  return out;
}

/// The words of `s` that say something (four letters or more, lower case,
/// not a word every phrase has).
std::set<std::string> content_words(const std::string& s) {
  static const std::regex word(R"([A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9_])");
  static const std::set<std::string> common = {"that",  "this",  "with",      "when", "than", "then", "from",
                                               "into",  "which", "there",     "also", "only", "after", "before",
                                               "under", "exit",  "exits",     "code", "codes", "actorpipe", "otherwise"};
  std::set<std::string> out;
  for (std::sregex_iterator it(s.begin(), s.end(), word), end; it != end; ++it) {
    std::string w = it->str();
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (w.size() >= 4 && !common.count(w)) out.insert(w);
  }
  return out;
}

/// What a list says of its i-th code: its phrase's words, or, for a code
/// listed with the next (`130 and 143 after ...`), the next one's.
std::set<std::string> meaning_of(const std::vector<listed_code>& codes, size_t i) {
  for (; i < codes.size(); ++i)
    if (auto w = content_words(codes[i].phrase); !w.empty()) return w;
  return {};
}

bool share_a_word(const std::set<std::string>& a, const std::set<std::string>& b) {
  return std::any_of(a.begin(), a.end(), [&](const std::string& w) { return b.count(w) > 0; });
}

std::string codes_text(const std::set<int>& codes) {
  std::string out;
  for (int c : codes) out += (out.empty() ? "" : ", ") + std::to_string(c);
  return "{" + out + "}";
}

/// docs/EXIT_CODES.md's table: each code with its row's other cells (a row
/// `| 130, 143 | ... |` gives both). A first cell that is not a list of
/// numbers is a problem.
std::map<int, std::string> exit_code_table(const std::string& md, std::vector<std::string>& problems) {
  std::map<int, std::string> out;
  const auto lines = split_lines(md);
  size_t i = 0;
  while (i < lines.size() && lines[i].rfind("| code |", 0) != 0) ++i;
  for (i += 2; i < lines.size() && lines[i].rfind("|", 0) == 0; ++i) {
    const auto bar = lines[i].find('|', 1);
    const std::string first = lines[i].substr(1, bar == std::string::npos ? std::string::npos : bar - 1);
    std::istringstream in(first);
    for (std::string c; std::getline(in, c, ',');) {
      c = trim(c);
      if (c.empty() || c.find_first_not_of("0123456789") != std::string::npos) {
        problems.push_back("docs/EXIT_CODES.md:" + std::to_string(i + 1) + ": the table's first cell '" + trim(first) +
                           "' is not a list of codes");
        break;
      }
      out[std::stoi(c)] = bar == std::string::npos ? "" : lines[i].substr(bar + 1);
    }
  }
  return out;
}

/// docs/EXIT_CODES.md's "By command" entries (`**`CMD`** ...` up to the next
/// entry, fenced block or comment), by command.
std::map<std::string, std::string> exit_codes_by_command(const std::string& md) {
  std::map<std::string, std::string> out;
  std::string name;
  bool in_section = false;
  for (const auto& l : split_lines(md)) {
    if (l.rfind("## ", 0) == 0) {
      in_section = trim(l) == "## By command";
      name.clear();
      continue;
    }
    if (!in_section) continue;
    const std::string t = trim(l);
    if (t.rfind("```", 0) == 0 || t.rfind("<!--", 0) == 0) {
      name.clear();
      continue;
    }
    if (l.rfind("**`", 0) == 0) {
      const auto tick = l.find('`', 3), bold = l.find("**", 3);
      name = l.substr(3, tick == std::string::npos ? std::string::npos : tick - 3);
      out[name] = bold == std::string::npos ? "" : l.substr(bold + 2);
      continue;
    }
    if (!name.empty()) out[name] += "\n" + l;
  }
  return out;
}

/// The commands `actorpipe --help` lists: the lines under "commands:" that
/// start with two spaces and a name.
std::vector<std::string> commands_in_help(const std::string& help) {
  static const std::regex entry(R"(^  ([a-z][a-z0-9-]*)(\s.*)?$)");
  std::vector<std::string> out;
  bool in = false;
  for (const auto& l : split_lines(help)) {
    if (trim(l) == "commands:") {
      in = true;
      continue;
    }
    if (!in) continue;
    if (trim(l).empty()) break;
    std::smatch m;
    if (std::regex_match(l, m, entry)) out.push_back(m[1]);
  }
  return out;
}

TEST(ExitCodeLists, AreReadFromProse) {
  const auto c = listed_codes(": 0 done; 1 a write (`--svg`, rank 0's) failed, exits 1 or more than 5e7 ops;\n"
                              "2 bad, 130 and 143 after SIGINT (1 if killed)\n- 5: lost, dp 2 at 1/4\n- 6.");
  std::vector<int> got;
  for (const auto& x : c) got.push_back(x.code);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 130, 143, 1, 5, 6}));
  ASSERT_EQ(c.size(), 8u);
  EXPECT_EQ(c[1].phrase, "a write (`--svg`, rank 0's) failed, exits 1 or more than 5e7 ops");
  EXPECT_EQ(meaning_of(c, 3), (std::set<std::string>{"sigint"})) << "130 means what 143 says";
  EXPECT_EQ(commands_in_help("usage\n\ncommands:\n  train CONFIG  t\n                  more\n  keys\n\nRun\n  x y\n"),
            (std::vector<std::string>{"train", "keys"}));
}

TEST(ExitCodes, TheReadmeListsEveryCodeOfTheTableAndSaysWhatItsRowSays) {
  std::vector<std::string> problems;
  const auto table = exit_code_table(slurp_file(source_dir / "docs/EXIT_CODES.md"), problems);
  for (const auto& p : problems) ADD_FAILURE() << p;
  ASSERT_FALSE(table.empty()) << "docs/EXIT_CODES.md has no table whose header starts `| code |`";
  const std::string para = paragraph_from(slurp_file(source_dir / "README.md"), "Exit codes:");
  ASSERT_FALSE(trim(para).empty()) << "README.md has no paragraph starting `Exit codes:`";
  const auto listed = listed_codes(para);
  std::set<int> seen;
  for (size_t i = 0; i < listed.size(); ++i) {
    const int c = listed[i].code;
    seen.insert(c);
    if (!table.count(c)) {
      ADD_FAILURE() << "README.md lists exit code " << c << " (" << listed[i].phrase
                    << "), which docs/EXIT_CODES.md's table does not have: add it to the table, or drop it from "
                       "README.md";
      continue;
    }
    if (!share_a_word(meaning_of(listed, i), content_words(table.at(c))))
      ADD_FAILURE() << "README.md says exit code " << c << " is '" << listed[i].phrase
                    << "', docs/EXIT_CODES.md's table row says '" << trim(table.at(c))
                    << "': not one word in common; say the same thing";
  }
  for (const auto& [c, row] : table)
    if (!seen.count(c))
      ADD_FAILURE() << "docs/EXIT_CODES.md's table has exit code " << c << " (" << trim(row)
                    << "), which README.md's `Exit codes:` paragraph does not list: add it there";
}

TEST(ExitCodes, EachCommandsHelpListsTheCodesOfItsEntryInExitCodesMd) {
  const std::string md = slurp_file(source_dir / "docs/EXIT_CODES.md");
  std::vector<std::string> problems;
  const auto table = exit_code_table(md, problems);
  ASSERT_FALSE(table.empty());
  const auto entries = exit_codes_by_command(md);
  ASSERT_FALSE(entries.empty()) << "docs/EXIT_CODES.md has no `## By command` entries";

  const auto top = run_child(ACTORPIPE_BIN, {"--help"});
  ASSERT_EQ(top.code, 0) << describe(top);
  const auto commands = commands_in_help(top.out + top.err);
  ASSERT_FALSE(commands.empty()) << "`actorpipe --help` lists no commands under `commands:`\n" << describe(top);
  for (const auto& [name, text] : entries)
    if (name != "actorpipe" && std::find(commands.begin(), commands.end(), name) == commands.end())
      ADD_FAILURE() << "docs/EXIT_CODES.md has a By command entry for `" << name
                    << "`, which `actorpipe --help` does not list";
  for (const auto& [name, text] : entries)
    for (const auto& x : listed_codes(text))
      if (!table.count(x.code))
        ADD_FAILURE() << "docs/EXIT_CODES.md's entry for `" << name << "` lists exit code " << x.code
                      << ", which its table does not have";

  // Every command's --help at once: each process spends most of its time
  // loading LibTorch.
  const fs::path dir = actorpipe::testing_util::test_dir("actorpipe_docs");
  std::string script;
  for (const auto& c : commands)
    script += "( " + sh_quoted(ACTORPIPE_BIN) + " " + c + " --help >" + sh_quoted(dir / c) + " 2>&1; echo $? >" +
              sh_quoted(dir / (c + ".rc")) + " ) &\n";
  const auto r = bash(script + "wait\n", 120);
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const auto& c : commands) {
    const std::string help = slurp_file(dir / c);
    EXPECT_EQ(first_line(slurp_file(dir / (c + ".rc"))), "0") << "actorpipe " << c << " --help\n" << help;
    if (!entries.count(c)) {
      ADD_FAILURE() << "docs/EXIT_CODES.md's `## By command` has no entry for `" << c
                    << "` (a line starting **`" << c << "`**): add one with the codes it exits with";
      continue;
    }
    const std::string para = paragraph_from(help, "exit codes:");
    if (trim(para).empty()) continue;  // checked through its entry only
    const auto in_help = listed_codes(para), in_doc = listed_codes(entries.at(c));
    std::set<int> help_codes, doc_codes;
    for (const auto& x : in_help) help_codes.insert(x.code);
    for (const auto& x : in_doc) doc_codes.insert(x.code);
    EXPECT_EQ(help_codes, doc_codes) << "`actorpipe " << c << " --help` lists the exit codes " << codes_text(help_codes)
                                     << ", docs/EXIT_CODES.md's entry for `" << c << "` "
                                     << codes_text(doc_codes) << ": make them the same\n--- help:\n"
                                     << para << "\n--- EXIT_CODES.md:" << entries.at(c);
    for (size_t i = 0; i < in_help.size(); ++i) {
      const int code = in_help[i].code;
      if (!table.count(code)) {
        ADD_FAILURE() << "`actorpipe " << c << " --help` lists exit code " << code << " (" << in_help[i].phrase
                      << "), which docs/EXIT_CODES.md's table does not have";
        continue;
      }
      std::set<std::string> doc_words = content_words(table.at(code));
      for (size_t j = 0; j < in_doc.size(); ++j)
        if (in_doc[j].code == code)
          for (const auto& w : meaning_of(in_doc, j)) doc_words.insert(w);
      if (!share_a_word(meaning_of(in_help, i), doc_words))
        ADD_FAILURE() << "`actorpipe " << c << " --help` says exit code " << code << " is '" << in_help[i].phrase
                      << "': not one word in common with docs/EXIT_CODES.md's table row ('" << trim(table.at(code))
                      << "') or its entry for `" << c << "`; say the same thing";
    }
  }
}

// -- facts with one source: environment variables ---------------------------------

/// Whether a line is a comment (`//`, `/*`, or a `*` line of a block).
bool comment_line(const std::string& line) {
  const std::string t = trim(line);
  return t.rfind("//", 0) == 0 || t.rfind("/*", 0) == 0 || t == "*" || t.rfind("* ", 0) == 0 || t.rfind("*/", 0) == 0;
}

struct env_read {
  std::string name, where;  ///< the variable; file:line of its first read
};

/// The environment variables the code under apps/, actors/, runtime/ and
/// messages/ of `root` reads: the name of every `getenv("NAME")` (std::getenv,
/// secure_getenv), and in a file whose getenv takes its name from elsewhere
/// (a helper such as `env("NAME")` or `wall_from_env("NAME")`, a loop over
/// names) every string literal spelled like a variable: capitals, digits and
/// '_', three or more.
std::map<std::string, std::string> environment_reads(const fs::path& root) {
  static const std::regex literal(R"#("([A-Z][A-Z0-9_]{2,})")#");
  std::map<std::string, std::string> out;
  std::vector<fs::path> files;
  for (const char* d : {"apps", "actors", "runtime", "messages"})
    if (fs::is_directory(root / d))
      for (const auto& e : fs::recursive_directory_iterator(root / d))
        if (e.is_regular_file() && std::set<std::string>{".cpp", ".hpp", ".h", ".cc"}.count(e.path().extension().string()))
          files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string rel = fs::relative(f, root).string();
    const auto lines = split_lines(slurp_file(f));
    bool wraps = false;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& l = lines[i];
      if (comment_line(l)) continue;
      for (size_t p = l.find("getenv"); p != std::string::npos; p = l.find("getenv", p + 1)) {
        size_t b = p;
        while (b > 0 && (std::isalnum(static_cast<unsigned char>(l[b - 1])) || l[b - 1] == '_')) --b;
        const std::string ident = l.substr(b, p + 6 - b);
        if (ident != "getenv" && ident != "secure_getenv") continue;
        size_t a = l.find_first_not_of(" \t", p + 6);
        if (a == std::string::npos || l[a] != '(') continue;
        a = l.find_first_not_of(" \t", a + 1);
        if (a != std::string::npos && l[a] == '"') {
          const auto close = l.find('"', a + 1);
          if (close != std::string::npos) out.emplace(l.substr(a + 1, close - a - 1), rel + ":" + std::to_string(i + 1));
        } else {
          wraps = true;
        }
      }
    }
    if (!wraps) continue;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (comment_line(lines[i])) continue;
      for (std::sregex_iterator it(lines[i].begin(), lines[i].end(), literal), end; it != end; ++it)
        out.emplace((*it)[1], rel + ":" + std::to_string(i + 1));
    }
  }
  return out;
}

/// The scripts: every file under scripts/, and bench/*.sh.
std::vector<fs::path> script_files(const fs::path& root) {
  std::vector<fs::path> out;
  if (fs::is_directory(root / "scripts"))
    for (const auto& e : fs::directory_iterator(root / "scripts"))
      if (e.is_regular_file()) out.push_back(e.path());
  if (fs::is_directory(root / "bench"))
    for (const auto& e : fs::directory_iterator(root / "bench"))
      if (e.is_regular_file() && e.path().extension() == ".sh") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// The ACTORPIPE_* variables the scripts read (`$NAME`, `${NAME...}`), each
/// with the first script that does.
std::map<std::string, std::string> script_reads(const fs::path& root) {
  static const std::regex read(R"(\$\{?[#!]?(ACTORPIPE_[A-Z0-9_]+))");
  std::map<std::string, std::string> out;
  for (const auto& f : script_files(root)) {
    const std::string text = slurp_file(f);
    for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it)
      out.emplace((*it)[1], fs::relative(f, root).string());
  }
  return out;
}

/// The variable-like words in the backquoted spans of a Markdown text.
std::set<std::string> backquoted_names(const std::string& md) {
  static const std::regex name(R"([A-Z][A-Z0-9_]*)");
  std::set<std::string> out;
  std::istringstream in(md);
  bool inside = false;
  for (std::string part; std::getline(in, part, '`'); inside = !inside)
    if (inside)
      for (std::sregex_iterator it(part.begin(), part.end(), name), end; it != end; ++it) out.insert(it->str());
  return out;
}

/// Every ACTORPIPE_* word of a text.
std::set<std::string> actorpipe_names(const std::string& text) {
  static const std::regex name(R"(ACTORPIPE_[A-Z0-9_]*[A-Z0-9])");
  std::set<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) out.insert(it->str());
  return out;
}

TEST_F(CheckerOnMadeUpPages, TheVariablesTheCodeReadsAreFoundBehindHelpers) {
  actorpipe::testing_util::write(root_ / "apps/a.cpp",
                                 "auto x = std::getenv(\"ACTORPIPE_A\");\n// getenv(\"IN_A_COMMENT\")\n"
                                 "auto y = secure_getenv( \"B_VAR\" ); auto z = my_getenv(\"NOT_GETENV\");\n"
                                 "log(\"NOT_READ_HERE\");\n");
  actorpipe::testing_util::write(root_ / "runtime/w.cpp",
                                 "opt env(const std::string& n) { return std::getenv(n.c_str()); }\n"
                                 "auto v = env(\"WRAPPED_ONE\"); for (auto k : {\"LOOPED\", \"X\"}) f(k);\n");
  std::set<std::string> names;
  for (const auto& [n, where] : environment_reads(root_)) names.insert(n);
  EXPECT_EQ(names, (std::set<std::string>{"ACTORPIPE_A", "B_VAR", "LOOPED", "WRAPPED_ONE"}));
  EXPECT_EQ(environment_reads(root_).at("WRAPPED_ONE"), "runtime/w.cpp:2");
  actorpipe::testing_util::write(root_ / "scripts/s", "x=${ACTORPIPE_S:-1} $ACTORPIPE_T ${#ACTORPIPE_U[@]}\n"
                                                      "ACTORPIPE_SET_ONLY=1\n");
  std::set<std::string> scripted;
  for (const auto& [n, where] : script_reads(root_)) scripted.insert(n);
  EXPECT_EQ(scripted, (std::set<std::string>{"ACTORPIPE_S", "ACTORPIPE_T", "ACTORPIPE_U"}));
}

TEST(EnvironmentPage, NamesEveryVariableTheCodeReads) {
  const std::string page = slurp_file(source_dir / "docs/ENVIRONMENT.md");
  ASSERT_FALSE(page.empty());
  const auto named = backquoted_names(page);
  const auto reads = environment_reads(source_dir);
  ASSERT_FALSE(reads.empty()) << "no getenv found under apps/, actors/, runtime/, messages/";
  for (const auto& [name, where] : reads)
    if (!named.count(name))
      ADD_FAILURE() << where << " reads the environment variable " << name
                    << ", which docs/ENVIRONMENT.md does not name (in backquotes): add it there";
}

TEST(EnvironmentPage, EveryActorpipeVariableItNamesIsReadByTheCodeOrAScript) {
  const auto reads = environment_reads(source_dir);
  const auto scripted = script_reads(source_dir);
  const auto named = actorpipe_names(slurp_file(source_dir / "docs/ENVIRONMENT.md"));
  ASSERT_FALSE(named.empty());
  for (const auto& name : named)
    if (!reads.count(name) && !scripted.count(name))
      ADD_FAILURE() << "docs/ENVIRONMENT.md names " << name
                    << ", which neither the code (apps/, actors/, runtime/, messages/) nor a script (scripts/*, "
                       "bench/*.sh) reads: drop it from the page, or correct its name";
}

TEST(EnvironmentPage, NamesEveryActorpipeVariableAScriptReads) {
  const auto named = actorpipe_names(slurp_file(source_dir / "docs/ENVIRONMENT.md"));
  const auto scripted = script_reads(source_dir);
  ASSERT_FALSE(scripted.empty());
  for (const auto& [name, script] : scripted)
    if (!named.count(name))
      ADD_FAILURE() << script << " reads " << name
                    << ", which docs/ENVIRONMENT.md does not name: add it to the page's table of the scripts";
}

// -- facts with one source: packages ------------------------------------------------

/// The packages of scripts/setup.sh: the words of `PACKAGES=(...)` and
/// every `PACKAGES+=(...)`, comments dropped.
std::set<std::string> setup_packages(const std::string& script) {
  static const std::regex list(R"(\bPACKAGES\+?=\(([^)]*)\))");
  std::string text;
  for (const auto& l : split_lines(script)) text += drop_comment(l) + " ";
  std::set<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), list), end; it != end; ++it) {
    std::istringstream in((*it)[1].str());
    for (std::string w; in >> w;) out.insert(w);
  }
  return out;
}

/// The packages of docs/BUILDING.md's table under `## The packages`: the
/// backquoted words of each row's first cell.
std::set<std::string> building_packages(const std::string& md) {
  std::set<std::string> out;
  bool in_section = false;
  for (const auto& l : split_lines(md)) {
    if (l.rfind("## ", 0) == 0) in_section = trim(l) == "## The packages";
    if (!in_section || l.rfind("| `", 0) != 0) continue;
    const std::string first = l.substr(1, l.find('|', 1) - 1);
    std::istringstream in(first);
    bool inside = false;
    for (std::string part; std::getline(in, part, '`'); inside = !inside)
      if (inside) out.insert(trim(part));
  }
  return out;
}

TEST(BuildingPage, ThePackageTableNamesTheSetupScriptsPackages) {
  const auto script = setup_packages(slurp_file(source_dir / "scripts/setup.sh"));
  ASSERT_FALSE(script.empty()) << "scripts/setup.sh has no PACKAGES=(...) list";
  const auto page = building_packages(slurp_file(source_dir / "docs/BUILDING.md"));
  ASSERT_FALSE(page.empty()) << "docs/BUILDING.md has no package table under `## The packages`";
  for (const auto& p : script)
    if (!page.count(p))
      ADD_FAILURE() << "scripts/setup.sh installs " << p
                    << ", which docs/BUILDING.md's package table does not name: add a row saying what it is for";
  for (const auto& p : page)
    if (!script.count(p))
      ADD_FAILURE() << "docs/BUILDING.md's package table names " << p
                    << ", which scripts/setup.sh's PACKAGES does not install: drop the row, or add it to the script";
}

}  // namespace
