#!/usr/bin/env python3
"""torch's side of bench/peers.sh: the same MLP, init and data as actorpipe.

    peers_torch.py prepare DIR [--samples N] [--seed S]
    peers_torch.py plain DIR [--steps N] [--threads T]
    peers_torch.py pipe DIR --chunks M [--steps N] [--threads T]
    peers_torch.py pipelining DIR --chunks M --schedule NAME [--ranks R] [--layers SPEC]
                   [--device cpu|cuda] [--steps N] [--threads T]

prepare writes DIR/init.pt (the model's state dict, seeded) and DIR/data.pt
({"x": float32 [N, 100], "y": int64 [N]}) for actorpipe's model.init_from
and data.kind: tensors. The other modes load both and train on consecutive
batches of 256 rows of the data, with Adam (lr 1e-3), and print one JSON
line {"step_ms": [...]} with every step's wall time (warm-up included):

  plain       one nn.Sequential, the whole batch at once, T intra-op threads
              (default 2);
  pipe        torch.distributed.pipeline.sync.Pipe (torch 1.x), 2 partitions
              (layers 0-7 and 8-14, where actorpipe's balanced partition cuts),
              M chunks, checkpoint="never" (actorpipe keeps activations too;
              --checkpoint except_last is Pipe's default, which recomputes every
              chunk's forward but the last's), T intra-op threads (default 2).
              On the CPU every partition shares
              one worker thread, and the backward runs on the calling thread;
  pipelining  torch.distributed.pipelining (torch >= 2.4): ScheduleGPipe,
              Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS or
              ScheduleZBVZeroBubble on R Gloo ranks (--ranks, default 2)
              started by torch.multiprocessing, the stages' layers given by
              --layers (actorpipe's partition), T intra-op threads per rank
              (default 1); --device cuda runs one rank that holds every stage
              on cuda:0 (a multi-stage schedule, NCCL). Times are those of the
              rank holding the last stage, each step starting after a barrier.

Exit 3 (with a line on stderr) where the installed torch lacks the module.
"""
import argparse
import importlib
import json
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# bench/peers_mlp.yaml's layers; CUT is where its 2-stage partition splits.
WIDTHS = [100, 1024, 1024, 2048, 2048, 1024, 1024, 512, 10]
CUT = 8
BATCH = 256
LR = 1e-3
EXIT_MISSING = 3


def build():
    layers = []
    for i in range(len(WIDTHS) - 1):
        layers.append(nn.Linear(WIDTHS[i], WIDTHS[i + 1]))
        if i < len(WIDTHS) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def load(d):
    net = build()
    net.load_state_dict(torch.load(os.path.join(d, "init.pt")))
    data = torch.load(os.path.join(d, "data.pt"))
    return net, data["x"], data["y"]


def batch(x, y, step):
    n = x.size(0) // BATCH
    i = step % n
    return x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]


def emit(times, **extra):
    print(json.dumps(dict(extra, step_ms=[round(t * 1e3, 3) for t in times])), flush=True)


def prepare(a):
    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(a.seed)
    net = build()
    torch.save(net.state_dict(), os.path.join(a.dir, "init.pt"))
    g = torch.Generator().manual_seed(a.seed + 1)
    x = torch.randn(a.samples, WIDTHS[0], generator=g)
    y = torch.randint(0, WIDTHS[-1], (a.samples,), generator=g)
    torch.save({"x": x, "y": y}, os.path.join(a.dir, "data.pt"))


def timed_steps(params, forward, x, y, steps):
    """Adam steps of `forward` (a batch to logits), each step's seconds."""
    opt = torch.optim.Adam(params, lr=LR)
    times = []
    for step in range(steps):
        xb, yb = batch(x, y, step)
        t = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(forward(xb), yb).backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return times


def plain(a):
    torch.set_num_threads(a.threads)
    net, x, y = load(a.dir)
    net.train()
    emit(timed_steps(net.parameters(), net, x, y, a.steps), threads=torch.get_num_threads())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pipe(a):
    try:
        from torch.distributed import rpc
        from torch.distributed.pipeline.sync import Pipe
    except ImportError as e:
        print(f"peers_torch.py: torch {torch.__version__} has no torch.distributed.pipeline.sync.Pipe ({e})",
              file=sys.stderr)
        sys.exit(EXIT_MISSING)
    torch.set_num_threads(a.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    rpc.init_rpc("peers", rank=0, world_size=1)  # Pipe needs the RPC framework, even in one process
    net, x, y = load(a.dir)
    layers = list(net.children())
    model = nn.Sequential(nn.Sequential(*layers[:CUT]), nn.Sequential(*layers[CUT:]))
    p = Pipe(model, chunks=a.chunks, checkpoint=a.checkpoint)
    p.train()
    times = timed_steps(p.parameters(), lambda xb: p(xb).local_value(), x, y, a.steps)
    emit(times, threads=torch.get_num_threads(), partitions=len(p.partitions), chunks=a.chunks,
         checkpoint=a.checkpoint)
    rpc.shutdown()


# torch.distributed.pipelining's schedules: (class name, stages per rank).
# The multi-stage ones place stage s on rank s mod R (interleaved, looped
# BFS) or in a V (ZBV: rank r holds stages r and 2R - 1 - r).
SCHEDULES = {
    "gpipe": ("ScheduleGPipe", 1),
    "1f1b": ("Schedule1F1B", 1),
    "interleaved1f1b": ("ScheduleInterleaved1F1B", None),
    "loopedbfs": ("ScheduleLoopedBFS", None),
    "zbv": ("ScheduleZBVZeroBubble", 2),
}


def rank_chunks(a):
    """Each rank's chunks as (first layer, last layer) pairs, from --layers
    ("0-5,11-11;6-7,12-12;..."): ranks split by ';', a rank's chunks by ','.
    Without it, the 2-stage cut of the MLP."""
    if not a.layers:
        n = len(build())
        return [[(0, CUT - 1)], [(CUT, n - 1)]]
    return [[tuple(int(v) for v in c.split("-")) for c in r.split(",")] for r in a.layers.split(";")]


def stage_ids(schedule, rank, ranks, per_rank):
    if schedule == "zbv":
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(per_rank)]


def pipelining_rank(rank, a, port, out_path):
    import inspect
    import torch.distributed as dist
    from torch.distributed import pipelining as pp
    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    cuda = a.device == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=a.ranks)
    net, x, y = load(a.dir)
    if cuda:
        net = net.to(device)
        x, y = x.to(device), y.to(device)
    layers = list(net.children())
    chunks = rank_chunks(a)[rank]
    cls_name, _ = SCHEDULES[a.schedule]
    ids = stage_ids(a.schedule, rank, a.ranks, len(chunks))
    n_stages = a.ranks * len(chunks)
    mb = BATCH // a.chunks
    stages, params = [], []
    for sid, (lo, hi) in zip(ids, chunks):
        part = nn.Sequential(*layers[lo:hi + 1])
        params += list(part.parameters())
        # layer 2k is the k-th Linear, 2k + 1 its ReLU: both take WIDTHS[k]
        # features... except the ReLU, which takes the Linear's output
        example = torch.zeros(mb, WIDTHS[(lo + 1) // 2], device=device)
        try:
            stage = pp.PipelineStage(part, sid, n_stages, device, input_args=(example,))
        except TypeError:
            stage = pp.PipelineStage(part, sid, n_stages, device)
        stages.append(stage)
    kind = getattr(pp, cls_name)
    scaled = "scale_grads" in inspect.signature(kind.__init__).parameters

    def loss_fn(out, target):
        # the mean over the batch, as the other peers take (torch >= 2.6
        # divides the gradients by the microbatch count itself)
        loss = F.cross_entropy(out, target)
        return loss if scaled else loss / a.chunks

    sched = kind(stages[0] if SCHEDULES[a.schedule][1] == 1 else stages, n_microbatches=a.chunks, loss_fn=loss_fn)
    opt = torch.optim.Adam(params, lr=LR)
    holds_first, holds_last = 0 in ids, n_stages - 1 in ids
    times = []
    for step in range(a.steps):
        xb, yb = batch(x, y, step)
        dist.barrier()
        t = time.perf_counter()
        opt.zero_grad()
        args = (xb,) if holds_first else ()
        kwargs = {"target": yb, "losses": []} if holds_last else {}
        sched.step(*args, **kwargs)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    dist.barrier()
    if holds_last:
        with open(out_path, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def pipelining(a):
    try:
        importlib.import_module("torch.distributed.pipelining")
        mp = importlib.import_module("torch.multiprocessing")
    except ImportError as e:
        print(f"peers_torch.py: torch {torch.__version__} has no torch.distributed.pipelining ({e})",
              file=sys.stderr)
        sys.exit(EXIT_MISSING)
    chunks = rank_chunks(a)
    if len(chunks) != a.ranks:
        sys.exit(f"peers_torch.py: --layers names {len(chunks)} ranks, --ranks is {a.ranks}")
    per_rank = SCHEDULES[a.schedule][1]
    if per_rank is not None and any(len(c) != per_rank for c in chunks):
        sys.exit(f"peers_torch.py: {a.schedule} takes {per_rank} stage(s) per rank")
    out_path = os.path.join(a.dir, f"pipelining_{os.getpid()}.json")
    mp.spawn(pipelining_rank, args=(a, free_port(), out_path), nprocs=a.ranks, join=True)
    with open(out_path) as f:
        times = json.load(f)
    os.remove(out_path)
    emit(times, threads_per_rank=a.threads, ranks=a.ranks, stages=sum(len(c) for c in chunks), chunks=a.chunks,
         schedule=a.schedule, device=a.device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["prepare", "plain", "pipe", "pipelining"])
    ap.add_argument("dir")
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe",
                    help="pipelining: the torch schedule class (multi-stage ones need --layers)")
    ap.add_argument("--ranks", type=int, default=2, help="pipelining: processes (default 2)")
    ap.add_argument("--layers", default="",
                    help="pipelining: each rank's layers, ranks split by ';' and a rank's stages by ',', "
                         "e.g. 0-5,11-11;6-7,12-12 (default: the 2-stage cut)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="pipelining: cuda puts every stage on cuda:0 (NCCL; --ranks 1)")
    ap.add_argument("--checkpoint", choices=["never", "except_last", "always"], default="never",
                    help="pipe: Pipe's activation checkpointing (torch's default is except_last)")
    a = ap.parse_args()
    if a.steps < 1 or a.chunks < 1 or a.samples < BATCH or (a.threads is not None and a.threads < 1):
        ap.error("--steps, --chunks and --threads must be positive and --samples at least 256")
    if BATCH % a.chunks:
        ap.error(f"--chunks must divide the batch ({BATCH})")
    if a.device == "cuda" and a.ranks != 1:
        ap.error("--device cuda takes --ranks 1 (NCCL refuses two ranks on one GPU)")
    if a.threads is None:
        a.threads = 1 if a.mode == "pipelining" else 2
    {"prepare": prepare, "plain": plain, "pipe": pipe, "pipelining": pipelining}[a.mode](a)


if __name__ == "__main__":
    main()
