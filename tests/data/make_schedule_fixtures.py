#!/usr/bin/env python3
"""Writes tests/data/schedule_csv/: PyTorch pipelining schedule CSVs that
tests/runtime/schedule/schedule_csv_test imports.

    python3 tests/data/make_schedule_fixtures.py            # torch if it can, else the rules
    python3 tests/data/make_schedule_fixtures.py --rules    # always the rules
    python3 tests/data/make_schedule_fixtures.py --compare  # torch's and the rules' side by side

Two sources, one format. With a torch that has torch.distributed.pipelining
(2.4 or later), each schedule class is built over stand-in stages (no process
group is needed to plan) and its own orders are written the way its
_dump_csv writes them: csv.writer, one row per rank, None as an empty cell;
`pipeline_order` for the compute_only files, `pipeline_order_with_comms` for
the *_comms ones. Without such a torch (this project's machines have torch
1.13), the orders are rebuilt from the construction rules torch documents in
torch/distributed/pipelining/schedules.py, written down below in this
script's own words: the GPipe, 1F1B, Interleaved1F1B, ZBVZeroBubble and
DualPipeV (DeepSeek's DualPipe reference, dualpipe/dualpipev.py, whose eight
steps torch's ScheduleDualPipeV follows) orders, the lowering passes that add
UNSHARD/RESHARD (FSDP prefetch of three stages), REDUCE_GRAD (after a stage's
last backward) and SEND/RECV (ranks taking turns), and the text of an action
(`0F3`, `2SEND_F1`, `0UNSHARD`, `(0F3;7B2)OVERLAP_F_B`). README.md there says
which source wrote the files.

Sizes: 4 ranks, 8 microbatches; Interleaved1F1B with 2 chunks per rank
(stages r and r + 4, round-robin), ZBVZeroBubble and DualPipeV with 2 in a V
(stages r and 7 - r).
"""
import argparse
import csv
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS, MICROBATCHES = 4, 8

COMPUTE = ("F", "I", "W", "B")


class Act:
    """One action: {stage}{kind}{microbatch}, or a compound of sub-actions."""

    def __init__(self, stage, kind, mb=None, sub=None):
        self.stage, self.kind, self.mb, self.sub = stage, kind, mb, sub

    def key(self):
        return (self.stage, self.kind, self.mb)

    def parts(self):
        return self.sub if self.sub else (self,)

    def __str__(self):
        if self.sub:
            return "(" + ";".join(str(a) for a in self.sub) + ")" + self.kind
        return f"{self.stage}{self.kind}{'' if self.mb is None else self.mb}"


# -- compute orders ----------------------------------------------------------------

def gpipe(S, M):
    """Fill, drain: every forward, a wait of three slots per hop to the last
    rank, every backward. REDUCE_GRAD follows the last (the bubbles go)."""
    out = {}
    for r in range(S):
        row = [None] * r + [Act(r, "F", i) for i in range(M)]
        row += [None] * (3 * (S - 1 - r)) + [Act(r, "B", i) for i in range(M)]
        out[r] = add_reduce_grad(row, M)
    return out


def one_f_one_b(S, M):
    """S-1-r warm-up forwards, a wait of two slots per hop to the last rank,
    then F, B pairs while forwards remain, then each left backward after an
    empty slot. REDUCE_GRAD follows the last backward (the bubbles go)."""
    out = {}
    for r in range(S):
        warm = S - 1 - r
        row = [None] * r + [Act(r, "F", i) for i in range(warm)] + [None] * (2 * warm)
        f, b = warm, 0
        while f < M:
            row += [Act(r, "F", f), Act(r, "B", b)]
            f, b = f + 1, b + 1
        while b < M:
            row += [None, Act(r, "B", b)]
            b += 1
        out[r] = add_reduce_grad(row, M)
    return out


def interleaved_1f1b(S, M, v):
    """Megatron's interleaved order over rounds of M // max(1, M // S)
    microbatches: forwards walk the chunks up one round at a time, backwards
    walk them down; warm-up (v-1) rounds plus two per hop to the last rank,
    and empty slots where the first backward cannot have arrived yet and
    before each cool-down backward."""
    rounds = max(1, M // S)
    per_round = M // rounds
    assert M % rounds == 0
    out = {}
    for r in range(S):
        total = v * M
        warm = min((v - 1) * per_round + 2 * (S - 1 - r), total)
        wait = (v * S + 2 * (S - 1 - r)) - (warm + r)
        fwd_stage = lambda k: ((k // per_round) % v) * S + r
        bwd_stage = lambda k: (v - 1 - ((k - warm) // per_round) % v) * S + r
        nf, nb = {}, {}

        def take(counter, stage):
            counter[stage] = counter.get(stage, 0) + 1
            return counter[stage] - 1

        row = [None] * r
        for k in range(warm + (total - warm) + warm):
            if k < warm:
                s = fwd_stage(k)
                row.append(Act(s, "F", take(nf, s)))
                if k == warm - 1:
                    row += [None] * wait
            elif k < total:
                s = fwd_stage(k)
                row.append(Act(s, "F", take(nf, s)))
                s = bwd_stage(k)
                row.append(Act(s, "B", take(nb, s)))
            else:
                row.append(None)
                s = bwd_stage(k)
                row.append(Act(s, "B", take(nb, s)))
        out[r] = row
    return out


def zbv(S, M):
    """ZB-V (Qi et al. 2024, section 6) for max(M, 2S-1) microbatches, the
    ones past M turned into empty slots: r empty slots; 2(S-r)-1 forwards of
    the first chunk; r pairs (F of chunk 1, F of chunk 0); S-r rounds of
    F I W on chunk 1; then F0 I0 W0 F1 I1 W1 while forwards remain; then r
    pairs (I0, I1), S-r pairs (I0, W0) and the held W1s, then W0s."""
    n = max(2 * S - 1, M)
    out = {}
    for r in range(S):
        s0, s1 = r, 2 * S - 1 - r
        row = [None] * r
        f0 = f1 = b0 = b1 = 0
        for _ in range(2 * (S - r) - 1):
            row.append(Act(s0, "F", f0)); f0 += 1
        for _ in range(r):
            row.append(Act(s1, "F", f1)); f1 += 1
            row.append(Act(s0, "F", f0)); f0 += 1
        for _ in range(S - r):
            row.append(Act(s1, "F", f1)); f1 += 1
            row += [Act(s1, "I", b1), Act(s1, "W", b1)]; b1 += 1
        while f1 < f0 or f0 < n:
            if f0 < n:
                row.append(Act(s0, "F", f0)); f0 += 1
            row += [Act(s0, "I", b0), Act(s0, "W", b0)]; b0 += 1
            row.append(Act(s1, "F", f1)); f1 += 1
            row += [Act(s1, "I", b1), Act(s1, "W", b1)]; b1 += 1
        w0, w1 = b0, b1
        for _ in range(r):
            row.append(Act(s0, "I", b0)); b0 += 1
            row.append(Act(s1, "I", b1)); b1 += 1
        for _ in range(S - r):
            row.append(Act(s0, "I", b0)); b0 += 1
            row.append(Act(s0, "W", w0)); w0 += 1
        while w1 < b1:
            row.append(Act(s1, "W", w1)); w1 += 1
        while w0 < b0:
            row.append(Act(s0, "W", w0)); w0 += 1
        out[r] = [a if a is not None and a.mb < M else None for a in row]
    return out


def dualpipev(S, M):
    """DeepSeek's DualPipeV (dualpipe/dualpipev.py), as torch's
    ScheduleDualPipeV lays it out. Rank r holds stage r (chunk 0, going
    down) and 2S-1-r (chunk 1, coming back). Each stage and kind counts its
    own microbatches; a full backward B counts as that stage's I and W; an I
    queues its W, which a later W slot runs (oldest first).
      1. 2(S-1-r) F0          2. r+1 times F0 F1
      3. S-1-r times I1 W F1  4. M-2S+r+1 times (F0;B1) (F1;B0), overlapped
                                 (the last rank runs its first F0, B1 apart)
      5. S-1-r times B1 (F1;B0)
      6. r+1 times B1 B0, switching to I halfway (odd ranks before B1, even
         ranks before B0)
      7. S-1-r times W, then I0   8. r+1 times W"""
    assert M >= 2 * S
    out = {}
    for r in range(S):
        s0, s1 = r, 2 * S - 1 - r
        row, count, pending = [], {}, []

        def nxt(stage, kind):
            return count.get((stage, kind), 0)

        def bump(stage, kind):
            count[(stage, kind)] = nxt(stage, kind) + 1

        def single(stage, kind):
            mb = nxt(stage, "I" if kind == "B" else kind)
            row.append(Act(stage, kind, mb))
            if kind == "B":
                bump(stage, "I"); bump(stage, "W")
            else:
                if kind == "I":
                    pending.append((stage, mb))
                bump(stage, kind)

        def overlapped(fs, bs):
            f = Act(fs, "F", nxt(fs, "F"))
            b = Act(bs, "B", nxt(bs, "I"))
            row.append(Act(-1, "OVERLAP_F_B", None, (f, b)))
            bump(fs, "F"); bump(bs, "I"); bump(bs, "W")

        def weight():
            if pending:
                stage, mb = pending.pop(0)
                row.append(Act(stage, "W", mb))
                bump(stage, "W")

        for _ in range(2 * (S - r - 1)):
            single(s0, "F")
        for _ in range(r + 1):
            single(s0, "F"); single(s1, "F")
        for _ in range(S - r - 1):
            single(s1, "I"); weight(); single(s1, "F")
        for i in range(M - 2 * S + r + 1):
            if i == 0 and r == S - 1:
                single(s0, "F"); single(s1, "B")
            else:
                overlapped(s0, s1)
            overlapped(s1, s0)
        for _ in range(S - r - 1):
            single(s1, "B"); overlapped(s1, s0)
        zb = False
        for i in range(r + 1):
            if i == (r + 1) // 2 and r % 2 == 1:
                zb = True
            single(s1, "I" if zb else "B")
            if i == (r + 1) // 2 and r % 2 == 0:
                zb = True
            single(s0, "I" if zb else "B")
        for _ in range(S - r - 1):
            weight(); single(s0, "I" if zb else "B")
        for _ in range(r + 1):
            weight()
        out[r] = row
    return out


# -- lowering (compute_only -> compute_comms) ---------------------------------------

def add_reduce_grad(row, M):
    """Drops the empty slots; after the action that holds a stage's M-th
    backward (B, or W when split) comes {stage}REDUCE_GRAD."""
    out, done = [], {}
    for a in row:
        if a is None:
            continue
        out.append(a)
        for p in a.parts():
            if p.kind in ("B", "W"):
                done[p.stage] = done.get(p.stage, 0) + 1
                if done[p.stage] == M:
                    out.append(Act(p.stage, "REDUCE_GRAD"))
    return out


def add_unshard_reshard(row, window=3):
    """FSDP prefetch: before each action, the next `window` distinct stages
    the row computes on are unsharded (in the order they come), and the
    active stages not among them resharded first; the rest reshard at the
    end. The empty slots go. Sets are walked in ascending stage order (what
    CPython's set order is for these small stage indices)."""
    acts = [a for a in row if a is not None]
    active, out = set(), []
    for i, a in enumerate(acts):
        upcoming = []  # a compound may take it past `window`
        for b in acts[i:]:
            for p in b.parts():
                if p.stage not in upcoming:
                    upcoming.append(p.stage)
            if len(upcoming) >= window:
                break
        for s in sorted(s for s in active if s not in upcoming):
            active.remove(s); out.append(Act(s, "RESHARD"))
        for s in upcoming:
            if s not in active:
                active.add(s); out.append(Act(s, "UNSHARD"))
        out.append(a)
    for s in sorted(active):
        out.append(Act(s, "RESHARD"))
    return out


def add_send_recv(rows, rank_of, num_stages):
    """Ranks take turns in rank order, each placing its next action once its
    input is there: a forward past stage 0 needs its RECV_F, or the stage
    before on this rank to have run it; a backward (B or I) before the last
    stage needs its RECV_B, or the stage after on this rank. A placed F
    (B or I) whose next (previous) stage is on another rank appends its
    SEND_F (SEND_B) here and the matching RECV_F (RECV_B) on that rank."""
    todo = {r: list(rows[r]) for r in rows}
    out = {r: [] for r in rows}
    seen = {r: set() for r in rows}

    def crosses(a):
        if a.kind == "F":
            return a.stage != num_stages - 1 and rank_of(a.stage + 1) != rank_of(a.stage)
        if a.kind in ("B", "I"):
            return a.stage != 0 and rank_of(a.stage - 1) != rank_of(a.stage)
        return False

    def ready(a, prev):
        if a.kind == "F" and a.stage != 0:
            return (a.stage, "RECV_F", a.mb) in prev or (a.stage - 1, "F", a.mb) in prev
        if a.kind in ("B", "I") and a.stage != num_stages - 1:
            return any(k in prev for k in ((a.stage, "RECV_B", a.mb), (a.stage + 1, "I", a.mb),
                                            (a.stage + 1, "B", a.mb)))
        return True

    while any(todo.values()):
        moved = False
        for r in sorted(todo):
            if not todo[r]:
                continue
            a = todo[r][0]
            if not all(ready(p, seen[r]) for p in a.parts()):
                continue
            out[r].append(a)
            for p in a.parts():
                seen[r].add(p.key())
                if crosses(p):
                    fwd = p.kind == "F"
                    send = Act(p.stage, "SEND_F" if fwd else "SEND_B", p.mb)
                    recv = Act(p.stage + 1 if fwd else p.stage - 1, "RECV_F" if fwd else "RECV_B", p.mb)
                    out[r].append(send); seen[r].add(send.key())
                    to = rank_of(recv.stage)
                    out[to].append(recv); seen[to].add(recv.key())
            todo[r].pop(0)
            moved = True
        if not moved:
            raise SystemExit("the compute order cannot be lowered: no rank can go on")
    return out


def with_comms(order, rank_of, num_stages, M):
    rows = {r: add_reduce_grad(add_unshard_reshard(order[r]), M) for r in order}
    return add_send_recv(rows, rank_of, num_stages)


def round_robin(S):
    return lambda stage: stage % S


def v_shape(S):
    return lambda stage: stage if stage < S else 2 * S - 1 - stage


def by_rules(S, M):
    """{file name: {rank: [Act | None]}} from the rules above."""
    inter, zv, dpv = interleaved_1f1b(S, M, 2), zbv(S, M), dualpipev(S, M)
    return {
        "gpipe.csv": gpipe(S, M),
        "1f1b.csv": one_f_one_b(S, M),
        "interleaved1f1b.csv": inter,
        "interleaved1f1b_comms.csv": with_comms(inter, round_robin(S), 2 * S, M),
        "zbv.csv": zv,
        "zbv_comms.csv": with_comms(zv, v_shape(S), 2 * S, M),
        "dualpipev.csv": dpv,
        "dualpipev_comms.csv": with_comms(dpv, v_shape(S), 2 * S, M),
    }


# -- torch's own ----------------------------------------------------------------------

def by_torch(S, M):
    """{file name: {rank: [action | None]}} from torch's schedule classes,
    or None when this torch has no torch.distributed.pipelining."""
    try:
        import torch
        from torch.distributed.pipelining import schedules as sch
    except ImportError:
        return None

    class Stage:  # what a schedule reads of a stage while it plans
        def __init__(self, index, num_stages):
            self.stage_index, self.num_stages = index, num_stages
            self.group_size, self.group_rank = S, 0
            self.submod = torch.nn.Identity()
            self.stage_index_to_group_rank = {}

    def multi(cls, indices):
        s = cls([Stage(i, 2 * S) for i in indices], M)
        return s.pipeline_order, s.pipeline_order_with_comms

    if not hasattr(sch, "ScheduleDualPipeV") or not hasattr(sch, "_add_reduce_grad"):
        print(f"torch {torch.__version__} predates DualPipeV and REDUCE_GRAD: using the rules", file=sys.stderr)
        return None
    files = {}
    for name, cls in (("gpipe.csv", sch.ScheduleGPipe), ("1f1b.csv", sch.Schedule1F1B)):
        files[name] = cls(Stage(0, S), M).pipeline_order
    for name, cls, indices in (("interleaved1f1b", sch.ScheduleInterleaved1F1B, (0, S)),
                               ("zbv", sch.ScheduleZBVZeroBubble, (0, 2 * S - 1)),
                               ("dualpipev", sch.ScheduleDualPipeV, (0, 2 * S - 1))):
        files[name + ".csv"], files[name + "_comms.csv"] = multi(cls, indices)
    return files, torch.__version__


def csv_text(order):
    """As _dump_csv writes it: csv.writer, rank order, None as ''."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    for r in sorted(order):
        writer.writerow(["" if a is None else str(a) for a in order[r]])
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", action="store_true", help="write the rules' orders even where torch could")
    ap.add_argument("--compare", action="store_true", help="print where torch's and the rules' files differ")
    ap.add_argument("--out", default=os.path.join(HERE, "schedule_csv"))
    args = ap.parse_args()
    rules = by_rules(RANKS, MICROBATCHES)
    theirs = None if args.rules else by_torch(RANKS, MICROBATCHES)
    if args.compare:
        if theirs is None:
            raise SystemExit("--compare needs a torch with torch.distributed.pipelining")
        differ = 0
        for name in rules:
            a, b = csv_text(theirs[0][name]), csv_text(rules[name])
            print(f"{name}: {'same' if a == b else 'DIFFERS'}")
            if a != b:
                differ += 1
                print("torch:\n" + a + "rules:\n" + b)
        return 1 if differ else 0
    files = rules if theirs is None else theirs[0]
    source = ("the construction rules in tests/data/make_schedule_fixtures.py (no torch with "
              "torch.distributed.pipelining was at hand)" if theirs is None else
              f"torch {theirs[1]}'s own schedule classes (pipeline_order, pipeline_order_with_comms)")
    os.makedirs(args.out, exist_ok=True)
    for name, order in files.items():
        with open(os.path.join(args.out, name), "w", newline="") as f:
            f.write(csv_text(order))
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(
            "# PyTorch pipelining schedule CSVs\n\n"
            f"Written by `tests/data/make_schedule_fixtures.py` from {source}, in the form torch's\n"
            "`_dump_csv` writes (csv.writer, one row per rank, empty cells for bubbles).\n"
            f"{RANKS} ranks, {MICROBATCHES} microbatches; Interleaved1F1B 2 chunks round-robin,\n"
            "ZBVZeroBubble and DualPipeV 2 chunks in a V.\n\n"
            "- `gpipe.csv`, `1f1b.csv`: the single-stage schedules' `pipeline_order`, which\n"
            "  holds REDUCE_GRAD and no bubbles.\n"
            "- `interleaved1f1b.csv`, `zbv.csv`, `dualpipev.csv`: `pipeline_order`\n"
            "  (compute_only; DualPipeV's overlapped pairs as `(0F3;7B2)OVERLAP_F_B`).\n"
            "- `*_comms.csv`: `pipeline_order_with_comms` (compute_comms): the same lowered\n"
            "  with UNSHARD/RESHARD, REDUCE_GRAD and SEND_F/RECV_F/SEND_B/RECV_B.\n")
    print(f"wrote {len(files)} files to {args.out} from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
