#!/usr/bin/env python3
"""Stage times of bench/gpt_partition.yaml under its default partition
(balanced by compute) and under the one balancing parameter counts gives,
alternating the two, three rounds each. Prints per-stage busy time per step
(median over the rounds' steps after 3 warm-up steps) and the step time.

Usage: python3 bench/gpt_partition.py [build/actorpipe]
"""
import json, os, statistics, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "actorpipe")
base = os.path.join(root, "bench", "gpt_partition.yaml")
by_params = [[0, 0], [1, 1], [2, 2], [3, 5]]  # balanced_partition over layer_parameter_counts

def run(cfg, results):
    subprocess.run([binary, "train", cfg, "--quiet", "--samples", "0", "--results", results],
                   check=True, stdout=subprocess.DEVNULL)
    steps = json.load(open(results))["steps"][3:]
    return ([s["step_s"] for s in steps], [[st["busy_s"] for st in s["stages"]] for s in steps])

with tempfile.TemporaryDirectory() as tmp:
    text = open(base).read().replace("path: ../data/", "path: " + os.path.join(root, "data") + "/")
    cfgs = {"by compute (default)": os.path.join(tmp, "compute.yaml"), "by parameters": os.path.join(tmp, "params.yaml")}
    open(cfgs["by compute (default)"], "w").write(text)
    open(cfgs["by parameters"], "w").write(text.replace("schedule: 1f1b}", "schedule: 1f1b, partition: %s}" % by_params))
    got = {k: ([], []) for k in cfgs}
    for _ in range(3):
        for name, cfg in cfgs.items():
            s, b = run(cfg, os.path.join(tmp, "r.json"))
            got[name][0].extend(s)
            got[name][1].extend(b)
    print("| partition | median step | busy per stage per step (ms) |")
    print("| --- | --- | --- |")
    for name, (steps, busy) in got.items():
        per_stage = [statistics.median(b[i] for b in busy) * 1e3 for i in range(len(busy[0]))]
        print("| %s | %.1f ms | %s |" % (name, statistics.median(steps) * 1e3, " / ".join("%.1f" % x for x in per_stage)))
    a, b = (statistics.median(got[k][0]) for k in cfgs)
    print("step by parameters / step by compute: %.2f" % (b / a))
