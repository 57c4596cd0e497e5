#!/usr/bin/env python3
"""What the training loop's features cost, each as pairs run back to back
(one ratio per pair, the median over pairs; these machines are noisy):

  eval     `eval: {every: 10}` against no eval: the training steps' mean
           time only (an evaluation runs between steps, outside every
           step's time). Goal: steps per second at least 0.99 of no eval.
  mixed    `model.mixed_precision: bfloat16` against float32: mean step time
           (bf16 matmuls are slow on CPUs without AMX: reported, not a goal)
           and the largest peak stashed activation bytes of any stage
           (goal: at most 0.55 of float32's).

The model is configs/gpt_fortunes.yaml's GPT (4 blocks of dim 128, seq 64,
batch 16, 8 microbatches, 4 stages, 1F1B), shortened to --steps steps, with
AdamW (decay_1d false) and a cosine schedule with warmup, as a recipe has.

Usage: python3 bench/training_loop_bench.py [--pairs 5] [--steps 40] [--only eval|mixed]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "actorpipe")

CONFIG = """model:
  layers:
    - {{type: embedding, vocab: 256, dim: 128, max_seq: 64}}
    - {{type: gpt_block, dim: 128, heads: 4, mlp_hidden: 512, repeat: 4}}
    - {{type: layernorm, dim: 128}}
    - {{type: lm_head, vocab: 256, dim: 128, tie: true}}
{mixed}data:
  kind: text
  path: {data}
  seq_len: 64
  test_fraction: 0.01
  split: random
  shuffle: true
train:
  steps: {steps}
  batch_size: 16
  optimizer: {{type: adamw, lr: 0.002, betas: [0.9, 0.95], weight_decay: 0.1, decay_1d: false}}
  lr_schedule: {{type: cosine, warmup_steps: 5, min_lr: 0.0002}}
  clip_grad_norm: 1.0
  seed: 1
pipeline:
  stages: 4
  microbatches: 8
  schedule: 1f1b
{eval}"""


def run(dir_, name, steps, mixed=False, every=0, batches=0):
    cfg = os.path.join(dir_, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(data=os.path.join(ROOT, "data", "fortunes.txt"), steps=steps,
                              mixed="  mixed_precision: bfloat16\n" if mixed else "",
                              eval="eval: {every: %d%s}\n" % (every, ", batches: %d" % batches if batches else "")
                              if every else ""))
    res = os.path.join(dir_, name + ".json")
    p = subprocess.run([BIN, "train", cfg, "--quiet", "--samples", "0", "--results", res],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (name, p.returncode, p.stdout[-2000:]))
    r = json.load(open(res))
    steps_s = [s["step_s"] for s in r["steps"][1:]]  # the first warms up
    peak = max(max(st["peak_stash_bytes"] for st in s["stages"]) for s in r["steps"])
    evals = sum(e["seconds"] for e in r["evals"])
    return statistics.mean(steps_s), peak, evals, len(r["evals"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-batches", type=int, default=8, help="batches per evaluation (default 8)")
    ap.add_argument("--only", choices=["eval", "mixed"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        if a.only in (None, "eval"):
            ratios = []
            for i in range(a.pairs):
                off, _, _, _ = run(d, "no_eval", a.steps)
                on, _, ev_s, n = run(d, "eval", a.steps, every=10, batches=a.eval_batches)
                ratios.append(off / on)
                print("eval pair %d: no eval %.2f ms, eval every 10 %.2f ms per training step "
                      "(%d evaluations, %.1f ms each); steps/s ratio %.4f"
                      % (i + 1, off * 1e3, on * 1e3, n, ev_s / max(1, n) * 1e3, off / on), flush=True)
            print("eval: steps/s with eval every 10 over without, median of %d pairs: %.4f (goal >= 0.99)"
                  % (a.pairs, statistics.median(ratios)))
        if a.only in (None, "mixed"):
            ratios, mems = [], []
            for i in range(a.pairs):
                f32, p32, _, _ = run(d, "f32", a.steps)
                bf, pbf, _, _ = run(d, "bf16", a.steps, mixed=True)
                ratios.append(bf / f32)
                mems.append(pbf / p32)
                print("mixed pair %d: float32 %.2f ms, bf16 mixed %.2f ms per step (%.3fx); peak stashed %d vs %d "
                      "bytes (%.4f)" % (i + 1, f32 * 1e3, bf * 1e3, bf / f32, p32, pbf, pbf / p32), flush=True)
            print("mixed: bf16 step time over float32, median of %d pairs: %.3f; peak stashed bytes %.4f "
                  "(goal <= 0.55)" % (a.pairs, statistics.median(ratios), statistics.median(mems)))


if __name__ == "__main__":
    main()
