// runtime/config/config: good configs load with the right values; every bad config
// fails with one exact FILE:LINE:COL: KEY: message line.
#include "tests/test_util.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/sections.hpp"
#include "runtime/util/text.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "tests/runtime/config/bad_configs.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

using testing_util::write;

fs::path test_dir() { return testing_util::test_dir("actorpipe_config_test"); }

/// Loads `yaml` and returns what() of the config_error it must throw.
std::string load_error(const std::string& file, const load_env& env = {}) {
  try {
    load_config(file, env);
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no error)";
}

/// A machine with `n` (fake) CUDA devices, one process.
load_env gpus(int n) {
  load_env env;
  env.cuda_devices = n;
  return env;
}

const char* const small_model = R"(model:
  layers:
    - {type: linear, in: 64, out: 256}
    - {type: relu}
    - {type: linear, in: 256, out: 10}
)";

// -- good configs --------------------------------------------------------------

TEST(LoadConfig, FullConfigLoadsEveryValue) {
  const fs::path dir = test_dir();
  write(dir / "data" / "digits.csv.gz", "x");
  write(dir / "init.pt", "x");
  const std::string file = write(dir / "config.yaml", R"(model:
  layers:
    - {type: linear, in: 64, out: 256}
    - {type: gelu}
    - {type: layernorm, dim: 256}
    - {type: dropout, p: 0.1}
    - {type: tanh}
    - {type: linear, in: 256, out: 10}
  init_from: init.pt
data:
  kind: csv
  path: data/digits.csv.gz
  test_fraction: 0.25
  shuffle: yes
  normalize: standard
train:
  steps: 7
  batch_size: 100
  optimizer: {type: adam, lr: 0.01, betas: [0.8, 0.99], eps: 1.0e-6, weight_decay: 0.5}
  lr_schedule: {type: step, step_size: 20, gamma: 0.5}
  clip_grad_norm: 1.5
  seed: 7
pipeline:
  stages: 2
  schedule: gpipe
  microbatches: 4
  devices: [cpu, cpu]
  intra_op_threads: 3
  pace_ms: 2.5
)");
  const config cfg = load_config(file);
  EXPECT_EQ(cfg.path, file);
  ASSERT_EQ(cfg.model.layers.size(), 6u);
  EXPECT_EQ(cfg.model.layers[0].type, "linear");
  EXPECT_EQ(cfg.model.layers[0].in, 64);
  EXPECT_EQ(cfg.model.layers[0].out, 256);
  EXPECT_EQ(cfg.model.layers[1].type, "gelu");
  EXPECT_EQ(cfg.model.layers[2].dim, 256);
  EXPECT_DOUBLE_EQ(cfg.model.layers[3].p, 0.1);
  EXPECT_EQ(cfg.model.layers[5].out, 10);
  EXPECT_EQ(cfg.model.init_from, (dir / "init.pt").string());
  EXPECT_EQ(cfg.data.kind, "csv");
  EXPECT_EQ(cfg.data.path, (dir / "data" / "digits.csv.gz").string());
  EXPECT_DOUBLE_EQ(cfg.data.test_fraction, 0.25);
  EXPECT_TRUE(cfg.data.shuffle);
  EXPECT_EQ(cfg.data.normalize, "standard");
  EXPECT_EQ(cfg.train.steps, 7);
  EXPECT_EQ(cfg.train.batch_size, 100);
  EXPECT_EQ(cfg.train.optimizer.type, "adam");
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.beta2, 0.99);
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.weight_decay, 0.5);
  EXPECT_EQ(cfg.train.lr_schedule.type, "step");
  EXPECT_EQ(cfg.train.lr_schedule.step_size, 20);
  EXPECT_DOUBLE_EQ(cfg.train.lr_schedule.gamma, 0.5);
  EXPECT_DOUBLE_EQ(cfg.train.clip_grad_norm, 1.5);
  EXPECT_EQ(cfg.train.seed, 7u);
  EXPECT_EQ(cfg.pipeline.stages, 2);
  EXPECT_TRUE(cfg.pipeline.partition.empty());  // partition_layers() fills it
  EXPECT_EQ(cfg.pipeline.schedule, "gpipe");
  EXPECT_EQ(cfg.pipeline.microbatches, 4);
  EXPECT_EQ(cfg.pipeline.devices, (std::vector<std::string>{"cpu", "cpu"}));
  EXPECT_EQ(cfg.pipeline.intra_op_threads, 3);
  EXPECT_DOUBLE_EQ(cfg.pipeline.pace_ms, 2.5);
  // Scalars are marked at their value, maps and lists at their key.
  EXPECT_EQ(cfg.marks.at("pipeline.schedule").line, 25);
  EXPECT_EQ(cfg.marks.at("pipeline.schedule").column, 13);
  EXPECT_EQ(cfg.marks.at("model.layers[2].dim").line, 5);
  EXPECT_EQ(cfg.marks.at("model.layers[2].dim").column, 30);
  EXPECT_EQ(cfg.marks.at("train.optimizer").line, 19);
  EXPECT_EQ(cfg.marks.at("train.optimizer").column, 3);
  EXPECT_EQ(cfg.marks.at("train.optimizer.betas[1]").column, 50);
}

TEST(LoadConfig, MinimalConfigFillsDefaults) {
  const config cfg = load_config(write(test_dir() / "config.yaml", small_model));
  const config defaults;
  EXPECT_EQ(cfg.model.layers.size(), 3u);
  EXPECT_EQ(cfg.model.init_from, "");
  EXPECT_EQ(cfg.data.kind, "synthetic");
  EXPECT_EQ(cfg.data.path, "");
  EXPECT_EQ(cfg.data.samples, defaults.data.samples);
  EXPECT_EQ(cfg.data.features, 64);  // model.layers[0].in
  EXPECT_EQ(cfg.data.classes, 10);   // the last linear's out
  EXPECT_DOUBLE_EQ(cfg.data.test_fraction, defaults.data.test_fraction);
  EXPECT_EQ(cfg.data.normalize, "none");
  EXPECT_EQ(cfg.train.steps, defaults.train.steps);
  EXPECT_EQ(cfg.train.batch_size, defaults.train.batch_size);
  EXPECT_EQ(cfg.train.optimizer.type, "adam");
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.lr, defaults.train.optimizer.lr);
  EXPECT_EQ(cfg.train.lr_schedule.type, "none");
  EXPECT_DOUBLE_EQ(cfg.train.clip_grad_norm, 0.0);
  EXPECT_EQ(cfg.train.seed, 42u);
  EXPECT_EQ(cfg.pipeline.stages, 1);
  EXPECT_EQ(cfg.pipeline.schedule, "1f1b");
  EXPECT_EQ(cfg.pipeline.microbatches, 1);
  EXPECT_EQ(cfg.pipeline.devices, std::vector<std::string>{"cpu"});
  EXPECT_EQ(cfg.pipeline.intra_op_threads, 0);
  EXPECT_FALSE(cfg.marks.count("train.steps"));
  EXPECT_EQ(cfg.marks.at("model.layers[1]").line, 4);
}

TEST(LoadConfig, EmptySectionsMeanDefaults) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + "data:\ntrain:\n"));
  EXPECT_EQ(cfg.data.kind, "synthetic");
  EXPECT_EQ(cfg.train.steps, 50);
}

TEST(LoadConfig, SyntheticSizesDefaultFromTheFirstWidthAndLastLinear) {
  const config cfg = load_config(write(test_dir() / "config.yaml", R"(model:
  layers:
    - {type: layernorm, dim: 12}
    - {type: linear, in: 12, out: 6}
    - {type: linear, in: 6, out: 5}
    - {type: relu}
data:
  synthetic: {samples: 100, classes: 3}
)"));
  EXPECT_EQ(cfg.data.samples, 100);
  EXPECT_EQ(cfg.data.features, 12);
  EXPECT_EQ(cfg.data.classes, 3);
}

TEST(LoadConfig, SgdOptimizer) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(train:
  optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0001}
)"));
  EXPECT_EQ(cfg.train.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(cfg.train.optimizer.weight_decay, 1e-4);
}

TEST(LoadConfig, RebalanceReadsEveryAndThreshold) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  stages: 2
  rebalance:
    every: 5
    threshold: 0.2
supervision:
  max_restarts: 1
)"));
  EXPECT_EQ(cfg.pipeline.rebalance.every, 5);
  EXPECT_DOUBLE_EQ(cfg.pipeline.rebalance.threshold, 0.2);
  EXPECT_EQ(cfg.marks.at("pipeline.rebalance").line, 8);
  EXPECT_EQ(cfg.marks.at("pipeline.rebalance.every").line, 9);
}

TEST(LoadConfig, RebalanceThresholdDefaultsToATenth) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  stages: 2
  rebalance: {every: 1}
supervision: {max_restarts: 1}
)"));
  EXPECT_EQ(cfg.pipeline.rebalance.every, 1);
  EXPECT_DOUBLE_EQ(cfg.pipeline.rebalance.threshold, 0.1);
}

TEST(LoadConfig, RebalanceLeftOutIsOff) {
  const config cfg =
      load_config(write(test_dir() / "config.yaml", std::string(small_model) + "pipeline:\n  stages: 2\n"));
  EXPECT_EQ(cfg.pipeline.rebalance.every, 0);
  EXPECT_DOUBLE_EQ(cfg.pipeline.rebalance.threshold, 0.1);
  EXPECT_FALSE(cfg.marks.count("pipeline.rebalance"));
}

// pipeline.rebalance's own values (every: 0 is in the bad-config table):
// each error names its key at its line and column.
TEST(LoadConfig, RebalanceBadValuesNameTheirKey) {
  const struct {
    const char* rebalance;  ///< pipeline.rebalance's value, on line 8 from column 14
    const char* message;
  } cases[] = {
      {"{every: 5, threshold: -1}", "8:36: pipeline.rebalance.threshold: must be positive, found -1"},
      {"{every: 5, threshold: 50}", "8:36: pipeline.rebalance.threshold: must be at most 10, found 50"},
      {"{every: 5, treshold: 0.2}", "8:25: pipeline.rebalance.treshold: unknown key; did you mean 'threshold'?"},
      {"{threshold: 0.2}", "8:3: pipeline.rebalance.every: required: the steps between two comparisons"},
      {"{every: 2.5}", "8:22: pipeline.rebalance.every: expected an integer, found '2.5'"},
      {"5", "8:14: pipeline.rebalance: expected a map, found '5'"},
  };
  for (const auto& c : cases) {
    const std::string yaml = std::string(small_model) + "pipeline:\n  stages: 2\n  rebalance: " + c.rebalance +
                             "\nsupervision: {max_restarts: 1}\n";
    const std::string file = write(test_dir() / "config.yaml", yaml);
    EXPECT_EQ(load_error(file), file + ":" + c.message) << c.rebalance;
  }
}

TEST(LoadConfig, RelativePathsResolveAgainstTheConfigDirectory) {
  const fs::path dir = test_dir();
  write(dir / "sub" / "rows.csv", "1,0\n");
  write(dir / "sub" / "config.yaml", std::string(small_model) + "data: {kind: csv, path: rows.csv}\n");
  const fs::path old = fs::current_path();
  fs::current_path(dir);
  config cfg;
  EXPECT_NO_THROW(cfg = load_config("sub/config.yaml"));
  fs::current_path(old);
  EXPECT_EQ(cfg.path, "sub/config.yaml");
  EXPECT_EQ(cfg.data.path, (dir / "sub" / "rows.csv").string());
}

TEST(LoadConfig, AbsolutePathsStayAsGiven) {
  const fs::path dir = test_dir();
  const std::string rows = write(dir / "elsewhere" / "rows.csv", "1,0\n");
  const config cfg = load_config(
      write(dir / "config.yaml", std::string(small_model) + "data: {kind: tensors, path: " + rows + "}\n"));
  EXPECT_EQ(cfg.data.kind, "tensors");
  EXPECT_EQ(cfg.data.path, rows);
}

TEST(LoadConfig, DevicesAutoIsCpuWithoutCuda) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + "pipeline: {stages: 3}\n"));
  EXPECT_EQ(cfg.pipeline.devices, (std::vector<std::string>{"cpu", "cpu", "cpu"}));
}

TEST(LoadConfig, DevicesAutoRoundRobinsOverCudaDevices) {
  const config cfg = load_config(
      write(test_dir() / "config.yaml", std::string(small_model) + "pipeline: {stages: 3, devices: auto}\n"),
      gpus(2));
  EXPECT_EQ(cfg.pipeline.devices, (std::vector<std::string>{"cuda:0", "cuda:1", "cuda:0"}));
}

/// One rank of a multi-process run: `rank` with `local_rank` on a machine
/// with `n` (fake) CUDA devices.
load_env rank_of_several(int n, int rank, int local_rank) {
  load_env env = gpus(n);
  env.rank = rank;
  env.local_rank = local_rank;
  return env;
}

TEST(LoadConfig, DevicesAutoPutsEveryStageOfARankOnItsLocalRanksGpu) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(train: {batch_size: 8}
parallel: {dp: 2}
pipeline: {stages: 3, devices: auto}
)");
  const config cfg = load_config(file, rank_of_several(2, 1, 1));
  const std::vector<std::string> gpu1(3, "cuda:1");
  EXPECT_EQ(cfg.pipeline.devices, gpu1);
  EXPECT_EQ(cfg.replica_devices, (std::vector<std::vector<std::string>>{gpu1, gpu1}));
  EXPECT_TRUE(cfg.pipeline.auto_devices);
  EXPECT_EQ(load_config(file, rank_of_several(2, 0, 0)).pipeline.devices, std::vector<std::string>(3, "cuda:0"));
  // Left out, devices are auto too.
  const config unsaid = load_config(write(test_dir() / "unsaid.yaml", std::string(small_model) + "pipeline: {stages: 2}\n"),
                                    rank_of_several(4, 3, 3));
  EXPECT_EQ(unsaid.pipeline.devices, std::vector<std::string>(2, "cuda:3"));
}

TEST(LoadConfig, DevicesAutoOnARankWithoutCudaIsCpu) {
  const config cfg = load_config(
      write(test_dir() / "config.yaml", std::string(small_model) + "pipeline: {stages: 3, devices: auto}\n"),
      rank_of_several(0, 1, 1));
  EXPECT_EQ(cfg.pipeline.devices, (std::vector<std::string>{"cpu", "cpu", "cpu"}));
}

TEST(LoadConfig, DevicesAutoPastTheMachinesGpusNamesTheRankAndItsVariable) {
  const std::string file =
      write(test_dir() / "config.yaml", std::string(small_model) + "pipeline: {stages: 3, devices: auto}\n");
  EXPECT_EQ(load_error(file, rank_of_several(1, 1, 1)),
            file + ":6:32: pipeline.devices: auto puts rank 1 (LOCAL_RANK 1) on cuda:1, but this machine has 1 CUDA "
                   "device");
  load_env slurm = rank_of_several(2, 6, 2);
  slurm.local_rank_variable = "SLURM_LOCALID";
  EXPECT_EQ(load_error(file, slurm), file + ":6:32: pipeline.devices: auto puts rank 6 (SLURM_LOCALID 2) on cuda:2, "
                                            "but this machine has 2 CUDA devices");
  // Left out: at the pipeline section.
  const std::string unsaid = write(test_dir() / "unsaid.yaml", std::string(small_model) + "pipeline:\n  stages: 3\n");
  EXPECT_EQ(load_error(unsaid, rank_of_several(1, 1, 1)),
            unsaid + ":6:1: pipeline.devices: auto puts rank 1 (LOCAL_RANK 1) on cuda:1, but this machine has 1 CUDA "
                     "device");
}

// Across processes the replicas' groups are Gloo's: nccl is refused (it has
// not run across processes), naming the key; in one process it stands.
TEST(LoadConfig, NcclAcrossProcessesIsRefusedNamingTheKey) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(train: {batch_size: 8}
parallel: {dp: 2, allreduce: nccl}
pipeline: {stages: 2, devices: auto}
)");
  EXPECT_EQ(load_error(file, rank_of_several(2, 1, 1)),
            file + ":7:30: parallel.allreduce: nccl across processes has not run on a GPU yet; use gloo (or auto, "
                   "which takes gloo across processes, the gradients of CUDA stages staged through the host)");
  EXPECT_EQ(load_config(file, gpus(2)).parallel.allreduce, "nccl");
  // ACTORPIPE_NCCL_ACROSS_PROCESSES=1, for the GPU check of docs/GPUS.md,
  // lifts the refusal; CPU stages are still refused.
  const std::string on_cpus = write(test_dir() / "cpus.yaml", std::string(small_model) + R"(train: {batch_size: 8}
parallel: {dp: 2, allreduce: nccl}
pipeline: {stages: 2, devices: [cpu, cpu]}
)");
  EXPECT_NE(load_error(on_cpus, rank_of_several(2, 1, 1)).find("nccl across processes has not run on a GPU yet"),
            std::string::npos);
  ::setenv("ACTORPIPE_NCCL_ACROSS_PROCESSES", "1", 1);
  const std::string lifted = load_error(on_cpus, rank_of_several(2, 1, 1));
  ::unsetenv("ACTORPIPE_NCCL_ACROSS_PROCESSES");
  EXPECT_EQ(lifted, on_cpus + ":7:30: parallel.allreduce: nccl sums CUDA tensors only, but a stage is on cpu; use "
                              "gloo or auto");
}

// Rank 0's plan of a dp 2 x pp 2 run on 4 ranks (rank q runs slot q):
// under auto on CUDA the other ranks' stages are on their own GPUs, which
// rank 0 names by the variable; without CUDA, with a list, or in one
// process, every rank has the same names.
TEST(LoadConfig, DeviceLabelNamesAnotherRanksAutoGpuByItsVariable) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(train: {batch_size: 8}
parallel: {dp: 2}
pipeline: {stages: 2, devices: auto}
)");
  const load_env rank0 = rank_of_several(2, 0, 0);
  const config cfg = load_config(file, rank0);
  EXPECT_EQ(device_label(cfg, rank0, 0, 0, 0), "cuda:0");
  EXPECT_EQ(device_label(cfg, rank0, 0, 1, 1), "cuda:LOCAL_RANK of rank 1");
  EXPECT_EQ(device_label(cfg, rank0, 1, 1, 3), "cuda:LOCAL_RANK of rank 3");
  load_env slurm = rank_of_several(2, 2, 0);
  slurm.local_rank_variable = "SLURM_LOCALID";
  const config on2 = load_config(file, slurm);
  EXPECT_EQ(device_label(on2, slurm, 1, 0, 2), "cuda:0");  // its own
  EXPECT_EQ(device_label(on2, slurm, 0, 0, 0), "cuda:SLURM_LOCALID of rank 0");
  // Without CUDA auto is cpu on every rank.
  const load_env cpu_only = rank_of_several(0, 0, 0);
  EXPECT_EQ(device_label(load_config(file, cpu_only), cpu_only, 1, 1, 3), "cpu");
  // One process: the round-robin it resolved is the truth.
  const config one = load_config(file, gpus(2));
  EXPECT_EQ(device_label(one, gpus(2), 1, 1, 0), "cuda:1");
  // A list: the same names on every rank.
  const std::string listed = write(test_dir() / "listed.yaml", std::string(small_model) + R"(train: {batch_size: 8}
parallel: {dp: 2}
pipeline: {stages: 2, devices: [cuda:0, cuda:1]}
)");
  EXPECT_EQ(device_label(load_config(listed, rank0), rank0, 1, 1, 3), "cuda:1");
}

TEST(LoadConfig, DeviceListsIgnoreTheLocalRank) {
  const config cfg = load_config(
      write(test_dir() / "config.yaml", std::string(small_model) + "pipeline: {stages: 2, devices: [cuda:0, cpu]}\n"),
      rank_of_several(1, 1, 1));
  EXPECT_EQ(cfg.pipeline.devices, (std::vector<std::string>{"cuda:0", "cpu"}));
  EXPECT_FALSE(cfg.pipeline.auto_devices);
}

TEST(LoadConfig, ExplicitCudaDevicesWithinTheMachine) {
  const config cfg = load_config(
      write(test_dir() / "config.yaml", std::string(small_model) + "pipeline: {stages: 2, devices: [cuda:1, cpu]}\n"),
      gpus(2));
  EXPECT_EQ(cfg.pipeline.devices, (std::vector<std::string>{"cuda:1", "cpu"}));
}

TEST(LoadConfig, NaiveForcesOneMicrobatch) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(train: {batch_size: 8}
pipeline: {schedule: naive, microbatches: 32}
)"));
  EXPECT_EQ(cfg.pipeline.schedule, "naive");
  EXPECT_EQ(cfg.pipeline.microbatches, 1);
}

TEST(LoadConfig, MicrobatchesThatTorchChunkCanProduce) {
  // 10 rows in 4 chunks of 3, 3, 3, 1: uneven but exactly 4.
  const config cfg = load_config(
      write(test_dir() / "config.yaml", std::string(small_model) + "train: {batch_size: 10}\npipeline: {microbatches: 4}\n"));
  EXPECT_EQ(cfg.pipeline.microbatches, 4);
}

TEST(LoadConfig, PartitionIsParsedAndGivesTheStageCount) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  partition: [[0, 1], [2, 2]]
)"));
  EXPECT_EQ(cfg.pipeline.stages, 2);
  EXPECT_EQ(cfg.pipeline.partition, (std::vector<std::pair<int, int>>{{0, 1}, {2, 2}}));
  EXPECT_EQ(cfg.pipeline.devices.size(), 2u);
  EXPECT_EQ(cfg.marks.at("pipeline.partition[1]").column, 23);
}

TEST(LoadConfig, PartitionWithAgreeingStages) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  stages: 3
  partition: [[0, 0], [1, 1], [2, 2]]
)"));
  EXPECT_EQ(cfg.pipeline.stages, 3);
  EXPECT_EQ(cfg.pipeline.partition.size(), 3u);
}

TEST(LoadConfig, MissingFileSaysSo) {
  const std::string file = (test_dir() / "nope.yaml").string();
  EXPECT_EQ(load_error(file), file + ": cannot read config file: No such file or directory");
}

TEST(LoadConfig, DirectoryIsNotAConfig) {
  const std::string dir = test_dir().string();
  EXPECT_EQ(load_error(dir), dir + ": cannot read config file: it is a directory");
}

TEST(LoadConfig, KnownSchedules) {
  EXPECT_EQ(known_schedules(), (std::vector<std::string>{"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "greedy", "forward-first", "async"}));
}

TEST(LoadConfig, EveryTableFieldLoads) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(data:
  split: random
  synthetic: {samples: 300, features: 64, classes: 7}
train: {batch_size: 8, seed: 0}
parallel: {dp: 2, allreduce: gloo}
pipeline:
  stages: 2
  microbatches: 2
  devices: [sim, sim]
  sim_ms: {F: 2, B: 3, W: 0.5}
  threads: dedicated
  lockstep: true
  recompute: [false, true]
checkpoint: {dir: ck, keep_last: 0}
supervision:
  watchdog_s: 5
  on_nonfinite: stop
  max_restarts: 2
  window_steps: 4
  op_timeout_ms: 50
  max_skipped_fraction: 1
faults:
  seed: 9
  inject:
    - {kind: delay, from: 0, to: 1, probability: 0.5, ms: 2}
    - {kind: throw, stage: 1, replica: 1, step: 3, microbatch: 1, op: B1}
)"));
  EXPECT_EQ(cfg.data.split, "random");
  EXPECT_EQ(cfg.data.samples, 300);
  EXPECT_EQ(cfg.data.classes, 7);
  EXPECT_EQ(cfg.train.seed, 0u);
  EXPECT_EQ(cfg.parallel.dp, 2);
  EXPECT_EQ(cfg.parallel.allreduce, "gloo");
  EXPECT_EQ(cfg.replica_devices, (std::vector<std::vector<std::string>>(2, {"sim", "sim"})));
  EXPECT_DOUBLE_EQ(cfg.pipeline.sim_f_ms, 2);
  EXPECT_DOUBLE_EQ(cfg.pipeline.sim_b_ms, 3);
  EXPECT_DOUBLE_EQ(cfg.pipeline.sim_w_ms, 0.5);
  EXPECT_EQ(cfg.pipeline.threads, "dedicated");
  EXPECT_TRUE(cfg.pipeline.lockstep);
  EXPECT_EQ(cfg.pipeline.recompute, (std::vector<bool>{false, true}));
  EXPECT_EQ(cfg.checkpoint.every, 1);  // a checkpoint section without `every` saves every step
  EXPECT_EQ(cfg.checkpoint.keep_last, 0);
  EXPECT_DOUBLE_EQ(cfg.supervision.watchdog_s, 5);
  EXPECT_EQ(cfg.supervision.on_nonfinite, "stop");
  EXPECT_EQ(cfg.supervision.max_restarts, 2);
  EXPECT_EQ(cfg.supervision.window_steps, 4);
  EXPECT_DOUBLE_EQ(cfg.supervision.op_timeout_ms, 50);
  EXPECT_DOUBLE_EQ(cfg.supervision.max_skipped_fraction, 1);
  EXPECT_EQ(cfg.faults.seed, 9u);
  ASSERT_EQ(cfg.faults.inject.size(), 2u);
  EXPECT_EQ(cfg.faults.inject[0].kind, fault_kind::delay);
  EXPECT_EQ(cfg.faults.inject[0].from, 0);
  EXPECT_EQ(cfg.faults.inject[0].to, 1);
  EXPECT_DOUBLE_EQ(cfg.faults.inject[0].ms, 2);
  EXPECT_EQ(cfg.faults.inject[1].kind, fault_kind::throw_in_op);
  EXPECT_EQ(cfg.faults.inject[1].replica, 1);
  EXPECT_EQ(cfg.faults.inject[1].microbatch, 1);
  EXPECT_EQ(cfg.faults.inject[1].op, "B1");
}

TEST(LoadConfig, RecomputeAllAndThreadsDefaultFollowTheFinalStages) {
  const config cfg = load_config(write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  partition: [[0, 0], [1, 1], [2, 2]]
  devices: [null, null, null]
  recompute: all
)"));
  EXPECT_EQ(cfg.pipeline.stages, 3);
  EXPECT_EQ(cfg.pipeline.recompute, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(cfg.pipeline.threads, "shared");  // null device, one replica
}

// -- cross-section checks --------------------------------------------------------

// A wrong value that another key depends on is what the error names, not
// the key that only disagrees because of it.
TEST(CrossSectionChecks, AStagesTypoIsBlamedOnStagesNotOnTheDevicesOrRecompute) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  stages: 32
  devices: [cpu, cpu]
  recompute: [true, false]
)");
  EXPECT_EQ(load_error(file), file + ":7:11: pipeline.stages: 32 exceeds the 3 layers of model.layers");
}

TEST(CrossSectionChecks, ARangePastTheModelIsBlamedOnThatRange) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  partition: [[0, 9], [1, 2]]
)");
  EXPECT_EQ(load_error(file), file + ":7:15: pipeline.partition[0]: layer 9 does not exist; model.layers has 3 layers (0..2)");
}

TEST(CrossSectionChecks, DeviceListsForTheWrongDpAreBlamedOnTheCountFirst) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  stages: 3
  devices: [[cpu, cpu], [cpu, cpu]]
)");
  EXPECT_EQ(load_error(file), file + ":8:3: pipeline.devices: 2 device lists for parallel.dp 1; give one list per "
                                     "replica (or one flat list for all)");
}

TEST(CrossSectionChecks, HaveUniqueNames) {
  std::set<std::string> names;
  for (const auto& c : config_detail::cross_checks()) {
    EXPECT_FALSE(std::string(c.name).empty());
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
  }
  EXPECT_GE(names.size(), 20u);
}

/// What load_config throws, with the sections read last to first.
std::string load_error_reading_backwards(const std::string& file) {
  config cfg;
  cfg.path = file;
  try {
    const YAML::Node root = YAML::LoadFile(file);
    if (!root.IsMap()) return "(not a map)";
    config_detail::reader r(cfg, load_env{});
    std::vector<std::string> names;
    for (const auto& s : config_detail::top_sections()) names.push_back(s.name);
    const config_detail::section top = r.read_map(root, "", names);
    const auto& sections = config_detail::top_sections();
    for (auto s = sections.rbegin(); s != sections.rend(); ++s) s->read(r, top.find(s->name));
    for (const auto& check : config_detail::cross_checks()) check.run(r);
  } catch (const config_error& e) {
    return e.what();
  } catch (const YAML::Exception&) {
    return "(invalid YAML)";
  }
  return "(no error)";
}

TEST(CrossSectionChecks, ReadOrderDoesNotMatter) {
  // Each table case has one fault: read backwards (faults before the
  // pipeline, the pipeline before train and the model), it names the same.
  int compared = 0;
  for (const auto& c : tests::bad_configs()) {
    const std::string file = write(test_dir() / "config.yaml", c.yaml);
    const std::string backwards = load_error_reading_backwards(file);
    if (backwards.front() == '(') continue;  // fails before any section
    EXPECT_EQ(backwards, load_error(file)) << c.name;
    ++compared;
  }
  EXPECT_GE(compared, 100);
}

TEST(CrossSectionChecks, HugeStagesTimesChunksIsAnErrorNotAnOverflow) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(pipeline:
  schedule: zb-v
  stages: 2147483647
)");
  EXPECT_EQ(load_error(file), file + ":6:1: pipeline.virtual_stages: 2147483647 stages x 2 virtual stages exceed the "
                                     "3 layers of model.layers");
}

TEST(CrossSectionChecks, AFaultStageBeyondAnIntIsNotTruncated) {
  const std::string file = write(test_dir() / "config.yaml", std::string(small_model) + R"(faults:
  inject:
    - {kind: nonfinite, stage: 4294967296, step: 1}
)");
  EXPECT_EQ(load_error(file), file + ":8:32: faults.inject[0].stage: stage 4294967296 does not exist (pipeline.stages 1)");
}

// -- where / error_at ----------------------------------------------------------

TEST(ConfigWhere, PresentKeyHasLineAndColumn) {
  const fs::path dir = test_dir();
  write(dir / "rows.csv", "1,0\n");
  const std::string file = write(dir / "config.yaml", std::string(small_model) + "data:\n  kind: csv\n  path: rows.csv\n");
  const config cfg = load_config(file);
  EXPECT_EQ(cfg.where("data.path"), file + ":8:9: data.path: ");
  EXPECT_EQ(std::string(cfg.error_at("data.path", "row 3 has 2 columns, expected 65").what()),
            file + ":8:9: data.path: row 3 has 2 columns, expected 65");
}

TEST(ConfigWhere, AbsentKeyNamesTheFileAlone) {
  const std::string file = write(test_dir() / "config.yaml", small_model);
  const config cfg = load_config(file);
  EXPECT_EQ(cfg.where("train.batch_size"), file + ": train.batch_size: ");
  EXPECT_EQ(std::string(cfg.error_at("train.batch_size", "exceeds the 100 training rows").what()),
            file + ": train.batch_size: exceeds the 100 training rows");
}

// -- the bad-config table ------------------------------------------------------

using tests::bad_config;
using tests::bad_configs;

class BadConfig : public ::testing::TestWithParam<bad_config> {};

TEST_P(BadConfig, FailsWithTheExactMessage) {
  const bad_config& c = GetParam();
  const std::string file = write(test_dir() / "config.yaml", c.yaml);
  const std::string what = load_error(file);
  EXPECT_EQ(what, tests::expected_message(c, file));
  EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfig, ::testing::ValuesIn(bad_configs()),
                         [](const ::testing::TestParamInfo<bad_config>& info) { return info.param.name; });

TEST(BadConfigTable, HasManyDistinctFailures) {
  std::set<std::string> names, messages;
  for (const auto& c : bad_configs()) {
    names.insert(c.name);
    messages.insert(c.message);
  }
  EXPECT_GE(bad_configs().size(), 18u);
  EXPECT_EQ(names.size(), bad_configs().size());
  EXPECT_EQ(messages.size(), bad_configs().size());
}

TEST(BadConfigTable, CudaCountMatters) {
  // The one machine-dependent case loads once the machine has the device.
  for (const auto& c : bad_configs()) {
    if (!c.assumes_no_cuda) continue;
    const std::string file = write(test_dir() / "config.yaml", c.yaml);
    EXPECT_NO_THROW(load_config(file, gpus(2)));
    EXPECT_EQ(load_error(file, gpus(1)),
              file + ":8:18: pipeline.devices[1]: cuda:1 requested but this machine has 1 CUDA device");
  }
}

// -- echoed input --------------------------------------------------------------

TEST(QuotedInput, ShortPrintableTextReadsAsWritten) {
  EXPECT_EQ(quoted_input("gpip"), "'gpip'");
  EXPECT_EQ(quoted_input(""), "''");
  EXPECT_EQ(quoted_input("a b\\c'd"), "'a b\\c'd'");  // printable ASCII stays, backslash included
  EXPECT_EQ(quoted_input("schedul", ""), "schedul");
  EXPECT_EQ(quoted_input(std::string(80, 'x')), "'" + std::string(80, 'x') + "'");
}

TEST(QuotedInput, ControlAndNonAsciiBytesAreEscaped) {
  EXPECT_EQ(quoted_input("\x1b[31mred\x1b[0m"), "'\\x1b[31mred\\x1b[0m'");
  EXPECT_EQ(quoted_input("a\nb\tc\rd"), "'a\\nb\\tc\\rd'");
  EXPECT_EQ(quoted_input(std::string("\0\x7f\xff", 3)), "'\\x00\\x7f\\xff'");
  EXPECT_EQ(quoted_input("caf\xc3\xa9"), "'caf\\xc3\\xa9'");
}

TEST(QuotedInput, LongTextIsCutTo80CharactersWithItsLength) {
  EXPECT_EQ(quoted_input(std::string(81, 'a')), "'" + std::string(80, 'a') + "...' (81 bytes)");
  EXPECT_EQ(quoted_input(std::string(10485760, 'a')), "'" + std::string(80, 'a') + "...' (10485760 bytes)");
  EXPECT_EQ(quoted_input(std::string(1000, 'k'), ""), std::string(80, 'k') + "... (1000 bytes)");
  // An escape is never split: after 4 letters, 19 escapes fill 80 characters;
  // after 5, only 18 fit.
  std::string escapes;
  for (int i = 0; i < 19; ++i) escapes += "\\x1b";
  EXPECT_EQ(quoted_input("aaaa" + std::string(100, '\x1b')), "'aaaa" + escapes + "...' (104 bytes)");
  EXPECT_EQ(quoted_input("aaaaa" + std::string(100, '\x1b')), "'aaaaa" + escapes.substr(4) + "...' (105 bytes)");
  EXPECT_EQ(quoted_input(std::string(100, 'p'), "", 10), "pppppppppp... (100 bytes)");
}

// -- nearest -------------------------------------------------------------------

TEST(Nearest, SuggestsAOneEditTypo) {
  EXPECT_EQ(nearest("schedul", {"stages", "schedule", "microbatches"}), "schedule");
  EXPECT_EQ(nearest("gpip", known_schedules()), "gpipe");
  EXPECT_EQ(nearest("1f1", known_schedules()), "1f1b");
}

TEST(Nearest, IgnoresCase) { EXPECT_EQ(nearest("GPipe", known_schedules()), "gpipe"); }

TEST(Nearest, AllowsMoreEditsForLongerWords) {
  // 3 edits: too many for a short word, fine for a 13-letter one.
  EXPECT_EQ(nearest("intra_threads", {"intra_op_threads", "pace_ms"}), "intra_op_threads");
  EXPECT_EQ(nearest("lrx", {"steps"}), "");
}

TEST(Nearest, PicksTheClosestAndTheFirstOnATie) {
  EXPECT_EQ(nearest("steps", {"step", "steps_"}), "step");
  EXPECT_EQ(nearest("ab", {"ac", "ad"}), "ac");
}

TEST(Nearest, NothingCloseGivesEmpty) {
  EXPECT_EQ(nearest("pipedream", known_schedules()), "");
  EXPECT_EQ(nearest("warmup", {"steps", "batch_size", "optimizer", "lr_schedule", "clip_grad_norm", "seed"}), "");
  EXPECT_EQ(nearest("x", {"lr"}), "");  // replacing every letter is no resemblance
  EXPECT_EQ(nearest("anything", {}), "");
}

}  // namespace
}  // namespace actorpipe
