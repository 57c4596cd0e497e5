#!/usr/bin/env python3
"""DualPipeV's per-rank op order, traced from a mock of DeepSeek's reference.

DeepSeek's dualpipe/dualpipev.py (github.com/deepseek-ai/DualPipe) runs one
step as eight phases of calls on a rank: _forward_chunk(phase),
_backward_chunk(phase, enable_zb), _forward_backward_chunk(phase0, phase1)
and _weight_chunk(). This script replays that call sequence against a mock
that records what each call computes, with the reference's own bookkeeping:

- a phase's forward (backward) takes that phase's next microbatch
  (current_f_chunk_id / current_b_chunk_id);
- a backward with enable_zb puts its weight gradient into WeightGradStore's
  cache, and flush() queues the cache as one group; without it, autograd
  computes the weight gradient inside the backward;
- _weight_chunk() pops the oldest queued group (FIFO);
- _forward_backward_chunk(p0, p1) overlaps a forward of p0 with a full
  (enable_zb=False) backward of p1.

Output, in actorpipe's op text: phase p is chunk p ("F3" is chunk 0's
forward of microbatch 3, "B2.1" chunk 1's input-gradient backward); a full
backward is written "B<mb> W<mb>" (input gradient, then at once the weight
gradient); an overlapped pair is "F<mb>+B<mb'>.<c>" followed by that B's W.

    python3 tests/reference/dualpipev_reference_order.py > tests/data/dualpipev_reference_orders.txt
"""
import sys


class MockRank:
    def __init__(self, rank, num_ranks):
        self.rank = rank
        self.num_ranks = num_ranks
        self.is_last_rank = rank == num_ranks - 1
        self.f_id = [0, 0]
        self.b_id = [0, 0]
        self.zb_enabled = False
        self.zb_cache = []
        self.zb_queue = []
        self.trace = []

    @staticmethod
    def _name(kind, mb, phase):
        return f"{kind}{mb}" + (f".{phase}" if phase else "")

    # -- what the reference's compute functions do ---------------------------
    def _forward_compute(self, phase):
        mb = self.f_id[phase]
        self.f_id[phase] += 1
        return self._name("F", mb, phase)

    def _backward_compute(self, phase, enable_zb):
        mb = self.b_id[phase]
        self.b_id[phase] += 1
        self.zb_enabled = enable_zb
        weight = self._name("W", mb, phase)
        ops = [self._name("B", mb, phase)]
        if self.zb_enabled:
            self.zb_cache.append(weight)  # WeightGradStore.put
        else:
            ops.append(weight)  # autograd does it inside the backward
        self.zb_enabled = False
        if enable_zb:  # WeightGradStore.flush
            self.zb_queue.append(self.zb_cache)
            self.zb_cache = []
        return ops

    # -- the reference's step-level calls -------------------------------------
    def forward_chunk(self, phase):
        self.trace.append(self._forward_compute(phase))

    def backward_chunk(self, phase, enable_zb=False):
        self.trace.extend(self._backward_compute(phase, enable_zb))

    def forward_backward_chunk(self, phase0, phase1):
        f = self._forward_compute(phase0)
        b, *rest = self._backward_compute(phase1, False)
        self.trace.append(f + "+" + b)
        self.trace.extend(rest)

    def weight_chunk(self):
        assert self.zb_queue, "W with nothing queued"
        self.trace.extend(self.zb_queue.pop(0))  # FIFO

    def step(self, num_chunks):
        rank, num_ranks = self.rank, self.num_ranks
        assert num_chunks >= 2 * num_ranks
        for _ in range((num_ranks - rank - 1) * 2):  # 1: nF0
            self.forward_chunk(0)
        for _ in range(rank + 1):  # 2: nF0F1
            self.forward_chunk(0)
            self.forward_chunk(1)
        for _ in range(num_ranks - rank - 1):  # 3: nB1W1F1, zero bubble
            self.backward_chunk(1, enable_zb=True)
            self.weight_chunk()
            self.forward_chunk(1)
        for i in range(num_chunks - num_ranks * 2 + rank + 1):  # 4: nF0B1F1B0
            if i == 0 and self.is_last_rank:  # not overlapped, as the reference notes
                self.forward_chunk(0)
                self.backward_chunk(1)
            else:
                self.forward_backward_chunk(0, 1)
            self.forward_backward_chunk(1, 0)
        for _ in range(num_ranks - rank - 1):  # 5: nB1F1B0
            self.backward_chunk(1)
            self.forward_backward_chunk(1, 0)
        enable_zb = False  # 6: nB1B0, the second half zero bubble
        step_6 = rank + 1
        for i in range(step_6):
            if i == step_6 // 2 and rank % 2 == 1:
                enable_zb = True
            self.backward_chunk(1, enable_zb=enable_zb)
            if i == step_6 // 2 and rank % 2 == 0:
                enable_zb = True
            self.backward_chunk(0, enable_zb=enable_zb)
        for _ in range(num_ranks - rank - 1):  # 7: nWB0, zero bubble
            self.weight_chunk()
            self.backward_chunk(0, enable_zb=True)
        for _ in range(rank + 1):  # 8: nW
            self.weight_chunk()
        assert not self.zb_queue and self.f_id == [num_chunks] * 2 and self.b_id == [num_chunks] * 2
        return " ".join(self.trace)


def main():
    shapes = [(4, 8), (4, 10), (8, 16), (2, 4), (2, 6)]
    print("# DualPipeV per-rank orders traced from a mock of DeepSeek's dualpipev.py step();")
    print("# made by tests/reference/dualpipev_reference_order.py. Line: ranks microbatches rank: ops")
    for ranks, m in shapes:
        for r in range(ranks):
            print(f"{ranks} {m} {r}: {MockRank(r, ranks).step(m)}")


if __name__ == "__main__":
    sys.exit(main())
