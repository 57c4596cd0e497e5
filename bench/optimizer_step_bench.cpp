// One Adam (and AdamW: decoupled decay 0.1 on the matrices, none on the
// biases, decay_1d false) step over the seed MLP's first stage (layers 0-11 of
// configs/seed_mlp.yaml at pp 2: 7.5 M floats) on one thread: LibTorch's
// step in place, against step_aside (the step a stage takes after a kept
// boundary shared its tensors), with as many boundaries kept as a stage's
// boundary memory holds (1 to 4; the writes go to pool buffers that the
// oldest dropped copy left), in blocks (the default) or whole tensors.
//
//   build/optimizer_step_bench
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <deque>
#include <string>
#include <vector>

#include "runtime/model/adamw.hpp"
#include "runtime/model/optimizer_state.hpp"
#include "runtime/model/tensor_pool.hpp"

namespace {

using namespace actorpipe;

struct stage {
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::Adam> opt;

  explicit stage(bool decoupled = false) {
    at::set_num_threads(1);
    torch::manual_seed(0);
    const std::vector<std::pair<int64_t, int64_t>> shapes{{100, 1024}, {1024, 1024}, {1024, 2048}, {2048, 2048}};
    for (auto [in, out] : shapes) {
      params.push_back(torch::randn({out, in}).mul_(0.01).requires_grad_());
      params.push_back(torch::zeros({out}).requires_grad_());
    }
    if (decoupled) {
      optimizer_config o;
      o.type = "adamw";
      o.weight_decay = 0.1;
      o.decay_1d = false;
      opt = std::make_unique<adamw>(params, torch::optim::AdamOptions(1e-3), adamw_decays(o, params));
    } else {
      opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
    }
    grads();
    opt->step();  // the state exists from here on
  }
  void grads() {
    for (auto& p : params) p.mutable_grad() = torch::randn_like(p).mul_(0.001);
  }
  // What a kept boundary holds: the tensors themselves (shared).
  std::vector<at::Tensor> shared() const {
    std::vector<at::Tensor> out;
    for (const auto& p : params) {
      out.push_back(p.detach());
      auto& st = static_cast<torch::optim::AdamParamState&>(
          *state_of(*opt, p));
      out.push_back(st.exp_avg());
      out.push_back(st.exp_avg_sq());
    }
    return out;
  }
};

void BM_AdamInPlace(benchmark::State& state) {
  stage s(state.range(0) != 0);
  for (auto _ : state) {
    s.opt->step();
    benchmark::ClobberMemory();
  }
}

void BM_AdamAside(benchmark::State& state) {
  stage s(state.range(2) != 0);
  tensor_pool pool;
  std::deque<std::vector<at::Tensor>> kept;
  const auto keep = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    kept.push_back(s.shared());
    while (kept.size() > keep) kept.pop_front();
    state.ResumeTiming();
    step_aside(*s.opt, &pool, state.range(1));
    benchmark::ClobberMemory();
  }
  state.counters["pool_buffers"] = static_cast<double>(pool.size());
}

// What supervision.check_updates costs an update: the step aside, the
// tensors from before it held until the driver's verdict (as a stage holds
// them), and the check of every parameter and state tensor it wrote.
void BM_AdamAsideChecked(benchmark::State& state) {
  stage s;
  tensor_pool pool;
  std::vector<std::string> names;
  for (size_t i = 0; i < s.params.size(); ++i) names.push_back(std::to_string(i));
  for (auto _ : state) {
    state.PauseTiming();
    auto before = s.shared();
    state.ResumeTiming();
    step_aside(*s.opt, &pool);
    auto bad = first_nonfinite_state(*s.opt, s.params, names);
    benchmark::DoNotOptimize(bad);
    state.PauseTiming();
    before.clear();
    state.ResumeTiming();
  }
}

// The check alone: a sum per tensor (22.5 M floats), one read of the result.
void BM_NonfiniteCheck(benchmark::State& state) {
  stage s;
  std::vector<std::string> names;
  for (size_t i = 0; i < s.params.size(); ++i) names.push_back(std::to_string(i));
  for (auto _ : state) {
    auto bad = first_nonfinite_state(*s.opt, s.params, names);
    benchmark::DoNotOptimize(bad);
  }
}

// Argument: 1 for AdamW.
BENCHMARK(BM_AdamInPlace)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_AdamAsideChecked)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_NonfiniteCheck)->Unit(benchmark::kMillisecond)->MinTime(2.0);
// Arguments: boundaries kept, then step_aside's block (0: whole tensors,
// LibTorch's op sequence over each parameter at once), then 1 for AdamW.
BENCHMARK(BM_AdamAside)
    ->Args({1, aside_block, 0})
    ->Args({1, aside_block, 1})
    ->Args({4, aside_block, 0})
    ->Args({1, 0, 0})
    ->Args({1, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
