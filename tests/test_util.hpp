#pragma once
// Helpers shared by the test files.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace actorpipe::testing_util {

namespace fs = std::filesystem;

/// A fresh, empty directory per test, named after it.
inline fs::path test_dir(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  for (auto& c : name)
    if (c == '/') c = '_';
  fs::path dir = fs::path(::testing::TempDir()) / (prefix + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// Writes `text` to `file` (creating its directory); returns the path.
inline std::string write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
  return file.string();
}

/// The whole content of `file` ("" if it cannot be read).
inline std::string slurp_file(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// The first line of `s` (all of it when it has no newline).
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

/// `text` as a GoogleTest parameter name: letters, digits and '_' only.
inline std::string param_name(std::string text) {
  for (auto& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return text;
}

}  // namespace actorpipe::testing_util
