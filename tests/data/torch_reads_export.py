#!/usr/bin/env python3
"""Reads actorpipe's schedule exports back with torch's own reader.

    python3 tests/data/torch_reads_export.py FILE:FORMAT:S:V:M [...]

FILE is a `simulate --export` CSV, FORMAT compute_only or compute_comms
(what --export-format compute and comms write), S the ranks and V the
stages per rank: 1, or 2 (round-robin, or a V where FILE's name holds
"zbv" or "dualpipev"), M the microbatches. Each file is loaded by
torch.distributed.pipelining's _PipelineScheduleRuntime._load_csv over
stand-in stages (no process group), which parses every action and, for
compute_only, lowers it to comms itself. Prints one line per file and
exits 1 if torch refused any; exit 3 where torch has no pipelining (2.4+).
"""
import sys


def main():
    try:
        import torch
        from torch.distributed.pipelining import schedules as sch
    except ImportError as e:
        print(f"torch_reads_export.py: no torch.distributed.pipelining ({e})", file=sys.stderr)
        return 3
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) > 1 else 2

    class Stage:  # what a schedule reads of a stage while it plans
        def __init__(self, index, num_stages, ranks):
            self.stage_index, self.num_stages = index, num_stages
            self.group_size, self.group_rank = ranks, 0
            self.submod = torch.nn.Identity()
            self.stage_index_to_group_rank = {}

    failed = 0
    for spec in sys.argv[1:]:
        path, form, ranks, per_rank, micro = spec.rsplit(":", 4)
        S, V, M = int(ranks), int(per_rank), int(micro)
        v_shape = "zbv" in path or "dualpipev" in path
        indices = [0] if V == 1 else ([0, 2 * S - 1] if v_shape else [k * S for k in range(V)])
        try:
            s = sch._PipelineScheduleRuntime([Stage(i, S * V, S) for i in indices], M)
            s._load_csv(path, format=form)
            order = s.pipeline_order_with_comms if form == "compute_comms" else s.pipeline_order
            n = sum(1 for r in order.values() for a in r if a is not None)
            print(f"{path}: torch {torch.__version__} read it ({form}): {len(order)} ranks, {n} actions")
        except Exception as e:  # noqa: BLE001 - report what torch said
            failed += 1
            print(f"{path}: torch {torch.__version__} REFUSED it ({form}): {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
