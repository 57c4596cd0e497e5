#!/usr/bin/env python3
"""The training loss of a run (`actorpipe train --results R.json`) as an SVG:
each step's loss (faint) and its 50-step running mean, in nats per byte for
a language model, with the held-out loss as a marked line when given.

Usage: python3 bench/loss_curve.py RESULTS.json OUT.svg [--held-out X] [--title T]
"""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("results")
ap.add_argument("out")
ap.add_argument("--held-out", type=float)
ap.add_argument("--title", default="training loss")
a = ap.parse_args()
losses = [s["loss"] for s in json.load(open(a.results))["steps"]]
mean, window = [], 50
for i in range(len(losses)):
    w = losses[max(0, i - window + 1):i + 1]
    mean.append(sum(w) / len(w))
W, H, L, R, T, B = 640, 320, 56, 16, 32, 40
lo, hi = 0.0, max(6.0, max(losses))
x = lambda i: L + (W - L - R) * i / max(1, len(losses) - 1)
y = lambda v: T + (H - T - B) * (1 - (v - lo) / (hi - lo))
every = max(1, len(losses) // 600)  # at most about 600 points a line
poly = lambda vs: " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v in enumerate(vs) if i % every == 0 or i == len(vs) - 1)
out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
       '<rect width="100%" height="100%" fill="white"/>',
       '<text x="%d" y="20" font-size="14">%s</text>' % (L, a.title)]
for v in range(0, int(hi) + 1):
    out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, y(v), y(v)))
    out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (L - 6, y(v) + 4, v))
n = len(losses)
for k in range(0, n + 1, max(1, n // 6 // 100 * 100 or 1)):
    out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(min(k, n - 1)), H - B + 16, k))
out.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((L + W - R) // 2, H - 6))
out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">nats per byte</text>' % (H // 2, H // 2))
out.append('<polyline fill="none" stroke="#9ecae1" stroke-width="1" points="%s"/>' % poly(losses))
out.append('<polyline fill="none" stroke="#08519c" stroke-width="2" points="%s"/>' % poly(mean))
if a.held_out is not None:
    out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="6 4"/>' % (L, W - R, y(a.held_out), y(a.held_out)))
    out.append('<text x="%d" y="%.1f" text-anchor="end" fill="#d62728">held-out %.3f</text>' % (W - R - 4, y(a.held_out) - 6, a.held_out))
out.append('<text x="%d" y="%d" fill="#08519c">train loss, %d-step mean</text>' % (L + 10, T + 16, window))
out.append("</svg>")
open(a.out, "w").write("\n".join(out) + "\n")
