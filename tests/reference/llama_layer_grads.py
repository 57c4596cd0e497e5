#!/usr/bin/env python3
"""One LLaMA layer's forward and backward in the reference (llama_reference.py),
for tests/runtime/model/llama_layers_test.cpp.

Usage: llama_layer_grads.py CASES.json

CASES.json lists the cases, each {"in": IN.pt, "out": OUT.pt, "spec": the
config's layer map}, all run in one start (torch's import is the cost).
IN.pt (torch.load's dict) holds "x" (the input: int64 ids for a
token_embedding, float32 otherwise), "g" (the gradient of the output) and the
layer's weights under their state-dict keys (no index prefix). The layer is
built from its spec, given those weights, run on x,
and backpropagated from g. OUT.pt holds "out", "x.grad" (float inputs only)
and "grad.<key>" for every weight. Exit 0 done, 2 a refused input.
Runs on Debian's python3-torch (1.13).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference  # noqa: E402


def run_case(in_path, out_path, spec):
    inp = torch.load(in_path)
    layer = llama_reference.build([spec])[0]
    weights = {k: v for k, v in inp.items() if k not in ("x", "g")}
    layer.load_state_dict(weights, strict=True)
    x = inp["x"]
    if x.is_floating_point():
        x = x.clone().requires_grad_(True)
    out = layer(x)
    out.backward(inp["g"])
    res = {"out": out.detach()}
    if x.is_floating_point():
        res["x.grad"] = x.grad
    for k, p in layer.named_parameters():
        res["grad." + k] = p.grad
    torch.save(res, out_path)


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        for case in json.load(f):
            run_case(case["in"], case["out"], case["spec"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
