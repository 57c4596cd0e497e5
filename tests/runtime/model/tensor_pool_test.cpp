// A pool gives a buffer again only once nothing outside it holds the
// buffer: no handle, no view, no tensor given its data.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "runtime/model/tensor_pool.hpp"

namespace actorpipe {
namespace {

TEST(TensorPool, GivesABufferAgainOnlyOnceNothingHoldsIt) {
  tensor_pool pool;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  auto a = pool.take({3, 4}, options);
  auto b = pool.take({3, 4}, options);
  EXPECT_NE(a.data_ptr(), b.data_ptr()) << "a held buffer was given twice";
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_TRUE(a.is_contiguous());
  void* was = a.data_ptr();

  // A view keeps the storage: still not free.
  auto view = a.narrow(0, 0, 1);
  a.reset();
  auto c = pool.take({3, 4}, options);
  EXPECT_NE(c.data_ptr(), was);
  EXPECT_EQ(pool.size(), 3u);

  // A parameter given the data (set_data) keeps it too.
  view.reset();
  auto param = torch::zeros({3, 4}).requires_grad_(true);
  {
    auto d = pool.take({3, 4}, options);
    EXPECT_EQ(d.data_ptr(), was) << "the freed buffer serves again";
    param.set_data(d);
  }
  auto e = pool.take({3, 4}, options);
  EXPECT_NE(e.data_ptr(), was) << "a buffer a parameter holds was given again";
  EXPECT_EQ(pool.size(), 4u);

  // Another shape or dtype never takes it.
  param.set_data(torch::zeros({3, 4}));
  auto f = pool.take({4, 3}, options);
  auto g = pool.take({3, 4}, at::TensorOptions().dtype(at::kDouble));
  EXPECT_NE(f.data_ptr(), was);
  EXPECT_NE(g.data_ptr(), was);
  EXPECT_EQ(pool.size(), 6u);
  EXPECT_EQ(pool.take({3, 4}, options).data_ptr(), was);
}

// A pool outlives generations: a buffer taken during the generation that
// ends serves the next one; one no one took during a whole generation is
// let go at the next start, unless something still holds it.
TEST(TensorPool, AgeLetsGoOfTheFreeBuffersNotTakenSinceTheLastStart) {
  tensor_pool pool;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  void* a_was = nullptr;
  {
    auto a = pool.take({8}, options);
    auto b = pool.take({4}, options);
    a_was = a.data_ptr();
  }
  auto held = pool.take({2}, options);  // kept by the caller throughout
  pool.age();                           // generation 1 starts: all three were taken in generation 0
  EXPECT_EQ(pool.size(), 3u);
  {
    auto a = pool.take({8}, options);  // generation 1 uses a again, not b
    EXPECT_EQ(a.data_ptr(), a_was) << "a buffer the last generation left served the next";
  }
  pool.age();  // generation 2: b and the held one were not taken in generation 1
  EXPECT_EQ(pool.size(), 2u) << "only b, free and untaken for a generation, goes";
  auto b = pool.take({4}, options);  // a new one
  EXPECT_EQ(pool.size(), 3u);
  held.reset();
  pool.age();  // generation 3: a (last taken in 1) and the one held until now go; b stays held
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_NE(pool.take({4}, options).data_ptr(), b.data_ptr()) << "b, still held, is never given";
}

TEST(TensorPool, TwoThreadsNeverShareABuffer) {
  tensor_pool pool;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  auto work = [&](int w) {
    // Each buffer held carries its own mark; were one given to the other
    // thread too, its mark would change under this one.
    std::vector<std::pair<at::Tensor, float>> mine;
    for (int i = 0; i < 300; ++i) {
      const float mark = static_cast<float>(w * 1000 + i);
      mine.emplace_back(pool.take({16}, options), mark);
      mine.back().first.fill_(mark);
      for (const auto& [t, m] : mine) EXPECT_TRUE(t.eq(m).all().item<bool>()) << "thread " << w << ", take " << i;
      if (mine.size() > 3) mine.erase(mine.begin());
    }
  };
  std::thread one(work, 0), two(work, 1);
  one.join();
  two.join();
  EXPECT_LE(pool.size(), 8u) << "freed buffers were not used again";
}

}  // namespace
}  // namespace actorpipe
