#!/usr/bin/env python3
"""Rebalance (pipeline.rebalance) around a process throttled by the kernel,
against the best static split for those speeds, and what rebalance costs a
run without events.

    python3 bench/rebalance_bench.py [--build build] [--steps 90] [--pairs 3]
                                     [--shares 0.667,0.333,0.667] [--every 3] [--no-static]
                                     [--cost-only]

The model of tests/apps/rebalance_test.cpp (14 layers, six 512-wide
linears; 0-5 | 6-9 | 10-13 by compute) at pp 3 under `actorpipe launch
--nprocs 3`, M 4, 1F1B, one intra-op thread a stage. RANK 1's process goes
into a cgroup v1 cpu group held to a third of a core (cfs_quota_us 3333 of
10000) as soon as it runs, before its first step. The other two processes
share the two cores with it (and with each other): a process's speed then
depends on how busy the others are.

With --shares A,B,C each RANK goes into a group of its own held to that
share of a core (0.667,0.333,0.667: three processes, one at half the
others' speed, that never contend: 1.667 of the 2 cores). That stands for
three devices of which one is slower, which is what the model (a stage's
time = its speed x its layers' cost) assumes.

  rebalanced  rebalance {every: K (--every, 3), threshold: 0.2}: the median step before
              the first re-partition, and over the last 20 steps (the
              split it settled on), with the steps of the first
              re-partition; each `re-placed:` line.
  static      the same throttled run, without rebalance, under every split
              of the 14 layers into 3 stages (78 splits): the median step
              over the steps after the third. The best of them is "the best
              static partition for those speeds, found by trying them".
              The least of 78 noisy medians is a lucky one, so the three
              best splits and the rebalanced run are run again in turn
              (--confirm rounds), and the medians of those rounds compared.
  cost        no throttle: rebalance on against off, median step after the
              third, in pairs whose order alternates.

Needs root (the cgroup). Python 3 standard library only.
"""
import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos import worker_pid  # noqa: E402

LAYERS = """model:
  layers:
    - {type: linear, in: 32, out: 512}
    - {type: relu}
    - {type: linear, in: 512, out: 512}
    - {type: dropout, p: 0.1}
    - {type: linear, in: 512, out: 512}
    - {type: relu}
    - {type: linear, in: 512, out: 512}
    - {type: tanh}
    - {type: linear, in: 512, out: 512}
    - {type: relu}
    - {type: linear, in: 512, out: 512}
    - {type: relu}
    - {type: linear, in: 512, out: 512}
    - {type: linear, in: 512, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 1024, features: 32, classes: 4}
  test_fraction: 0.25
"""
STARTS = range(1, 14)  # where stage 1 and stage 2 may start: every split of the 14 layers


def config(steps, pipeline_extra="", rest=""):
    return (LAYERS + f"train:\n  steps: {steps}\n  batch_size: 192\n  optimizer: {{type: adam, lr: 0.001}}\n"
            "  clip_grad_norm: 1.0\n  seed: 11\n"
            "pipeline:\n  stages: 3\n  schedule: 1f1b\n  microbatches: 4\n  devices: auto\n  intra_op_threads: 1\n"
            + pipeline_extra + "supervision: {max_restarts: 3, heartbeat_timeout_s: 5}\n" + rest)


class Throttle:
    def __init__(self, quota, name="1"):
        self.dir = f"/sys/fs/cgroup/cpu/actorpipe_bench_{os.getpid()}_{name}"
        os.makedirs(self.dir, exist_ok=True)
        self._write("cpu.cfs_period_us", "10000")
        self._write("cpu.cfs_quota_us", str(int(quota * 10000)))

    def _write(self, name, value, d=None):
        with open(os.path.join(d or self.dir, name), "w") as f:
            f.write(value)

    def hold(self, pid):
        self._write("cgroup.procs", str(pid))

    def close(self):
        try:
            for pid in open(os.path.join(self.dir, "cgroup.procs")).read().split():
                self._write("cgroup.procs", pid, "/sys/fs/cgroup/cpu")
            os.rmdir(self.dir)
        except OSError:
            pass


def rank_pid(launcher, rank, timeout=30):
    """chaos.worker_pid, retried until the worker is there (-1 after timeout s)."""
    end = time.time() + timeout
    while time.time() < end:
        pid = worker_pid(launcher, rank)
        if pid > 0:
            return pid
        time.sleep(0.01)
    return -1


def run(args, work, name, text, throttles=None):
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    results = os.path.join(work, name + ".json")
    p = subprocess.Popen([os.path.join(args.build, "actorpipe"), "launch", "--coordinator", "rank0", "--nprocs", "3", path, "--quiet",
                          "--results", results], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for rank, throttle in (throttles or {}).items():
        pid = rank_pid(p.pid, rank)
        if pid < 0:
            p.kill()
            sys.exit(f"no worker with RANK {rank}")
        throttle.hold(pid)
    out, _ = p.communicate(timeout=600)
    if p.returncode != 0:
        sys.exit(f"{name} failed ({p.returncode}):\n{out}")
    doc = json.load(open(results))
    return [s["step_s"] * 1e3 for s in doc["steps"]], doc["supervision"].get("notices", []), out


def median_after(ms, skip=3):
    return statistics.median(ms[skip:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=90)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cost-only", action="store_true", help="only the cost pairs (no throttle)")
    ap.add_argument("--every", type=int, default=3, help="rebalance.every (K)")
    ap.add_argument("--no-static", action="store_true", help="leave out the 78 static splits")
    ap.add_argument("--confirm", type=int, default=3, help="rounds that run the rebalanced run and the three best "
                    "static splits again, in turn (default 3)")
    ap.add_argument("--write-config", metavar="PATH", help="write the model's config (--steps steps, no rebalance) "
                    "to PATH and stop")
    ap.add_argument("--shares", default="", help="a share of a core for each RANK, e.g. 0.667,0.333,0.667 "
                    "(default: RANK 1 alone held to 0.333)")
    args = ap.parse_args()
    if args.write_config:
        with open(args.write_config, "w") as f:
            f.write(config(args.steps))
        return
    work = tempfile.mkdtemp(prefix="rebalance_bench_")
    if args.shares and not args.cost_only:
        shares = [float(x) for x in args.shares.split(",")]
        if len(shares) != 3 or not all(0 < x <= 2 for x in shares):
            sys.exit("--shares: three shares of a core, each in (0, 2]")
        th = {r: Throttle(x, str(r)) for r, x in enumerate(shares)}
    else:
        th = {} if args.cost_only else {1: Throttle(1 / 3)}
    try:
        if not args.cost_only:
            ms, notices, _ = run(args, work, "rebalanced",
                                 config(args.steps, f"  rebalance: {{every: {args.every}, threshold: 0.2}}\n"), th)
            firsts = [int(re.search(r"after step (\d+)", n).group(1)) for n in notices]
            before = statistics.median(ms[1:firsts[0] + 1]) if firsts else float("nan")
            settled = statistics.median(ms[-20:])
            print(f"rebalanced: median step {before:.1f} ms before the first re-partition (after step "
                  f"{firsts[0] if firsts else '-'}), {settled:.1f} ms over the last 20 steps; "
                  f"{len(notices)} re-partition(s)")
            # "Reached within 2K steps": the 20 steps after 2K (K = every), under
            # whatever split the run had by then.
            k2 = 2 * args.every
            early = statistics.median(ms[k2:k2 + 20])
            print(f"rebalanced: median step {early:.1f} ms over steps {k2 + 1}-{k2 + 20} (after 2K = {k2} steps)")
            for n in notices:
                print("  " + n)
            if args.no_static:
                return
            static = {}
            for a, b in itertools.combinations(STARTS, 2):
                parts = f"[[0, {a - 1}], [{a}, {b - 1}], [{b}, 13]]"
                ms_s, _, _ = run(args, work, f"static_{a}_{b}", config(30, f"  partition: {parts}\n").replace(
                    "  stages: 3\n", ""), th)
                static[(a, b)] = median_after(ms_s)
                print(f"static 0-{a - 1} | {a}-{b - 1} | {b}-13: median step {static[(a, b)]:.1f} ms")
            best = min(static, key=static.get)
            print(f"best static: 0-{best[0] - 1} | {best[0]}-{best[1] - 1} | {best[1]}-13 at {static[best]:.1f} ms; "
                  f"rebalanced settled at {static[best] / settled:.3f} of its throughput "
                  f"(before the re-partition {static[best] / before:.3f}; over steps 7-26 {static[best] / early:.3f})")
            # The least of 78 noisy medians is a lucky one: the three best
            # splits and the rebalanced run again, in turn, on equal terms.
            top = sorted(static, key=static.get)[:3]
            again = {ab: [] for ab in top}
            runs = {"early": [], "settled": []}
            for r in range(args.confirm):
                ms_r, _, _ = run(args, work, f"rebalanced_{r}",
                                 config(args.steps, f"  rebalance: {{every: {args.every}, threshold: 0.2}}\n"), th)
                runs["early"].append(statistics.median(ms_r[k2:k2 + 20]))
                runs["settled"].append(statistics.median(ms_r[-20:]))
                for a, b in top:
                    parts = f"[[0, {a - 1}], [{a}, {b - 1}], [{b}, 13]]"
                    ms_s, _, _ = run(args, work, f"again_{a}_{b}", config(30, f"  partition: {parts}\n").replace(
                        "  stages: 3\n", ""), th)
                    again[(a, b)].append(median_after(ms_s))
                print(f"round {r + 1}: rebalanced {runs['early'][-1]:.1f} ms over steps {k2 + 1}-{k2 + 20}, "
                      f"{runs['settled'][-1]:.1f} over the last 20; " +
                      "; ".join(f"0-{a - 1} | {a}-{b - 1} | {b}-13 {again[(a, b)][-1]:.1f}" for a, b in top))
            if args.confirm:
                best_again = min(statistics.median(v) for v in again.values())
                print(f"again, medians of {args.confirm} rounds: the best of the three static splits {best_again:.1f} ms; "
                      f"rebalanced over steps {k2 + 1}-{k2 + 20} {statistics.median(runs['early']):.1f} ms "
                      f"({best_again / statistics.median(runs['early']):.3f}), over the last 20 "
                      f"{statistics.median(runs['settled']):.1f} ms ({best_again / statistics.median(runs['settled']):.3f})")
    finally:
        for t in th.values():
            t.close()
    on, off = [], []
    if args.pairs < 1:
        return
    for i in range(args.pairs):
        order = [("on", f"  rebalance: {{every: {args.every}, threshold: 0.2}}\n"), ("off", "")]
        if i % 2:
            order.reverse()
        for label, extra in order:
            ms, notices, _ = run(args, work, f"cost_{label}_{i}", config(args.steps, extra))
            (on if label == "on" else off).append(median_after(ms))
            if notices:
                print(f"cost {label} {i}: {len(notices)} re-partition(s) without a throttle")
    ratios = [a / b for a, b in zip(on, off)]
    print("cost: median step on/off per pair: " + ", ".join(f"{r:.3f}" for r in ratios) +
          f"; on {statistics.median(on):.1f} ms, off {statistics.median(off):.1f} ms")


if __name__ == "__main__":
    main()
