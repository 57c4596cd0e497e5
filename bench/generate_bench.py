#!/usr/bin/env python3
"""`actorpipe generate` with the KV cache against without it (--no-cache):
tokens per second over --tokens tokens after a short prompt, for the LLaMA of
configs/llama_fortunes.yaml and the GPT of configs/gpt_fortunes.yaml, each
with a window (data.seq_len, max_seq) of 320 so that every token comes from
the cache (a slid window runs the window again, with or without it).

The weights come from 2 training steps (the speed does not depend on them).
A token's time is (t(N tokens) - t(1 token)) / (N - 1), each t the median of
--rounds runs of the whole command, with and without the cache alternating:
the process start, the model's build and the prompt cancel out.

Usage: python3 bench/generate_bench.py [--tokens 256] [--rounds 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "actorpipe")


def config(src, window, dir_):
    text = open(os.path.join(ROOT, "configs", src)).read()
    text = text.replace("../data/", os.path.join(ROOT, "data") + "/")
    text = text.replace("seq_len: 64", "seq_len: %d" % window).replace("max_seq: 64", "max_seq: %d" % window)
    text = text.replace("batches: 20", "batches: 1")  # fewer, longer windows held out
    path = os.path.join(dir_, src)
    with open(path, "w") as f:
        f.write(text)
    return path


def wall(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr))
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for src, prompt in (("llama_fortunes.yaml", "The secret of"), ("gpt_fortunes.yaml", "Q: ")):
            cfg = config(src, 320, d)
            state = os.path.join(d, src + ".pt")
            wall([BIN, "train", cfg, "--steps", "2", "--quiet", "--samples", "0", "--save", state])
            times = {}
            for n in (1, a.tokens):
                for cache in (True, False):
                    times[(n, cache)] = []
            for _ in range(a.rounds):
                for n in (1, a.tokens):
                    for cache in (True, False):
                        cmd = [BIN, "generate", cfg, "--load", state, "--prompt", prompt, "--tokens", str(n), "--seed", "1"]
                        if not cache:
                            cmd.append("--no-cache")
                        times[(n, cache)].append(wall(cmd))
            per = {}
            for cache in (True, False):
                per[cache] = (statistics.median(times[(a.tokens, cache)]) - statistics.median(times[(1, cache)])) / (a.tokens - 1)
            print("%s: %d tokens, window 320: with the cache %.1f tokens/s (%.2f ms a token), without %.1f tokens/s "
                  "(%.2f ms); the cache %.1fx faster" % (src, a.tokens, 1 / per[True], per[True] * 1e3, 1 / per[False],
                                                       per[False] * 1e3, per[False] / per[True]), flush=True)


if __name__ == "__main__":
    main()
