// The config reference: every key the reader accepts. Keep a key's line
// here when you add it to a section reader; the reader refuses any key
// this table does not list.
#include "runtime/config/schema.hpp"

#include "runtime/config/config.hpp"

#include <cstring>
#include <iterator>
#include <regex>
#include <sstream>

namespace actorpipe::config_schema {

namespace {

// A plain array: constant-initialized, so keys() works from any static
// initializer.
constexpr key_doc table[] = {
    // -- model --
    {"model", "map", "required", "The network: a list of layers applied in order, like torch.nn.Sequential."},
    {"model.layers", "list of maps", "required",
     "The layers, each a map with a `type` (see Layer types below) and that type's keys."},
    {"model.layers[].type", "layer type", "required", "What the layer is: one of the layer types below."},
    {"model.layers[].in", "int", "required", "linear: input width."},
    {"model.layers[].out", "int", "required", "linear: output width."},
    {"model.layers[].p", "number in [0, 1]", "0", "dropout: the probability of zeroing an element."},
    {"model.layers[].dim", "int", "required",
     "layernorm, rmsnorm: the normalized width; embedding, token_embedding, gpt_block, llama_block, lm_head: the "
     "model width."},
    {"model.layers[].vocab", "int", "required",
     "embedding, token_embedding, lm_head: the vocabulary size (256 for bytes; a tokenizer's or token file's)."},
    {"model.layers[].max_seq", "int", "required", "embedding: how many positions it has (at least data.seq_len)."},
    {"model.layers[].heads", "int", "required",
     "gpt_block, llama_block: attention (query) heads; they must divide dim (llama_block: into an even head width)."},
    {"model.layers[].mlp_hidden", "int", "(4 dim)", "gpt_block: the hidden width of its MLP."},
    {"model.layers[].kv_heads", "int", "(heads)",
     "llama_block: key/value heads (grouped-query attention); they divide heads, and query head h reads key/value "
     "head h / (heads / kv_heads)."},
    {"model.layers[].ffn_hidden", "int", "required", "llama_block: the hidden width of its SwiGLU feed-forward."},
    {"model.layers[].rope_theta", "number > 0", "10000", "llama_block: the rotary base (LLaMA 3 uses 500000)."},
    {"model.layers[].norm_eps", "number > 0", "1e-05", "llama_block: the eps of its two RMSNorms."},
    {"model.layers[].eps", "number > 0", "1e-05", "rmsnorm: added to the mean square."},
    {"model.layers[].dropout", "number in [0, 1]", "0", "embedding, gpt_block: the dropout probability inside the layer."},
    {"model.layers[].tie", "bool", "false",
     "lm_head: share the embedding's table (embedding's wte.weight, token_embedding's weight), as GPT-2 and small "
     "LLaMAs do; each stage holds a copy and their gradients are summed."},
    {"model.layers[].repeat", "int", "1",
     "Any layer: this many consecutive copies. Layer indices, partitions and state-dict keys count the expanded list."},
    {"model.init_from", "path", "(seeded init)",
     "Initial weights: a file of `torch.save(model.state_dict(), PATH)`, relative to the config. A NaN or an infinity in it is refused."},
    {"model.dtype", "float32 | bfloat16 | float16", "float32",
     "Parameters, activations and gradients. Also written bf16, fp16, half, fp32, float."},
    {"model.mixed_precision", "none | bfloat16", "none",
     "bfloat16: every layer computes in bfloat16 from its weights cast for the step's forwards; activations and their "
     "gradients cross stages in bfloat16; the loss is taken in float32. Parameters, gradients, their reduction, "
     "clipping and the optimizer state stay float32, and so does the saved file (torchtitan's mixed_precision_param, "
     "Megatron's --bf16). Also written bf16."},
    // -- data --
    {"data", "map", "(synthetic data)", "Where the rows come from and how they are split."},
    {"data.kind", "csv | tensors | synthetic | text | tokens", "synthetic",
     "csv: a CSV file, optionally .gz, whose last column is the label. tensors: a `torch.save({\"x\": X, \"y\": Y})` "
     "file. synthetic: learnable data drawn from train.seed. text: a text file whose bytes (or, with a tokenizer, "
     "its tokens) are the tokens. tokens: a file of token ids, nanoGPT's flat train.bin or Megatron's indexed "
     ".bin beside its .idx. Sample i of text and tokens is tokens [i seq_len, (i + 1) seq_len + 1)."},
    {"data.path", "path", "required", "csv, tensors, text, tokens: the file, relative to the config."},
    {"data.seq_len", "int", "required", "text, tokens: tokens per sample; the targets are the next tokens."},
    {"data.dtype", "uint16 | uint32", "uint16",
     "tokens: the ids' type in a flat file, little-endian (a Megatron .idx names its own)."},
    {"data.tokenizer", "path", "(bytes)",
     "text: a SentencePiece model (`spm_train`'s .model), relative to the config: the text is tokenized at load, "
     "the same ids as `actorpipe tokenize`."},
    {"data.test_fraction", "number in [0, 1)", "0.2", "The share of rows held out for the test accuracy and loss."},
    {"data.split", "tail | random", "tail",
     "tail: the last test_fraction of the rows (file order) are held out. random: one permutation seeded by train.seed "
     "is split instead."},
    {"data.shuffle", "bool", "false", "Reshuffle the training rows every epoch (seeded by train.seed)."},
    {"data.normalize", "none | standard", "none", "standard: scale every feature by the training split's mean and std."},
    {"data.synthetic", "map", "(the defaults below)", "synthetic: the size of the drawn data."},
    {"data.synthetic.samples", "int", "2048", "Rows drawn."},
    {"data.synthetic.features", "int", "(model input width)", "Features per row; it must equal the model's input width."},
    {"data.synthetic.classes", "int", "(model output width)", "Classes; at least 2 and at most the model's output width."},
    // -- train --
    {"train", "map", "(the defaults below)", "How long and how to train."},
    {"train.steps", "int", "50", "Optimizer steps: consecutive batches, drop_last, wrapping around epochs."},
    {"train.batch_size", "int", "256", "Rows per step, split into pipeline.microbatches (and over parallel.dp replicas)."},
    {"train.clip_grad_norm", "number > 0", "(no clipping)",
     "Clip the global 2-norm of the gradients over every stage, as torch's clip_grad_norm_."},
    {"train.seed", "int", "42", "Initial weights, dropout masks, shuffling, the random split and synthetic data."},
    {"train.optimizer", "map", "(adam, lr 0.001)", "The optimizer, bitwise as torch.optim's."},
    {"train.optimizer.type", "adam | adamw | sgd", "adam",
     "torch.optim.Adam, torch.optim.AdamW (decoupled weight decay) or torch.optim.SGD."},
    {"train.optimizer.lr", "number > 0", "0.001", "The learning rate."},
    {"train.optimizer.betas", "[number, number]", "[0.9, 0.999]", "adam, adamw: beta1 and beta2, each in [0, 1]."},
    {"train.optimizer.eps", "number > 0", "1e-08", "adam, adamw: added to the denominator."},
    {"train.optimizer.weight_decay", "number >= 0", "0",
     "adam, sgd: an L2 penalty added to the gradient, as torch's weight_decay. adamw (default 0.01, as torch's): "
     "decoupled, each parameter scaled by 1 - lr * weight_decay with the step's rate before its update."},
    {"train.optimizer.decay_1d", "bool", "true",
     "adamw: false exempts parameters of fewer than two dimensions (norm gains, biases) from weight decay, as nanoGPT "
     "and Megatron group them. A tied weight is one parameter, decayed once."},
    {"train.optimizer.momentum", "number >= 0", "0", "sgd: momentum."},
    {"train.lr_schedule", "map", "(constant)",
     "How the learning rate changes: the rate of each update is computed from its step alone, so a resumed, healed "
     "or re-placed run needs no scheduler state."},
    {"train.lr_schedule.type", "none | step | cosine | linear | constant", "none",
     "step: torch's StepLR. cosine, linear: a linear warmup (the rate of update s is lr (s + 1) / (warmup_steps + 1)), "
     "then a cosine or linear decay to min_lr over decay_steps, then min_lr (nanoGPT's get_lr, torchtitan's "
     "decay_type). constant: the warmup, then lr."},
    {"train.lr_schedule.step_size", "int", "1", "step: multiply the rate by gamma every step_size steps."},
    {"train.lr_schedule.gamma", "number > 0", "1", "step: the factor."},
    {"train.lr_schedule.warmup_steps", "int >= 0", "0", "cosine, linear, constant: updates of linear warmup."},
    {"train.lr_schedule.decay_steps", "int", "(train.steps - warmup_steps)",
     "cosine, linear: updates of decay after the warmup. Past train.steps the run ends before the rate reaches "
     "min_lr (the plan line says where)."},
    {"train.lr_schedule.min_lr", "number >= 0", "0", "cosine, linear: the rate at the end of the decay; at most lr."},
    // -- eval --
    {"eval", "map", "(only at the end)",
     "Validation during training: the held-out split runs forward only through the pipeline (any schedule, any "
     "process layout), dropout off, after every `every`-th update and after the last. It changes no training bit."},
    {"eval.every", "int", "required", "Evaluate after every this many updates (and after the last)."},
    {"eval.batches", "int", "(the whole held-out split)",
     "Evaluate the first this many batches of train.batch_size rows of the held-out split."},
    // -- parallel --
    {"parallel", "map", "(one replica)", "Data parallelism around the pipeline."},
    {"parallel.dp", "int", "1",
     "Replicas of the whole pipeline; each stage's gradients are summed over its replicas before the step. "
     "train.batch_size is split over them."},
    {"parallel.allreduce", "auto | gloo | nccl", "auto",
     "How replicas sum their gradients: auto takes nccl when every stage is on a GPU in one process, gloo otherwise. "
     "Across processes the groups are gloo: auto takes it (the plan line says so), and nccl is refused until it has "
     "run on a GPU across processes."},
    // -- pipeline --
    {"pipeline", "map", "(one stage)", "How the model is cut into stages and which schedule runs them."},
    {"pipeline.stages", "int", "1", "Pipeline stages. Layers are balanced by compute (multiply-adds per token) unless a partition is given."},
    {"pipeline.partition", "list of [first, last]", "(balanced by compute)",
     "Inclusive layer ranges, one per virtual stage (stages x virtual_stages), chaining over every layer."},
    {"pipeline.schedule", "schedule name", "1f1b", "Which policy picks each stage's next op (docs/SCHEDULES.md):"},
    {"pipeline.microbatches", "int", "1",
     "Microbatches per step, split like torch.chunk; microbatch i's loss is weighted by its size over the batch. "
     "naive runs the batch as one."},
    {"pipeline.virtual_stages", "int", "(the schedule's)",
     "Model chunks per stage: interleaved (default 2) and greedy (default 1) take any count; zb-v and dualpipev run 2; "
     "the others 1."},
    {"pipeline.max_inflight", "int", "(S - rank + (v - 1) S)", "greedy only: microbatches a stage may hold open at once."},
    {"pipeline.devices", "auto or list", "auto",
     "One device per stage: cpu, cuda:N, or a measuring device (null: ops do no work; sim: ops take sim_ms), or one "
     "list per replica. auto: every stage on cpu without a GPU; with GPUs, round-robin in one process, and "
     "cuda:LOCAL_RANK in each process of a multi-process run."},
    {"pipeline.intra_op_threads", "int in [0, 1024]", "0", "LibTorch threads per stage; 0: cores / stages, at least 1."},
    {"pipeline.pace_ms", "ms", "0",
     "Pad every op to at least this wall time: a stand-in for a slower device. 0: off."},
    {"pipeline.lockstep", "bool", "false",
     "The deterministic test device: stages fire in lock-step rounds of one op on a virtual clock, so the emergent "
     "order is the uniform-cost order whatever the machine's load."},
    {"pipeline.recompute", "all | none | list of bool", "none",
     "Activation recomputation per stage: a recomputing stage keeps only each forward's input and runs the forward "
     "again inside its backward."},
    {"pipeline.threads", "dedicated | shared", "(the device's)",
     "dedicated: a thread per stage. shared: CAF's scheduler (the null device at dp 1, whose ops never block, takes it "
     "by default)."},
    {"pipeline.sim_ms", "map", "(F 1, B 1, W 0)", "The sim device's op times, as the simulator's cost model."},
    {"pipeline.sim_ms.F", "ms", "1", "A forward."},
    {"pipeline.sim_ms.B", "ms", "1", "A backward for the input; a full backward takes B + W."},
    {"pipeline.sim_ms.W", "ms", "0", "A backward for the weights."},
    {"pipeline.rebalance", "map", "(off)",
     "Move layers between stages by their measured cost during the run, at a step boundary. Needs "
     "supervision.max_restarts > 0, one chunk per stage and a schedule that flushes; under `actorpipe launch` the "
     "layers' state moves between the processes' memories, in one process every stage restarts from the boundary "
     "in memory. The weights stay bitwise equal to a run without it."},
    {"pipeline.rebalance.every", "int", "required",
     "Every this many steps, the supervisor compares the stages' measured busy time (a process held to a CPU "
     "quota: its stages' CPU time over the quota, where longer)."},
    {"pipeline.rebalance.threshold", "number in (0, 10]", "0.1",
     "Re-partition at that step boundary when the slowest stage is more than this fraction (0.1: 10 %) above its "
     "balanced share (the mean)."},
    // -- compare --
    {"compare", "map", "(naive, gpipe, 1f1b)", "What `actorpipe compare` runs."},
    {"compare.schedules", "list of schedule names", "(naive, gpipe, 1f1b)",
     "The schedules to run, in this order; NAME+recompute runs NAME with every stage recomputing."},
    // -- checkpoint --
    {"checkpoint", "map", "(no checkpoints)", "On-disk checkpoints, which `--resume` continues from."},
    {"checkpoint.dir", "path", "required", "Where the step_NNNNNNNN.pt files go, relative to the config."},
    {"checkpoint.every", "int", "1", "Write one every this many steps; the last step is always written."},
    {"checkpoint.keep_last", "int", "3",
     "Keep the newest this many (0: every one); older ones go once a newer one is safely written."},
    // -- supervision --
    {"supervision", "map", "(the defaults below)", "Watching the run: hangs, NaNs, restarts and lost processes."},
    {"supervision.watchdog_s", "seconds in [0, 86400]", "60",
     "No op fired anywhere for this long: stop with exit 3 and the per-stage op grid. 0: no watchdog."},
    {"supervision.on_nonfinite", "skip | stop", "skip",
     "A NaN or an infinity before the step or left by it: skip the step (weights and optimizer state as before it), "
     "or write a checkpoint and stop."},
    {"supervision.check_updates", "bool", "true",
     "Each update steps aside and is checked for a NaN or an infinity in every parameter and optimizer state before "
     "it counts (a stage holds its state twice during the step). false: in place and unchecked."},
    {"supervision.max_skipped_fraction", "number in [0, 1]", "0.5",
     "More steps than this share of train.steps skipped for a NaN or an infinity: stop with exit 1. 1: never."},
    {"supervision.max_restarts", "int", "0",
     "Restarts after a stage or a process died, at most this many within window_steps; 0: a death ends the run."},
    {"supervision.window_steps", "int", "10", "The window max_restarts counts over."},
    {"supervision.copy_every", "int", "1",
     "Processes: keep boundary copies after every K-th step only; a death then re-runs up to K steps."},
    {"supervision.op_timeout_ms", "ms", "500",
     "A stage that waited this long for its next input asks the sender to send it again (a dropped message). 0: never."},
    {"supervision.connect_timeout_s", "seconds in [1, 86400]", "60",
     "Processes: how long a rank tries to reach the master and the others, and how long a transfer or a remote "
     "request may wait."},
    {"supervision.heartbeat_timeout_s", "seconds in [1, 86400]", "10",
     "Processes: a peer that sent nothing (not even its heartbeat every 0.5 s) for this long is taken for dead."},
    {"supervision.replace_timeout_s", "seconds in [0, 86400]", "(unset)",
     "Processes: how long to wait for a lost process's replacement. Unset: `launch` starts one (elsewhere the run "
     "ends). 0: never wait; its stages go on in the processes that are left, from their memory. Above 0: `launch` "
     "starts one; under another launcher the stages go on in the others. Set (any value): the run takes processes "
     "that join (`launch --join`). Needs max_restarts > 0."},
    {"supervision.shrink", "recut | double_up", "double_up",
     "Processes, going on without a lost process: `recut` cuts the layers again into one stage per process left "
     "(at most pipeline.stages; every replica the same cut), each layer's state from memory; `double_up` keeps the "
     "stage count and a survivor runs the lost stage beside its own. Needs replace_timeout_s."},
    // -- faults --
    {"faults", "map", "(none)", "Faults injected on purpose, to see the runtime cope. Picked by seed and message ids, never by timing, so a scenario repeats."},
    {"faults.seed", "int", "0", "Draws the messages that probability-based faults pick."},
    {"faults.inject", "list of maps", "(none)", "The faults, each a map with a kind (see Fault kinds below)."},
    {"faults.inject[].kind", "fault kind", "required", "What goes wrong: one of the fault kinds below."},
    {"faults.inject[].stage", "int", "0", "The stage it happens on (nonfinite, slow_stage, kill_stage, throw, kill_process, stop_process, stale_message)."},
    {"faults.inject[].step", "int", "0", "The step it happens at."},
    {"faults.inject[].microbatch", "int", "0", "nonfinite: the microbatch whose value turns NaN."},
    {"faults.inject[].where", "grad | activation | update", "grad",
     "nonfinite: a microbatch's gradient or activation, or the stage's first parameter right after its update."},
    {"faults.inject[].after_op", "op", "required",
     "kill_stage, kill_process, stop_process: the op (F5, B2, W3) right after which it happens; kill_process and "
     "stop_process also take `update`."},
    {"faults.inject[].op", "op", "required", "throw: the op that throws; drop: the op whose message is lost."},
    {"faults.inject[].from", "int", "(any stage)", "delay, drop: only messages sent by this stage."},
    {"faults.inject[].to", "int", "(any stage)", "delay, drop: only messages sent to this stage."},
    {"faults.inject[].probability", "number in [0, 1]", "0", "duplicate, delay: the share of messages picked."},
    {"faults.inject[].ms", "ms", "0", "delay: how long a picked message is held back."},
    {"faults.inject[].factor", "number in [1, 1000]", "1", "slow_stage: every op takes this many times as long."},
    {"faults.inject[].replica", "int", "(every replica)", "A stage's fault with parallel.dp > 1: only this replica's."},
};

}  // namespace

const std::vector<key_doc>& keys() {
  static const std::vector<key_doc> all(std::begin(table), std::end(table));
  return all;
}

namespace {

/// "model.layers[3].in" -> "model.layers[].in".
std::string normalized(const std::string& path) {
  static const std::regex index(R"(\[[0-9]+\])");
  return std::regex_replace(path, index, "[]");
}

}  // namespace

std::vector<std::string> keys_under(const std::string& path) {
  const std::string prefix = path.empty() ? "" : normalized(path) + ".";
  std::vector<std::string> out;
  for (const auto& k : keys()) {
    const std::string p = k.path;
    if (p.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = p.substr(prefix.size());
    if (rest.find_first_of(".[") == std::string::npos) out.push_back(rest);
  }
  return out;
}

const std::vector<choice_doc>& layer_types() {
  static const std::vector<choice_doc> types{
      {"linear", "y = x W^T + b (in, out)."},
      {"relu", "ReLU; keeps the width."},
      {"gelu", "GELU, exact (torch's default); keeps the width."},
      {"tanh", "tanh; keeps the width."},
      {"dropout", "Dropout with p, seeded by train.seed and the layer; keeps the width."},
      {"layernorm", "LayerNorm over dim."},
      {"embedding", "GPT token and position embeddings (vocab, dim, max_seq, dropout): bytes in, vectors out."},
      {"gpt_block", "A pre-norm transformer block (dim, heads, mlp_hidden, dropout), as tests/reference/gpt_reference.py."},
      {"lm_head", "The vocabulary projection, logits = x W^T (vocab, dim, tie), with no norm and no bias; the loss is "
                  "cross-entropy per token."},
      {"token_embedding", "LLaMA's token embedding (vocab, dim): token ids in, vectors out; no positions (the blocks "
                          "rotate them in)."},
      {"llama_block", "A LLaMA block (dim, heads, kv_heads, ffn_hidden, rope_theta, norm_eps): RMSNorm, attention "
                      "with rotary positions and grouped key/value heads, RMSNorm, a SwiGLU feed-forward, no biases, "
                      "as tests/reference/llama_reference.py."},
      {"rmsnorm", "RMSNorm over dim (eps), computed in float32, with a gain and no bias."},
  };
  return types;
}

const std::vector<choice_doc>& fault_kinds() {
  static const std::vector<choice_doc> kinds{
      {"nonfinite", "A NaN in a microbatch's gradient or activation, or in the first parameter after the update (where)."},
      {"duplicate", "A picked message is sent twice; the receiver drops and counts the copy."},
      {"delay", "A picked message is held back ms."},
      {"slow_stage", "Every op of the stage takes factor times as long; the run names the straggler."},
      {"kill_stage", "The stage actor exits right after after_op; with max_restarts the supervisor restarts it."},
      {"throw", "The op throws inside; the stage dies of it."},
      {"drop", "The message for op at step is lost; the receiver asks for it again after supervision.op_timeout_ms."},
      {"kill_process", "Multi-process only: the stage's whole process raises SIGKILL right after after_op."},
      {"stop_process", "Multi-process only: the stage's whole process stops itself (SIGSTOP), as a hung or lost host."},
      {"stale_message",
       "In every attempt after a restart or a heal, the stage's first message at or after step goes out again under the "
       "attempt before's epoch; the receiver drops it."},
  };
  return kinds;
}

namespace {

std::string section_of(const std::string& path) { return path.substr(0, path.find_first_of(".[")); }

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string schedule_list() {
  std::string out;
  for (const auto& name : known_schedules()) out += (out.empty() ? "" : ", ") + std::string("`") + name + "`";
  return out;
}

}  // namespace

std::string render_markdown() {
  std::ostringstream md;
  std::string current;
  for (const auto& k : keys()) {
    const std::string path = k.path;
    if (section_of(path) != current || path == section_of(path)) {
      current = section_of(path);
      md << (md.tellp() > 0 ? "\n" : "") << "## " << current << "\n\n" << k.meaning << " Default: " << k.default_text
         << ".\n\n| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
      continue;
    }
    md << "| `" << path << "` | " << cell(k.type) << " | " << cell(k.default_text) << " | " << cell(k.meaning);
    if (path == "pipeline.schedule") md << " " << schedule_list() << ".";
    md << " |\n";
  }
  md << "\n## Layer types\n\n| type | what it is |\n| --- | --- |\n";
  for (const auto& t : layer_types()) md << "| `" << t.name << "` | " << cell(t.meaning) << " |\n";
  md << "\n## Fault kinds\n\n| kind | what happens |\n| --- | --- |\n";
  for (const auto& f : fault_kinds()) md << "| `" << f.name << "` | " << cell(f.meaning) << " |\n";
  return md.str();
}

namespace {

/// `text` in lines of at most `width` characters, each after `indent`.
std::string wrapped(const std::string& text, const std::string& indent, size_t width) {
  std::istringstream words(text);
  std::string out, line, word;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + indent + line + "\n";
}

}  // namespace

std::string render_text(const std::string& prefix) {
  std::ostringstream out;
  for (const auto& k : keys()) {
    if (std::strncmp(k.path, prefix.c_str(), prefix.size()) != 0) continue;
    std::string meaning = k.meaning;
    if (std::string(k.path) == "pipeline.schedule") meaning += " " + schedule_list();
    out << k.path << "  (" << k.type << "; default " << k.default_text << ")\n" << wrapped(meaning, "    ", 72);
  }
  return out.str();
}

}  // namespace actorpipe::config_schema
