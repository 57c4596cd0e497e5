#!/usr/bin/env python3
"""Recovery time: healing one killed process from a peer's memory, against
restarting every rank from the newest checkpoint (TorchElastic's model).

    python3 bench/heal_bench.py [--build build] [--rounds 3] [--part all|recovery|cost|coordinator]
                                [--copy-every 1,8] [--dp 2,1] [--steps 24] [--skip 3]
                                [--coordinator rank0|process]

The seed MLP (configs/seed_mlp.yaml) at dp 2 x pp 2 under
`actorpipe launch --nprocs 4`, 8 steps, a checkpoint after every step. A
kill_process fault kills rank 3 (replica 1, stage 1) right after its last
backward of step 4 (0-based; its peer waits in the allreduce), so both
models lose the same work: the step that was running.

  heal     supervision.max_restarts 2: rank 0's supervisor has launch start
           rank 3 again, every rank rolls back in memory, the new process
           gets its stage from replica 0's memory.
  restart  supervision.max_restarts 0: launch stops every worker (as
           torchrun's agent does), then four `actorpipe train --resume`
           processes start from the newest checkpoint, each executed
           afresh with torchrun's variables (as the agent starts them;
           `launch` would fork them with LibTorch already loaded).

Every line of output is stamped as it arrives. Recovery is from the
launcher's line that names the kill to the end of the re-run step, less that
step's own time (as printed): what the failure cost beyond the lost step.
Rounds alternate the two; the table gives medians, and heal's split as its
`heal:` line prints it.

The cost to a run with no faults (--part cost): the same config, 24 steps,
no fault and no checkpoints, with supervision.max_restarts 0 and 2. At
dp 2 x pp 2 each stage keeps its live state as its boundary after every
step (copy_every does not apply); at dp 1 x pp 2 under `launch --nprocs 2`
each stage keeps its boundary and stage 1 also leaves a copy with rank 0's
process (its keeper: through shared memory on one machine, through the
socket with ACTORPIPE_SHM_DISABLE=1 in the environment), after every K-th step with
supervision.copy_every K (one run per mesh and K in --copy-every);
alternating; the median step time
over the steps after the first --skip of every round (from --results), and
the ratios. A longer run skipping more (--steps 48 --skip 8) gives the
steady state: the first steps after a kept boundary also fault in the
buffers that the stepped-aside updates write (two or three sets of a
stage's state, once).

With --coordinator process every launch runs the supervisor and the store
in a process apart (`launch --coordinator process`), and the fault kills
rank 0 (replica 0, stage 0), which then heals like any other worker. The
part `coordinator` prices that process: fault-free runs at dp 2 x pp 2
(and dp 1 x pp 2), --coordinator rank0 against process, alternating; the
median step time and the ratio.

Python 3 standard library only.
"""
import json
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from etcd_local import free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r"^step +(\d+)/(\d+) .* step +([\d.]+) ms")
HEAL = re.compile(r"(\d+) ms to decide, (\d+) ms to the rendezvous.*?, (\d+) ms for the channel and groups, (\d+) ms")


COORDINATOR = ["--coordinator", "rank0"]


def config(dir_, restarts, fault=True, dp=2, copy_every=1):
    text = open(os.path.join(ROOT, "configs/seed_mlp.yaml")).read()
    text = re.sub(r"(?m)^(train:\n(?:  .*\n)*?)  steps: \d+", r"\1  steps: 8", text)
    text = re.sub(r"(?ms)^pipeline:.*?(?=^\S|\Z)", "", text)
    text = re.sub(r"(?ms)^(supervision|checkpoint|parallel|faults):.*?(?=^\S|\Z)", "", text)
    text += (f"parallel: {{dp: {dp}, allreduce: gloo}}\n"
             "pipeline: {stages: 2, schedule: 1f1b, microbatches: 4, devices: auto, intra_op_threads: 1}\n"
             f"supervision: {{max_restarts: {restarts}, heartbeat_timeout_s: 2, copy_every: {copy_every}}}\n"
             f"checkpoint: {{every: 1, dir: {dir_}/ckpt}}\n")
    if fault:
        victim = "replica: 0, stage: 0" if COORDINATOR[1] == "process" else "replica: 1, stage: 1"
        text += "faults:\n  inject:\n    - {kind: kill_process, " + victim + ", step: 4, after_op: B3}\n"
    path = os.path.join(dir_, f"heal_{restarts}_{int(fault)}_dp{dp}_k{copy_every}.yaml")
    open(path, "w").write(text)
    return path


def stamped(cmd):
    """Runs cmd; returns [(seconds since start, line)] over stdout and stderr."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = [(time.monotonic() - t0, l.rstrip("\n")) for l in p.stdout]
    p.wait()
    return t0, p.returncode, lines


def torchrun_like(exe, nprocs, args):
    """Starts nprocs `actorpipe train ARGS` as torchrun's agent starts its
    workers: each one executed afresh (LibTorch loaded anew), with RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
    rank 0 holds the store. Returns (t0, exit code, rank 0's stamped
    lines); the first nonzero code of the others if rank 0's is 0."""
    port = free_port()
    others = []
    t0 = time.monotonic()
    for r in range(nprocs - 1, 0, -1):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(nprocs), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        others.append(subprocess.Popen([exe, "train", *args, "--quiet"], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True))
    env = dict(os.environ, RANK="0", WORLD_SIZE=str(nprocs), LOCAL_RANK="0", LOCAL_WORLD_SIZE=str(nprocs),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    p = subprocess.Popen([exe, "train", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1)
    lines = [(time.monotonic() - t0, l.rstrip("\n")) for l in p.stdout]
    code = p.wait()
    for o in others:
        _, err = o.communicate()
        if o.returncode != 0 and code == 0:
            code = o.returncode
            lines.append((time.monotonic() - t0, err))
    return t0, code, lines


def first(lines, pred):
    return next((t, l) for t, l in lines if pred(l))


def heal_round(exe, cfg):
    _, code, lines = stamped([exe, "launch", "--nprocs", "4", *COORDINATOR, cfg])
    if code != 0:
        sys.exit("heal run failed:\n" + "\n".join(l for _, l in lines))
    t_kill, _ = first(lines, lambda l: "killed by SIGKILL" in l)
    # The re-run step 4 is the second "step 5/8" line... there is only one:
    # the first attempt never finished it.
    t_step, l_step = first(lines, lambda l: l.startswith("step     5/8") or l.startswith("step 5/8"))
    step_ms = float(STEP.match(l_step).group(3))
    split = [int(x) for x in HEAL.search(first(lines, lambda l: "generation 1 runs" in l)[1]).groups()]
    return (t_step - t_kill) * 1e3 - step_ms, split


def restart_round(exe, cfg, resumed_cfg, dir_):
    t0, code, lines = stamped([exe, "launch", "--nprocs", "4", *COORDINATOR, cfg])
    if code == 0:
        sys.exit("the restart model's first run did not fail")
    t_kill, _ = first(lines, lambda l: "killed by SIGKILL" in l)
    t_end = lines[-1][0] if lines else t_kill
    stopped = time.monotonic() - t0  # the launcher returned: every worker is gone
    # The fault has fired: the restarted workers run without it, each
    # executed afresh as torchrun's agent starts them.
    t1, code, lines2 = torchrun_like(exe, 4, [resumed_cfg, "--resume", os.path.join(dir_, "ckpt")])
    if code != 0:
        sys.exit("the resumed run failed:\n" + "\n".join(l for _, l in lines2))
    t_step, l_step = first(lines2, lambda l: STEP.match(l) and STEP.match(l).group(1) == "5")
    step_ms = float(STEP.match(l_step).group(3))
    stop_ms = (stopped - t_kill) * 1e3
    start_ms = ((t1 - t0) - stopped) * 1e3 + t_step * 1e3 - step_ms
    del t_end
    return stop_ms + start_ms, [stop_ms, start_ms]


def overhead_round(exe, dir_, restarts, dp, copy_every=1, steps=24, skip=3, coordinator=None):
    cfg = config(dir_, restarts, fault=False, dp=dp, copy_every=copy_every)
    text = open(cfg).read().replace("steps: 8", f"steps: {steps}")
    text = re.sub(r"checkpoint: .*\n", "", text)
    open(cfg, "w").write(text)
    out = os.path.join(dir_, "results.json")
    where = ["--coordinator", coordinator] if coordinator else COORDINATOR
    r = subprocess.run([exe, "launch", "--nprocs", str(2 * dp), *where, cfg, "--quiet", "--results", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stdout + r.stderr)
    runs = json.load(open(out))
    run = runs[0] if isinstance(runs, list) else runs.get("runs", [runs])[0]
    return [s["step_s"] * 1e3 for s in run["steps"][skip:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part", choices=("all", "recovery", "cost", "coordinator"), default="all",
                    help="recovery time, the cost to a run with no faults, or both; or a coordinator apart's cost")
    ap.add_argument("--coordinator", choices=("rank0", "process"), default="rank0",
                    help="process: launch --coordinator process, and the fault kills rank 0 (stage 0)")
    ap.add_argument("--copy-every", default="1,8",
                    help="the supervision.copy_every values of the cost runs, comma-separated")
    ap.add_argument("--dp", default="2,1", help="the meshes of the cost runs: dp values (pp 2), comma-separated")
    ap.add_argument("--steps", type=int, default=24, help="steps of each cost run")
    ap.add_argument("--skip", type=int, default=3, help="the first steps of each cost run left out of the median")
    a = ap.parse_args()
    exe = os.path.join(a.build, "actorpipe")
    COORDINATOR[1] = a.coordinator
    if a.part == "coordinator":
        coordinator_cost(exe, a.rounds, [int(x) for x in a.dp.split(",") if x.strip()], a.steps, a.skip)
        return
    if a.part in ("all", "recovery"):
        recovery(exe, a.rounds)
    if a.part in ("all", "cost"):
        ks = [int(k) for k in a.copy_every.split(",") if k.strip()]
        if not ks or min(ks) < 1:
            sys.exit("heal_bench: --copy-every wants positive integers, e.g. 1,8")
        dps = [int(x) for x in a.dp.split(",") if x.strip()]
        if not dps or any(x not in (1, 2) for x in dps):
            sys.exit("heal_bench: --dp wants 1, 2 or both, e.g. 2,1")
        if a.steps < 2 or not 0 <= a.skip < a.steps:
            sys.exit("heal_bench: --steps wants at least 2 and --skip fewer than --steps")
        cost(exe, a.rounds, ks, dps, a.steps, a.skip)


def recovery(exe, rounds):
    heal, heal_split, full, full_split = [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            for kind in ("heal", "restart"):
                subprocess.run(["rm", "-rf", os.path.join(d, "ckpt")])
                if kind == "heal":
                    ms, split = heal_round(exe, config(d, 2))
                    heal.append(ms)
                    heal_split.append(split)
                else:
                    ms, split = restart_round(exe, config(d, 0), config(d, 0, fault=False), d)
                    full.append(ms)
                    full_split.append(split)
                print(f"round {r + 1} {kind}: {ms:.0f} ms {split}", file=sys.stderr)
    med = statistics.median
    hs = [med(x) for x in zip(*heal_split)]
    fs = [med(x) for x in zip(*full_split)]
    print(f"| model | recovery (median of {rounds}) | split |")
    print("| --- | --- | --- |")
    print(f"| heal one process from a peer's memory | {med(heal):.0f} ms | detect and decide {hs[0]:.0f}, "
          f"new process to rendezvous {hs[1]:.0f}, channel and groups {hs[2]:.0f}, state and stages {hs[3]:.0f} ms |")
    print(f"| restart every rank from the newest checkpoint | {med(full):.0f} ms | stop every worker {fs[0]:.0f}, "
          f"start four and resume {fs[1]:.0f} ms |")
    print(f"\nfull restart / heal: {med(full) / med(heal):.1f}x")


def cost(exe, rounds, ks, dps=(2, 1), n_steps=24, skip=3):
    """Step time with and without supervision, dp 2 x pp 2 (each stage keeps
    a copy in its own process's memory) and dp 1 x pp 2 (and stage 1 sends
    its copy to rank 0, its keeper, in the background), with copies after
    every K-th step for each K of ks, rounds alternating over all the
    runs."""
    med = statistics.median
    with tempfile.TemporaryDirectory() as d:
        runs = [run for dp in dps for run in [(dp, 0, 1)] + [(dp, 2, k) for k in ks]]
        steps = {run: [] for run in runs}
        for r in range(rounds):
            for dp, restarts, k in runs:
                got = overhead_round(exe, d, restarts, dp, k, n_steps, skip)
                steps[(dp, restarts, k)] += got
                print(f"round {r + 1} dp {dp} max_restarts {restarts} copy_every {k}: "
                      f"{med(got):.1f} ms", file=sys.stderr)
    print(f"\n| mesh | supervision.max_restarts 0 | 2 | with / without |")
    print("| --- | --- | --- | --- |")
    every = lambda k: "every step" if k == 1 else f"every {k}th step"
    what = {2: lambda k: f"dp 2 x pp 2, copy_every {k} (each stage's live state kept after every step, whatever K)",
            1: lambda k: f"dp 1 x pp 2, copy_every {k} (and stage 1's copy sent to rank 0 after {every(k)})"}
    for dp in dps:
        off = med(steps[(dp, 0, 1)])
        for k in ks:
            on = med(steps[(dp, 2, k)])
            print(f"| {what[dp](k)} | {off:.1f} ms | {on:.1f} ms | {on / off:.3f} |")

def coordinator_cost(exe, rounds, dps, n_steps, skip):
    """Fault-free step time with max_restarts 2, rank 0 coordinating against
    a coordinator apart, alternating."""
    med = statistics.median
    with tempfile.TemporaryDirectory() as d:
        steps = {(dp, c): [] for dp in dps for c in ("rank0", "process")}
        for r in range(rounds):
            for dp, c in steps:
                got = overhead_round(exe, d, 2, dp, 1, n_steps, skip, c)
                steps[(dp, c)] += got
                print(f"round {r + 1} dp {dp} --coordinator {c}: {med(got):.1f} ms", file=sys.stderr)
    print("\n| mesh | --coordinator rank0 | process | process / rank0 |")
    print("| --- | --- | --- | --- |")
    for dp in dps:
        off, on = med(steps[(dp, "rank0")]), med(steps[(dp, "process")])
        print(f"| dp {dp} x pp 2 on {2 * dp} workers | {off:.1f} ms | {on:.1f} ms | {on / off:.3f} |")


if __name__ == "__main__":
    main()
