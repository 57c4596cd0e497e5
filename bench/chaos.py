#!/usr/bin/env python3
"""A chaos run: a long pipeline under `actorpipe launch` loses workers for
good at seeded moments, goes on over the ones left each time
(supervision.replace_timeout_s: 0), and must end bitwise equal to the
fault-free run in one process. With --replacements, a run of its own:
every worker lost is started again instead (`replace` below).

    python3 bench/chaos.py [--build build] [--seed 1] [--events 3] [--joins 0] [--throttles 0] [--nprocs 4] [--steps 60]
                           [--coordinator rank0|process] [--replacements 0] [--link-down]

Events are drawn from the seed: which worker (any RANK but 0, which holds
the supervisor; with --coordinator process, any RANK: the supervisor and
the store run in a process apart), at which step, and how it is lost:

  kill   `kill -9` of the worker
  stop   SIGSTOP of the worker: a hung or cut-off host, seen after the
         heartbeat timeout (2 s here; 4 s with --throttles), then killed by
         launch
  join   `actorpipe launch --join HOST:PORT` (--joins of them, each 2 to 4
         steps after one of the first losses): a new process that takes a
         stage back at a step boundary once a process holds two
  throttle  (--throttles of them, root only) a worker moved into a cgroup v1
         cpu group held to a twentieth of a core (a host starved of CPU; the
         run's ops are paced, so a lighter throttle would not show); the
         run has pipeline.rebalance {every: 3, threshold: 0.2}, and the row
         times its `re-partitions the layers` line. The heartbeat timeout is
         then 4 s: at a twentieth of a core, a worker that forms a
         generation (its state through the socket) can go 2 s without a
         beat on a loaded machine, and it would be lost, not slow

  replace  (--replacements of them) `kill -9` of a worker that `launch`
         starts again with the same RANK: the run heals onto the new
         process, every stage where it was (no shrink). Drawn from a draw
         of their own (a seed's other events stay what they were): the
         RANK, any that may be drawn, and the step, 2 after a multiple of 5
         (7, 12, ...: never the step of a loss). Such a run sets
         supervision.replace_timeout_s: 30 in place of 0, and that key
         decides for the whole run: rank 0 heals every lost RANK of launch's
         own by asking node 0's launcher for a replacement
         (actors/supervisor/heal_decision.cpp, goes_on_without), so the --events losses
         of that run are replaced too (their rows say so: a `stop` is then
         a hung worker taken for dead, killed and started again), and
         --joins are refused (with every loss replaced no process ever
         holds two stages, so a joiner would never be placed). Under
         `launch --nnodes K` it is the same: a dead rank of any node, its
         node's launcher gone with it or not, is started again on node 0
         (a host lost for good doubles up on node 0; nothing shrinks). Only
         a process that joined is lost for good in such a run. A kill for
         good and a kill with replacement of launch's own RANKs cannot be
         drawn into one run.

  link     (--link-down, root only) the run is two hosts: network
         namespaces A and B joined by a veth pair, `launch --nnodes 2`,
         half the RANKs on each (node 0, with RANK 0, on A). At a drawn
         step A's end of the link goes down for good: B's processes are
         lost at once, seen after the heartbeat timeout, and stop by
         themselves (exit 5); the run goes on over A's. The other losses
         are drawn among A's RANKs. No --replacements with it: a cut host's
         RANKs would be started again on node 0.

At most nprocs - 1 losses (each one takes a process for good; kills with
replacement do not count). Every event
prints one row: when it was fired, and the time from it to rank 0's
decision (the `re-placed:` line, printed once the failure was seen and the
new placement chosen; for a loss replaced, the `heal: ... started again`
line), to the new generation ready (state and stages: the
`generation N runs` line), and to the first step printed after it. The last line is the verdict: the
saved weights against the fault-free run's, byte for byte. Exit 0 when they
are equal, 1 otherwise.

Python 3 standard library only.
"""
import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r"^step +(\d+)/")


def config(stages, steps, supervision, pace_ms):
    layers = "".join(f"    - {{type: linear, in: {32 if i == 0 else 64}, out: {8 if i == 2 * stages - 1 else 64}}}\n"
                     f"    - {{type: {'relu' if i % 2 else 'tanh'}}}\n" for i in range(2 * stages))
    text = ("model:\n  layers:\n" + layers.rsplit("    - {type:", 1)[0] +
            "data:\n  kind: synthetic\n  synthetic: {samples: 2048, features: 32, classes: 8}\n"
            f"train:\n  steps: {steps}\n  batch_size: 64\n  optimizer: {{type: adam, lr: 0.003}}\n"
            "  clip_grad_norm: 1.0\n  seed: 5\n"
            f"pipeline:\n  stages: {stages}\n  schedule: 1f1b\n  microbatches: 4\n  intra_op_threads: 1\n")
    if pace_ms:
        text += f"  pace_ms: {pace_ms}\n"
    if supervision:
        text += f"supervision: {supervision}\n"
    return text


def worker_pid(launcher, rank):
    try:
        kids = open(f"/proc/{launcher}/task/{launcher}/children").read().split()
    except OSError:
        return -1
    for k in kids:
        # A worker the launcher forked is named for its RANK (its
        # /proc/PID/environ is the launcher's); a spawned one is found by
        # its environment.
        try:
            comm = open(f"/proc/{k}/comm").read().strip()
            if comm == f"actorpipe r{rank}":
                return int(k)
            if comm.startswith("actorpipe "):
                continue
            env = open(f"/proc/{k}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"ACTORPIPE_COORDINATOR=self" not in env:
            return int(k)
    return -1


def draw(seed, n, nprocs, steps, joins=0, throttles=0, first=1, replacements=0, link=False):
    rng = random.Random(seed)
    # With a link down, host B's RANKs (the upper half) go with the link.
    ranks = rng.sample(range(first, nprocs // 2 if link else nprocs), n)
    at = sorted(rng.sample(range(5, steps - 10, 5), n))
    losses = [(at[i], ranks[i], rng.choice(("kill", "stop"))) for i in range(n)]
    # Joins and throttles from draws of their own, so that a seed's losses
    # stay what they were.
    later = random.Random(seed * 1000 + 7)
    joined = [(at[i] + later.choice((2, 3, 4)), -1, "join") for i in range(joins)]
    slow = random.Random(seed * 1000 + 11)
    lost = {q for _, q, _ in losses}
    spared = [q for q in range(first, nprocs) if q not in lost] or list(range(first, nprocs))
    throttled = [(slow.choice(range(3, 8)), slow.choice(spared), "throttle") for _ in range(throttles)]
    # Kills with replacement: a draw of their own too, 2 steps off the
    # losses' grid (none at a loss's step).
    again = random.Random(seed * 1000 + 13)
    replaced = [(s, again.choice(range(first, nprocs)), "replace")
                for s in sorted(again.sample(range(7, steps - 10, 5), replacements))]
    # The link: a draw of its own, on the losses' grid, at none of their steps.
    cut = []
    if link:
        free = [x for x in range(5, steps - 10, 5) if x not in at]
        cut = [(random.Random(seed * 1000 + 17).choice(free), -1, "link")]
    return sorted(losses + joined + throttled + replaced + cut)


def ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("ip " + " ".join(args) + ": " + (r.stderr or r.stdout).strip())


class TwoHosts:
    """Namespaces A and B joined by a veth pair (10.238.N.1 and .2); deleted on close."""

    def __init__(self):
        pid = os.getpid()
        self.a, self.b = f"chaosA_{pid}", f"chaosB_{pid}"
        self.va, self.vb = f"xA{pid}", f"xB{pid}"
        net = f"10.238.{pid % 250}"
        self.addr_a = net + ".1"
        self.made = []
        try:
            for ns in (self.a, self.b):
                ip("netns", "add", ns)
                self.made.append(ns)
            ip("link", "add", self.va, "type", "veth", "peer", "name", self.vb)
            ip("link", "set", self.va, "netns", self.a)
            ip("link", "set", self.vb, "netns", self.b)
            ip("-n", self.a, "addr", "add", net + ".1/24", "dev", self.va)
            ip("-n", self.b, "addr", "add", net + ".2/24", "dev", self.vb)
            for ns, v in ((self.a, self.va), (self.b, self.vb)):
                ip("-n", ns, "link", "set", v, "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except (OSError, RuntimeError) as e:
            self.close()
            sys.exit(f"chaos: --link-down needs network namespaces (root and iproute2): {e}")

    def cut(self):
        ip("-n", self.a, "link", "set", self.va, "down")

    def close(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.va], capture_output=True)  # if it never moved


class Throttle:
    """A cgroup v1 cpu group held to `quota` of a core; removed on close."""

    def __init__(self, quota):
        self.dir = f"/sys/fs/cgroup/cpu/actorpipe_chaos_{os.getpid()}"
        try:
            os.makedirs(self.dir, exist_ok=True)
            # The kernel takes a quota of 1 ms at least: 1 ms of every 20 ms.
            self._write(self.dir, "cpu.cfs_period_us", str(int(1000 / quota)))
            self._write(self.dir, "cpu.cfs_quota_us", "1000")
        except OSError as e:
            sys.exit(f"chaos: --throttles needs a writable cgroup v1 cpu controller (root): {e}")

    @staticmethod
    def _write(d, name, value):
        with open(os.path.join(d, name), "w") as f:
            f.write(value)

    def hold(self, pid):
        self._write(self.dir, "cgroup.procs", str(pid))

    def close(self):
        try:
            for pid in open(os.path.join(self.dir, "cgroup.procs")).read().split():
                self._write("/sys/fs/cgroup/cpu", "cgroup.procs", pid)
            os.rmdir(self.dir)
        except OSError:
            pass


def join_address(lines):
    for _, l in lines:
        m = re.search(r"takes processes that join at (\S+):", l)
        if m:
            return m.group(1)
    sys.exit("chaos: rank 0 named no address for processes that join")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--events", type=int, default=3)
    ap.add_argument("--joins", type=int, default=0, help="processes that join, each after one of the first losses")
    ap.add_argument("--throttles", type=int, default=0, help="workers held to a twentieth of a core (root)")
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--coordinator", choices=("rank0", "process"), default="rank0",
                    help="process: the supervisor runs apart (launch --coordinator process), RANK 0 is drawn too")
    ap.add_argument("--replacements", type=int, default=0,
                    help="kills -9 that launch replaces (same RANK); the run then replaces every loss")
    ap.add_argument("--link-down", action="store_true",
                    help="two hosts (network namespaces, root); the link between them goes down for good")
    a = ap.parse_args()
    if not 2 <= a.nprocs <= 8 or not 1 <= a.events < a.nprocs or a.steps < 5 * a.events + 20:
        sys.exit("chaos: --nprocs wants 2..8, --events 1..nprocs-1, --steps at least 5 x events + 20")
    if not 0 <= a.joins <= a.events:
        sys.exit("chaos: --joins wants 0..events (each follows a loss)")
    exe = os.path.join(a.build, "actorpipe")
    if not 0 <= a.throttles <= 2:
        sys.exit("chaos: --throttles wants 0..2")
    if not 0 <= a.replacements <= (a.steps - 11) // 5:
        sys.exit("chaos: --replacements wants 0..(steps - 11) / 5")
    if a.replacements and a.joins:
        sys.exit("chaos: --joins and --replacements do not go together: a run that replaces (replace_timeout_s > 0) "
                 "replaces every lost RANK, so no process ever holds two stages for a joiner to take")
    first = 0 if a.coordinator == "process" else 1
    if a.link_down:
        if a.replacements:
            sys.exit("chaos: --link-down and --replacements do not go together: the cut host's RANKs would be "
                     "started again on node 0")
        if a.nprocs % 2 or a.events > a.nprocs // 2 - first:
            sys.exit(f"chaos: --link-down wants an even --nprocs and --events at most {a.nprocs // 2 - first} "
                     "(the losses are drawn among host A's RANKs; the link takes host B's)")
    events = draw(a.seed, a.events, a.nprocs, a.steps, a.joins, a.throttles, first, a.replacements, a.link_down)
    throttle = Throttle(1 / 20) if a.throttles else None
    hosts = TwoHosts() if a.link_down else None
    with tempfile.TemporaryDirectory() as d:
        clean_cfg, chaos_cfg = os.path.join(d, "clean.yaml"), os.path.join(d, "chaos.yaml")
        open(clean_cfg, "w").write(config(a.nprocs, a.steps, "", 0))
        beat = 4 if a.throttles else 2
        # A kill with replacement is a restart too; replace_timeout_s above
        # 0 has launch start every lost RANK again (see the docstring).
        sup = (f"{{max_restarts: {a.events + a.replacements + (1 if a.link_down else 0)}, window_steps: {a.steps}, heartbeat_timeout_s: {beat}, "
               f"replace_timeout_s: {30 if a.replacements else 0}}}")
        text = config(a.nprocs, a.steps, sup, 4)
        if a.throttles:
            text = text.replace("  pace_ms: 4\n", "  pace_ms: 4\n  rebalance: {every: 3, threshold: 0.2}\n")
        open(chaos_cfg, "w").write(text)
        clean, saved = os.path.join(d, "clean.pt"), os.path.join(d, "chaos.pt")
        r = subprocess.run([exe, "train", clean_cfg, "--quiet", "--save", clean], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("the fault-free run failed:\n" + r.stdout + r.stderr)
        print(f"seed {a.seed}: {a.events} events" +
              (f" and {a.replacements} kill(s) with replacement (replace_timeout_s: 30: every loss is replaced)"
               if a.replacements else "") +
              f" on pp {a.nprocs} over {a.nprocs} processes" +
              (f" (two hosts of {a.nprocs // 2} each)" if a.link_down else "") + f", {a.steps} steps: " +
              ", ".join(f"{k} at step {s}" if k == "join" else
                        f"link down (host B: ranks {a.nprocs // 2}-{a.nprocs - 1}) at step {s}" if k == "link" else
                        f"{k} rank {q} at step {s}" for s, q, k in events))
        t0 = time.monotonic()
        node_b, run_in = None, []
        if a.link_down:
            run_in = ["ip", "netns", "exec", hosts.a]
            port = str(random.Random().randint(20000, 60000))  # the namespaces are new: nothing else listens
            nodes = ["--nnodes", "2", "--nprocs", str(a.nprocs // 2), "--master-addr", hosts.addr_a,
                     "--master-port", port]
            node_b = subprocess.Popen(["ip", "netns", "exec", hosts.b, exe, "launch", *nodes, "--node-rank", "1",
                                       "--coordinator", a.coordinator, chaos_cfg, "--quiet"],
                                      stdout=open(os.path.join(d, "node_b.out"), "w"), stderr=subprocess.STDOUT)
            p = subprocess.Popen(run_in + [exe, "launch", *nodes, "--node-rank", "0", "--coordinator",
                                           a.coordinator, chaos_cfg, "--save", saved],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        else:
            p = subprocess.Popen([exe, "launch", "--nprocs", str(a.nprocs), "--coordinator", a.coordinator, chaos_cfg,
                                  "--save", saved],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        lines, pending, fired, joiners = [], list(events), [], []
        watchdog = threading.Timer(300, p.kill)
        watchdog.start()
        try:
            for line in p.stdout:
                now = time.monotonic() - t0
                lines.append((now, line.rstrip("\n")))
                m = STEP.match(line)
                if m and pending and int(m.group(1)) >= pending[0][0]:
                    step, rank, kind = pending.pop(0)
                    if kind == "join":
                        joiners.append(subprocess.Popen(run_in + [exe, "launch", "--join", join_address(lines),
                                                                  chaos_cfg],
                                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                        fired.append((time.monotonic() - t0, step, rank, kind, len(lines)))
                        continue
                    if kind == "link":
                        hosts.cut()
                        fired.append((time.monotonic() - t0, step, rank, kind, len(lines)))
                        continue
                    pid = worker_pid(p.pid, rank)
                    if pid < 0:
                        sys.exit(f"chaos: no worker with RANK={rank} to hit")
                    if kind == "throttle":
                        throttle.hold(pid)
                    else:
                        os.kill(pid, signal.SIGSTOP if kind == "stop" else signal.SIGKILL)
                    fired.append((time.monotonic() - t0, step, rank, kind, len(lines)))
            p.wait()
            joined = [(j.wait(30), j.stdout.read()) for j in joiners]
            if node_b:
                try:
                    node_b.wait(60)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if throttle:
                throttle.close()
            watchdog.cancel()
            for q in [p] + joiners + ([node_b] if node_b else []):
                if q.poll() is None:
                    q.kill()
            if hosts:
                hosts.close()
        print("| event | fired at | detected and decided (`re-placed:`" +
              (" or `heal: ... started again`" if a.replacements else "") +
              ") | state and stages ready | first step after |")
        print("| --- | --- | --- | --- | --- |")
        for t, step, rank, kind, at in fired:
            after = lines[at:]

            def when(pred):
                hit = next((tt for tt, l in after if pred(l)), None)
                return f"+{(hit - t) * 1e3:.0f} ms" if hit is not None else "never"
            who = ("a process joins" if kind == "join" else
                   f"link down (ranks {a.nprocs // 2}-{a.nprocs - 1})" if kind == "link" else f"{kind} rank {rank}")
            what = {"throttle": "re-partitions the layers", "join": " takes in rank "}.get(kind, " goes on over ")
            decided = (lambda l, what=what: l.startswith("re-placed:") and what in l)
            if kind == "replace" or (a.replacements and kind in ("kill", "stop")):
                # Healed onto a process started again: rank 0's `heal:`
                # line that names it, before launch starts it.
                who = f"kill rank {rank} with replacement" if kind == "replace" else f"{kind} rank {rank} (replaced)"
                decided = (lambda l, rank=rank: l.startswith("heal: ") and "started again" in l and f"rank {rank}" in l)
            print(f"| {who} after step {step} | {t:.2f} s | {when(decided)} "
                  f"| {when(lambda l: 'runs from after step' in l)} "
                  f"| {when(lambda l: STEP.match(l) is not None)} |")
        for _, l in lines:
            if l.startswith("re-placed:"):
                print(l)
            elif a.replacements and (l.startswith("heal: ") and "started again" in l or
                                     l.startswith("actorpipe launch: started ") or
                                     "was taken for dead by" in l):
                print(l)
        for code, out in joined:
            print(f"joiner exit {code}: " + " / ".join(l for l in out.splitlines() if l.strip())[:300])
        if node_b:
            said = [l for l in open(os.path.join(d, "node_b.out")).read().splitlines() if l.strip()]
            print(f"host B's launcher exit {node_b.returncode}: " + " / ".join(said[-3:])[:400])
        same = p.returncode == 0 and os.path.exists(saved) and open(saved, "rb").read() == open(clean, "rb").read()
        print(f"launch exit {p.returncode}; verdict: " +
              ("final weights bitwise equal to the fault-free run" if same else "NOT equal to the fault-free run"))
        if not same:
            print("\n".join(l for _, l in lines[-40:]), file=sys.stderr)
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
