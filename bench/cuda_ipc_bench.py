#!/usr/bin/env python3
"""Two processes on one GPU: a tensor handed from one to the other through a
CUDA IPC buffer, against staging it through pinned shared host memory (the
way the data plane's shared ring carries a CUDA stage's activation today:
device to host, the ring, host to device).

Each transfer: the sender copies its tensor into the shared buffer (the
receiver's GPU buffer, mapped once through its IPC handle; or the pinned host
buffer), synchronizes, rings the receiver over a pipe; the receiver copies the
buffer into a tensor of its own on the GPU, synchronizes and answers. The
figure is that round trip, less the pipe's own round trip (measured first),
the median of --iters after --warmup. The receiver checks the last bytes it
got against the sender's sum, so a transfer that moved nothing fails.

Usage: bench/cuda_ipc_bench.py [--sizes-mib 1,16,64] [--iters 20] [--warmup 5]
Needs a CUDA GPU and torch; prints a markdown table.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp


def pin(t):
    """Page-locks a shared host tensor in this process; False where it cannot."""
    try:
        rc = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
        return int(rc) == 0 if not isinstance(rc, tuple) else int(rc[0]) == 0
    except Exception:  # noqa: BLE001 - a figure without pinning is still a figure
        return False


def receiver(conn, q, nbytes, way, iters):
    torch.cuda.set_device(0)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    if way == "ipc":
        buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        q.put(buf)
    else:
        buf = q.get()
        pinned = pin(buf)
        conn.send(pinned)
    for _ in range(iters):
        conn.recv()
        dst.copy_(buf, non_blocking=True)
        torch.cuda.synchronize()
        conn.send(0)
    conn.send(int(dst.to(torch.int64).sum().item()))
    conn.recv()  # the sender is done with buf before it goes


def sender(nbytes, way, iters, warmup):
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    q = ctx.Queue()
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    pinned = None
    if way == "host":
        buf = torch.empty(nbytes, dtype=torch.uint8).share_memory_()
        q.put(buf)
    p = ctx.Process(target=receiver, args=(b, q, nbytes, way, warmup + iters))
    p.start()
    if way == "ipc":
        buf = q.get()
    else:
        mine = pin(buf)
        pinned = a.recv() and mine
    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        buf.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        a.send(i)
        a.recv()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    got = a.recv()
    if way == "ipc":  # let go of the receiver's buffer before the receiver goes
        del buf
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()
    a.send(0)
    p.join(30)
    want = int(src.to(torch.int64).sum().item())
    if got != want:
        sys.exit(f"cuda_ipc_bench: {way} at {nbytes} bytes delivered sum {got}, sent {want}")
    return statistics.median(times), pinned


def pipe_round_trip(iters):
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=echo, args=(b, iters + 5))
    p.start()
    times = []
    for i in range(iters + 5):
        t0 = time.perf_counter()
        a.send(i)
        a.recv()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    p.join(10)
    return statistics.median(times)


def echo(conn, n):
    for _ in range(n):
        conn.send(conn.recv())


def in_process(nbytes, iters):
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for i in range(iters + 3):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-mib", default="1,16,64")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("cuda_ipc_bench: needs a CUDA GPU")
    torch.cuda.set_device(0)
    pipe = pipe_round_trip(args.iters)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; the pipe's own round trip "
          f"{pipe * 1e6:.0f} us is taken off each row\n")
    print("| size | one process, D2D copy | CUDA IPC buffer | pinned host staging | host / IPC |")
    print("| --- | --- | --- | --- | --- |")
    for mib in (float(s) for s in args.sizes_mib.split(",")):
        n = int(mib * 2**20)
        local = in_process(n, args.iters)
        ipc, _ = sender(n, "ipc", args.iters, args.warmup)
        host, pinned = sender(n, "host", args.iters, args.warmup)
        ipc, host = max(ipc - pipe, 1e-9), max(host - pipe, 1e-9)

        def cell(s):
            return f"{s * 1e3:.3f} ms ({n / s / 1e9:.1f} GB/s)"
        print(f"| {mib:g} MiB | {cell(local)} | {cell(ipc)} | {cell(host)}{'' if pinned else ' (not pinned)'}"
              f" | {host / ipc:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
