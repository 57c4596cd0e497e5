#!/usr/bin/env python3
"""The cost of keeping a run's record in etcd to a run without faults:
`launch --coordinator etcd://...` against `launch --coordinator process`
(the same coordinator apart, without etcd), rounds alternating.

    python3 bench/etcd_cost.py [--build build] [--rounds 5] [--steps 40] [--skip 3]

Starts a 3-member etcd cluster (Debian's etcd-server) on loopback ports
the kernel gave out, in a temporary directory, and stops it at the end.
The run: the seed MLP (configs/seed_mlp.yaml) at dp 1 x pp 2 under
`launch --nprocs 2`, supervision on (max_restarts 2), no checkpoints. The
coordinator writes the record once a generation forms and then the newest
decided step at most every 0.5 s (from a thread of its own), and renews
its lease every third of heartbeat_timeout_s. Prints the median
step time of each (from --results, the first --skip steps of each round
left out) and the ratio; the median of the per-round ratios (each round
runs both, in alternating order: the second run of a pair tends to be the
faster one here); and the CPU time etcd's members used while each kind of
run ran, per second of it (from /proc/PID/stat): what etcd on the same
cores takes from the run.

Python 3 standard library only.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import etcd_local

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config(d, steps):
    text = open(os.path.join(ROOT, "configs/seed_mlp.yaml")).read()
    text = re.sub(r"(?m)^(train:\n(?:  .*\n)*?)  steps: \d+", rf"\1  steps: {steps}", text)
    text = re.sub(r"(?ms)^(pipeline|supervision|checkpoint|parallel|faults):.*?(?=^\S|\Z)", "", text)
    text += ("pipeline: {stages: 2, schedule: 1f1b, microbatches: 4, devices: auto, intra_op_threads: 1}\n"
             "supervision: {max_restarts: 2, heartbeat_timeout_s: 2}\n")
    path = os.path.join(d, "etcd_cost.yaml")
    open(path, "w").write(text)
    return path


def cpu_s(procs):
    """The user + system CPU seconds the processes used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in procs:
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick


def round_steps(exe, cfg, coordinator, d, skip, run_id):
    out = os.path.join(d, "results.json")
    args = [exe, "launch", "--nprocs", "2", "--coordinator", coordinator]
    if coordinator.startswith("etcd://"):
        args += ["--run-id", run_id]
    r = subprocess.run(args + [cfg, "--quiet", "--results", out], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stdout + r.stderr)
    runs = json.load(open(out))
    run = runs[0] if isinstance(runs, list) else runs.get("runs", [runs])[0]
    return [s["step_s"] * 1e3 for s in run["steps"][skip:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--skip", type=int, default=3)
    a = ap.parse_args()
    if not shutil.which("etcd"):
        sys.exit("etcd_cost: etcd is not installed (scripts/setup.sh installs etcd-server)")
    if a.rounds < 1 or a.steps < 2 or not 0 <= a.skip < a.steps:
        sys.exit("etcd_cost: --rounds at least 1, --steps at least 2, --skip below --steps")
    exe = os.path.join(a.build, "actorpipe")
    med = statistics.median
    with tempfile.TemporaryDirectory() as d:
        procs = []
        try:
            url = etcd_local.start(d, procs)
            cfg = config(d, a.steps)
            steps = {"process": [], url: []}
            etcd_cpu = {"process": [0.0, 0.0], url: [0.0, 0.0]}  # etcd's CPU s, wall s
            ratios = []
            for r in range(a.rounds):
                order = ["process", url] if r % 2 == 0 else [url, "process"]
                medians = {}
                for c in order:
                    cpu0, t0 = cpu_s(procs), time.monotonic()
                    got = round_steps(exe, cfg, c, d, a.skip, f"bench-{os.getpid()}-{r}")
                    etcd_cpu[c][0] += cpu_s(procs) - cpu0
                    etcd_cpu[c][1] += time.monotonic() - t0
                    steps[c] += got
                    medians[c] = med(got)
                    print(f"round {r + 1} {'etcd' if c == url else c}: {med(got):.1f} ms", file=sys.stderr)
                ratios.append(medians[url] / medians["process"])
                print(f"round {r + 1} etcd / without: {ratios[-1]:.3f}", file=sys.stderr)
        except etcd_local.ClusterError as e:
            sys.exit(f"etcd_cost: {e}")
        finally:
            etcd_local.stop(procs)
    off, on = med(steps["process"]), med(steps[url])
    print("| run (dp 1 x pp 2, seed MLP, 2 workers and a coordinator apart) | median step |")
    print("| --- | --- |")
    print(f"| `--coordinator process` | {off:.1f} ms |")
    print(f"| `--coordinator etcd://` (3 members on loopback) | {on:.1f} ms |")
    print(f"\netcd / without: {on / off:.3f} (all steps); median of the {len(ratios)} per-round ratios "
          f"{med(ratios):.3f} (from {min(ratios):.3f} to {max(ratios):.3f})")
    for c, name in ((url, "with etcd"), ("process", "without")):
        used, wall = etcd_cpu[c]
        print(f"etcd's 3 members used {1e3 * used / wall:.1f} ms of CPU per s of a run {name} "
              f"({100 * used / wall / os.cpu_count():.2f} % of the machine's {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
