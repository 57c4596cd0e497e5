#!/usr/bin/env python3
"""Taking in a process that joins (`actorpipe launch --join`), after a shrink,
and what offering joins costs a run without events.

    python3 bench/grow_bench.py [--build build] [--rounds 3] [--steps 40]

The seed MLP (configs/seed_mlp.yaml) at pp 4 under `actorpipe launch
--nprocs 4`, M 8, as bench/elastic_bench.py runs it: a kill_process fault
kills rank 2 in step 6 and the run goes on over 3 processes (no checkpoints
here). Once rank 0
prints its `re-placed:` line, `actorpipe launch --join HOST:PORT` starts a
fifth process, which takes stage 2 back at the next step boundary. The
joiner starts 6 steps after the shrink.

  join     from the joiner's launch to the end of the first step of the
           grown generation, less that step's own time; split into the
           joiner's start (to its "joining the run" line: the process,
           LibTorch, the config, the store), the wait for a step boundary
           and the decision (to rank 0's `re-placed: generation 2` line),
           and its `heal:` line's rendezvous, channel and groups, state and
           stages.
  steps    median step time on 4 processes before the kill, on 3 after the
           shrink, and on 4 again after the join (the first step after each
           change left out), in the same run.
  cost     supervision {max_restarts: 2, replace_timeout_s: 0} (rank 0's
           driver asks the store for joiners at every step boundary)
           against {max_restarts: 2} (it does not), no fault, median step
           over the steps after the third; the pair's order alternates
           from round to round (the second run of a pair ran faster).

Python 3 standard library only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_bench import KILL_STEP, config, steps_of  # noqa: E402
from heal_bench import HEAL, STEP, first, stamped  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOIN_AT = re.compile(r"takes processes that join at (\S+):")
SHRUNK_STEPS = 6  # steps on 3 processes before the joiner starts


def without_checkpoints(cfg):
    """elastic_bench's config writes a checkpoint after every step (its restart model's): not here."""
    text = re.sub(r"checkpoint: .*\n", "", open(cfg).read())
    open(cfg, "w").write(text)
    return cfg


def grow_round(exe, dir_, steps):
    cfg = without_checkpoints(
        config(dir_, "grow", "{max_restarts: 2, heartbeat_timeout_s: 2, replace_timeout_s: 0}", steps))
    t0 = time.monotonic()
    p = subprocess.Popen([exe, "launch", "--coordinator", "rank0", "--nprocs", "4", cfg], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, bufsize=1)
    lines, joiner = [], {}

    def join(at):
        joiner["t0"], code, joiner["lines"] = stamped([exe, "launch", "--join", at, cfg])
        joiner["code"] = code

    worker = None
    for raw in p.stdout:
        lines.append((time.monotonic() - t0, raw.rstrip("\n")))
        m = STEP.match(raw)
        if worker is None and m and int(m.group(1)) == KILL_STEP + 1 + SHRUNK_STEPS:
            at = next(JOIN_AT.search(l).group(1) for _, l in lines if JOIN_AT.search(l))
            worker = threading.Thread(target=join, args=(at,))
            worker.start()
    p.wait()
    if worker:
        worker.join()
    if p.returncode != 0 or joiner.get("code") != 0 or not any("takes in rank" in l for _, l in lines):
        sys.exit("the grow run failed:\n" + "\n".join(l for _, l in lines + joiner.get("lines", [])))
    shift = joiner["t0"] - t0  # the joiner's clock starts later
    t_ticket = shift + first(joiner["lines"], lambda l: "joining the run" in l)[0]
    t_placed, placed = first(lines, lambda l: "re-placed: generation 2" in l)
    boundary = int(re.search(r"after step (\d+)", placed).group(1))
    t_step, l_step = first(lines, lambda l: STEP.match(l) and int(STEP.match(l).group(1)) == boundary + 2)
    total = (t_step - shift) * 1e3 - float(STEP.match(l_step).group(3))
    heal = [int(x) for x in HEAL.search(first(lines, lambda l: "generation 2 runs" in l)[1]).groups()]
    split = [(t_ticket - shift) * 1e3, (t_placed - t_ticket) * 1e3] + heal[1:]
    ms = steps_of(lines)
    kill_at = KILL_STEP + 1  # printed 1-based
    four = statistics.median(m for s, m in ms if 2 <= s <= KILL_STEP)
    three = statistics.median(m for s, m in ms if kill_at + 1 < s <= boundary)
    again = statistics.median(m for s, m in ms if s > boundary + 2)
    return total, split, four, three, again


def cost_round(exe, dir_, supervision, steps):
    cfg = without_checkpoints(config(dir_, "cost", supervision, steps, fault=False))
    _, code, lines = stamped([exe, "launch", "--coordinator", "rank0", "--nprocs", "4", cfg])
    if code != 0:
        sys.exit("the cost run failed:\n" + "\n".join(l for _, l in lines))
    return statistics.median(m for s, m in steps_of(lines) if s > 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="steps of the grow run (the join must land within them)")
    ap.add_argument("--cost-steps", type=int, default=30)
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 30:
        sys.exit("grow_bench: --rounds wants at least 1 and --steps at least 30")
    exe = os.path.join(a.build, "actorpipe")
    med = statistics.median
    total, split, four, three, again, on, off = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            subprocess.run(["rm", "-rf", os.path.join(d, "ckpt")])
            t, s, f, th, ag = grow_round(exe, d, a.steps)
            total.append(t), split.append(s), four.append(f), three.append(th), again.append(ag)
            print(f"round {r + 1} join: {t:.0f} ms {[round(x) for x in s]}, step {f:.1f} -> {th:.1f} -> {ag:.1f} ms",
                  file=sys.stderr)
            # The second run of a pair ran faster in either order here:
            # the order alternates (on, off; off, on; ...).
            for taking in ((True, False) if r % 2 == 0 else (False, True)):
                (on if taking else off).append(cost_round(
                    exe, d, "{max_restarts: 2, heartbeat_timeout_s: 2" + (", replace_timeout_s: 0}" if taking else "}"),
                    a.cost_steps))
            print(f"round {r + 1} cost: step {on[-1]:.2f} ms taking joiners, {off[-1]:.2f} ms not", file=sys.stderr)
    sp = [med(x) for x in zip(*split)]
    print(f"| what | median of {a.rounds} | split |")
    print("| --- | --- | --- |")
    print(f"| launch --join to the grown generation's first step | {med(total):.0f} ms | joiner's start {sp[0]:.0f}, "
          f"boundary and decision {sp[1]:.0f}, rendezvous {sp[2]:.0f}, channel and groups {sp[3]:.0f}, "
          f"state and stages {sp[4]:.0f} ms |")
    print(f"\nstep on 4 processes {med(four):.2f} ms, on 3 after the shrink {med(three):.2f} ms, on 4 after the join "
          f"{med(again):.2f} ms: throughput after the join / before the kill {med(four) / med(again):.3f}")
    print(f"cost of taking joiners: step {med(on):.2f} ms against {med(off):.2f} ms: "
          f"{(med(on) / med(off) - 1) * 100:+.1f} % (rounds: " +
          ", ".join(f"{x / y:.3f}" for x, y in zip(on, off)) + ")")


if __name__ == "__main__":
    main()
