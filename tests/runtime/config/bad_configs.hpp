#pragma once
// Bad configs and the exact one-line error each must produce. Shared by the
// config unit test and the CLI test (`actorpipe train BAD.yaml` exits 2 and
// prints the same line on stderr).
//
// Each case is a distinct failure. In `message`, {FILE} stands for the
// config path exactly as given and {DIR} for its directory, absolute (where
// relative paths in the config resolve). Write the YAML to a file named
// config.yaml: one case refers to its own file by that name.
#include <filesystem>
#include <string>
#include <vector>

namespace actorpipe::tests {

struct bad_config {
  const char* name;     ///< a valid GoogleTest parameter name
  const char* yaml;     ///< the file's content
  const char* message;  ///< the expected what(), with placeholders
  /// The message assumes a machine with no CUDA device (load_env{}); a
  /// test against the real machine should skip it when one is present.
  bool assumes_no_cuda = false;
};

/// The table.
inline const std::vector<bad_config>& bad_configs() {
  // A 1000-character value: echoed cut to 80 characters and its length.
  static const std::string long_value_yaml = R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: )yaml" + std::string(1000, '9') + "x\n";
  static const std::string long_value_message =
      "{FILE}:7:15: train.batch_size: expected an integer, found '" + std::string(80, '9') + "...' (1001 bytes)";
  static const std::string long_key_yaml = R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  )yaml" + std::string(1000, 'k') + ": 1\n";
  static const std::string long_key_message = "{FILE}:7:3: pipeline." + std::string(80, 'k') + "... (1000 bytes): unknown key";
  static const std::vector<bad_config> table{
      {"UnknownKeySuggests",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  schedul: gpipe
)yaml",
       "{FILE}:8:3: pipeline.schedul: unknown key; did you mean 'schedule'?"},
      {"UnknownKeyNoSuggestion",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  warmup: 3
)yaml",
       "{FILE}:7:3: train.warmup: unknown key"},
      {"UnknownTopLevelKey",
       R"yaml(modle:
  layers: []
)yaml",
       "{FILE}:1:1: modle: unknown key; did you mean 'model'?"},
      {"IntegerExpected",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: abc
)yaml",
       "{FILE}:7:15: train.batch_size: expected an integer, found 'abc'"},
      {"IntegerExpectedNotFraction",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps: 2.5
)yaml",
       "{FILE}:7:10: train.steps: expected an integer, found '2.5'"},
      {"MapExpected",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train: [1, 2]
)yaml",
       "{FILE}:6:8: train: expected a map, found a sequence"},
      {"BooleanExpected",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  shuffle: maybe
)yaml",
       "{FILE}:7:12: data.shuffle: expected a boolean, found 'maybe'"},
      {"NumberExpected",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {type: sgd, lr: fast}
)yaml",
       "{FILE}:7:30: train.optimizer.lr: expected a number, found 'fast'"},
      {"EmptyValue",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps:
  seed: 1
)yaml",
       "{FILE}:7:3: train.steps: expected an integer, found no value"},
      {"DuplicateKey",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps: 10
  batch_size: 8
  steps: 20
)yaml",
       "{FILE}:9:3: train.steps: duplicate key (first at line 7)"},
      {"DuplicateKeyInFlowMap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 3, in: 5}
)yaml",
       "{FILE}:3:37: model.layers[0].in: duplicate key (first at line 3)"},
      {"UnknownLayerType",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: rellu}
    - {type: linear, in: 8, out: 3}
)yaml",
       "{FILE}:4:14: model.layers[1].type: unknown layer type 'rellu'; did you mean 'relu'? (known: linear, relu, gelu, tanh, dropout, layernorm, embedding, gpt_block, lm_head, token_embedding, llama_block, rmsnorm)"},
      {"LayerOptionOfOtherType",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu, p: 0.1}
    - {type: linear, in: 8, out: 3}
)yaml",
       "{FILE}:4:20: model.layers[1].p: 'p' does not apply to a relu layer (only to dropout)"},
      {"LayerNotAMap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - relu
    - {type: linear, in: 8, out: 3}
)yaml",
       "{FILE}:4:7: model.layers[1]: expected a map like {type: relu}, found 'relu'"},
      {"UnknownSchedule",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  schedule: gpip
)yaml",
       "{FILE}:7:13: pipeline.schedule: unknown schedule 'gpip'; did you mean 'gpipe'? (known: naive, gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev, greedy, forward-first, async)"},
      {"UnknownOptimizer",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {type: adamx}
)yaml",
       "{FILE}:7:21: train.optimizer.type: unknown optimizer 'adamx'; did you mean 'adam'? (known: adam, adamw, sgd)"},
      {"OptimizerOptionOfOtherType",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {type: adam, momentum: 0.9}
)yaml",
       "{FILE}:7:27: train.optimizer.momentum: 'momentum' does not apply to the adam optimizer (only to sgd)"},
      {"UnknownLrSchedule",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  lr_schedule: {type: onecycle}
)yaml",
       "{FILE}:7:23: train.lr_schedule.type: unknown lr schedule 'onecycle' (known: none, step, cosine, linear, constant)"},
      {"UnknownDataKind",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  kind: parquet
)yaml",
       "{FILE}:7:9: data.kind: unknown data kind 'parquet' (known: csv, tensors, synthetic, text, tokens)"},
      {"UnknownNormalize",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  normalize: minmax
)yaml",
       "{FILE}:7:14: data.normalize: unknown normalize mode 'minmax' (known: none, standard)"},
      {"LayerShapesDoNotChain",
       R"yaml(model:
  layers:
    - {type: linear, in: 64, out: 256}
    - {type: relu}
    - {type: linear, in: 128, out: 10}
)yaml",
       "{FILE}:5:26: model.layers[2].in: 128 does not match the previous output 256"},
      {"LayerNormDimMismatch",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: layernorm, dim: 4}
    - {type: linear, in: 8, out: 3}
)yaml",
       "{FILE}:4:30: model.layers[1].dim: 4 does not match the previous output 8"},
      {"LinearMissingOut",
       R"yaml(model:
  layers:
    - {type: linear, in: 4}
)yaml",
       "{FILE}:3:7: model.layers[0].out: required for a linear layer"},
      {"LinearNonPositive",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 0}
)yaml",
       "{FILE}:3:34: model.layers[0].out: must be positive, found 0"},
      {"DropoutOutOfRange",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: dropout, p: 1.0}
    - {type: linear, in: 8, out: 3}
)yaml",
       "{FILE}:4:26: model.layers[1].p: must be in [0, 1), found 1"},
      {"NoLinearLayer",
       R"yaml(model:
  layers:
    - {type: relu}
)yaml",
       "{FILE}:2:3: model.layers: has no linear or lm_head layer; the model has nothing to train"},
      {"StagesExceedLayers",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 5
)yaml",
       "{FILE}:7:11: pipeline.stages: 5 exceeds the 3 layers of model.layers"},
      {"StagesBelowOne",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 0
)yaml",
       "{FILE}:7:11: pipeline.stages: must be at least 1, found 0"},
      {"MicrobatchesExceedBatch",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 256
pipeline:
  microbatches: 300
)yaml",
       "{FILE}:9:17: pipeline.microbatches: 300 exceeds train.batch_size 256"},
      {"MicrobatchesBelowOne",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  microbatches: 0
)yaml",
       "{FILE}:7:17: pipeline.microbatches: must be at least 1, found 0"},
      {"MicrobatchesTorchChunkCannotMake",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 10
pipeline:
  schedule: gpipe
  microbatches: 6
)yaml",
       "{FILE}:10:17: pipeline.microbatches: torch.chunk splits train.batch_size 10 into 5 chunks, not 6"},
      {"DataFileNotFound",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  kind: csv
  path: data/nope.csv.gz
)yaml",
       "{FILE}:8:9: data.path: file not found: {DIR}/data/nope.csv.gz"},
      {"InitFileNotFound",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
  init_from: init.pt
)yaml",
       "{FILE}:6:14: model.init_from: file not found: {DIR}/init.pt"},
      {"DataPathRequired",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  kind: csv
  shuffle: true
)yaml",
       "{FILE}:7:9: data.path: required when data.kind is csv"},
      {"PartitionGap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  partition: [[0, 0], [2, 2]]
)yaml",
       "{FILE}:7:23: pipeline.partition[1]: starts at layer 2 but the previous range ended at layer 0; ranges must be contiguous"},
      {"PartitionDoesNotCover",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  partition: [[0, 0], [1, 1]]
)yaml",
       "{FILE}:7:3: pipeline.partition: covers layers 0..1 but model.layers has 3 layers; the last range must end at layer 2"},
      {"PartitionStartAfterEnd",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  partition:
    - [0, 1]
    - [2, 1]
)yaml",
       "{FILE}:9:7: pipeline.partition[1]: ends at layer 1, before its start 2"},
      {"PartitionBeyondLastLayer",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  partition: [[0, 1], [2, 3]]
)yaml",
       "{FILE}:7:23: pipeline.partition[1]: layer 3 does not exist; model.layers has 3 layers (0..2)"},
      {"PartitionStagesDisagree",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 3
  partition: [[0, 1], [2, 2]]
)yaml",
       "{FILE}:7:11: pipeline.stages: 3 does not match the 2 ranges of pipeline.partition"},
      {"InterleavedMicrobatchesNotAMultipleOfStages",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 12
pipeline:
  stages: 2
  schedule: interleaved
  microbatches: 3
)yaml",
       "{FILE}:13:17: pipeline.microbatches: interleaved runs microbatches in groups of pipeline.stages (2); 3 is not a multiple"},
      {"DualPipeVOddStages",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 12
pipeline:
  stages: 3
  schedule: dualpipev
  microbatches: 6
)yaml",
       "{FILE}:13:11: pipeline.stages: DualPipeV needs an even number of stages (ranks), at least 2; got 3"},
      {"DualPipeVTooFewMicrobatches",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 12
pipeline:
  stages: 2
  schedule: dualpipev
  microbatches: 3
)yaml",
       "{FILE}:13:17: pipeline.microbatches: DualPipeV needs at least 2 x stages (4) microbatches; got 3"},
      {"VirtualStagesExceedLayers",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  schedule: interleaved
  virtual_stages: 2
)yaml",
       "{FILE}:9:19: pipeline.virtual_stages: 2 stages x 2 virtual stages exceed the 3 layers of model.layers"},
      {"VirtualStagesWithoutInterleaved",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  schedule: 1f1b
  virtual_stages: 2
)yaml",
       "{FILE}:8:19: pipeline.virtual_stages: only the interleaved, zb-v, dualpipev and greedy schedules run several chunks per stage, not 1f1b"},
      {"ZbVWithThreeChunks",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  schedule: zb-v
  virtual_stages: 3
)yaml",
       "{FILE}:8:19: pipeline.virtual_stages: zb-v runs exactly 2 chunks per stage (one down the V, one back), not 3"},
      {"MaxInflightWithoutGreedy",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  schedule: 1f1b
  max_inflight: 2
)yaml",
       "{FILE}:8:17: pipeline.max_inflight: only the greedy schedule takes a memory bound; 1f1b sets its own"},
      {"MaxInflightZero",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  schedule: greedy
  max_inflight: 0
)yaml",
       "{FILE}:8:17: pipeline.max_inflight: must be at least 1, found 0"},
      {"AsyncWithClipping",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
  clip_grad_norm: 1.0
pipeline:
  stages: 2
  schedule: async
  microbatches: 4
)yaml",
       "{FILE}:8:19: train.clip_grad_norm: async (PipeDream-2BW) steps each stage on its own, with no global gradient norm to clip by; leave train.clip_grad_norm out"},
      {"AsyncFewerMicrobatchesThanStages",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 3
  schedule: async
  microbatches: 2
)yaml",
       "{FILE}:11:17: pipeline.microbatches: async (PipeDream-2BW) needs at least as many microbatches as stages (3) so that two weight versions suffice; got 2"},
      {"DpLargerThanBatch",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
parallel:
  dp: 9
)yaml",
       "{FILE}:9:7: parallel.dp: 9 replicas exceed train.batch_size 8; every replica needs a sample"},
      {"DeviceListsForWrongDp",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
parallel:
  dp: 2
pipeline:
  stages: 2
  microbatches: 2
  devices: [[cpu, cpu], [cpu, cpu], [cpu, cpu]]
)yaml",
       "{FILE}:13:3: pipeline.devices: 3 device lists for parallel.dp 2; give one list per replica (or one flat list for all)"},
      {"UnknownDtype",
       R"yaml(model:
  dtype: bfloat15
  layers:
    - {type: linear, in: 4, out: 3}
)yaml",
       "{FILE}:2:10: model.dtype: unknown parameter type 'bfloat15' (known: float32, bfloat16, float16; also bf16, fp16, fp32)"},
      {"NcclOnCpuStages",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
parallel:
  dp: 2
  allreduce: nccl
pipeline:
  stages: 2
  microbatches: 2
  devices: [cpu, cpu]
)yaml",
       "{FILE}:10:14: parallel.allreduce: nccl sums CUDA tensors only, but a stage is on cpu; use gloo or auto"},
      {"MoreDevicesThanExist",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
parallel:
  dp: 2
pipeline:
  stages: 2
  microbatches: 2
  devices: [[cpu, cpu], [cpu, cuda:3]]
)yaml",
       "{FILE}:13:31: pipeline.devices[1][1]: cuda:3 requested but this machine has 0 CUDA devices"},
      {"ReplicaShareTooSmallForMicrobatches",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 10
parallel:
  dp: 3
pipeline:
  stages: 2
  microbatches: 4
)yaml",
       "{FILE}:12:17: pipeline.microbatches: a replica's share of train.batch_size (2 of 10 over parallel.dp 3) splits into 2 chunks, not 4"},
      {"AsyncWithReplicas",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
parallel:
  dp: 2
pipeline:
  stages: 2
  schedule: async
  microbatches: 2
)yaml",
       "{FILE}:9:7: parallel.dp: async (PipeDream-2BW) runs one replica; its stages step on their own, with no allreduce point"},
      {"UnknownAllreduceBackend",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
parallel:
  dp: 2
  allreduce: mpi
)yaml",
       "{FILE}:10:14: parallel.allreduce: unknown allreduce backend 'mpi' (known: auto, gloo, nccl)"},
      {"RecomputeUnknownWord",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  recompute: some
)yaml",
       "{FILE}:8:14: pipeline.recompute: expected all, none or a list of true/false (one per stage), found 'some'"},
      {"RecomputeListTooShort",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  recompute: [true]
)yaml",
       "{FILE}:8:3: pipeline.recompute: 1 values for 2 stages; give one true/false per stage, or all / none"},
      {"RecomputeNotABoolean",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  recompute: [true, maybe]
)yaml",
       "{FILE}:8:21: pipeline.recompute[1]: expected true or false, found 'maybe'"},
      {"CheckpointWithoutDir",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
checkpoint:
  every: 5
)yaml",
       "{FILE}:6:1: checkpoint.dir: expected a directory path"},
      {"CheckpointEveryZero",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
checkpoint:
  dir: ck
  every: 0
)yaml",
       "{FILE}:8:10: checkpoint.every: must be at least 1, found 0"},
      {"CheckpointWithAsync",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 2
  schedule: async
  microbatches: 2
checkpoint:
  dir: ck
)yaml",
       "{FILE}:12:1: checkpoint: async (PipeDream-2BW) has no step boundary where every stage's weights are one version; checkpoints need a synchronous schedule"},
      {"UnknownFaultKind",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
faults:
  inject:
    - {kind: dorp, from: 0, to: 1, step: 1}
)yaml",
       "{FILE}:8:14: faults.inject[0].kind: unknown fault kind 'dorp'; did you mean 'drop'? (known: nonfinite, duplicate, delay, slow_stage, kill_stage, throw, drop, kill_process, stop_process, stale_message)"},
      {"FaultOnMissingStage",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 2
  microbatches: 2
faults:
  inject:
    - {kind: nonfinite, stage: 2, step: 1}
)yaml",
       "{FILE}:13:32: faults.inject[0].stage: stage 2 does not exist (pipeline.stages 2)"},
      {"FaultOnMissingReplica",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 2
  microbatches: 2
parallel:
  dp: 2
faults:
  inject:
    - {kind: kill_stage, replica: 2, stage: 1, step: 1, after_op: F0}
)yaml",
       "{FILE}:15:35: faults.inject[0].replica: replica 2 does not exist (parallel.dp 2)"},
      {"ReplicaOnAMessageFault",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 2
  microbatches: 2
parallel:
  dp: 2
faults:
  inject:
    - {kind: duplicate, replica: 1, probability: 0.1}
)yaml",
       "{FILE}:15:34: faults.inject[0].replica: duplicate picks messages of every replica; replica is for a stage's faults"},
      {"UnknownNonfinitePolicy",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
supervision:
  on_nonfinite: ignore
)yaml",
       "{FILE}:7:17: supervision.on_nonfinite: unknown non-finite policy 'ignore' (known: skip, stop)"},
      {"CompareUnknownSchedule",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
compare:
  schedules: [gpipe, 1f1d]
)yaml",
       "{FILE}:7:22: compare.schedules[1]: unknown schedule '1f1d'; did you mean '1f1b'? (known: naive, gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev, greedy, forward-first, async)"},
      {"DevicesCountMismatch",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [cpu, cpu, cpu]
)yaml",
       "{FILE}:8:3: pipeline.devices: 3 devices for 2 stages; give one per stage"},
      {"DevicesUnknown",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [cpu, gpu]
)yaml",
       "{FILE}:8:18: pipeline.devices[1]: unknown device 'gpu'; expected cpu, cuda:N, null or sim"},
      {"DevicesNullNextToCpu",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [cpu, null]
)yaml",
       "{FILE}:8:3: pipeline.devices: the null device runs every stage or none; found cpu next to null"},
      {"SimTimesWithoutTheSimDevice",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [cpu, cpu]
  sim_ms: {F: 1, B: 2}
)yaml",
       "{FILE}:9:3: pipeline.sim_ms: only the sim device takes op times; pipeline.devices is cpu"},
      {"SimTimeNegative",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [sim, sim]
  sim_ms: {F: 1, B: -2}
)yaml",
       "{FILE}:9:21: pipeline.sim_ms.B: must be at least 0, found -2"},
      {"SharedThreadsForACpuStage",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  threads: shared
  devices: [cpu, cpu]
)yaml",
       "{FILE}:8:12: pipeline.threads: shared runs the stages on CAF's scheduler, which only the null device's ops never block; a stage on cpu needs its own thread (dedicated)"},
      {"ThreadsUnknown",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [null, null]
  threads: pooled
)yaml",
       "{FILE}:9:12: pipeline.threads: unknown threads mode 'pooled' (known: dedicated, shared)"},
      {"DevicesCudaUnavailable",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [cpu, cuda:1]
)yaml",
       "{FILE}:8:18: pipeline.devices[1]: cuda:1 requested but this machine has 0 CUDA devices", true},
      {"StepsBelowOne",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps: 0
)yaml",
       "{FILE}:7:10: train.steps: must be at least 1, found 0"},
      {"BatchSizeBelowOne",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: -4
)yaml",
       "{FILE}:7:15: train.batch_size: must be at least 1, found -4"},
      {"LearningRateNotPositive",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {lr: 0}
)yaml",
       "{FILE}:7:19: train.optimizer.lr: must be positive, found 0"},
      {"BetasNotAPair",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {betas: [0.9]}
)yaml",
       "{FILE}:7:22: train.optimizer.betas: expected a list of two numbers [beta1, beta2], found a list of length 1"},
      {"BetaOutOfRange",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer:
    betas: [0.9, 1.5]
)yaml",
       "{FILE}:8:18: train.optimizer.betas[1]: must be in [0, 1), found 1.5"},
      {"EpsNotPositive",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {eps: 0}
)yaml",
       "{FILE}:7:20: train.optimizer.eps: must be positive, found 0"},
      {"ClipNotPositive",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  clip_grad_norm: 0
)yaml",
       "{FILE}:7:19: train.clip_grad_norm: must be positive, found 0"},
      {"TestFractionOutOfRange",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  test_fraction: 1
)yaml",
       "{FILE}:7:18: data.test_fraction: must be in [0, 1), found 1"},
      {"StepSizeBelowOne",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  lr_schedule: {type: step, step_size: 0}
)yaml",
       "{FILE}:7:40: train.lr_schedule.step_size: must be at least 1, found 0"},
      {"GammaNotPositive",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  lr_schedule: {type: step, gamma: -0.5}
)yaml",
       "{FILE}:7:36: train.lr_schedule.gamma: must be positive, found -0.5"},
      {"IntraOpThreadsNegative",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  intra_op_threads: -1
)yaml",
       "{FILE}:7:21: pipeline.intra_op_threads: must be at least 0, found -1"},
      {"PaceNegative",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  pace_ms: -2.5
)yaml",
       "{FILE}:7:12: pipeline.pace_ms: must be at least 0, found -2.5"},
      {"EmptyFile",
       R"yaml(# nothing here
)yaml",
       "{FILE}:1:1: the config is empty; it needs at least model.layers"},
      {"TopLevelNotAMap",
       R"yaml(- model
- data
)yaml",
       "{FILE}:1:1: expected a map at the top level, found a sequence"},
      {"LayersEmpty",
       R"yaml(model:
  layers: []
)yaml",
       "{FILE}:2:3: model.layers: is empty; the model needs at least one layer"},
      {"LayersNotAList",
       R"yaml(model:
  layers: {type: relu}
)yaml",
       "{FILE}:2:11: model.layers: expected a list of layers, found a map"},
      {"ModelMissing",
       R"yaml(train:
  steps: 3
)yaml",
       "{FILE}:1:1: model.layers: required: the list of layers"},
      {"SyntheticFeaturesMismatch",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  synthetic: {samples: 64, features: 5}
)yaml",
       "{FILE}:7:38: data.synthetic.features: 5 does not match model.layers[0].in 4"},
      {"SyntheticClassesBelowTwo",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  synthetic: {classes: 1}
)yaml",
       "{FILE}:7:24: data.synthetic.classes: must be at least 2, found 1"},
      {"SyntheticBlockWithCsv",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  kind: tensors
  path: config.yaml
  synthetic: {samples: 64}
)yaml",
       "{FILE}:9:3: data.synthetic: only used when data.kind is synthetic, not tensors"},
      {"LongValueIsCut", long_value_yaml.c_str(), long_value_message.c_str()},
      {"LongKeyIsCut", long_key_yaml.c_str(), long_key_message.c_str()},
      {"GptHeadsDoNotDivideDim",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 30, max_seq: 16}
    - {type: gpt_block, dim: 30, heads: 4}
    - {type: lm_head, vocab: 256, dim: 30}
data: {kind: text, path: config.yaml, seq_len: 8}
)yaml",
       "{FILE}:4:41: model.layers[1].heads: 4 heads do not divide dim 30"},
      {"GptSeqLenAboveMaxSeq",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: gpt_block, dim: 32, heads: 4}
    - {type: lm_head, vocab: 256, dim: 32, tie: true}
data: {kind: text, path: config.yaml, seq_len: 17}
)yaml",
       "{FILE}:6:48: data.seq_len: 17 exceeds model.layers[0].max_seq 16"},
      {"GptTieWithoutEmbedding",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: lm_head, vocab: 10, dim: 8, tie: true}
)yaml",
       "{FILE}:4:47: model.layers[1].tie: ties the head to the embedding's table, but the model has no embedding layer"},
      {"GptTieVocabDiffers",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: gpt_block, dim: 32, heads: 4, repeat: 2}
    - {type: lm_head, vocab: 128, dim: 32, tie: true}
data: {kind: text, path: config.yaml, seq_len: 8}
)yaml",
       "{FILE}:5:30: model.layers[2].vocab: 128 differs from the tied embedding's vocab 256"},
      {"GptTieDimDiffers",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: gpt_block, dim: 32, heads: 4}
    - {type: linear, in: 32, out: 16}
    - {type: lm_head, vocab: 256, dim: 16, tie: true}
data: {kind: text, path: config.yaml, seq_len: 8}
)yaml",
       "{FILE}:6:40: model.layers[3].dim: 16 differs from the tied embedding's dim 32"},
      {"GptTextVocabNot256",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 512, dim: 32, max_seq: 16}
    - {type: gpt_block, dim: 32, heads: 4}
    - {type: lm_head, vocab: 512, dim: 32}
data: {kind: text, path: config.yaml, seq_len: 8}
)yaml",
       "{FILE}:3:32: model.layers[0].vocab: is 512; data.kind text has 256 byte tokens (give data.tokenizer for subword tokens)"},
      {"GptTextNeedsAnEmbedding",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
data: {kind: text, path: config.yaml, seq_len: 8}
)yaml",
       "{FILE}:4:14: data.kind: text gives tokens; the model's first layer must be an embedding or a token_embedding, not linear"},
      {"GptEmbeddingNeedsText",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: lm_head, vocab: 256, dim: 32}
)yaml",
       "{FILE}:3:14: model.layers[0].type: an embedding takes tokens; use data.kind text or tokens, not synthetic"},
      {"GptEmbeddingNotFirst",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: embedding, vocab: 256, dim: 8, max_seq: 16}
)yaml",
       "{FILE}:4:14: model.layers[1].type: an embedding takes tokens; it must be the first layer, not layer 1"},
      {"GptRepeatZero",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: gpt_block, dim: 32, heads: 4, repeat: 0}
    - {type: lm_head, vocab: 256, dim: 32}
data: {kind: text, path: config.yaml, seq_len: 8}
)yaml",
       "{FILE}:4:52: model.layers[1].repeat: must be at least 1, found 0"},
      {"GptSeqLenNeedsText",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
data: {kind: synthetic, seq_len: 8}
)yaml",
       "{FILE}:4:34: data.seq_len: only used when data.kind is text or tokens, not synthetic"},
      {"GptTextNeedsSeqLen",
       R"yaml(model:
  layers:
    - {type: embedding, vocab: 256, dim: 32, max_seq: 16}
    - {type: lm_head, vocab: 256, dim: 32}
data: {kind: text, path: config.yaml}
)yaml",
       "{FILE}:5:14: data.seq_len: required when data.kind is text"},
      {"EscapeInAValueIsEscaped",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  kind: "\e[2J\e[31mcsv"
)yaml",
       "{FILE}:7:9: data.kind: unknown data kind '\\x1b[2J\\x1b[31mcsv' (known: csv, tensors, synthetic, text, tokens)"},
      {"EscapeInAKeyIsEscaped",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  "sched\eule": gpipe
)yaml",
       "{FILE}:7:3: pipeline.sched\\x1bule: unknown key; did you mean 'schedule'?"},
      {"ControlBytesInAnIntegerAreEscaped",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps: "3\t\a\x7f\u00e9"
)yaml",
       "{FILE}:7:10: train.steps: expected an integer, found '3\\t\\x07\\x7f\\xc3\\xa9'"},
      {"BatchSizeBeyondTheCap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 9223372036854775807
)yaml",
       "{FILE}:7:15: train.batch_size: must be at most 2147483648 (2^31), found 9223372036854775807"},
      {"StepsBeyondTheCap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps: 2147483649
)yaml",
       "{FILE}:7:10: train.steps: must be at most 2147483648 (2^31), found 2147483649"},
      {"LayerWidthBeyondTheCap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 4611686018427387904}
)yaml",
       "{FILE}:3:34: model.layers[0].out: must be at most 2147483648 (2^31), found 4611686018427387904"},
      {"SyntheticSamplesBeyondTheCap",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  synthetic: {samples: 9000000000}
)yaml",
       "{FILE}:7:24: data.synthetic.samples: must be at most 2147483648 (2^31), found 9000000000"},
      {"AsyncStreamBeyondAnInt",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  steps: 1073741824
  batch_size: 8
pipeline:
  stages: 2
  schedule: async
  microbatches: 2
)yaml",
       "{FILE}:7:10: train.steps: async (PipeDream-2BW) streams every step's microbatches as one: 1073741824 steps x 2 microbatches exceed 2147483647"},
      {"IntraOpThreadsTooMany",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  intra_op_threads: 100000
)yaml",
       "{FILE}:7:21: pipeline.intra_op_threads: must be at most 1024, found 100000"},
      {"PaceTooLong",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  pace_ms: 1e300
)yaml",
       "{FILE}:7:12: pipeline.pace_ms: must be at most 3600000 (one hour), found 1e+300"},
      {"SimTimeTooLong",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  devices: [sim, sim]
  sim_ms: {F: 1, B: 1e7}
)yaml",
       "{FILE}:9:21: pipeline.sim_ms.B: must be at most 3600000 (one hour), found 1e+07"},
      {"SlowStageFactorTooLarge",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 2
  microbatches: 2
faults:
  inject:
    - {kind: slow_stage, stage: 1, factor: 1e300}
)yaml",
       "{FILE}:13:44: faults.inject[0].factor: must be at most 1000, found 1e+300"},
      {"DelayTooLong",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
faults:
  inject:
    - {kind: delay, probability: 0.5, ms: 1e300}
)yaml",
       "{FILE}:8:43: faults.inject[0].ms: must be at most 3600000 (one hour), found 1e+300"},
      {"OpTimeoutTooLong",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
supervision:
  op_timeout_ms: 1e18
)yaml",
       "{FILE}:7:18: supervision.op_timeout_ms: must be at most 3600000 (one hour), found 1e+18"},
      {"WatchdogTooLong",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
supervision:
  watchdog_s: 1e300
)yaml",
       "{FILE}:7:15: supervision.watchdog_s: must be at most 86400 (one day), found 1e+300"},
      {"RebalanceEveryZero",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  rebalance:
    every: 0
supervision:
  max_restarts: 1
)yaml",
       "{FILE}:9:12: pipeline.rebalance.every: must be at least 1, found 0"},
      {"RebalanceWithAsync",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  batch_size: 8
pipeline:
  stages: 2
  schedule: async
  microbatches: 2
  rebalance: {every: 5}
supervision:
  max_restarts: 1
)yaml",
       "{FILE}:12:3: pipeline.rebalance: async (PipeDream-2BW) has no step boundary where every stage's weights are one version to move; rebalancing needs a synchronous schedule"},
      {"RebalanceWithInterleaved",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
    - {type: tanh}
train:
  batch_size: 8
pipeline:
  stages: 2
  schedule: interleaved
  virtual_stages: 2
  microbatches: 2
  rebalance: {every: 5}
supervision:
  max_restarts: 1
)yaml",
       "{FILE}:14:3: pipeline.rebalance: re-partitions one chunk per stage; pipeline.virtual_stages is 2 (interleaved)"},
      {"RebalanceOneStage",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  rebalance: {every: 5}
supervision:
  max_restarts: 1
)yaml",
       "{FILE}:7:3: pipeline.rebalance: moves layers between stages; pipeline.stages is 1"},
      {"RebalanceWithoutRestarts",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  stages: 2
  rebalance: {every: 5}
)yaml",
       "{FILE}:8:3: pipeline.rebalance: needs supervision.max_restarts > 0: the layers move through the stages' step-boundary copies, which the supervisor keeps only when restarts are allowed"},
      {"DecayOneDOnAdam",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {type: adam, decay_1d: false}
)yaml",
       "{FILE}:7:27: train.optimizer.decay_1d: 'decay_1d' does not apply to the adam optimizer (only to adamw)"},
      {"WarmupOnStepSchedule",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  lr_schedule: {type: step, step_size: 2, warmup_steps: 3}
)yaml",
       "{FILE}:7:43: train.lr_schedule.warmup_steps: 'warmup_steps' does not apply to lr_schedule step (only to cosine, linear and constant)"},
      {"MinLrOnConstant",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  lr_schedule: {type: constant, warmup_steps: 3, min_lr: 0.0001}
)yaml",
       "{FILE}:7:50: train.lr_schedule.min_lr: 'min_lr' does not apply to lr_schedule constant (only to cosine and linear)"},
      {"MinLrAboveLr",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {type: adamw, lr: 0.001}
  lr_schedule: {type: cosine, warmup_steps: 2, min_lr: 0.01}
)yaml",
       "{FILE}:8:56: train.lr_schedule.min_lr: 0.01 is above train.optimizer.lr 0.001; the decay would raise the rate"},
      {"DecayStepsZero",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  lr_schedule: {type: linear, decay_steps: 0}
)yaml",
       "{FILE}:7:44: train.lr_schedule.decay_steps: must be at least 1, found 0"},
      {"LrPastFloat",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
train:
  optimizer: {type: adamw, lr: 1.0e+39}
)yaml",
       "{FILE}:7:32: train.optimizer.lr: 1e+39 is past float32's largest value (3.40282e+38), which the optimizer computes in"},
      {"EvalEveryZero",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
eval:
  every: 0
)yaml",
       "{FILE}:7:10: eval.every: must be at least 1, found 0"},
      {"EvalWithoutEvery",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
eval:
  batches: 2
)yaml",
       "{FILE}:6:1: eval.every: required: evaluate after every this many updates"},
      {"EvalWithoutHeldOutSplit",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
data:
  test_fraction: 0
eval: {every: 5}
)yaml",
       "{FILE}:8:15: eval.every: evaluates the held-out split, and data.test_fraction 0 holds none out (set data.test_fraction above 0)"},
      {"EvalOnTheNullDevice",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
pipeline:
  devices: [null]
eval: {every: 5}
)yaml",
       "{FILE}:8:15: eval.every: the null device computes no model, so there is nothing to evaluate"},
      {"MixedPrecisionUnknown",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
  mixed_precision: float16
)yaml",
       "{FILE}:6:20: model.mixed_precision: unknown compute type 'float16' (known: none, bfloat16; also bf16)"},
      {"MixedPrecisionOverBf16Parameters",
       R"yaml(model:
  layers:
    - {type: linear, in: 4, out: 8}
    - {type: relu}
    - {type: linear, in: 8, out: 3}
  dtype: bfloat16
  mixed_precision: bfloat16
)yaml",
       "{FILE}:7:20: model.mixed_precision: keeps parameters, gradients and optimizer state in float32; model.dtype is bfloat16 (leave model.dtype out)"},
      {"LlamaKvHeadsNotDividingHeads",
       R"yaml(model:
  layers:
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 4, kv_heads: 3, ffn_hidden: 64}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 64, dim: 32, tie: true}
data: {kind: tokens, path: config.yaml, seq_len: 16}
)yaml",
       "{FILE}:4:56: model.layers[1].kv_heads: 3 key/value heads do not divide the 4 query heads"},
      {"LlamaOddHeadWidth",
       R"yaml(model:
  layers:
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 32, kv_heads: 2, ffn_hidden: 64}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 64, dim: 32, tie: true}
data: {kind: tokens, path: config.yaml, seq_len: 16}
)yaml",
       "{FILE}:4:43: model.layers[1].heads: a head of dim / heads = 1 values cannot be rotated in pairs (rotary positions need an even head width)"},
      {"LlamaFfnHiddenMissing",
       R"yaml(model:
  layers:
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 4, kv_heads: 2}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 64, dim: 32, tie: true}
data: {kind: tokens, path: config.yaml, seq_len: 16}
)yaml",
       "{FILE}:4:7: model.layers[1].ffn_hidden: required for a llama_block layer"},
      {"TokenEmbeddingNotFirst",
       R"yaml(model:
  layers:
    - {type: rmsnorm, dim: 32}
    - {type: rmsnorm, dim: 32}
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 4, kv_heads: 2, ffn_hidden: 64}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 64, dim: 32, tie: true}
data: {kind: tokens, path: config.yaml, seq_len: 16}
)yaml",
       "{FILE}:5:14: model.layers[2].type: an embedding takes tokens; it must be the first layer, not layer 2"},
      {"TokenDtypeUnderText",
       R"yaml(model:
  layers:
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 4, kv_heads: 2, ffn_hidden: 64}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 64, dim: 32, tie: true}
data: {kind: text, path: config.yaml, seq_len: 16, dtype: uint16}
)yaml",
       "{FILE}:7:59: data.dtype: only used when data.kind is tokens, not text"},
      {"TokenizerUnderTokens",
       R"yaml(model:
  layers:
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 4, kv_heads: 2, ffn_hidden: 64}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 64, dim: 32, tie: true}
data: {kind: tokens, path: config.yaml, seq_len: 16, tokenizer: config.yaml}
)yaml",
       "{FILE}:7:65: data.tokenizer: only used when data.kind is text (a token file is tokenized already), not tokens"},
      {"LmHeadVocabDiffersFromTokenEmbedding",
       R"yaml(model:
  layers:
    - {type: token_embedding, vocab: 64, dim: 32}
    - {type: llama_block, dim: 32, heads: 4, kv_heads: 2, ffn_hidden: 64}
    - {type: rmsnorm, dim: 32}
    - {type: lm_head, vocab: 60, dim: 32}
data: {kind: tokens, path: config.yaml, seq_len: 16}
)yaml",
       "{FILE}:6:30: model.layers[3].vocab: 60 differs from model.layers[0].vocab 64: the logits name the same tokens"},
      {"YamlSyntaxError",
       R"yaml(model:
  layers: [{type: relu}
)yaml",
       "{FILE}:3:1: invalid YAML: end of sequence flow not found"},
  };
  return table;
}

/// `c.message` with the placeholders filled in for a config at `file`.
inline std::string expected_message(const bad_config& c, const std::string& file) {
  const std::string dir = std::filesystem::absolute(file).parent_path().lexically_normal().string();
  std::string out = c.message;
  for (auto [from, to] : {std::pair<std::string, std::string>{"{FILE}", file}, {"{DIR}", dir}}) {
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
  }
  return out;
}

}  // namespace actorpipe::tests
