#!/usr/bin/env python3
"""actorpipe side by side with torch's own pipelines: bench/peers.sh's body.

    bench/peers.sh [--rounds 3] [--steps 12] [--warmup 2] [--microbatches 8,32] [--baseline BINARY]
                   [--build build] [--python /usr/bin/python3] [--only REGEX]

One model, init, data, batch and thread budget for every peer: the seed MLP
without dropout (bench/peers_mlp.yaml: 100-1024-1024-2048-2048-1024-1024-
512-10, ReLU, batch 256, Adam lr 1e-3, no clipping), its initial weights and
4096 rows of data written once by peers_torch.py (model.init_from and
data.kind: tensors for actorpipe), two cores' worth of intra-op threads:

  python plain        torch, one nn.Sequential, the whole batch, 2 threads
  libtorch plain      build/peers_plain_bench, the whole batch, 2 threads
  libtorch plain, M   the same with M microbatches (gradient accumulation)
  torch Pipe          torch.distributed.pipeline.sync.Pipe (torch 1.x), 2
                      partitions (actorpipe's cut), M chunks, checkpoint never,
                      2 threads; and again with Pipe's default checkpointing
                      (except_last: every chunk's forward but the last's runs
                      again in the backward)
  actorpipe gpipe/1f1b  `actorpipe train`, 2 stages, M microbatches, 1 thread a stage
  launch gpipe/1f1b   `actorpipe launch --nprocs 2`: a stage per process, 1 thread each
  pipelining gpipe/1f1b  torch >= 2.4 only: torch.distributed.pipelining on 2
                      Gloo ranks, 1 thread each (skipped, and said, elsewhere)

Each round runs every peer once, in turn, so they share the machine's
noise; the first --warmup steps of each run are dropped and the table gives
the median over the remaining steps of all rounds, and the best round (the
lowest of the rounds' medians: other programs' load only ever slows a run). "vs Pipe" is Pipe's
median step / the peer's: above 1 the peer is faster. The load average is
printed at the start and the end. Python 3 standard library only here.
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

from bench_runs import results_complete, run_until_results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUN_TIMEOUT_S = 300
EXIT_GRACE_S = 5


def load():
    return "%.2f %.2f %.2f" % os.getloadavg()


def derive(src, out, data_dir, microbatches, stages=2, device=None):
    """bench/peers_mlp.yaml with the shared init and data, M microbatches, S
    stages, and every stage on `device` when one is given."""
    text = open(src).read()
    text = re.sub(r"stages: \d+", f"stages: {stages}", text)
    if device:
        text = text.replace("  intra_op_threads: 1", f"  intra_op_threads: 1\n  devices: [{', '.join([device] * stages)}]")
    text = text.replace("model:\n  layers:", f"model:\n  init_from: {data_dir}/init.pt\n  layers:", 1)
    text = re.sub(r"kind: synthetic\n\s*synthetic: \{[^}]*\}", f"kind: tensors\n  path: {data_dir}/data.pt", text)
    text = re.sub(r"microbatches: \d+", f"microbatches: {microbatches}", text)
    if f"{data_dir}/data.pt" not in text or "init_from" not in text:
        raise SystemExit(f"{src}: cannot point its model and data at {data_dir}")
    with open(out, "w") as f:
        f.write(text)


def json_line(out):
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run_json(cmd, log):
    """A peer that prints {"step_ms": [...]}: its step times in ms, or None."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    doc = json_line(p.stdout) if p.returncode == 0 else None
    if doc is None:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-4:])
        print(f"  ! {' '.join(cmd)}: exit {p.returncode}\n{tail}", file=log)
        return None
    return doc["step_ms"], {}


def run_actorpipe(cmd, results, log):
    """`actorpipe train|launch ... --results R`: step times (ms) and stage figures.

    A launched worker may hang on its way out after rank 0 wrote the results
    (bench/multi_process.py saw it): then the launcher is stopped
    EXIT_GRACE_S later and the run's steps are kept."""
    code, seen, stopped, out = run_until_results(cmd + ["--quiet", "--results", results], results, RUN_TIMEOUT_S,
                                                 EXIT_GRACE_S)
    if stopped:
        print(f"  ! {' '.join(cmd[:3])}: stopped {'after its results' if seen else 'with no results'}", file=log)
    if not results_complete(results) or (code not in (0, None) and not seen):
        tail = "\n".join(out.strip().splitlines()[-4:])
        print(f"  ! {' '.join(cmd)}: exit {code}\n{tail}", file=log)
        return None
    doc = json.load(open(results))
    steps = doc["steps"]
    extra = {
        "busy": [[st["busy_s"] * 1e3 for st in s["stages"]] for s in steps],
        "boundary": [(s["step_s"] - s["pipeline_s"]) * 1e3 for s in steps],
    }
    return [s["step_s"] * 1e3 for s in steps], extra


# actorpipe's schedules and torch.distributed.pipelining's class for the same order
TORCH_SCHEDULE = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved": "interleaved1f1b", "zb-v": "zbv"}


def partition(actorpipe, config, schedule):
    """Each rank's layers under `schedule`, as peers_torch.py's --layers takes
    them, read off the stage lines of a one-step `actorpipe train`."""
    p = subprocess.run([actorpipe, "train", config, "--schedule", schedule, "--steps", "1"], capture_output=True,
                       text=True, timeout=RUN_TIMEOUT_S)
    ranks = []
    for line in p.stdout.splitlines():
        m = re.match(r"\s+stage (\d+) on \S+: layers (.*)$", line)
        if m:
            ranks.append(",".join(c.strip().replace("..", "-") for c in m.group(2).split(",")))
    if p.returncode != 0 or not ranks:
        sys.exit(f"peers: cannot read the partition of {config} under {schedule}: exit {p.returncode}\n{p.stderr}")
    return ";".join(ranks)


def probe(python, module):
    code = f"import importlib, sys; importlib.import_module('{module}')"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--microbatches", default="8,32")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=os.environ.get("PYTHON", "/usr/bin/python3"))
    ap.add_argument("--only", default="", help="run only the peers whose name matches this regex")
    ap.add_argument("--baseline", default="", metavar="BINARY",
                    help="another actorpipe binary (an older build, say) whose train and launch rows run in the "
                         "same rounds, marked [baseline]")
    ap.add_argument("--stages", type=int, default=2,
                    help="pipeline stages (and launch/pipelining processes); torch's Pipe runs at 2 only")
    ap.add_argument("--schedules", default="gpipe,1f1b",
                    help="actorpipe schedules (gpipe, 1f1b, interleaved, zb-v); pipelining runs torch's own class "
                         "for each, on actorpipe's partition")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of the one-process plain loops and Pipe")
    ap.add_argument("--gpu", action="store_true",
                    help="add actorpipe with every stage on cuda:0 and torch.distributed.pipelining's "
                         "multi-stage schedules (interleaved1f1b, loopedbfs) with every stage on one rank on cuda:0")
    a = ap.parse_args()
    try:
        ms = [int(m) for m in a.microbatches.split(",")]
    except ValueError:
        ap.error(f"--microbatches expects a comma-separated list of integers, got '{a.microbatches}'")
    if a.rounds < 1 or a.steps < 1 or a.warmup < 0 or a.warmup >= a.steps:
        ap.error("--rounds and --steps must be positive, and --warmup below --steps")
    scheds = a.schedules.split(",")
    if any(x not in TORCH_SCHEDULE for x in scheds):
        ap.error(f"--schedules takes {', '.join(TORCH_SCHEDULE)}; got '{a.schedules}'")
    if a.stages < 2 or a.threads < 1:
        ap.error("--stages must be at least 2 and --threads positive")
    if any(m < 1 or 256 % m for m in ms):
        ap.error("every --microbatches must divide the batch (256)")
    actorpipe = os.path.join(a.build, "actorpipe")
    plain_bin = os.path.join(a.build, "peers_plain_bench")
    for b, target in ((actorpipe, "actorpipe"), (plain_bin, "peers_plain_bench")):
        if not os.access(b, os.X_OK):
            sys.exit(f"peers: {b} is missing: cmake --build {a.build} --target {target}")
    if a.baseline and not os.access(a.baseline, os.X_OK):
        sys.exit(f"peers: --baseline {a.baseline}: not an executable")
    binaries = [(actorpipe, "")] + ([(os.path.abspath(a.baseline), " [baseline]")] if a.baseline else [])
    if not probe(a.python, "torch"):
        sys.exit(f"peers: {a.python} cannot import torch (set --python or PYTHON)")
    torch_py = os.path.join(HERE, "peers_torch.py")
    version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    has_pipe = probe(a.python, "torch.distributed.pipeline.sync")
    has_pipelining = probe(a.python, "torch.distributed.pipelining")
    log = sys.stderr
    started = time.time()
    load_start = load()
    print(f"torch {version} at {a.python}: Pipe {'yes' if has_pipe else 'no'}, "
          f"torch.distributed.pipelining {'yes' if has_pipelining else 'no (skipped)'}; "
          f"load average {load_start}", file=log, flush=True)

    tmp = tempfile.mkdtemp(prefix="actorpipe-peers-")
    try:
        subprocess.run([a.python, torch_py, "prepare", tmp], check=True)
        configs, gpu_configs, layers = {}, {}, {}
        src = os.path.join(HERE, "peers_mlp.yaml")
        for m in ms:
            configs[m] = os.path.join(tmp, f"m{m}.yaml")
            derive(src, configs[m], tmp, m, a.stages, "cpu")  # not auto: that is cuda:0 on a GPU machine
            if a.gpu:
                gpu_configs[m] = os.path.join(tmp, f"m{m}_gpu.yaml")
                derive(src, gpu_configs[m], tmp, m, a.stages, "cuda:0")
        if has_pipelining:
            for sched in scheds:
                layers[sched] = partition(actorpipe, configs[ms[0]], sched)
        S = str(a.stages)
        threads = ["--threads", str(a.threads)]
        steps = ["--steps", str(a.steps)]
        res = os.path.join(tmp, "r.json")
        # (table key, M or None for the whole batch, label, set-up, run())
        peers = [
            (None, "python plain", f"torch, whole batch, {a.threads} threads",
             lambda m: run_json([a.python, torch_py, "plain", tmp] + steps + threads, log)),
            (None, "libtorch plain", f"LibTorch, whole batch, {a.threads} threads",
             lambda m: run_json([plain_bin, configs[ms[0]]] + steps + threads, log)),
        ]
        for m in ms:
            peers += [
                (m, "libtorch plain", f"LibTorch, {m} microbatches accumulated, {a.threads} threads",
                 lambda m: run_json([plain_bin, configs[m], "--microbatches", str(m)] + steps + threads, log)),
            ]
            if has_pipe and a.stages == 2:
                peers.append((m, "torch Pipe", f"2 partitions, {m} chunks, checkpoint never, {a.threads} threads",
                              lambda m: run_json([a.python, torch_py, "pipe", tmp, "--chunks", str(m)] + steps
                                                 + threads, log)))
                peers.append((m, "torch Pipe, its default", f"the same with checkpoint except_last (recomputes)",
                              lambda m: run_json([a.python, torch_py, "pipe", tmp, "--chunks", str(m),
                                                  "--checkpoint", "except_last"] + steps + threads, log)))
            for binary, mark in binaries:
                for sched in scheds:
                    peers.append((m, f"actorpipe {sched}{mark}", f"train, {S} stages, 1 thread each",
                                  lambda m, s=sched, b=binary: run_actorpipe(
                                      [b, "train", configs[m], "--schedule", s] + steps, res, log)))
            for binary, mark in binaries:
                for sched in scheds:
                    peers.append((m, f"launch {sched}{mark}", f"launch --nprocs {S}, a rank per stage, 1 thread each",
                                  lambda m, s=sched, b=binary: run_actorpipe(
                                      [b, "launch", "--coordinator", "rank0", "--nprocs", S, configs[m], "--schedule", s] + steps, res, log)))
            if has_pipelining:
                for sched in scheds:
                    t = TORCH_SCHEDULE[sched]
                    peers.append((m, f"pipelining {t}",
                                  f"torch.distributed.pipelining, {S} Gloo ranks, 1 thread each, {sched}'s partition",
                                  lambda m, t=t, s=sched: run_json(
                                      [a.python, torch_py, "pipelining", tmp, "--chunks", str(m), "--schedule", t,
                                       "--ranks", S, "--layers", layers[s]] + steps, log)))
            if a.gpu:
                for sched in scheds:
                    peers.append((m, f"actorpipe {sched} on cuda:0", f"train, {S} stages on one GPU",
                                  lambda m, s=sched: run_actorpipe(
                                      [actorpipe, "train", gpu_configs[m], "--schedule", s] + steps, res, log)))
                if has_pipelining and "1f1b" in layers:
                    one_rank = layers["1f1b"].replace(";", ",")
                    for t in ("interleaved1f1b", "loopedbfs"):
                        peers.append((m, f"pipelining {t} on cuda:0",
                                      f"torch.distributed.pipelining, 1 rank holding {S} stages (1f1b's partition)",
                                      lambda m, t=t: run_json(
                                          [a.python, torch_py, "pipelining", tmp, "--chunks", str(m), "--schedule", t,
                                           "--ranks", "1", "--layers", one_rank, "--device", "cuda"] + steps, log)))
        if a.only:
            peers = [p for p in peers if re.search(a.only, p[1])]
        samples = {}
        rounds_of = {}
        extras = {}
        for r in range(a.rounds):
            for m, name, _, fn in peers:
                got = fn(m)
                key = (m, name)
                if got is None:
                    samples.setdefault(key, [])
                    continue
                times, extra = got
                kept = times[a.warmup:]
                samples.setdefault(key, []).extend(kept)
                rounds_of.setdefault(key, []).append(statistics.median(kept))
                for k, v in extra.items():
                    extras.setdefault(key, {}).setdefault(k, []).extend(v[a.warmup:])
                print(f"  round {r + 1}/{a.rounds}  {name:<29} M={m or 'whole':<5} median "
                      f"{statistics.median(kept):8.1f} ms  (load {load()})", file=log, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    load_end = load()
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    best = {k: min(v) for k, v in rounds_of.items() if v}
    print(f"bash bench/peers.sh {' '.join(sys.argv[1:])}: torch {version}, "
          f"{os.cpu_count()} cores, load average {load_start} at the start, {load_end} at the end, "
          f"{time.time() - started:.0f} s")
    print()
    print("ms/step: the median over the steps after warm-up of every round; best round: the lowest of the rounds' "
          "medians (other load only slows a run down, so this is the figure least touched by it); vs Pipe = "
          "Pipe's (checkpoint never) ms / the row's ms, from the medians and (in brackets) the best rounds (above 1: "
          "faster than Pipe); vs python = the same against the python plain loop")
    for m in ms:
        pipe, pipe_b = med.get((m, "torch Pipe")), best.get((m, "torch Pipe"))
        py, py_b = med.get((None, "python plain")), best.get((None, "python plain"))
        print()
        print(f"M = {m} (microbatches of {256 // m} rows)")
        print()
        print("| peer | set-up | ms/step | best round | vs Pipe | vs python plain | stage busy ms (0 / 1 / ...) |")
        print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
        for pm, name, setup, _ in peers:
            if pm not in (None, m):
                continue
            key = (pm, name)
            if key not in med:
                print(f"| {name} | {setup} | failed | | | | |")
                continue
            v = med[key]
            busy = ""
            if key in extras and "busy" in extras[key]:
                b = extras[key]["busy"]
                busy = " / ".join(f"{statistics.median([s[i] for s in b if i < len(s)]):.0f}" for i in range(len(b[0])))
                busy += f"; boundary {statistics.median(extras[key]['boundary']):.0f}"
            vb = best[key]
            vs_pipe = f"{pipe / v:.3f} ({pipe_b / vb:.3f})" if pipe else "n/a"
            vs_py = f"{py / v:.3f} ({py_b / vb:.3f})" if py else "n/a"
            print(f"| {name} | {setup} | {v:.1f} | {vb:.1f} | {vs_pipe} | {vs_py} | {busy} |")
        for _, mark in binaries:
            g, o = med.get((m, f"actorpipe gpipe{mark}")), med.get((m, f"actorpipe 1f1b{mark}"))
            if g and o:
                gb, ob = best[(m, f"actorpipe gpipe{mark}")], best[(m, f"actorpipe 1f1b{mark}")]
                print(f"\nactorpipe{mark} 1f1b speed / gpipe's at M = {m}: {g / o:.3f} ({gb / ob:.3f} best rounds; "
                      f"above 1: 1f1b faster)")
        for sched in ("gpipe", "1f1b") if a.baseline else ():
            for kind in ("actorpipe", "launch"):
                old, new = med.get((m, f"{kind} {sched} [baseline]")), med.get((m, f"{kind} {sched}"))
                if old and new:
                    ob, nb = best[(m, f"{kind} {sched} [baseline]")], best[(m, f"{kind} {sched}")]
                    print(f"{kind} {sched} at M = {m}: this build is {old / new:.3f} x the baseline's speed "
                          f"({ob / nb:.3f} best rounds)")
    if not has_pipelining:
        print(f"\ntorch.distributed.pipelining: not in torch {version}; its ScheduleGPipe / Schedule1F1B rows "
              f"were not run")


if __name__ == "__main__":
    main()
