// runtime/dist/transport/shared_segments: a ring takes over another's free
// segments (a slot whose keeper changed) and leaves the ones a keeper
// holds; the taken segments serve the next copy as they are, a line from
// before cannot read the new copy, and each file goes with its last ring;
// a free segment too small for a copy grows to fit.
#include "runtime/dist/transport/shared_segments.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "runtime/dist/transport/p2p_group.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

constexpr int64_t numel = 1000;

/// Writes `value` into a segment of `ring` (`n` floats) and publishes it.
segment_ring::lease write(segment_ring& ring, float value, int64_t n = numel) {
  std::string why;
  auto l = ring.take(static_cast<size_t>(n) * sizeof(float), &why);
  EXPECT_TRUE(l) << why;
  if (!l) return {};
  auto* data = static_cast<float*>(l->data);
  for (int64_t i = 0; i < n; ++i) data[i] = value;
  ring.publish(*l);
  return *l;
}

TEST(SegmentRing, AdoptsAnothersFreeSegmentsAndLeavesTheHeldOnes) {
  const auto dir = testing_util::test_dir("actorpipe_segments_test");
  auto old_ring = std::make_unique<segment_ring>((dir / "old").string(), 4);
  const auto held = write(*old_ring, 1.0f);
  const auto dropped = write(*old_ring, 2.0f);
  const auto unsent = write(*old_ring, 3.0f);
  at::Tensor keeper = map_segment(held.path, held.seq, at::kFloat, numel);
  map_segment(dropped.path, dropped.seq, at::kFloat, numel);  // mapped and let go: free
  old_ring->give_back(unsent);  // its line was never sent: free
  ASSERT_EQ(old_ring->size(), 3u);

  segment_ring ring((dir / "new").string(), 4);
  EXPECT_EQ(ring.adopt_free(*old_ring), 2u);
  EXPECT_EQ(ring.size(), 2u);
  EXPECT_EQ(old_ring->size(), 1u);  // the one the keeper holds

  // The next copies go into the adopted files: no new one is made.
  const auto next = write(ring, 4.0f);
  const auto after = write(ring, 5.0f);
  EXPECT_EQ(ring.size(), 2u);
  for (const auto& l : {next, after}) EXPECT_TRUE(l.path == dropped.path || l.path == unsent.path) << l.path;
  EXPECT_NE(next.seq, dropped.seq);
  EXPECT_NE(next.seq, unsent.seq);
  // A line from before names the file but not the copy it holds now.
  const auto& stale = next.path == dropped.path ? dropped : unsent;
  EXPECT_THROW(map_segment(stale.path, stale.seq, at::kFloat, numel), transfer_error);
  at::Tensor got = map_segment(next.path, next.seq, at::kFloat, numel);
  EXPECT_TRUE(got.eq(4.0f).all().item<bool>());

  // The held copy is untouched and outlives its ring's files.
  old_ring.reset();
  EXPECT_FALSE(fs::exists(held.path));
  EXPECT_TRUE(fs::exists(next.path));
  EXPECT_TRUE(keeper.eq(1.0f).all().item<bool>());

  // A ring adopts no more than it may hold, and none that are held.
  segment_ring small((dir / "small").string(), 1);
  got = at::Tensor();
  EXPECT_EQ(small.adopt_free(ring), 1u);
  EXPECT_EQ(ring.size(), 1u);
}

// A stage that took on layers: its free segment, too small, grows in its
// file (its mapping grown, not made again) and serves the bigger copy; the
// line of the copy it held before reads nothing.
TEST(SegmentRing, AFreeSegmentTooSmallGrowsInItsFileAndServesTheBiggerCopy) {
  const auto dir = testing_util::test_dir("actorpipe_segments_grow_test");
  segment_ring ring((dir / "grow").string(), 1);
  const auto small = write(ring, 1.0f);
  map_segment(small.path, small.seq, at::kFloat, numel);  // mapped and let go: free
  const int64_t big = 3 << 20;  // 12 MB: past what the first mapping reserved
  const auto grown = write(ring, 2.0f, big);
  EXPECT_EQ(ring.size(), 1u);
  EXPECT_EQ(grown.path, small.path);
  EXPECT_GE(fs::file_size(grown.path), static_cast<uintmax_t>(big) * sizeof(float));
  EXPECT_THROW(map_segment(small.path, small.seq, at::kFloat, numel), transfer_error);
  at::Tensor got = map_segment(grown.path, grown.seq, at::kFloat, big);
  EXPECT_TRUE(got.eq(2.0f).all().item<bool>());
  // Held by the keeper, it is not taken again: the one segment a ring of
  // one may have is held.
  std::string why;
  EXPECT_FALSE(ring.take(sizeof(float), &why));
  EXPECT_NE(why.find("segments are held"), std::string::npos) << why;
  got = at::Tensor();
  const auto again = write(ring, 3.0f);  // free again: the grown file serves a small copy
  EXPECT_EQ(again.path, small.path);
  EXPECT_TRUE(map_segment(again.path, again.seq, at::kFloat, numel).eq(3.0f).all().item<bool>());
}

}  // namespace
}  // namespace actorpipe
