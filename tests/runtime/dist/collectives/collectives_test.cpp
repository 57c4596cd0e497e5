// Allreduce groups: every backend through the same sum checks (one thread per
// rank, as the supervisor will drive them), groups side by side, the async
// form, and the errors. NCCL tests skip, saying why, without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "runtime/dist/collectives/collectives.hpp"
#include "runtime/dist/transport/rendezvous.hpp"

#if ACTORPIPE_HAS_NCCL
#include <cuda_runtime.h>
#endif

namespace actorpipe {
namespace {

using clock_type = std::chrono::steady_clock;

/// Runs fn(rank) on one thread per rank; returns the first failure, if any.
std::string run_ranks(int size, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

/// Rank r's tensors in round k: several shapes and dtypes. Integer-valued, so
/// every summation order gives the same bits.
std::vector<at::Tensor> exact_inputs(int rank, int round) {
  double base = 100.0 * round + 10.0 * rank;
  return {at::arange(12, at::kFloat).reshape({4, 3}).add(base),
          at::arange(7, at::kDouble).mul(-3).add(base),
          at::arange(5, at::kLong).add(static_cast<int64_t>(base)),
          at::full({2, 2, 2}, base + 0.5, at::kFloat)};
}

/// Fractional values: the order of summation changes the last bits.
std::vector<at::Tensor> inexact_inputs(int rank, int round) {
  return {at::arange(1000, at::kFloat).mul(0.37 + 0.01 * rank).add(round).sin(),
          at::arange(33, at::kDouble).mul(1.0 / 3.0 + rank).cos()};
}

/// The sum over ranks, computed on one thread.
std::vector<at::Tensor> expected_sum(int size, int round,
                                     const std::function<std::vector<at::Tensor>(int, int)>& inputs) {
  auto sum = inputs(0, round);
  for (int r = 1; r < size; ++r) {
    auto more = inputs(r, round);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + more[i];
  }
  return sum;
}

#if ACTORPIPE_HAS_NCCL
int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/// A copy of `t` on cuda:`device`, made with the CUDA runtime alone: this
/// LibTorch may have no CUDA, but a tensor can still wrap device memory.
at::Tensor to_device(const at::Tensor& t, int device) {
  auto c = t.contiguous();
  size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
  void* p = nullptr;
  if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess ||
      cudaMemcpy(p, c.data_ptr(), bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    throw std::runtime_error("cannot copy a tensor to cuda:" + std::to_string(device));
  at::Device where(at::kCUDA, static_cast<c10::DeviceIndex>(device));
  return at::for_blob(p, c.sizes())
      .deleter([](void* q) { cudaFree(q); })
      .target_device(where)
      .options(at::TensorOptions().dtype(c.scalar_type()).device(where))
      .make_tensor();
}

at::Tensor to_host(const at::Tensor& t) {
  auto out = at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
  size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (cudaMemcpy(out.data_ptr(), t.data_ptr(), bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    throw std::runtime_error("cannot copy a tensor back from " + t.device().str());
  return out;
}
#endif

/// (backend, ranks)
using backend_shape = std::tuple<std::string, int>;

/// Builds the groups and moves tensors to where the backend wants them.
class Allreduce : public ::testing::TestWithParam<backend_shape> {
protected:
  void SetUp() override {
    auto [backend, size] = GetParam();
    backend_ = backend;
    size_ = size;
    if (backend_ == "nccl") {
      std::string why;
      if (!nccl_available(&why)) GTEST_SKIP() << "NCCL tests skipped: " << why;
#if ACTORPIPE_HAS_NCCL
      if (cuda_device_count() < size_)
        GTEST_SKIP() << "NCCL needs " << size_ << " GPUs (one per rank), found " << cuda_device_count();
      for (int r = 0; r < size_; ++r) devices_.push_back(r);
      groups_ = make_nccl_groups(devices_, "test");
#endif
    } else {
      groups_ = make_gloo_groups(size_, "test");
    }
    ASSERT_EQ(groups_.size(), static_cast<size_t>(size_));
  }

  std::vector<at::Tensor> place(std::vector<at::Tensor> ts, int rank) const {
#if ACTORPIPE_HAS_NCCL
    if (backend_ == "nccl")
      for (auto& t : ts) t = to_device(t, devices_[static_cast<size_t>(rank)]);
#endif
    return ts;
  }

  std::vector<at::Tensor> fetch(std::vector<at::Tensor> ts) const {
#if ACTORPIPE_HAS_NCCL
    if (backend_ == "nccl")
      for (auto& t : ts) t = to_host(t);
#endif
    return ts;
  }

  /// results[rank][round] after each rank summed inputs(rank, round) for
  /// every round, as it would at the end of each step.
  std::vector<std::vector<std::vector<at::Tensor>>> run_rounds(
      int rounds, const std::function<std::vector<at::Tensor>(int, int)>& inputs) {
    std::vector<std::vector<std::vector<at::Tensor>>> results(static_cast<size_t>(size_));
    auto failure = run_ranks(size_, [&](int r) {
      auto& g = *groups_[static_cast<size_t>(r)];
      for (int k = 0; k < rounds; ++k) {
        auto ts = place(inputs(r, k), r);
        g.allreduce_sum(ts);
        results[static_cast<size_t>(r)].push_back(fetch(ts));
      }
    });
    EXPECT_EQ(failure, "");
    return results;
  }

  std::string backend_;
  int size_ = 0;
  std::vector<int> devices_;
  allreduce_groups groups_;
};

TEST_P(Allreduce, RanksKnowThemselves) {
  for (int r = 0; r < size_; ++r) {
    EXPECT_EQ(groups_[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(groups_[static_cast<size_t>(r)]->size(), size_);
    EXPECT_EQ(groups_[static_cast<size_t>(r)]->backend(), backend_);
  }
}

TEST_P(Allreduce, IntegerValuedSumsAreBitwiseExactForSeveralTensorsAndRounds) {
  const int rounds = 4;
  auto results = run_rounds(rounds, exact_inputs);
  ASSERT_FALSE(HasFailure());
  for (int k = 0; k < rounds; ++k) {
    auto want = expected_sum(size_, k, exact_inputs);
    for (int r = 0; r < size_; ++r) {
      auto& got = results[static_cast<size_t>(r)][static_cast<size_t>(k)];
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type());
        EXPECT_TRUE(at::equal(got[i], want[i])) << "rank " << r << " round " << k << " tensor " << i;
      }
    }
  }
}

TEST_P(Allreduce, FractionalSumsMatchToRounding) {
  const int rounds = 3;
  auto results = run_rounds(rounds, inexact_inputs);
  ASSERT_FALSE(HasFailure());
  for (int k = 0; k < rounds; ++k) {
    auto want = expected_sum(size_, k, inexact_inputs);
    for (int r = 0; r < size_; ++r)
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(at::allclose(results[static_cast<size_t>(r)][static_cast<size_t>(k)][i], want[i], 1e-6, 1e-6))
            << "rank " << r << " round " << k << " tensor " << i;
  }
}

TEST_P(Allreduce, AsyncStartReturnsBeforeTheLastRankArrives) {
  // The last rank comes late; the others start, work meanwhile, then wait.
  const auto late = std::chrono::milliseconds(300);
  std::vector<double> start_ms(static_cast<size_t>(size_)), wait_ms(static_cast<size_t>(size_));
  std::vector<std::vector<at::Tensor>> results(static_cast<size_t>(size_));
  std::atomic<int> other_work_done{0};
  auto failure = run_ranks(size_, [&](int r) {
    // A first round together: NCCL may connect peers lazily, inside it.
    auto warm = place(exact_inputs(r, 1), r);
    groups_[static_cast<size_t>(r)]->allreduce_sum(warm);
    if (r == size_ - 1) std::this_thread::sleep_for(late);
    auto ts = place(exact_inputs(r, 0), r);
    auto t0 = clock_type::now();
    auto work = groups_[static_cast<size_t>(r)]->allreduce_sum_async(ts);
    auto t1 = clock_type::now();
    auto m = at::ones({64, 64});
    for (int i = 0; i < 10; ++i) m = at::mm(m, m).div(64);  // the overlapped work
    other_work_done += m.sum().item<float>() > 0;
    work->wait();
    auto t2 = clock_type::now();
    start_ms[static_cast<size_t>(r)] = std::chrono::duration<double, std::milli>(t1 - t0).count();
    wait_ms[static_cast<size_t>(r)] = std::chrono::duration<double, std::milli>(t2 - t1).count();
    results[static_cast<size_t>(r)] = fetch(ts);
  });
  ASSERT_EQ(failure, "");
  EXPECT_EQ(other_work_done.load(), size_);
  auto want = expected_sum(size_, 0, exact_inputs);
  for (int r = 0; r < size_; ++r)
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(at::equal(results[static_cast<size_t>(r)][i], want[i])) << "rank " << r << " tensor " << i;
  if (size_ < 2) return;  // nobody to wait for
  // Rank 0 cannot finish before the late rank arrives; its start did not
  // block on it.
  EXPECT_LT(start_ms[0], 150.0) << "allreduce_sum_async blocked";
  EXPECT_GT(start_ms[0] + wait_ms[0], 200.0) << "rank 0 finished without the late rank";
}

TEST_P(Allreduce, EmptyListIsANoOp) {
  auto failure = run_ranks(size_, [&](int r) {
    std::vector<at::Tensor> none;
    groups_[static_cast<size_t>(r)]->allreduce_sum(none);
  });
  EXPECT_EQ(failure, "");
}

INSTANTIATE_TEST_SUITE_P(Backends, Allreduce,
                         ::testing::Values(backend_shape{"gloo", 1}, backend_shape{"gloo", 2},
                                           backend_shape{"gloo", 3}, backend_shape{"nccl", 1},
                                           backend_shape{"nccl", 2}),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) +
                                  "_ranks";
                         });

TEST(GlooGroups, TwoStagesGroupsSideBySideDoNotInterfere) {
  // 2 stages x 2 replicas: thread (s, d) drives rank d of stage s's group.
  const int stages = 2, replicas = 2, rounds = 3;
  std::vector<allreduce_groups> groups;
  for (int s = 0; s < stages; ++s) groups.push_back(make_gloo_groups(replicas, "stage" + std::to_string(s)));
  auto inputs = [](int s, int d, int k) {
    return std::vector<at::Tensor>{at::full({3 + s}, 1000.0 * s + 10.0 * d + k), at::full({2}, -1.0 * s - d)};
  };
  std::vector<std::vector<at::Tensor>> last(static_cast<size_t>(stages * replicas));
  auto failure = run_ranks(stages * replicas, [&](int t) {
    int s = t / replicas, d = t % replicas;
    for (int k = 0; k < rounds; ++k) {
      auto ts = inputs(s, d, k);
      groups[static_cast<size_t>(s)][static_cast<size_t>(d)]->allreduce_sum(ts);
      last[static_cast<size_t>(t)] = ts;
    }
  });
  ASSERT_EQ(failure, "");
  for (int s = 0; s < stages; ++s) {
    auto want = inputs(s, 0, rounds - 1);
    for (int d = 1; d < replicas; ++d) {
      auto more = inputs(s, d, rounds - 1);
      for (size_t i = 0; i < want.size(); ++i) want[i] += more[i];
    }
    for (int d = 0; d < replicas; ++d)
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(at::equal(last[static_cast<size_t>(s * replicas + d)][i], want[i]))
            << "stage " << s << " replica " << d << " tensor " << i;
  }
}

TEST(GlooGroups, AMissingPeerFailsNamingTheGroupInsteadOfHanging) {
  auto groups = make_gloo_groups(2, "stage7", std::chrono::milliseconds(500));
  std::vector<at::Tensor> ts{at::ones({4})};
  auto t0 = clock_type::now();
  try {
    groups[0]->allreduce_sum(ts);  // rank 1 never joins
    FAIL() << "allreduce without its peer returned";
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("gloo group 'stage7' rank 0/2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 10.0);
}

TEST(GlooGroups, SizeBelowOneIsRefused) {
  try {
    make_gloo_groups(0, "empty");
    FAIL() << "a group of 0 ranks was built";
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("'empty': size must be >= 1, got 0"), std::string::npos) << e.what();
  }
}

TEST(GlooGroups, ACudaTensorIsRefusedBeforeAnythingIsSent) {
  // A tensor that only claims to be on cuda:0: nothing reads its memory.
  float dummy = 0;
  auto t = at::for_blob(&dummy, {1})
               .target_device(at::Device(at::kCUDA, 0))
               .options(at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0))
               .make_tensor();
  auto groups = make_gloo_groups(1, "solo");
  std::vector<at::Tensor> ts{at::ones({2}), t};
  try {
    groups[0]->allreduce_sum(ts);
    FAIL() << "Gloo took a CUDA tensor";
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 is on cuda:0; this Gloo sums CPU tensors only"),
              std::string::npos)
        << e.what();
  }
}

TEST(NcclGroups, TwoRanksOnOneDeviceAreRefusedWithAClearMessage) {
  if (!nccl_compiled) GTEST_SKIP() << "built without NCCL: nothing to refuse";
  try {
    make_nccl_groups({0, 1, 0}, "stage0");
    FAIL() << "NCCL group with two ranks on cuda:0 was built";
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 2 both name cuda:0; NCCL refuses two ranks on one device; "
                                         "use gloo"),
              std::string::npos)
        << e.what();
  }
}

TEST(NcclGroups, UnavailableNcclSaysWhyAndRefusesGroups) {
  std::string why;
  if (nccl_available(&why)) GTEST_SKIP() << "NCCL is available here";
  EXPECT_FALSE(why.empty());
  try {
    make_nccl_groups({0}, "stage0");
    FAIL() << "NCCL group built although NCCL is unavailable";
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use gloo"), std::string::npos) << e.what();
  }
}

// NCCL across processes (join_nccl_groups): what it refuses before any
// rank meets, with or without a GPU, and with the same words as in one
// process.
TEST(NcclGroups, AcrossProcessesTwoRanksOfOneProcessOnOneDeviceAreRefused) {
  if (!nccl_compiled) GTEST_SKIP() << "built without NCCL: nothing to refuse";
  kv_store_ptr store = host_store(0, std::chrono::milliseconds(5000));
  try {
    join_nccl_groups(store, "gen_1/dp/stage_0", {0, 2}, 3, {1, 1});
    FAIL() << "NCCL group with two ranks on cuda:1 was built";
  } catch (const collective_error& e) {
    EXPECT_EQ(std::string(e.what()), "nccl group 'gen_1/dp/stage_0': ranks 0 and 2 both name cuda:1; NCCL refuses "
                                     "two ranks on one device; use gloo");
  }
  EXPECT_FALSE(store->has("gen_1/dp/stage_0/nccl_unique_id")) << "no id is published for a refused group";
}

TEST(NcclGroups, AcrossProcessesUnavailableNcclSaysWhyAndPublishesNothing) {
  std::string why;
  if (nccl_available(&why)) GTEST_SKIP() << "NCCL is available here";
  kv_store_ptr store = host_store(0, std::chrono::milliseconds(5000));
  try {
    join_nccl_groups(store, "g", {0}, 2, {0});
    FAIL() << "NCCL group built although NCCL is unavailable";
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use gloo"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(store->has("g/nccl_unique_id"));
  if (!nccl_compiled) return;  // the stub says only why
  try {
    join_nccl_groups(store, "g", {0, 1}, 2, {0});
    FAIL() << "two ranks with one device were taken";
  } catch (const collective_error& e) {
    EXPECT_EQ(std::string(e.what()), "nccl group 'g': 2 ranks of this process and 1 devices; one device per rank");
  }
  try {
    join_nccl_groups(store, "g", {2}, 2, {0});
    FAIL() << "rank 2 of a group of 2 was taken";
  } catch (const collective_error& e) {
    EXPECT_EQ(std::string(e.what()), "nccl group 'g': rank 2 is not in 0 .. 1");
  }
}

TEST(AllreduceGroups, AutoPicksGlooForCpuRanksAndForRanksSharingAGpu) {
  EXPECT_EQ(make_allreduce_groups("auto", {"cpu", "cpu"}, "a")[0]->backend(), "gloo");
  EXPECT_EQ(make_allreduce_groups("auto", {"cuda:0", "cuda:0"}, "b")[1]->backend(), "gloo");
  EXPECT_EQ(make_allreduce_groups("gloo", {"cpu", "cpu", "cpu"}, "c").size(), 3u);
}

TEST(AllreduceGroups, UnknownBackendOrDeviceIsNamed) {
  try {
    make_allreduce_groups("mpi", {"cpu"}, "x");
    FAIL();
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'mpi'"), std::string::npos) << e.what();
  }
  try {
    make_allreduce_groups("auto", {"cpu", "cuda:x"}, "x");
    FAIL();
  } catch (const collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad device 'cuda:x'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace actorpipe
