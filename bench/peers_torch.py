#!/usr/bin/env python3
"""torch's side of bench/peers.sh: the same MLP, init and data as actorpipe.

    peers_torch.py prepare DIR [--samples N] [--seed S]
    peers_torch.py plain DIR [--steps N] [--threads T]
    peers_torch.py pipe DIR --chunks M [--steps N] [--threads T]
    peers_torch.py pipelining DIR --chunks M --schedule gpipe|1f1b [--steps N] [--threads T]

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
  pipelining  torch.distributed.pipelining (torch >= 2.4) ScheduleGPipe or
              Schedule1F1B on 2 Gloo ranks started by torch.multiprocessing, a
              stage per rank, T intra-op threads per rank (default 1). Times are
              rank 1's (the last stage), each step starting after a barrier.

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


def pipelining_rank(rank, a, port, out_path):
    import torch.distributed as dist
    from torch.distributed import pipelining as pp
    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    net, x, y = load(a.dir)
    layers = list(net.children())
    part = nn.Sequential(*(layers[:CUT] if rank == 0 else layers[CUT:]))
    mb = BATCH // a.chunks
    example = torch.zeros(mb, WIDTHS[0] if rank == 0 else part[0].in_features)
    stage = pp.PipelineStage(part, rank, 2, torch.device("cpu"), input_args=(example,))

    def loss_fn(out, target):
        return F.cross_entropy(out, target) / a.chunks  # the mean over the batch, as the other peers take

    kind = pp.ScheduleGPipe if a.schedule == "gpipe" else pp.Schedule1F1B
    sched = kind(stage, n_microbatches=a.chunks, loss_fn=loss_fn)
    opt = torch.optim.Adam(part.parameters(), lr=LR)
    times = []
    for step in range(a.steps):
        xb, yb = batch(x, y, step)
        dist.barrier()
        t = time.perf_counter()
        opt.zero_grad()
        if rank == 0:
            sched.step(xb)
        else:
            sched.step(target=yb, losses=[])
        opt.step()
        times.append(time.perf_counter() - t)
    dist.barrier()
    if rank == 1:
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
    out_path = os.path.join(a.dir, f"pipelining_{os.getpid()}.json")
    mp.spawn(pipelining_rank, args=(a, free_port(), out_path), nprocs=2, join=True)
    with open(out_path) as f:
        times = json.load(f)
    os.remove(out_path)
    emit(times, threads_per_rank=a.threads, ranks=2, chunks=a.chunks, schedule=a.schedule)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["prepare", "plain", "pipe", "pipelining"])
    ap.add_argument("dir")
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], default="gpipe")
    ap.add_argument("--checkpoint", choices=["never", "except_last", "always"], default="never",
                    help="pipe: Pipe's activation checkpointing (torch's default is except_last)")
    a = ap.parse_args()
    if a.steps < 1 or a.chunks < 1 or a.samples < BATCH or (a.threads is not None and a.threads < 1):
        ap.error("--steps, --chunks and --threads must be positive and --samples at least 256")
    if BATCH % a.chunks:
        ap.error(f"--chunks must divide the batch ({BATCH})")
    if a.threads is None:
        a.threads = 1 if a.mode == "pipelining" else 2
    {"prepare": prepare, "plain": plain, "pipe": pipe, "pipelining": pipelining}[a.mode](a)


if __name__ == "__main__":
    main()
