#!/usr/bin/env python3
"""The independent reference for actorpipe's training (GPT and LLaMA layers), in plain PyTorch.

Reads the same YAML config as `actorpipe train`, builds the model with
gpt_reference.build, or llama_reference.build when the layers are LLaMA ones
(the config's `repeat: n` expanded into n layers), and

  --write-init PATH        seeds torch (--seed, default train.seed), builds the
                           model and torch.save's its state dict (a valid
                           model.init_from: with tie: true both tied keys);
  --init PATH --out PATH   loads that state dict (default: the config's
                           model.init_from), trains --steps steps (default
                           train.steps) the way actorpipe does, and saves the
                           final state dict (float32);
  --evals PATH             also writes the held-out evaluations (below) as a
                           JSON list [{"step": k, "loss": l, "accuracy": a}, ...];
  --eval-every K           evaluates every K updates without a config `eval` key
                           (overrides eval.every).

Training, step by step as actorpipe: data kind text (gpt_reference.text_windows)
or tokens (llama_reference.token_windows), the test set is the tail (n_test =
llround(test_fraction * n)) of the file (split: tail) or of one permutation
seeded by train.seed (split: random); step t's batch is rows [(t % per_epoch) *
B, +B) of the train split (drop_last, wrapping), of a permutation seeded by
(train.seed, epoch) with data.shuffle; with parallel.dp > 1 the batch is
torch.chunk'ed into dp shares first; each share is torch.chunk'ed into
pipeline.microbatches; each microbatch's mean cross-entropy is weighted by its
share of the batch (b_mb / B) and its gradients accumulate; then
clip_grad_norm_ (train.clip_grad_norm > 0; a tied tensor counts once), the
optimizer step (adam, adamw or sgd with the config's hyperparameters) and the
learning-rate schedule. Everything in float32 on the CPU unless
model.mixed_precision says bfloat16.

Layers: embedding, gpt_block, layernorm (gpt_reference) or token_embedding,
llama_block, rmsnorm (llama_reference), and lm_head (tie: true shares the
preceding embedding's / token_embedding's weight) in either; one model does not
mix the two families (refused). --write-init of a LLaMA model is
llama_reference.build's own initialisation after torch.manual_seed(seed).

Data:
  {kind: text, path, seq_len}               the file's bytes are the tokens;
  {kind: text, path, seq_len, tokenizer: M} the file's UTF-8 text encoded by the
                                            SentencePiece model M (plain encode, no
                                            BOS/EOS), windows as token_windows; only
                                            when the python sentencepiece module is
                                            importable, else refused;
  {kind: tokens, path, seq_len, dtype: uint16|uint32 (default uint16)}
                                            llama_reference.token_windows (a file
                                            that is not a whole number of tokens is
                                            refused).
  split (tail|random), test_fraction (default 0.2) and shuffle as above for all.
  Token ids past the first layer's vocab are refused.

Optimizers (train.optimizer):
  adam  {lr 1e-3, betas [0.9, 0.999] (or beta1, beta2), eps 1e-8, weight_decay 0}
        torch.optim.Adam(model.parameters(), ...) (L2 added to the gradient);
  adamw {lr 1e-3, betas [0.9, 0.999] (or beta1, beta2), eps 1e-8, weight_decay 0.01,
        decay_1d true}
        torch.optim.AdamW(llama_reference.adamw_groups(model, weight_decay,
        decay_1d), lr, betas, eps): decoupled decay; decay_1d false exempts the
        parameters of fewer than two dimensions; a tied weight is one parameter,
        decayed once;
  sgd   {lr 1e-3, momentum 0, weight_decay 0} torch.optim.SGD.
  Any other type is refused.

Learning-rate schedules (train.lr_schedule):
  none (default)                   the optimizer's lr throughout;
  step {step_size 1, gamma 1}      torch's StepLR, stepped after each update;
  cosine | linear | constant {warmup_steps 0, decay_steps max(0, steps -
        warmup_steps), min_lr 0}   before the update of 0-based step s every
        parameter group's lr is set to llama_reference.lr_at(s, optimizer.lr,
        warmup_steps, decay_steps, min_lr, type) (steps: the run's, after --steps).
  Any other type is refused. Each step's line prints the lr its update used.

Evaluation (config `eval: {every: K, batches: N}`, or --eval-every K; --evals
alone evaluates after the last update only): after update k (k = 1..steps, the
number of updates done) when k % K == 0 or k == steps, with model.eval() and
torch.no_grad(), over the held-out split (test_x, test_y as split above) cut into
consecutive chunks of train.batch_size rows (the last may be smaller), only the
first N chunks when batches is given: loss = the sum over chunks of
float(cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum"))
(each chunk's sum in float32, the sum over chunks in double) / positions, and
accuracy = (positions where logits.argmax(-1) == y) / positions, positions =
every target position of those chunks. The model goes back to model.train()
after. Logged as `eval k/steps  loss ...  accuracy ...` (no line starts with
`step ` but the steps'). An empty held-out split is refused when evaluating.

Mixed precision (model.mixed_precision: bfloat16, also bf16; absent or none:
off), by definition, with explicit casts and no autocast: the master parameters
stay float32 (the saved state dict is float32). Each step makes a bfloat16
compute copy of the model whose every parameter is its master .to(torch.bfloat16)
(a tied lm_head's weight and its embedding's are two separate bfloat16 tensors in
the copy, each the cast of the one master). For each microbatch: the copy's
forward on the microbatch (a floating input cast to bfloat16 first; token ids
stay int64), so every layer computes in bfloat16 as the reference modules'
forward does in that dtype; the logits cast to float32; the loss in float32
(lm_loss, times b_mb / B); backward; then each copy parameter's bfloat16 .grad
cast to float32 is added (in float32) to its master's .grad, in module order (so
for a tied weight the embedding's contribution first, then the head's), and the
copy's grads are cleared. Clipping, the optimizer and the lr schedule then run on
the float32 masters exactly as in float32 training. Evaluation in mixed mode
runs a fresh bfloat16 copy of the current masters the same way (logits cast to
float32, loss in float32).

Exit codes: 0 done, 2 a config or an init file this script refuses (one line on
stderr). Runs on Debian's python3-torch (1.13), python3-yaml and python3-numpy.
"""
import argparse
import copy
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
import llama_reference  # noqa: E402


class Refused(Exception):
    pass


GPT_TYPES = ("embedding", "gpt_block", "layernorm")
LLAMA_TYPES = ("token_embedding", "llama_block", "rmsnorm")
SHARED_TYPES = ("lm_head",)
EMBEDDING_TYPES = ("embedding", "token_embedding")


def expand_layers(layers):
    """`repeat: n` -> n consecutive copies of the layer (without the key)."""
    out = []
    for spec in layers:
        spec = dict(spec)
        n = spec.pop("repeat", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise Refused(f"repeat must be a positive integer, got {n!r}")
        out.extend(copy.deepcopy(spec) for _ in range(n))
    return out


def llround(v):
    """C's llround for v >= 0: half away from zero (Python's round() is half-even)."""
    f = math.floor(v)
    return int(f) + (1 if v - f >= 0.5 else 0)


def resolve(cfg_path, p):
    return p if os.path.isabs(p) else os.path.join(os.path.dirname(os.path.abspath(cfg_path)), p)


def load_config(path):
    try:
        with open(path) as f:
            cfg = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise Refused(f"{path}: {e}") from e
    if not isinstance(cfg, dict) or "model" not in cfg:
        raise Refused(f"{path}: no model section")
    return cfg


def family(layers):
    """"gpt" or "llama": which reference module builds these layers."""
    types = [spec.get("type") for spec in layers]
    for t in types:
        if t not in GPT_TYPES + LLAMA_TYPES + SHARED_TYPES:
            raise Refused(f"unknown layer type {t!r} (known: {', '.join(GPT_TYPES + LLAMA_TYPES + SHARED_TYPES)})")
    gpt = sorted({t for t in types if t in GPT_TYPES})
    llama = sorted({t for t in types if t in LLAMA_TYPES})
    if gpt and llama:
        raise Refused(f"model.layers mixes GPT layers ({', '.join(gpt)}) with LLaMA layers ({', '.join(llama)})")
    return "llama" if llama else "gpt"


def tied_keys(layers):
    """(embedding key, head key) when the lm_head is tied, else None."""
    emb, emb_key = None, None
    for i, spec in enumerate(layers):
        if spec["type"] == "embedding":
            emb, emb_key = i, f"{i}.wte.weight"
        elif spec["type"] == "token_embedding":
            emb, emb_key = i, f"{i}.weight"
        if spec["type"] == "lm_head" and spec.get("tie", False):
            if emb is None:
                raise Refused("lm_head tie: true needs an embedding layer before it")
            return emb_key, f"{i}.weight"
    return None


def build_model(layers):
    """The reference model of these layers (the caller seeds torch first)."""
    fam = family(layers)
    tied_keys(layers)
    try:
        return (llama_reference if fam == "llama" else gpt_reference).build(layers)
    except (KeyError, TypeError, ValueError, AssertionError) as e:
        raise Refused(f"model.layers: {type(e).__name__}: {e}") from e


def load_init(model, layers, path):
    sd = torch.load(path, map_location="cpu")
    tie = tied_keys(layers)
    if tie is not None:
        a, b = tie
        if a in sd and b in sd and not torch.equal(sd[a], sd[b]):
            raise Refused(f"{path}: the tied tensors {a} and {b} differ")
    missing, unexpected = set(model.state_dict()) - set(sd), set(sd) - set(model.state_dict())
    if missing or unexpected:
        raise Refused(f"{path}: missing keys {sorted(missing)}, unexpected keys {sorted(unexpected)}")
    model.load_state_dict(sd, strict=True)


M64 = (1 << 64) - 1


def mix64(x):
    """splitmix64, as runtime/util/seed.hpp."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def derive_seed(seed, coords):
    s = mix64(seed & M64)
    for c in coords:
        s = mix64(s ^ (c & M64))
    return s


def randperm(n, seed):
    """torch.randperm on a CPU generator seeded with `seed` (a uint64), as
    at::randperm(n, make_generator<CPUGeneratorImpl>(seed))."""
    g = torch.Generator()
    g.manual_seed(seed)
    return torch.randperm(n, generator=g, dtype=torch.long)


TOKEN_DTYPES = {"uint16": 2, "uint32": 4}


def sentencepiece_windows(path, model_path, seq_len):
    """data: {kind: text, tokenizer: M}: the file's UTF-8 text encoded by the
    SentencePiece model M line by line, as spm_encode does (each line's ids,
    no BOS/EOS, no token for a line break), windows laid out as token_windows."""
    try:
        import sentencepiece  # noqa: PLC0415 - optional
    except ImportError as e:
        raise Refused(f"data.tokenizer {model_path}: needs the python sentencepiece module, "
                      f"which is not installed") from e
    try:
        sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
        with open(path, encoding="utf-8") as f:
            ids = [i for line in f.read().split("\n") for i in sp.encode(line)]
    except (OSError, RuntimeError, UnicodeDecodeError) as e:
        raise Refused(f"data.tokenizer {model_path}: {e}") from e
    raw = torch.tensor(ids, dtype=torch.long)
    n = (raw.numel() - 1) // seq_len
    if n < 1:
        raise Refused(f"data.path {path}: {raw.numel()} tokens make no window of seq_len {seq_len}")
    x = torch.stack([raw[i * seq_len:(i + 1) * seq_len] for i in range(n)])
    y = torch.stack([raw[i * seq_len + 1:(i + 1) * seq_len + 1] for i in range(n)])
    return x, y


def windows(d, cfg_path):
    """(x, y): every window of the data file, before the split."""
    kind = d.get("kind")
    if kind not in ("text", "tokens"):
        raise Refused(f"data.kind {kind!r}: only text and tokens are supported here")
    if "path" not in d or "seq_len" not in d:
        raise Refused("data needs path and seq_len")
    path, seq_len = resolve(cfg_path, d["path"]), int(d["seq_len"])
    if seq_len < 1:
        raise Refused(f"data.seq_len {seq_len}")
    if kind == "text" and d.get("tokenizer"):
        return sentencepiece_windows(path, resolve(cfg_path, d["tokenizer"]), seq_len)
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise Refused(f"data.path: {e}") from e
    if kind == "text":
        tokens = size
    else:
        dtype = d.get("dtype", "uint16")
        if dtype not in TOKEN_DTYPES:
            raise Refused(f"data.dtype {dtype!r} (known: uint16, uint32)")
        if size % TOKEN_DTYPES[dtype]:
            raise Refused(f"data.path {path}: {size} bytes is not a whole number of {dtype} tokens")
        tokens = size // TOKEN_DTYPES[dtype]
    if (tokens - 1) // seq_len < 1:
        raise Refused(f"data.path {path}: {tokens} tokens make no window of seq_len {seq_len}")
    if kind == "text":
        return gpt_reference.text_windows(path, seq_len)
    return llama_reference.token_windows(path, seq_len, dtype)


def train_data(cfg, cfg_path):
    """(train_x, train_y, test_x, test_y): split tail holds out the file's
    last windows; split random the tail of one permutation seeded by train.seed."""
    d = cfg.get("data", {}) or {}
    if d.get("kind") not in ("text", "tokens"):
        raise Refused(f"data.kind {d.get('kind')!r}: only text and tokens are supported here")
    split = d.get("split", "tail")
    if split not in ("tail", "random"):
        raise Refused(f"data.split {split!r}")
    x, y = windows(d, cfg_path)
    n = x.shape[0]
    n_test = llround(float(d.get("test_fraction", 0.2)) * float(n))
    n_train = n - n_test
    if split == "random":
        perm = randperm(n, int((cfg.get("train", {}) or {}).get("seed", 42)))
        x, y = x[perm], y[perm]
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def check_vocab(layers, *tensors):
    """Token ids past the first layer's vocabulary are refused, not an IndexError."""
    if not layers or layers[0]["type"] not in EMBEDDING_TYPES:
        return
    vocab = int(layers[0]["vocab"])
    top = max((int(t.max()) for t in tensors if t.numel()), default=-1)
    if top >= vocab:
        raise Refused(f"the data holds token id {top}, past the embedding's vocab {vocab}")


def batch_rows(rows, bs, step, shuffle, seed):
    """Step `step`'s rows of the train split: consecutive slices of bs rows,
    drop_last, wrapping; with data.shuffle each epoch's rows are a
    permutation seeded by derive_seed(seed, {epoch})."""
    per_epoch = rows // bs
    epoch, begin = step // per_epoch, (step % per_epoch) * bs
    if not shuffle:
        return torch.arange(begin, begin + bs)
    return randperm(rows, derive_seed(seed, [epoch]))[begin:begin + bs]


def betas_of(o):
    betas = o.get("betas", [o.get("beta1", 0.9), o.get("beta2", 0.999)])
    if not isinstance(betas, (list, tuple)) or len(betas) != 2:
        raise Refused(f"train.optimizer.betas {betas!r}: two numbers")
    return float(betas[0]), float(betas[1])


def make_optimizer(model, t):
    o = t.get("optimizer", {}) or {}
    kind = o.get("type", "adam")
    lr = float(o.get("lr", 1e-3))
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, betas=betas_of(o),
                                eps=float(o.get("eps", 1e-8)), weight_decay=float(o.get("weight_decay", 0.0)))
    if kind == "adamw":
        decay_1d = o.get("decay_1d", True)
        if not isinstance(decay_1d, bool):
            raise Refused(f"train.optimizer.decay_1d {decay_1d!r}: true or false")
        groups = llama_reference.adamw_groups(model, float(o.get("weight_decay", 0.01)), decay_1d)
        return torch.optim.AdamW(groups, lr=lr, betas=betas_of(o), eps=float(o.get("eps", 1e-8)))
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=float(o.get("momentum", 0.0)),
                               weight_decay=float(o.get("weight_decay", 0.0)))
    raise Refused(f"train.optimizer.type {kind!r} (known: adam, adamw, sgd)")


def make_schedule(opt, t, steps):
    """(StepLR or None, lr_of(step) or None) for train.lr_schedule."""
    ls = t.get("lr_schedule", {}) or {}
    kind = ls.get("type", "none")
    if kind == "none":
        return None, None
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=int(ls.get("step_size", 1)),
                                               gamma=float(ls.get("gamma", 1.0))), None
    if kind in ("cosine", "linear", "constant"):
        base = float((t.get("optimizer", {}) or {}).get("lr", 1e-3))
        warmup = int(ls.get("warmup_steps", 0))
        decay = ls.get("decay_steps")
        decay = max(0, steps - warmup) if decay is None else int(decay)
        min_lr = float(ls.get("min_lr", 0.0))
        if warmup < 0 or decay < 0 or min_lr < 0:
            raise Refused(f"train.lr_schedule: warmup_steps {warmup}, decay_steps {decay} and min_lr {min_lr:g} "
                          f"must not be negative")
        return None, lambda s: llama_reference.lr_at(s, base, warmup, decay, min_lr, kind)
    raise Refused(f"train.lr_schedule.type {kind!r} (known: none, step, cosine, linear, constant)")


def mixed_dtype(cfg):
    """None (float32 training) or torch.bfloat16 for model.mixed_precision."""
    mp = (cfg.get("model", {}) or {}).get("mixed_precision")
    if mp is None or mp is False or mp == "none":
        return None
    if mp in ("bfloat16", "bf16"):
        return torch.bfloat16
    raise Refused(f"model.mixed_precision {mp!r} (known: none, bfloat16)")


class ComputeCopy:
    """The bfloat16 compute copy of a float32 master model (see the docstring's
    mixed precision): same modules, every parameter slot its own tensor."""

    def __init__(self, model, dtype):
        self.dtype = dtype
        self.copy = copy.deepcopy(model)
        self.slots = []                              # (copy module, name, master), module order
        for mm, cm in zip(model.modules(), self.copy.modules()):
            for name, p in mm._parameters.items():
                if p is not None:
                    self.slots.append((cm, name, p))
        self.refresh()

    def refresh(self):
        """Every copy parameter := its master cast (a tied master cast twice, untied)."""
        for cm, name, master in self.slots:
            cm._parameters[name] = nn.Parameter(master.detach().to(self.dtype))

    def __call__(self, x):
        if x.is_floating_point():
            x = x.to(self.dtype)
        return self.copy(x).float()

    def accumulate(self):
        """Each copy .grad, cast to float32, added into its master's .grad; the copy's cleared."""
        for cm, name, master in self.slots:
            p = cm._parameters[name]
            if p.grad is None:
                continue
            g = p.grad.float()
            if master.grad is None:
                master.grad = g
            else:
                master.grad.add_(g)
            p.grad = None


def evaluate(model, forward, test_x, test_y, bs, batches):
    """(loss, accuracy) over the first `batches` (None: all) chunks of bs rows of the held-out split."""
    n = test_x.shape[0]
    chunks = range(0, n, bs)
    if batches is not None:
        chunks = chunks[:batches]
    total, correct, positions = 0.0, 0, 0
    model.eval()
    if isinstance(forward, ComputeCopy):
        forward.copy.eval()
    with torch.no_grad():
        for b in chunks:
            x, y = test_x[b:b + bs], test_y[b:b + bs]
            logits = forward(x)
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            positions += y.numel()
    model.train()
    if isinstance(forward, ComputeCopy):
        forward.copy.train()
    return total / positions, correct / positions


def eval_plan(cfg, eval_every, want_evals):
    """(every K or None, batches N or None, whether to evaluate at all)."""
    ev = cfg.get("eval")
    if ev is not None and not isinstance(ev, dict):
        raise Refused(f"eval {ev!r}: a map {{every: K, batches: N}}")
    ev = ev or {}
    every = eval_every if eval_every is not None else ev.get("every")
    batches = ev.get("batches")
    for key, v in (("every", every), ("batches", batches)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise Refused(f"eval.{key} {v!r}: a positive integer")
    if cfg.get("eval") is not None and every is None:
        raise Refused("eval needs every: K (or --eval-every K)")
    return every, batches, every is not None or want_evals


def train(model, cfg, cfg_path, steps, log, layers=None, eval_every=None, want_evals=False):
    """Trains `model` in place; returns the list of evaluations made."""
    t = cfg.get("train", {}) or {}
    p = cfg.get("pipeline", {}) or {}
    dp = int((cfg.get("parallel", {}) or {}).get("dp", 1))
    micro = int(p.get("microbatches", 1))
    bs = int(t.get("batch_size", 256))
    clip = float(t.get("clip_grad_norm", 0.0))
    seed = int(t.get("seed", 42))
    shuffle = bool((cfg.get("data", {}) or {}).get("shuffle", False))
    mixed = mixed_dtype(cfg)
    every, batches, evaluating = eval_plan(cfg, eval_every, want_evals)
    train_x, train_y, test_x, test_y = train_data(cfg, cfg_path)
    if layers is not None:
        check_vocab(layers, train_x, train_y, test_x, test_y)
    rows = train_x.shape[0]
    if rows < bs:
        raise Refused(f"train.batch_size {bs} exceeds the {rows} training rows")
    if evaluating and test_x.shape[0] == 0:
        raise Refused("evaluation needs a held-out split, and data.test_fraction leaves none")

    opt = make_optimizer(model, t)
    sched, lr_of = make_schedule(opt, t, steps)
    compute = ComputeCopy(model, mixed) if mixed is not None else None
    evals = []
    model.train()
    for step in range(steps):
        if lr_of is not None:
            for g in opt.param_groups:
                g["lr"] = lr_of(step)
        idx = batch_rows(rows, bs, step, shuffle, seed)
        bx, by = train_x[idx], train_y[idx]
        shares = list(zip(torch.chunk(bx, dp), torch.chunk(by, dp))) if dp > 1 else [(bx, by)]
        opt.zero_grad(set_to_none=True)
        if compute is not None:
            compute.refresh()
        total = 0.0
        for sx, sy in shares:
            for mx, my in zip(torch.chunk(sx, micro), torch.chunk(sy, micro)):
                if compute is None:
                    loss = gpt_reference.lm_loss(model(mx), my) * (mx.shape[0] / bs)
                    loss.backward()
                else:
                    loss = gpt_reference.lm_loss(compute(mx), my) * (mx.shape[0] / bs)
                    loss.backward()
                    compute.accumulate()
                total += loss.item()
        norm = None
        if clip > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        lr = opt.param_groups[0]["lr"]
        opt.step()
        if sched is not None:
            sched.step()
        if log:
            extra = f"  grad_norm {norm:.6f}" if norm is not None else ""
            print(f"step {step + 1}/{steps}  loss {total:.6f}  lr {lr:.6g}{extra}", flush=True)
        k = step + 1
        if evaluating and ((every is not None and k % every == 0) or k == steps):
            if compute is not None:
                compute.refresh()
            loss, acc = evaluate(model, compute if compute is not None else model, test_x, test_y, bs, batches)
            evals.append({"step": k, "loss": loss, "accuracy": acc})
            if log:
                print(f"eval {k}/{steps}  loss {loss:.6f}  accuracy {acc:.6f}", flush=True)
    return evals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--write-init", metavar="PATH", help="save the seeded initial state dict and exit")
    ap.add_argument("--seed", type=int, default=None, help="torch.manual_seed before building (default train.seed)")
    ap.add_argument("--init", metavar="PATH", help="initial state dict (default: the config's model.init_from)")
    ap.add_argument("--steps", type=int, default=None, help="default train.steps")
    ap.add_argument("--out", metavar="PATH", help="where the trained state dict goes")
    ap.add_argument("--evals", metavar="PATH", help="write the held-out evaluations as a JSON list")
    ap.add_argument("--eval-every", metavar="K", type=int, default=None,
                    help="evaluate every K updates (and after the last), as eval.every")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    a = ap.parse_args(argv)

    torch.set_num_threads(max(1, a.threads))
    torch.set_default_dtype(torch.float32)
    try:
        cfg = load_config(a.config)
        layers = expand_layers(cfg["model"]["layers"])
        seed = a.seed if a.seed is not None else int((cfg.get("train", {}) or {}).get("seed", 42))
        torch.manual_seed(seed)
        model = build_model(layers)
        if a.write_init:
            torch.save(model.state_dict(), a.write_init)
            return 0
        init = a.init
        if init is None and cfg["model"].get("init_from"):
            init = resolve(a.config, cfg["model"]["init_from"])
        if init is None:
            raise Refused("no initial weights: give --init or set model.init_from")
        if not a.out:
            raise Refused("--out is required when training")
        if a.eval_every is not None and a.eval_every < 1:
            raise Refused(f"--eval-every {a.eval_every}: a positive integer")
        load_init(model, layers, init)
        steps = a.steps if a.steps is not None else int((cfg.get("train", {}) or {}).get("steps", 50))
        evals = train(model, cfg, a.config, steps, not a.quiet, layers, a.eval_every, a.evals is not None)
        torch.save(model.state_dict(), a.out)
        if a.evals:
            with open(a.evals, "w") as f:
                json.dump(evals, f, indent=1)
                f.write("\n")
        return 0
    except Refused as e:
        print(f"gpt_train.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
