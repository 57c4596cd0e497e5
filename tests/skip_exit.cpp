// Linked into every test executable. A run whose tests were all skipped
// (no GPU, no etcd, ...) ends with exit code 77, which ctest shows as
// skipped (cmake/ctest_entries.cmake). A run with a failure or a pass
// keeps gtest's own code.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace {

class skip_exit : public testing::EmptyTestEventListener {
  void OnTestProgramEnd(const testing::UnitTest& u) override {
    if (u.successful_test_count() == 0 && u.skipped_test_count() > 0 && u.failed_test_count() == 0 &&
        u.ad_hoc_test_result().Passed()) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(77);
    }
  }
};

// The printers write the summary (and any XML report) at the iteration's
// end, before this program-end event: the output is whole when it exits.
const bool added = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new skip_exit);
  return true;
}();

}  // namespace
