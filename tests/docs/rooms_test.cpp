// The rooms of the code and which may include which: docs/ARCHITECTURE.md's
// "Where things live" table is the source.
//
// - every source file under messages/, runtime/, actors/ and apps/ is in a
//   room of the table (the longest room that is a prefix of its path);
// - a room's "may include" names only rooms above it in the table, so the
//   table itself only goes down;
// - every `#include "..."` of a file from another room is one its room may
//   include, or a row of the exceptions table (file, room);
// - every exception is still needed: its file includes from that room;
// - no file under actors/ is over 400 lines: each is read in one sitting.
//
// The check runs on the tree, and on made-up trees that break each rule,
// so that a check that found nothing is seen to find what it should.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.hpp"

namespace {

namespace fs = std::filesystem;
using actorpipe::testing_util::slurp_file;

const std::string source_dir = ACTORPIPE_SOURCE_DIR;

struct room_table {
  std::vector<std::string> rooms;                   // in the table's order, top first
  std::map<std::string, std::set<std::string>> may;  // room -> rooms it may include
  std::set<std::pair<std::string, std::string>> exceptions;  // (file, room)
};

std::vector<std::string> backticked(const std::string& cell) {
  std::vector<std::string> out;
  static const std::regex tick("`([^`]+)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), tick); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(row.substr(1));
  while (std::getline(in, cell, '|')) out.push_back(cell);
  return out;
}

bool is_source(const std::string& p) {
  const auto ext = fs::path(p).extension();
  return ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cu";
}

// The rows of the section's two tables: rooms (first cell a directory,
// ending in '/') and exceptions (first cell a source file).
room_table read_table(const std::string& markdown, std::vector<std::string>& problems) {
  room_table t;
  std::istringstream in(markdown);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Where things live";
    if (!inside || line.rfind("| `", 0) != 0) continue;
    const auto c = cells(line);
    if (c.size() < 3) {
      problems.push_back("a row with fewer than three cells: " + line);
      continue;
    }
    const auto first = backticked(c[0]);
    if (first.size() != 1) {
      problems.push_back("a row whose first cell is not one `name`: " + line);
      continue;
    }
    const std::string& name = first[0];
    if (!name.empty() && name.back() == '/') {
      if (t.may.count(name)) problems.push_back("room " + name + " has two rows");
      t.rooms.push_back(name);
      const auto may = backticked(c[2]);
      t.may[name] = std::set<std::string>(may.begin(), may.end());
    } else if (is_source(name)) {
      for (const auto& r : backticked(c[1])) t.exceptions.insert({name, r});
    } else {
      problems.push_back("a row that names neither a room (ending in /) nor a source file: " + line);
    }
  }
  return t;
}

std::string room_of(const room_table& t, const std::string& path) {
  std::string best;
  for (const auto& r : t.rooms)
    if (path.rfind(r, 0) == 0 && r.size() > best.size()) best = r;
  return best;
}

// One source file: its path from the root and its text.
using source_tree = std::map<std::string, std::string>;

// What breaks the rules, one line each ("file:line: ...").
std::vector<std::string> check(const room_table& t, const source_tree& files) {
  std::vector<std::string> out;
  for (size_t i = 0; i < t.rooms.size(); ++i)
    for (const auto& m : t.may.at(t.rooms[i])) {
      const auto at = std::find(t.rooms.begin(), t.rooms.end(), m);
      if (at == t.rooms.end())
        out.push_back("room " + t.rooms[i] + " may include " + m + ", which is not a room of the table");
      else if (static_cast<size_t>(at - t.rooms.begin()) >= i)
        out.push_back("room " + t.rooms[i] + " may include " + m + ", which is not above it in the table");
    }
  std::set<std::pair<std::string, std::string>> used;
  static const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  for (const auto& [path, text] : files) {
    const std::string from = room_of(t, path);
    if (from.empty()) {
      out.push_back(path + ": in no room of the table");
      continue;
    }
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      std::string target = m[1];
      if (!files.count(target)) {  // relative to the including file
        const std::string beside = (fs::path(path).parent_path() / target).lexically_normal().generic_string();
        if (files.count(beside)) target = beside;
      }
      const std::string to = room_of(t, target);
      if (to.empty() || to == from) continue;  // not ours (a system or third-party header), or the same room
      if (t.may.at(from).count(to)) continue;
      if (t.exceptions.count({path, to})) {
        used.insert({path, to});
        continue;
      }
      out.push_back(path + ":" + std::to_string(n) + ": " + from + " includes " + target + " (" + to +
                    "), which " + from + " may not include");
    }
  }
  for (const auto& e : t.exceptions)
    if (!used.count(e))
      out.push_back("the exception " + e.first + " -> " + e.second + " is not needed: the file includes nothing from it");
  return out;
}

// The sources, read once.
const source_tree& tree() {
  static const source_tree sources = [] {
    source_tree out;
    for (const char* top : {"messages", "runtime", "actors", "apps"})
      for (const auto& e : fs::recursive_directory_iterator(fs::path(source_dir) / top)) {
        const std::string rel = fs::relative(e.path(), source_dir).generic_string();
        if (e.is_regular_file() && is_source(rel)) out[rel] = slurp_file(e.path());
      }
    return out;
  }();
  return sources;
}

room_table architecture(std::vector<std::string>& problems) {
  return read_table(slurp_file(source_dir + "/docs/ARCHITECTURE.md"), problems);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

const char* small_table = R"(# x
## Where things live
| room | owns | may include |
| --- | --- | --- |
| `messages/` | declarations | nothing |
| `runtime/` | not actors | `messages/` |
| `actors/stage/` | the stage | `messages/` `runtime/` |
| `actors/supervisor/` | decisions | `actors/stage/` `runtime/` |
| `actors/` | entry | `actors/supervisor/` |

| file | includes from | why |
| --- | --- | --- |
| `runtime/odd.cpp` | `actors/` | a test of the exception |
## Next
| `apps/` | outside the section | `actors/` |
)";

TEST(Rooms, TheTableReadsEveryRoomInOrderAndNothingOutsideItsSection) {
  std::vector<std::string> problems;
  const auto t = read_table(small_table, problems);
  EXPECT_TRUE(problems.empty()) << joined(problems);
  EXPECT_EQ(t.rooms, (std::vector<std::string>{"messages/", "runtime/", "actors/stage/", "actors/supervisor/", "actors/"}));
  EXPECT_EQ(t.may.at("actors/supervisor/"), (std::set<std::string>{"actors/stage/", "runtime/"}));
  EXPECT_TRUE(t.may.at("messages/").empty());
  EXPECT_EQ(t.exceptions, (std::set<std::pair<std::string, std::string>>{{"runtime/odd.cpp", "actors/"}}));
  EXPECT_EQ(room_of(t, "actors/stage/x.cpp"), "actors/stage/");
  EXPECT_EQ(room_of(t, "actors/trainer.cpp"), "actors/");
  EXPECT_EQ(room_of(t, "apps/main.cpp"), "");
}

TEST(Rooms, TheCheckFindsALowerRoomThatIncludesAHigherOne) {
  std::vector<std::string> problems;
  const auto t = read_table(small_table, problems);
  const source_tree files{
      {"runtime/a.hpp", "#pragma once\n#include <vector>\n#include \"messages/m.hpp\"\n"},
      {"runtime/b.cpp", "#include \"runtime/a.hpp\"\n\n#include \"actors/trainer.hpp\"\n"},
      {"runtime/odd.cpp", "#include \"actors/trainer.hpp\"\n"},
      {"messages/m.hpp", "#pragma once\n"},
      {"actors/trainer.hpp", "#include \"actors/supervisor/s.hpp\"\n"},
      {"actors/stage/st.cpp", "#include \"runtime/a.hpp\"\n#include \"actors/supervisor/s.hpp\"\n"},
      {"actors/supervisor/s.hpp", "#include \"../stage/st.hpp\"\n#include \"actors/stage/st.hpp\"\n"},
      {"actors/stage/st.hpp", "#pragma once\n"},
  };
  const auto found = check(t, files);
  EXPECT_EQ(found, (std::vector<std::string>{
                       "actors/stage/st.cpp:2: actors/stage/ includes actors/supervisor/s.hpp (actors/supervisor/), "
                       "which actors/stage/ may not include",
                       "runtime/b.cpp:3: runtime/ includes actors/trainer.hpp (actors/), which runtime/ may not include",
                   }))
      << joined(found);
}

TEST(Rooms, TheCheckFindsATableThatGoesUpAFileInNoRoomAndAnExceptionNoLongerNeeded) {
  std::vector<std::string> problems;
  auto t = read_table(small_table, problems);
  t.may["runtime/"].insert("actors/stage/");
  const source_tree files{{"runtime/odd.cpp", "// includes nothing now\n"}, {"tools/x.cpp", ""}};
  const auto found = check(t, files);
  EXPECT_EQ(found, (std::vector<std::string>{
                       "room runtime/ may include actors/stage/, which is not above it in the table",
                       "tools/x.cpp: in no room of the table",
                       "the exception runtime/odd.cpp -> actors/ is not needed: the file includes nothing from it",
                   }))
      << joined(found);
}

TEST(Rooms, EveryIncludeOfTheTreeGoesDownTheRoomsOfArchitectureMd) {
  std::vector<std::string> problems;
  const auto t = architecture(problems);
  ASSERT_TRUE(problems.empty()) << joined(problems);
  ASSERT_GE(t.rooms.size(), 10u) << "docs/ARCHITECTURE.md's table of rooms was not found";
  for (const char* must : {"messages/", "runtime/model/", "actors/stage/", "actors/driver/", "actors/supervisor/",
                           "actors/process/", "actors/", "apps/"})
    EXPECT_NE(std::find(t.rooms.begin(), t.rooms.end(), must), t.rooms.end()) << must;
  const auto& files = tree();
  ASSERT_GT(files.size(), 100u);
  const auto found = check(t, files);
  EXPECT_TRUE(found.empty()) << joined(found);
}

TEST(Rooms, NoFileOfActorsIsOver400Lines) {
  std::vector<std::string> over;
  size_t seen = 0;
  for (const auto& [path, text] : tree()) {
    if (path.rfind("actors/", 0) != 0) continue;
    ++seen;
    const auto lines = std::count(text.begin(), text.end(), '\n');
    if (lines > 400) over.push_back(path + ": " + std::to_string(lines) + " lines");
  }
  EXPECT_GT(seen, 20u);
  EXPECT_TRUE(over.empty()) << joined(over);
}

}  // namespace
