#!/usr/bin/env python3
"""The independent reference for actorpipe's GPT training, in plain PyTorch.

Reads the same YAML config as `actorpipe train`, builds the model with
gpt_reference.build (the config's `repeat: n` expanded into n layers), and

  --write-init PATH        seeds torch (--seed, default train.seed), builds the
                           model and torch.save's its state dict (a valid
                           model.init_from: with tie: true both tied keys);
  --init PATH --out PATH   loads that state dict (default: the config's
                           model.init_from), trains --steps steps (default
                           train.steps) the way actorpipe does, and saves the
                           final state dict.

Training, step by step as actorpipe: data kind text (gpt_reference.text_windows),
the test set is the tail (n_test = llround(test_fraction * n)) of the file
(split: tail) or of one permutation seeded by train.seed (split: random); step
t's batch is rows [(t % per_epoch) * B, +B) of the train split (drop_last,
wrapping), of a permutation seeded by (train.seed, epoch) with data.shuffle;
with parallel.dp > 1 the batch is torch.chunk'ed into dp shares first; each
share is torch.chunk'ed into pipeline.microbatches; each microbatch's mean
cross-entropy is weighted by its share of the batch (b_mb / B) and its
gradients accumulate; then clip_grad_norm_ (train.clip_grad_norm > 0; a tied
tensor counts once), the optimizer step (adam or sgd with the config's
hyperparameters) and StepLR. Everything in float32 on the CPU.

Exit codes: 0 done, 2 a config or an init file this script refuses.
Runs on Debian's python3-torch (1.13) and python3-yaml.
"""
import argparse
import copy
import math
import os
import sys

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402


class Refused(Exception):
    pass


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


def tied_keys(layers):
    """(embedding key, head key) when the lm_head is tied, else None."""
    emb = None
    for i, spec in enumerate(layers):
        if spec["type"] == "embedding":
            emb = i
        if spec["type"] == "lm_head" and spec.get("tie", False):
            if emb is None:
                raise Refused("lm_head tie: true needs an embedding layer before it")
            return f"{emb}.wte.weight", f"{i}.weight"
    return None


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
    """splitmix64, as runtime/model/seed.hpp."""
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


def train_data(cfg, cfg_path):
    """(train_x, train_y, test_x, test_y): split tail holds out the file's
    last windows; split random the tail of one permutation seeded by train.seed."""
    d = cfg.get("data", {})
    if d.get("kind") != "text":
        raise Refused(f"data.kind {d.get('kind')!r}: only text is supported here")
    split = d.get("split", "tail")
    if split not in ("tail", "random"):
        raise Refused(f"data.split {split!r}")
    x, y = gpt_reference.text_windows(resolve(cfg_path, d["path"]), int(d["seq_len"]))
    n = x.shape[0]
    n_test = llround(float(d.get("test_fraction", 0.2)) * float(n))
    n_train = n - n_test
    if split == "random":
        perm = randperm(n, int((cfg.get("train", {}) or {}).get("seed", 42)))
        x, y = x[perm], y[perm]
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def batch_rows(rows, bs, step, shuffle, seed):
    """Step `step`'s rows of the train split: consecutive slices of bs rows,
    drop_last, wrapping; with data.shuffle each epoch's rows are a
    permutation seeded by derive_seed(seed, {epoch})."""
    per_epoch = rows // bs
    epoch, begin = step // per_epoch, (step % per_epoch) * bs
    if not shuffle:
        return torch.arange(begin, begin + bs)
    return randperm(rows, derive_seed(seed, [epoch]))[begin:begin + bs]


def make_optimizer(params, t):
    o = t.get("optimizer", {}) or {}
    kind = o.get("type", "adam")
    lr = float(o.get("lr", 1e-3))
    wd = float(o.get("weight_decay", 0.0))
    if kind == "adam":
        betas = o.get("betas", [o.get("beta1", 0.9), o.get("beta2", 0.999)])
        return torch.optim.Adam(params, lr=lr, betas=(float(betas[0]), float(betas[1])),
                                eps=float(o.get("eps", 1e-8)), weight_decay=wd)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(o.get("momentum", 0.0)), weight_decay=wd)
    raise Refused(f"train.optimizer.type {kind!r}")


def train(model, cfg, cfg_path, steps, log):
    t = cfg.get("train", {}) or {}
    p = cfg.get("pipeline", {}) or {}
    dp = int((cfg.get("parallel", {}) or {}).get("dp", 1))
    micro = int(p.get("microbatches", 1))
    bs = int(t.get("batch_size", 256))
    clip = float(t.get("clip_grad_norm", 0.0))
    seed = int(t.get("seed", 42))
    shuffle = bool((cfg.get("data", {}) or {}).get("shuffle", False))
    train_x, train_y, _, _ = train_data(cfg, cfg_path)
    rows = train_x.shape[0]
    if rows < bs:
        raise Refused(f"train.batch_size {bs} exceeds the {rows} training rows")

    opt = make_optimizer(model.parameters(), t)
    ls = t.get("lr_schedule", {}) or {}
    sched = None
    if ls.get("type", "none") == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=int(ls.get("step_size", 1)),
                                                gamma=float(ls.get("gamma", 1.0)))
    model.train()
    for step in range(steps):
        idx = batch_rows(rows, bs, step, shuffle, seed)
        bx, by = train_x[idx], train_y[idx]
        shares = list(zip(torch.chunk(bx, dp), torch.chunk(by, dp))) if dp > 1 else [(bx, by)]
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for sx, sy in shares:
            for mx, my in zip(torch.chunk(sx, micro), torch.chunk(sy, micro)):
                loss = gpt_reference.lm_loss(model(mx), my) * (mx.shape[0] / bs)
                loss.backward()
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--write-init", metavar="PATH", help="save the seeded initial state dict and exit")
    ap.add_argument("--seed", type=int, default=None, help="torch.manual_seed before building (default train.seed)")
    ap.add_argument("--init", metavar="PATH", help="initial state dict (default: the config's model.init_from)")
    ap.add_argument("--steps", type=int, default=None, help="default train.steps")
    ap.add_argument("--out", metavar="PATH", help="where the trained state dict goes")
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
        model = gpt_reference.build(layers)
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
        load_init(model, layers, init)
        steps = a.steps if a.steps is not None else int((cfg.get("train", {}) or {}).get("steps", 50))
        train(model, cfg, a.config, steps, not a.quiet)
        torch.save(model.state_dict(), a.out)
        return 0
    except Refused as e:
        print(f"gpt_train.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
