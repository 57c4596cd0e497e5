#!/usr/bin/env python3
"""`actorpipe launch --nprocs S` against the same config in one process.

    python3 bench/multi_process.py [--build build] [--rounds 3] [--baseline OLD_BINARY]

Four stages (pipeline.stages = 4), so S = 2 puts two stages in each process
and S = 4 one. For the seed MLP (configs/seed_mlp.yaml), the digits app
(configs/digits_mlp.yaml) and the seed MLP on the null device (no model:
the runtime alone, 0-element tensors still cross), each round runs the
one-process variant and then `launch --nprocs 2` and `--nprocs 4`, in turn,
so the variants see the same background load. Step times come from
`--results` (steps[].step_s); the first steps of each run are warm-up and
dropped; the table gives the median over the remaining steps of all rounds
and launch / one process. On the null device a step fires
stages x microbatches x 2 ops (F and B), so the table also gives µs per op.
If build/caf_roundtrip_bench exists it runs once at the end (the CAF
middleman round trip between two processes, for reference).

With --baseline, each round also runs every variant with that binary (an
older build), right after this build's, and the table has a row for each:
before and after from one run, under the same load.

Python 3 standard library only. Derived configs go to a temporary
directory; the digits data path is made absolute.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_runs import results_complete, run_until_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, source config, steps, warm-up steps, devices override
CASES = [
    ("seed MLP", "configs/seed_mlp.yaml", 12, 3, None),
    ("digits", "configs/digits_mlp.yaml", 30, 5, None),
    ("seed MLP, null device", "configs/seed_mlp.yaml", 60, 10, "[null, null, null, null]"),
]
NPROCS = [2, 4]
EXIT_GRACE_S = 5
RUN_TIMEOUT_S = 90  # a worker can also hang before rank 0 writes its results
STATS = {"hung": 0}


def derive(src, out_path, devices):
    """The source config with absolute data paths and, if asked, other devices."""
    lines = []
    with open(os.path.join(ROOT, src)) as f:
        for line in f:
            stripped = line.strip()
            if stripped.startswith("path:") and "data/" in stripped:
                rel = stripped.split(":", 1)[1].split("#")[0].strip()
                line = line[: line.index("path:")] + "path: " + os.path.normpath(
                    os.path.join(ROOT, "configs", rel)) + "\n"
            if devices is not None and stripped.startswith("devices:"):
                line = line[: line.index("devices:")] + "devices: " + devices + "\n"
            lines.append(line)
    text = "".join(lines)
    if "stages:" not in text and "partition:" not in text:
        raise SystemExit(f"{src}: no stage count to keep at 4")
    with open(out_path, "w") as f:
        f.write(text)


def run_once(binary, nprocs, config, steps, results):
    if nprocs == 1:
        cmd = [binary, "train", config]
    else:
        cmd = [binary, "launch", "--coordinator", "rank0", "--nprocs", str(nprocs), config]
    cmd += ["--steps", str(steps), "--quiet", "--results", results]
    # A worker may hang on its way out after rank 0 wrote the results: it
    # is stopped EXIT_GRACE_S later, the steps are kept, the hang counted.
    code, seen, hung, out = run_until_results(cmd, results, RUN_TIMEOUT_S, EXIT_GRACE_S, poll_s=0.2)
    if hung and not seen:
        print(f"  ! {' '.join(cmd[1:4])}: no results after {RUN_TIMEOUT_S} s; stopped", file=sys.stderr)
    elif hung:
        STATS["hung"] += 1
        print(f"  ! {' '.join(cmd[1:4])}: still running {EXIT_GRACE_S} s after rank 0 wrote its results; "
              f"stopped", file=sys.stderr)
    if (code != 0 and not hung) or not results_complete(results):
        tail = "\n".join(out.splitlines()[-5:])
        print(f"  ! {' '.join(cmd[1:])}: exit {code}\n{tail}", file=sys.stderr)
        return None
    with open(results) as f:
        doc = json.load(f)
    if doc["stages"] != 4:
        raise SystemExit(f"{config}: {doc['stages']} stages, expected 4")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="another actorpipe binary to run beside this build's, round by round")
    args = ap.parse_args()
    binaries = [("", os.path.join(args.build, "actorpipe"))]
    if args.baseline:
        binaries = [(" (this build)", binaries[0][1]), (" (baseline)", os.path.abspath(args.baseline))]
    started = time.time()
    rows = []
    failures = 0
    with tempfile.TemporaryDirectory(prefix="actorpipe-mp-") as tmp:
        for name, src, steps, warm, devices in CASES:
            config = os.path.join(tmp, f"case{len(rows)}.yaml")
            derive(src, config, devices)
            times = {(b, n): [] for b, _ in binaries for n in [1] + NPROCS}
            ops = None
            for r in range(args.rounds):
                for n in [1] + NPROCS:
                    for tag, binary in binaries:
                        doc = None
                        for attempt in range(2):  # one retry: a failed run is reported, not hidden
                            doc = run_once(binary, n, config, steps, os.path.join(tmp, "r.json"))
                            if doc is not None:
                                break
                            failures += 1
                        if doc is None:
                            continue
                        ops = doc["stages"] * doc["microbatches"] * 2 * max(1, doc.get("virtual_stages") or 1)
                        step_s = [s["step_s"] for s in doc["steps"]][warm:]
                        times[(tag, n)].extend(step_s)
                        print(f"  {name}{tag}, {'one process' if n == 1 else f'launch --nprocs {n}'}, round {r + 1}: "
                              f"median {statistics.median(step_s) * 1e3:.2f} ms", file=sys.stderr, flush=True)
            for tag, _ in binaries:
                rows.append((name + tag, steps, warm, ops, devices is not None, {n: times[(tag, n)] for n in [1] + NPROCS}))

    caf_line = None
    caf = os.path.join(args.build, "caf_roundtrip_bench")
    if os.path.exists(caf):
        p = subprocess.run([caf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        caf_line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else f"exit {p.returncode}"

    print()
    print(f"{args.rounds} rounds, one process / launch 2 / launch 4 in turn each round; "
          f"medians over the steps after warm-up")
    print()
    print("| model | steps (warm-up) | processes | median step | launch / one process | µs per op |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, steps, warm, ops, null, times in rows:
        if not times[1]:
            continue
        base = statistics.median(times[1])
        for n in [1] + NPROCS:
            if not times[n]:
                print(f"| {name} | {steps} ({warm}) | {n} | failed | | |")
                continue
            med = statistics.median(times[n])
            ratio = "1" if n == 1 else f"{med / base:.2f}"
            per_op = f"{med / ops * 1e6:.1f}" if null and ops else ""
            label = "one process" if n == 1 else f"launch --nprocs {n}"
            print(f"| {name} | {steps} ({warm}) | {label} | {med * 1e3:.2f} ms | {ratio} | {per_op} |")
    print()
    if caf_line:
        print(f"CAF middleman round trip between two processes: {caf_line}")
    print(f"failed runs (retried once): {failures}; runs stopped because a worker did not exit "
          f"{EXIT_GRACE_S} s after rank 0's results (their steps kept): {STATS['hung']}; wall time {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
