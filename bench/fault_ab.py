#!/usr/bin/env python3
"""Two actorpipe binaries, run in turn on one config under `launch --nprocs 3
--coordinator rank0`: the three workers' minor page faults and CPU time over
the whole run, the sum of its step times and its re-placements.

    python3 bench/fault_ab.py A_BINARY B_BINARY CONFIG [--rounds 2] [--shares]

CONFIG `rebalance` is rebalance_bench.py's model at 40 steps under
pipeline.rebalance {every: 3, threshold: 0.2}.

--shares holds the workers to 0.667, 0.333 and 0.667 of a core (cgroup v1
cpu, as bench/rebalance_bench.py --shares). Rounds alternate the order.
Needs root for --shares. Python 3 standard library only.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import tempfile
import time

spec = importlib.util.spec_from_file_location("rb", os.path.join(os.path.dirname(__file__), "rebalance_bench.py"))
rb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rb)


def once(binary, cfg, shares, tag):
    th = {r: rb.Throttle(x, f"{r}_{tag}") for r, x in enumerate(shares)} if shares else {}
    results = os.path.join(tempfile.mkdtemp(prefix="fault_ab_"), "r.json")
    p = subprocess.Popen([binary, "launch", "--coordinator", "rank0", "--nprocs", "3", cfg, "--quiet",
                          "--results", results], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pids = [rb.rank_pid(p.pid, r) for r in range(3)]
        for r, t in th.items():
            t.hold(pids[r])
        last = {}
        while p.poll() is None:
            for pid in pids:
                try:
                    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                    last[pid] = (int(f[7]), int(f[11]) + int(f[12]))  # minflt, utime + stime (ticks)
                except OSError:
                    pass
            time.sleep(0.05)
    finally:
        if p.poll() is None:
            p.kill()
        for t in th.values():
            t.close()
    if p.returncode != 0:
        raise SystemExit(f"{binary} failed ({p.returncode}):\n{p.stdout.read()}")
    d = json.load(open(results))
    return (sum(v[0] for v in last.values()), sum(v[1] for v in last.values()) / os.sysconf("SC_CLK_TCK"),
            sum(s["step_s"] for s in d["steps"]), len(d["supervision"].get("notices", [])))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("config")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shares", action="store_true")
    args = ap.parse_args()
    shares = [0.667, 0.333, 0.667] if args.shares else None
    if args.config == "rebalance":
        args.config = os.path.join(tempfile.mkdtemp(prefix="fault_ab_"), "rebalance.yaml")
        with open(args.config, "w") as f:
            f.write(rb.config(40, "  rebalance: {every: 3, threshold: 0.2}\n"))
    for i in range(args.rounds):
        for tag, b in (("a", args.a), ("b", args.b)) if i % 2 == 0 else (("b", args.b), ("a", args.a)):
            faults, cpu, steps, moves = once(b, args.config, shares, tag)
            print(f"{b}: faults {faults}, cpu {cpu:.2f} s, sum of step times {steps:.2f} s, "
                  f"{moves} re-placement(s)", flush=True)


if __name__ == "__main__":
    main()
