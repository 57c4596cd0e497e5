#pragma once
// The YAML config: schema, defaults and validation.
//
// load_config() either returns a fully validated config or throws
// config_error whose what() is one line of the form
//   FILE:LINE:COL: KEY.PATH: message
// Callers (apps/commands.cpp) print it and exit with code 2.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/faults/fault_kind.hpp"

namespace actorpipe {

/// A bad config, a bad data file or an impossible request; exit code 2.
class config_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A malformed or inconsistent launcher environment. what() is one line
/// that names the variable and what is wrong with it, values quoted
/// printable and cut short ("RANK 'x' is not a non-negative integer").
/// A config_error, so the apps print it and exit with code 2.
struct rank_env_error : config_error {
  using config_error::config_error;
  /// `quiet`: every rank meets this error alike, and rank 0 says it for
  /// them all; the apps exit 2 without printing it (one line in total).
  rank_env_error(const std::string& line, bool quiet) : config_error(line), quiet_(quiet) {}
  bool quiet() const { return quiet_; }

 private:
  bool quiet_ = false;
};

/// A 1-based position in the config file.
struct source_mark {
  int line = 0;
  int column = 0;
};

/// One entry of model.layers. Unused fields stay at their defaults.
struct layer_spec {
  /// linear | relu | gelu | tanh | dropout | layernorm | embedding |
  /// gpt_block | lm_head (the transformer layers of
  /// tests/reference/gpt_reference.py) | token_embedding | llama_block |
  /// rmsnorm (tests/reference/llama_reference.py's)
  std::string type;
  int64_t in = 0;    ///< linear
  int64_t out = 0;   ///< linear
  double p = 0.0;    ///< dropout probability (dropout; embedding's and gpt_block's `dropout`)
  int64_t dim = 0;   ///< layernorm normalized size; embedding, gpt_block, lm_head width
  int64_t vocab = 0;       ///< embedding, lm_head
  int64_t max_seq = 0;     ///< embedding: positions
  int64_t heads = 0;       ///< gpt_block
  int64_t mlp_hidden = 0;  ///< gpt_block (default 4 dim)
  bool tie = false;        ///< lm_head: shares the embedding's wte.weight (a token_embedding's weight)
  int64_t kv_heads = 0;    ///< llama_block: key/value heads (grouped-query attention; default heads)
  int64_t ffn_hidden = 0;  ///< llama_block: SwiGLU's hidden width
  double rope_theta = 10000.0;  ///< llama_block: rotary base
  double eps = 1e-5;       ///< rmsnorm's eps; llama_block's norm_eps
  /// The config entry it came from ("model.layers[1]"): `repeat: n`
  /// expands one entry into n layers.
  std::string key;
};

struct optimizer_config {
  std::string type = "adam";  ///< adam | adamw | sgd
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// adam, sgd: an L2 term added to the gradient; adamw: decoupled, the
  /// parameter scaled by 1 - lr * weight_decay before the step (0.01 by
  /// default for adamw, as torch's).
  double weight_decay = 0.0;
  double momentum = 0.0;  ///< sgd only
  /// adamw: false leaves parameters of fewer than two dimensions (norm
  /// gains, biases) undecayed, as nanoGPT and Megatron group them.
  bool decay_1d = true;
};

/// Whether `type` keeps Adam's state (step, exp_avg, exp_avg_sq,
/// max_exp_avg_sq): adam and adamw.
inline bool adam_family(const std::string& type) { return type == "adam" || type == "adamw"; }

struct lr_schedule_config {
  /// none | step (torch's StepLR) | cosine | linear | constant (a linear
  /// warmup, then a cosine or linear decay to min_lr, or none).
  std::string type = "none";
  int64_t step_size = 1;  ///< step
  double gamma = 1.0;     ///< step
  int64_t warmup_steps = 0;  ///< cosine, linear, constant
  /// cosine, linear: steps of decay after the warmup; -1: train.steps -
  /// warmup_steps (at least 0), so a --steps override moves it too.
  int64_t decay_steps = -1;
  double min_lr = 0.0;  ///< cosine, linear: the rate after the decay
};

struct model_config {
  std::vector<layer_spec> layers;
  std::string init_from;  ///< resolved path, empty = seeded default init
  /// An lm_head with tie: true: the embedding's layer index and the head's
  /// (-1 without a tie). Each holds a copy; their gradients are summed.
  int tie_embedding = -1, tie_head = -1;
  /// Parameters, activations and gradients: float32 | bfloat16 | float16.
  std::string dtype = "float32";
  /// none | bfloat16: parameters, gradients and optimizer state stay in
  /// model.dtype (float32); every layer computes in bfloat16 (its weights
  /// cast for the forward), activations and their gradients cross stages
  /// in bfloat16, and the loss is taken in float32.
  std::string mixed_precision = "none";
};

struct data_config {
  /// csv | tensors | synthetic | text (bytes are the tokens, or a
  /// tokenizer's) | tokens (a file of token ids)
  std::string kind = "synthetic";
  int64_t seq_len = 0;             ///< text, tokens: tokens per sample
  std::string token_dtype = "uint16";  ///< tokens: uint16 | uint32, little-endian
  std::string tokenizer;           ///< text: a SentencePiece model (resolved path); empty: bytes
  std::string path;                ///< resolved path (csv, tensors)
  double test_fraction = 0.2;
  /// tail: the last test_fraction of the rows are held out (file order).
  /// random: a seeded (train.seed) permutation of the rows is split instead.
  std::string split = "tail";
  bool shuffle = false;
  std::string normalize = "none";  ///< none | standard (train-split mean/std)
  int64_t samples = 2048;          ///< synthetic
  int64_t features = 0;            ///< synthetic; 0 = model.layers[0].in
  int64_t classes = 0;             ///< synthetic; 0 = last layer's out
};

/// eval: the held-out split evaluated during training, forward only,
/// after every `every`-th update and after the last (0: only at the end).
struct eval_config {
  int64_t every = 0;
  /// Batches of train.batch_size rows from the split's start; 0: all.
  int64_t batches = 0;
};

/// Whether an evaluation follows the update that brings a run of `steps`
/// steps to `updates` updates done: every `every`-th and the last.
inline bool eval_due(const eval_config& e, int64_t updates, int64_t steps) {
  return e.every > 0 && updates > 0 && (updates % e.every == 0 || updates == steps);
}

struct train_config {
  int64_t steps = 50;
  int64_t batch_size = 256;
  optimizer_config optimizer;
  lr_schedule_config lr_schedule;
  double clip_grad_norm = 0.0;  ///< 0 = no clipping
  uint64_t seed = 42;
};

/// The null and sim devices do no work: they measure the runtime and the
/// schedules, not a model.
inline bool is_measuring_device(const std::string& d) { return d == "null" || d == "sim"; }

struct pipeline_config {
  int stages = 1;
  /// Inclusive layer ranges, one per virtual stage (stages x
  /// virtual_stages); empty = balanced by compute (multiply-adds per
  /// token, runtime/model/partition.hpp).
  std::vector<std::pair<int, int>> partition;
  std::string schedule = "1f1b";  ///< a name from known_schedules()
  /// Model chunks per stage (2 for zb-v; interleaved's v, default 2; 1
  /// otherwise). The schedule's placement (runtime/schedule/placement) says which
  /// virtual stage each chunk is; partition ranges go by virtual stage.
  int virtual_stages = 1;
  /// greedy: microbatches a stage may hold open at once; 0 = S - rank +
  /// (virtual_stages - 1) S.
  int max_inflight = 0;
  int microbatches = 1;
  /// One device per stage after loading: "cpu", "cuda:N", or one of the
  /// two measuring devices (every stage alike): "null" (ops do no work,
  /// activations are empty tensors: what is left is the runtime) and
  /// "sim" (an op does no work but takes sim_ms of its kind).
  std::vector<std::string> devices;
  /// The devices came from `auto` (written or left out).
  bool auto_devices = false;
  /// The sim device's op times in ms, as the simulator's cost model: a full
  /// backward (policies that do not split it) takes B + W.
  double sim_f_ms = 1.0, sim_b_ms = 1.0, sim_w_ms = 0.0;
  /// Where the stage actors run: "dedicated" (a thread each: an op blocks
  /// its thread while it computes) or "shared" (CAF's scheduler, for the
  /// null device, whose ops never block). Empty = the device's default.
  std::string threads;
  int intra_op_threads = 0;  ///< per stage; 0 = cores / stages, at least 1
  /// Every op is padded to at least this wall time (a stand-in for a
  /// slower device). 0 = off.
  double pace_ms = 0.0;
  /// Deterministic test device: stages fire in lock-step rounds of one op
  /// each on a virtual clock, messages of round t visible in round t + 1,
  /// so the emergent order is the uniform-cost order whatever the machine's
  /// load.
  bool lockstep = false;
  /// Activation recomputation per stage (GPipe's re-materialisation): a
  /// recomputing stage keeps only each forward's input and runs the forward
  /// again inside its backward. Sized to stages after loading.
  std::vector<bool> recompute;
  /// pipeline.rebalance: every `every` steps (0 = off) rank 0's supervisor
  /// compares the stages' measured busy time, and when the slowest is more
  /// than `threshold` (a fraction) above the mean it re-partitions the
  /// layers by measured cost at that step boundary (runs under launch).
  struct rebalance_config {
    int every = 0;
    double threshold = 0.1;
  } rebalance;
};

/// Data parallelism around the pipeline: `dp` replicas of every stage,
/// each stage's gradients summed over its replicas before the step.
struct parallel_config {
  int dp = 1;
  std::string allreduce = "auto";  ///< auto | gloo | nccl
};

/// Watching the run: with no op fired anywhere for watchdog_s seconds the
/// run stops with the per-stage op grid (0 = no watchdog).
struct supervision_config {
  double watchdog_s = 60.0;
  /// A NaN or infinity before the optimizer step, or left by it in a
  /// parameter or its optimizer state: skip the step (weights and optimizer
  /// state as before it) or stop after a checkpoint.
  std::string on_nonfinite = "skip";
  /// Each update steps aside and is checked for a NaN or an infinity in
  /// every parameter and optimizer state before it counts: a stage holds
  /// its weights and optimizer state twice during the step, and the next
  /// step waits for every stage's verdict. false: the update is applied in
  /// place, unchecked (one copy; the next step starts without waiting); a
  /// non-finite weight is then seen only in later activations and at the
  /// end of the run, which fails.
  bool check_updates = true;
  /// Restarts after a stage died or threw: at most max_restarts within any
  /// window_steps steps (0: a death ends the run). Each step boundary is
  /// then kept in memory to roll back to.
  int max_restarts = 0;
  int window_steps = 10;
  /// Multi-process: a stage keeps its boundary copy (and at dp = 1 sends
  /// it to its keeper's process) after every copy_every-th step (steps
  /// k-1, 2k-1, ...) and at each generation's start only. A death then
  /// re-runs up to copy_every steps; a fault-free run pays 1/copy_every
  /// of the copies' cost.
  int copy_every = 1;
  /// A stage that waited this long for its next input asks the sender to
  /// send it again (a dropped message). 0: never.
  double op_timeout_ms = 500.0;
  /// More steps than this fraction of train.steps skipped for a NaN or an
  /// infinity: the run stops and fails (1: never).
  double max_skipped_fraction = 0.5;
  /// Multi-process: how long a rank tries to reach the master (and the
  /// others), and how long a transfer or a remote request may wait.
  double connect_timeout_s = 60.0;
  /// Multi-process: a peer process that sent nothing (not even the
  /// heartbeat every 0.5 s) for this long is taken for dead (a stopped
  /// process, a lost host, a cut link): its connection closes and its
  /// stages go down.
  double heartbeat_timeout_s = 10.0;
  /// Multi-process: how long to wait for a lost process's replacement.
  /// Below 0 (unset): `launch` starts one, and elsewhere the run ends. 0:
  /// never wait; the stages go on over the processes that are left (a
  /// re-placement, actors/supervisor/heal_decision.cpp). Above 0: `launch` starts one;
  /// where nothing can, the stages go on over the others.
  double replace_timeout_s = -1.0;
  /// Multi-process, going on without a process: "recut" cuts the layers
  /// again into as many stages as the processes left can each hold one of
  /// (runtime/dist/placement/recut.hpp); "double_up" keeps the stage count
  /// and a survivor runs the lost stage beside its own.
  std::string shrink = "double_up";
};


struct faults_config {
  uint64_t seed = 0;
  std::vector<fault_spec> inject;
};

/// On-disk checkpoints every `every` steps (0 = none) into `dir`; the
/// newest `keep_last` stay (0: every one).
struct checkpoint_config {
  std::string dir;
  int64_t every = 0;
  int keep_last = 3;
};

struct config {
  std::string path;  ///< the file it was read from, as given
  model_config model;
  data_config data;
  train_config train;
  pipeline_config pipeline;
  parallel_config parallel;
  checkpoint_config checkpoint;
  supervision_config supervision;
  faults_config faults;
  eval_config eval;
  /// Device of every (replica, stage) after loading; replica 0 is
  /// pipeline.devices.
  std::vector<std::vector<std::string>> replica_devices;
  /// compare.schedules: what `actorpipe compare` runs; empty = its default.
  std::vector<std::string> compare_schedules;
  /// Position of every key that was present, by dotted path
  /// ("pipeline.microbatches", "model.layers[2].in").
  std::map<std::string, source_mark> marks;

  /// "FILE:LINE:COL: KEY: " for a key (the file alone if the key is absent).
  std::string where(const std::string& key) const;
  /// A config_error for `key` with the given message.
  config_error error_at(const std::string& key, const std::string& msg) const;
};

/// What the machine offers, and where this process sits in a run; the
/// config is checked against it.
struct load_env {
  int cuda_devices = 0;
  /// Set only in a multi-process run: this process's rank among those on
  /// its machine. `auto` then puts all of its stages on cuda:local_rank
  /// (torchrun's one process per GPU).
  std::optional<int> local_rank;
  int rank = 0;                                    ///< the process's rank, for messages
  std::string local_rank_variable = "LOCAL_RANK";  ///< where local_rank came from, for messages
};

/// Reads and validates `path`. Throws config_error.
config load_config(const std::string& path, const load_env& env = {});

/// How this process names the device of stage (replica, stage), which rank
/// `owner` runs, before the ranks meet: its name in cfg.replica_devices,
/// the same on every rank, except under `auto` on CUDA in a multi-process
/// run, where another rank's stages are on that rank's own GPU, whose local
/// rank this process does not know: "cuda:LOCAL_RANK of rank 1" (the
/// variable as env.local_rank_variable names it).
std::string device_label(const config& cfg, const load_env& env, int replica, int stage, int owner);

/// Schedules the runtime knows, for messages and suggestions.
const std::vector<std::string>& known_schedules();

/// The candidate closest to `word` by edit distance, or "" if none is close.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace actorpipe
