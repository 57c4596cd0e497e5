#!/usr/bin/env python3
"""Takeover time: a run whose coordinator dies, taken over by a standby
coordinator that heals from the workers' memory (`launch --coordinator
etcd://`), against resuming every rank from the newest checkpoint.

    python3 bench/takeover_bench.py [--build build] [--rounds 3]
                                    [--mesh pp3,dp2pp2] [--fault kill|stop] [--heartbeat 2]

A deep MLP (11 layers, dropout), 40 steps of batch 48 in 4 microbatches,
1f1b, paced at 4 ms an op, supervision on (max_restarts 2, heartbeat 2 s: --heartbeat,
the coordinator's lease in etcd too),
a checkpoint every 4 steps; at pp 3 under `launch --nprocs 3` and at
dp 2 x pp 2 (gloo) under `launch --nprocs 4`, each with its coordinator in
a process apart. The coordinator is the launcher's child whose
/proc/PID/environ holds ACTORPIPE_COORDINATOR=self; once the line
`step    10/40` arrives it is found, and 20 ms later (mid-step) hit.

  takeover  `launch --coordinator etcd://...` on a 3-member etcd cluster
            (loopback ports the kernel gave out, a temporary directory,
            stopped at the end). --fault kill: kill -9 of the coordinator;
            its process is gone, so the launcher revokes its lease in
            etcd at once and starts a coordinator that wins the election
            and takes the run over from the workers' boundaries in
            memory. --fault stop:
            SIGSTOP (as one cut off: it renews no lease); once its lease
            expires the launcher kills it and the standby takes over (the
            stopped process is SIGKILLed at the end in every path). The
            run must exit 0. The new coordinator's `takeover 1:` line gives
            the split (election, new store, reaching the workers and asking
            what they hold, rendezvous, channel + groups + stages). The
            part up to the lease's end (revoked, or expired) is the stamped
            time from the hit to that line less the line's own total (with
            kill, plus the line's "to revoke its lease": the stamps then
            only add the few ms from the kill to the loss the launcher
            saw); the last
            part is from that line to the next step's first op.
  resume    `launch --coordinator process` (no etcd): kill -9 of the
            coordinator; every worker exits by itself and the launcher
            exits 5; then `launch --coordinator process --resume <ckpt>`
            starts every rank again from the newest checkpoint (the
            checkpoint directory is removed before each first run, not
            before the resume). With --fault stop it does not run: it needs
            a death.

Every line of output is stamped as it arrives. Recovery is from the kill
to the first op of the next step: the arrival of the first `step` line
after the takeover line, less that step's own time as printed (as
bench/heal_bench.py does). For resume it is (the first launcher's exit -
the kill) + (the second launch's start to its first step's first op, the
same way); the steps it runs again (those after the newest checkpoint,
up to 3 here) are not counted, as the step that was running is counted
for neither. Rounds alternate the models (and the meshes); the table
gives medians, and a `resume from disk / takeover` ratio per mesh.
Progress per round goes to stderr.

Python 3 standard library only.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import etcd_local

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r"^step +(\d+)/(\d+) .* step +([\d.]+) ms")
TAKEOVER = re.compile(
    r"takeover (\d+): generation (\d+) runs from after step (\d+), (-?\d+) ms after the coordinator"
    r"(?: was lost: (-?\d+) ms (?:to its lease's expiry|to revoke its lease \(its process is gone\)),"
    r"|'s lease expired \(it stopped answering, or was cut off\):)"
    r" (-?\d+) ms for the election \(the new coordinator's start\), (-?\d+) ms for the new store,"
    r" (-?\d+) ms to reach the workers and ask what they hold, (-?\d+) ms to the rendezvous,"
    r" (-?\d+) ms for the channel, groups and stages")
MESHES = {"pp3": (3, "pp 3", 3, None), "dp2pp2": (4, "dp 2 x pp 2", 2, 2)}  # nprocs, name, stages, dp
TIMEOUT = 120  # seconds for any one wait


class BenchError(Exception):
    pass


def fail(what, lines=()):
    tail = "\n".join(l for _, l in list(lines)[-60:])
    raise BenchError(what + ("\n--- its output (the end) ---\n" + tail if tail else ""))


# --- processes ---------------------------------------------------------------

def stat(pid):
    """(ppid, start time) of pid, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root):
    """[(pid, start time)] of every live descendant of root."""
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s:
                kids.setdefault(s[0], []).append((int(name), s[1]))
    out, todo = [], [root]
    while todo:
        for kid in kids.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid[0])
    return out


def kill_exact(pid, start):
    """SIGKILL pid if it is still the process that started at `start`."""
    s = stat(pid)
    if s and s[1] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def children(pid):
    kids = set()
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            kids.update(int(x) for x in open(path).read().split())
        except OSError:
            pass
    if not kids:  # no children files in this kernel: by PPid
        kids = {p for p, _ in descendants(pid) if (stat(p) or (0,))[0] == pid}
    return sorted(kids)


def find_coordinator(launcher):
    """(pid, start time) of the launcher's child with ACTORPIPE_COORDINATOR=self."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for kid in children(launcher):
            try:
                env = open(f"/proc/{kid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            s = stat(kid)
            if b"ACTORPIPE_COORDINATOR=self" in env and s:
                return kid, s[1]
        time.sleep(0.01)
    return None


class Launch:
    """One `actorpipe launch`: its lines (stdout and stderr) stamped with
    time.monotonic() as they arrive, its exit stamped as its wait returns."""

    def __init__(self, cmd):
        self.lines, self.eof, self.code, self.t_exit = [], False, None, None
        self.cond = threading.Condition()
        self.t_start = time.monotonic()
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1, errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.reader.start()
        self.waiter.start()

    def _read(self):
        for l in self.p.stdout:
            t = time.monotonic()
            with self.cond:
                self.lines.append((t, l.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _wait(self):
        code = self.p.wait()
        t = time.monotonic()
        with self.cond:
            self.code, self.t_exit = code, t
            self.cond.notify_all()

    def wait_line(self, pred, timeout=TIMEOUT):
        """The first (time, line) that pred accepts, None at the end of the
        output or after timeout seconds."""
        deadline = time.monotonic() + timeout
        i = 0
        with self.cond:
            while True:
                for t, l in self.lines[i:]:
                    if pred(l):
                        return t, l
                i = len(self.lines)
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    return None
                self.cond.wait(left)

    def wait_exit(self, timeout=TIMEOUT):
        """The exit code (None after timeout seconds); then the rest of the
        output is read (the workers die with the launcher)."""
        self.waiter.join(timeout)
        if self.code is not None:
            self.reader.join(10)
        return self.code

    def finish(self):
        """Kills the launcher and every process under it, in every path."""
        kids = descendants(self.p.pid) if self.code is None else []
        if self.code is None:
            try:
                self.p.send_signal(signal.SIGKILL)
            except OSError:
                pass
        self.waiter.join(10)
        for pid, start in kids:
            kill_exact(pid, start)
        self.reader.join(5)


def hit_coordinator(run, sig):
    """Once `step    10/` arrives: the coordinator, 20 ms later hit with sig.
    Returns (kill time, (pid, start time))."""
    if not run.wait_line(lambda l: (m := STEP.match(l)) is not None and m.group(1) == "10"):
        fail("no `step    10/` line", run.lines)
    coord = find_coordinator(run.p.pid)
    if not coord:
        fail("no child of the launcher holds ACTORPIPE_COORDINATOR=self", run.lines)
    time.sleep(0.02)
    t_kill = time.monotonic()
    os.kill(coord[0], sig)
    return t_kill, coord


def first_step(lines, after=None):
    """(arrival, that step's own time in s) of the first step line after index `after`."""
    for t, l in lines[(after + 1 if after is not None else 0):]:
        m = STEP.match(l)
        if m:
            return t, float(m.group(3)) / 1e3
    return None


# --- the two models -------------------------------------------------------------

def config(d, mesh, heartbeat=2):
    _, _, stages, dp = MESHES[mesh]
    text = """model:
  layers:
    - {type: linear, in: 16, out: 32}
    - {type: relu}
    - {type: dropout, p: 0.1}
    - {type: linear, in: 32, out: 32}
    - {type: relu}
    - {type: dropout, p: 0.1}
    - {type: linear, in: 32, out: 32}
    - {type: tanh}
    - {type: linear, in: 32, out: 32}
    - {type: relu}
    - {type: linear, in: 32, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 512, features: 16, classes: 4}
  test_fraction: 0.25
train:
  steps: 40
  batch_size: 48
  optimizer: {type: adam, lr: 0.01}
  clip_grad_norm: 1.0
  seed: 7
"""
    if dp:
        text += f"parallel: {{dp: {dp}, allreduce: gloo}}\n"
    text += f"""pipeline:
  stages: {stages}
  schedule: 1f1b
  microbatches: 4
  devices: auto
  intra_op_threads: 1
  pace_ms: 4
supervision: {{max_restarts: 2, heartbeat_timeout_s: {heartbeat}}}
checkpoint: {{every: 4, dir: {os.path.join(d, "ckpt")}}}
"""
    path = os.path.join(d, f"takeover_{mesh}.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def takeover_round(exe, cfg, mesh, d, url, run_id, fault):
    """Recovery ms and its split: [the hit to the lease's expiry,
    election, new store, reach and ask the workers, rendezvous, channel +
    groups + stages, the takeover line to the next step's first op]."""
    shutil.rmtree(os.path.join(d, "ckpt"), ignore_errors=True)
    nprocs = MESHES[mesh][0]
    run = Launch([exe, "launch", "--nprocs", str(nprocs), "--coordinator", url, "--run-id", run_id, cfg])
    coord = None
    try:
        t_kill, coord = hit_coordinator(run, signal.SIGSTOP if fault == "stop" else signal.SIGKILL)
        code = run.wait_exit()
        if code is None:
            fail(f"the run did not end within {TIMEOUT} s of the {fault}", run.lines)
        if code != 0:
            fail(f"the run exited {code} after the {fault} of its coordinator (want 0)", run.lines)
    finally:
        run.finish()
        if coord:
            kill_exact(*coord)  # stopped: SIGKILLed in every path
    lines = run.lines
    at = next((i for i, (_, l) in enumerate(lines) if TAKEOVER.search(l)), None)
    if at is None:
        fail("no `takeover 1:` line", lines)
    t_line, line = lines[at]
    g = TAKEOVER.search(line).groups()
    if int(g[0]) != 1:
        fail(f"takeover {g[0]}, not 1", lines)
    if (g[4] is None) != (fault == "stop"):
        fail(f"the takeover line does not read as after a {fault}: {line}", lines)
    step = first_step(lines, at)
    if not step:
        fail("no step line after the takeover line", lines)
    t_op = step[0] - step[1]
    total = int(g[3])
    before = (t_line - t_kill) * 1e3 - total  # kill: to the loss seen; stop: to the lease's expiry
    lease = float(g[4]) if g[4] is not None else 0.0
    split = [before + lease] + [float(x) for x in g[5:10]] + [(t_op - t_line) * 1e3]
    return (t_op - t_kill) * 1e3, split


def resume_round(exe, cfg, mesh, d):
    """Recovery ms and its split: [stop every worker, start and resume]."""
    ckpt = os.path.join(d, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    nprocs = MESHES[mesh][0]
    base = [exe, "launch", "--nprocs", str(nprocs), "--coordinator", "process", cfg]
    run = Launch(base)
    try:
        t_kill, _ = hit_coordinator(run, signal.SIGKILL)
        code = run.wait_exit()
        if code is None:
            fail(f"the launch did not end within {TIMEOUT} s of its coordinator's kill", run.lines)
        if code != 5:
            fail(f"the launch that lost its coordinator exited {code} (want 5)", run.lines)
    finally:
        run.finish()
    stop_ms = (run.t_exit - t_kill) * 1e3
    again = Launch(base + ["--resume", ckpt])
    try:
        code = again.wait_exit()
        if code is None:
            fail(f"the resumed launch did not end within {TIMEOUT} s", again.lines)
        if code != 0:
            fail(f"the resumed launch exited {code}", again.lines)
    finally:
        again.finish()
    step = first_step(again.lines)
    if not step:
        fail("the resumed launch printed no step line", again.lines)
    start_ms = (step[0] - step[1] - again.t_start) * 1e3
    return stop_ms + start_ms, [stop_ms, start_ms]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mesh", default="pp3,dp2pp2", help="the meshes, comma-separated: pp3, dp2pp2 or both")
    ap.add_argument("--fault", choices=("kill", "stop"), default="kill",
                    help="kill -9 the coordinator, or SIGSTOP it (then only the takeover model runs)")
    ap.add_argument("--heartbeat", type=int, default=2,
                    help="supervision.heartbeat_timeout_s, and so the coordinator's lease in etcd (s, at least 1)")
    a = ap.parse_args()
    if a.heartbeat < 1:
        sys.exit("takeover_bench: --heartbeat at least 1")
    meshes = [m.strip() for m in a.mesh.split(",") if m.strip()]
    if not meshes or any(m not in MESHES for m in meshes) or len(set(meshes)) != len(meshes):
        sys.exit("takeover_bench: --mesh wants pp3, dp2pp2 or both, e.g. pp3,dp2pp2")
    if a.rounds < 1:
        sys.exit("takeover_bench: --rounds at least 1")
    exe = os.path.join(a.build, "actorpipe")
    if not os.access(exe, os.X_OK):
        sys.exit(f"takeover_bench: no actorpipe binary at {exe} (build it, or pass --build)")
    if not shutil.which("etcd"):
        sys.exit("takeover_bench: etcd is not installed (scripts/setup.sh installs etcd-server)")
    if not os.path.isdir("/proc/self"):
        sys.exit("takeover_bench: needs /proc (Linux) to find the coordinator")
    models = ("takeover",) if a.fault == "stop" else ("takeover", "resume")
    got = {(m, k): [] for m in meshes for k in models}
    etcd = []
    try:
        with tempfile.TemporaryDirectory() as d:
            try:
                url = etcd_local.start(d, etcd)
                cfgs = {m: config(d, m, a.heartbeat) for m in meshes}
                for r in range(a.rounds):
                    for m in meshes:
                        for k in models:
                            if k == "takeover":
                                run_id = f"takeover-{os.getpid()}-{m}-{r}"
                                ms, split = takeover_round(exe, cfgs[m], m, d, url, run_id, a.fault)
                            else:
                                ms, split = resume_round(exe, cfgs[m], m, d)
                            got[(m, k)].append((ms, split))
                            print(f"round {r + 1} {MESHES[m][1]} {k}: {ms:.0f} ms "
                                  f"[{', '.join(f'{x:.0f}' for x in split)}]", file=sys.stderr)
            finally:
                etcd_local.stop(etcd)
    except (BenchError, etcd_local.ClusterError) as e:
        sys.exit(f"takeover_bench: {e}")
    except KeyboardInterrupt:
        sys.exit("takeover_bench: interrupted")
    med = statistics.median
    hit = "kill -9" if a.fault == "kill" else "SIGSTOP"
    print(f"| mesh | model (coordinator hit by {hit} mid step 11) | recovery (median of {a.rounds}) | split (ms) |")
    print("| --- | --- | --- | --- |")
    for m in meshes:
        for k in models:
            ms = med(x for x, _ in got[(m, k)])
            s = [med(x) for x in zip(*(sp for _, sp in got[(m, k)]))]
            if k == "takeover":
                print(f"| {MESHES[m][1]} | takeover by a standby (etcd, 3 members) | {ms:.0f} ms | "
                      f"{hit} to the lease's end {s[0]:.0f}, "
                      f"election {s[1]:.0f}, new store {s[2]:.0f}, reach and ask the workers {s[3]:.0f}, "
                      f"rendezvous {s[4]:.0f}, channel + groups + stages {s[5]:.0f}, "
                      f"to the next step's first op {s[6]:.0f} |")
            else:
                print(f"| {MESHES[m][1]} | resume from disk (`--coordinator process`, `--resume`) | {ms:.0f} ms | "
                      f"stop every worker {s[0]:.0f}, start and resume {s[1]:.0f} |")
    if "resume" in models:
        print()
        for m in meshes:
            ratio = med(x for x, _ in got[(m, "resume")]) / med(x for x, _ in got[(m, "takeover")])
            print(f"{MESHES[m][1]}: resume from disk / takeover: {ratio:.1f}x")


if __name__ == "__main__":
    main()
