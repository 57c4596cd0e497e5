#!/usr/bin/env python3
"""Two overhead_bench binaries side by side in one run.

    bench/overhead_ab.py OLD_BINARY NEW_BINARY [--rounds 3] [--filter REGEX]

Runs the two binaries alternately (old, new, old, new, ...) so that both
see the same machine noise, takes each benchmark's median ns per fired op
over the rounds, and prints a table of old, new and new/old per benchmark,
with the geometric mean of the ratios last. Ratios below 1 mean the new
binary spends less per op.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys


def run(binary, pattern):
    out = subprocess.run([binary, "--benchmark_filter=" + pattern, "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    return {b["name"]: b["ns_per_op"] for b in json.loads(out)["benchmarks"] if "ns_per_op" in b}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--filter", default="null/shared")
    a = ap.parse_args()
    samples = {"old": {}, "new": {}}
    for r in range(a.rounds):
        for side, binary in (("old", a.old), ("new", a.new)):
            print(f"round {r + 1}/{a.rounds}: {side}", file=sys.stderr, flush=True)
            for name, ns in run(binary, a.filter).items():
                samples[side].setdefault(name, []).append(ns)
    names = [n for n in samples["old"] if n in samples["new"]]
    if not names:
        sys.exit("no benchmark in common under --filter " + a.filter)
    print(f"| benchmark | old ns/op | new ns/op | new/old |")
    print("| --- | --- | --- | --- |")
    logs = []
    for n in names:
        o, w = statistics.median(samples["old"][n]), statistics.median(samples["new"][n])
        logs.append(math.log(w / o))
        short = n.replace("/iterations:1/manual_time", "")
        print(f"| {short} | {o:.0f} | {w:.0f} | {w / o:.2f} |")
    print(f"\ngeometric mean new/old over {len(names)} benchmarks, {a.rounds} rounds each: "
          f"{math.exp(sum(logs) / len(logs)):.3f}")


if __name__ == "__main__":
    main()
