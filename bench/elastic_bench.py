#!/usr/bin/env python3
"""Going on without a lost process (supervision.replace_timeout_s: 0),
against restarting every worker from disk at the new world size
(TorchElastic's model).

    python3 bench/elastic_bench.py [--build build] [--rounds 3] [--steps 20]

The seed MLP (configs/seed_mlp.yaml) at pp 4 under `actorpipe launch
--nprocs 4`, M 8, a checkpoint after every step. A kill_process fault
kills rank 2 (stage 2) right after its last backward of step 6 (0-based),
so both models lose the same work: the step that was running.

  shrink   supervision {max_restarts: 2, replace_timeout_s: 0}: rank 0's
           supervisor re-places stage 2 in rank 1's process (which holds
           its copy), and the three processes go on from memory.
  restart  supervision.max_restarts 0: launch stops every worker (as
           torchrun's agent does), then two `actorpipe train --resume`
           processes, each executed afresh with torchrun's variables (as
           the agent starts them), start the new world from the newest
           checkpoint (2: the smallest world
           a run may start with that divides 4 stages and has lost a host).

Time to continue is from the launcher's line that names the kill to the end
of the re-run step, less that step's own time (as printed): the kill to the
next step's first op, within one print. Shrink's split is its `heal:` line's;
detection is the rest. The time to the end of the re-run step is printed
too: work a model does after the first op (the shrink's copies of the start
to changed keepers) shows there. Throughput after the shrink is the median step time
of the steps before the kill over the median of the steps after it (the
first after it left out), in the same run; and, for reference, a fresh
`launch --nprocs 2` run's median over the shrunk run's, of the rounds'
medians and per round (the two runs of a round are back to back). Rounds
alternate.

Python 3 standard library only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heal_bench import HEAL, STEP, first, stamped, torchrun_like  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILL_STEP = 6


def config(dir_, name, supervision, steps, fault=True):
    text = open(os.path.join(ROOT, "configs/seed_mlp.yaml")).read()
    text = re.sub(r"(?m)^(train:\n(?:  .*\n)*?)  steps: \d+", rf"\1  steps: {steps}", text)
    text = re.sub(r"(?ms)^(pipeline|supervision|checkpoint|parallel|faults|compare):.*?(?=^\S|\Z)", "", text)
    text += ("pipeline: {stages: 4, schedule: 1f1b, microbatches: 8, devices: auto, intra_op_threads: 1}\n"
             f"supervision: {supervision}\n"
             f"checkpoint: {{every: 1, dir: {dir_}/ckpt}}\n")
    if fault:
        text += f"faults:\n  inject:\n    - {{kind: kill_process, stage: 2, step: {KILL_STEP}, after_op: B7}}\n"
    path = os.path.join(dir_, name + ".yaml")
    open(path, "w").write(text)
    return path


def steps_of(lines):
    """[(step number, ms)] of every step line, in order."""
    return [(int(m.group(1)), float(m.group(3))) for m in (STEP.match(l) for _, l in lines) if m]


def shrink_round(exe, dir_, steps):
    cfg = config(dir_, "shrink", "{max_restarts: 2, heartbeat_timeout_s: 2, replace_timeout_s: 0}", steps)
    _, code, lines = stamped([exe, "launch", "--coordinator", "rank0", "--nprocs", "4", cfg])
    if code != 0 or not any("re-placed" in l for _, l in lines):
        sys.exit("the shrink run failed:\n" + "\n".join(l for _, l in lines))
    t_kill, _ = first(lines, lambda l: "killed by SIGKILL" in l)
    after = KILL_STEP + 1  # printed 1-based
    t_step, l_step = first(lines, lambda l: STEP.match(l) and int(STEP.match(l).group(1)) == after)
    total = (t_step - t_kill) * 1e3 - float(STEP.match(l_step).group(3))
    split = [int(x) for x in HEAL.search(first(lines, lambda l: "generation 1 runs" in l)[1]).groups()]
    ms = steps_of(lines)
    before = statistics.median(m for s, m in ms if 2 <= s <= KILL_STEP)
    later = statistics.median(m for s, m in ms if s > after)
    return total, [total - sum(split)] + split, before, later, float(STEP.match(l_step).group(3))


def restart_round(exe, dir_, steps):
    t0, code, lines = stamped([exe, "launch", "--coordinator", "rank0", "--nprocs", "4", config(dir_, "restart", "{max_restarts: 0}", steps)])
    if code == 0:
        sys.exit("the restart model's first run did not fail")
    t_kill, _ = first(lines, lambda l: "killed by SIGKILL" in l)
    stopped = time.monotonic() - t0  # the launcher returned: every worker is gone
    resumed = config(dir_, "resumed", "{max_restarts: 0}", steps, fault=False)
    t1, code, lines2 = torchrun_like(exe, 2, [resumed, "--resume", os.path.join(dir_, "ckpt")])
    if code != 0:
        sys.exit("the resumed run failed:\n" + "\n".join(l for _, l in lines2))
    t_step, l_step = first(lines2, lambda l: STEP.match(l) and int(STEP.match(l).group(1)) == KILL_STEP + 1)
    stop_ms = (stopped - t_kill) * 1e3
    first_ms = float(STEP.match(l_step).group(3))
    start_ms = ((t1 - t0) - stopped) * 1e3 + t_step * 1e3 - first_ms
    return stop_ms + start_ms, [stop_ms, start_ms], first_ms


def fresh_two(exe, dir_, steps):
    cfg = config(dir_, "fresh2", "{max_restarts: 0}", steps, fault=False)
    _, code, lines = stamped([exe, "launch", "--coordinator", "rank0", "--nprocs", "2", cfg])
    if code != 0:
        sys.exit("the fresh run failed:\n" + "\n".join(l for _, l in lines))
    return statistics.median(m for s, m in steps_of(lines) if s > KILL_STEP + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="steps per run (more than %d)" % (KILL_STEP + 3))
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < KILL_STEP + 4:
        sys.exit(f"elastic_bench: --rounds wants at least 1 and --steps at least {KILL_STEP + 4}")
    exe = os.path.join(a.build, "actorpipe")
    med = statistics.median
    shrink, split, before, later, full, full_split, fresh = [], [], [], [], [], [], []
    shrink_first, full_first = [], []  # the re-run step's own time
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for kind in ("shrink", "restart", "fresh"):
                subprocess.run(["rm", "-rf", os.path.join(d, "ckpt")])
                if kind == "shrink":
                    ms, s, b, l, f = shrink_round(exe, d, a.steps)
                    shrink.append(ms), split.append(s), before.append(b), later.append(l), shrink_first.append(f)
                    print(f"round {r + 1} shrink: {ms:.0f} ms {[round(x) for x in s]}, step {b:.1f} -> {l:.1f} ms, "
                          f"the re-run step {f:.1f} ms", file=sys.stderr)
                elif kind == "restart":
                    ms, s, f = restart_round(exe, d, a.steps)
                    full.append(ms), full_split.append(s), full_first.append(f)
                    print(f"round {r + 1} restart: {ms:.0f} ms {[round(x) for x in s]}, the re-run step {f:.1f} ms",
                          file=sys.stderr)
                else:
                    fresh.append(fresh_two(exe, d, a.steps))
                    print(f"round {r + 1} fresh on 2: step {fresh[-1]:.1f} ms", file=sys.stderr)
    sp = [med(x) for x in zip(*split)]
    fs = [med(x) for x in zip(*full_split)]
    print(f"| model | kill to the next step's first op (median of {a.rounds}) | split |")
    print("| --- | --- | --- |")
    print(f"| go on over 3 processes from memory | {med(shrink):.0f} ms | detection {sp[0]:.0f}, decision {sp[1]:.0f}, "
          f"rendezvous {sp[2]:.0f}, channel and groups {sp[3]:.0f}, state and stages {sp[4]:.0f} ms |")
    print(f"| restart every worker from disk on 2 | {med(full):.0f} ms | stop every worker {fs[0]:.0f}, "
          f"start two and resume {fs[1]:.0f} ms |")
    print(f"\nrestart / shrink: {med(full) / med(shrink):.1f}x")
    # Work moved past the first op (a copy made after it) shows here.
    with_step = [a_ + b_ for a_, b_ in zip(shrink, shrink_first)]
    full_with_step = [a_ + b_ for a_, b_ in zip(full, full_first)]
    print(f"kill to the end of the re-run step: shrink {med(with_step):.0f} ms (the step {med(shrink_first):.1f}), "
          f"restart {med(full_with_step):.0f} ms (the step {med(full_first):.1f}): "
          f"{med(full_with_step) / med(with_step):.1f}x")
    print(f"step before the kill {med(before):.1f} ms, after the shrink {med(later):.1f} ms: "
          f"throughput after / before {med(before) / med(later):.3f}")
    # Each round's ratio from that round's two runs (back to back), then
    # their median: the rounds' medians taken apart pair runs of different
    # rounds.
    per_round = [f_ / l_ for f_, l_ in zip(fresh, later)]
    print(f"fresh launch --nprocs 2: step {med(fresh):.1f} ms: throughput after the shrink / fresh on 2 "
          f"{med(fresh) / med(later):.3f} of the medians; per round "
          + ", ".join(f"{x:.3f}" for x in per_round) + f", median {med(per_round):.3f}")


if __name__ == "__main__":
    main()
