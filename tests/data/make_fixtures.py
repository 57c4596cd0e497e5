#!/usr/bin/python3
"""Writes the small torch.save fixtures that tests/runtime/files/state_dict_test reads.

Run with Debian's /usr/bin/python3 (it has python3-torch 1.13):
    /usr/bin/python3 tests/data/make_fixtures.py
Each NAME.pt gets a NAME.txt reference written by Python itself, one tensor per
line: `name dtype ndim dims... values...` (values with repr precision), so the
test never checks our loader against itself.
"""
import collections
import os

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def write_reference(path, tensors):
    with open(path, "w") as f:
        for name, t in tensors.items():
            t = t.detach().contiguous()
            kind = "float" if t.is_floating_point() else "int"
            values = [repr(float(v)) if kind == "float" else str(int(v))
                      for v in t.reshape(-1).tolist()]
            f.write(" ".join([name, kind, str(t.dim())] + [str(d) for d in t.shape]
                             + values) + "\n")


def main():
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.LayerNorm(3), nn.Linear(3, 2))
    # Make LayerNorm's affine params non-trivial so the test sees real values.
    with torch.no_grad():
        model[2].weight.uniform_(0.5, 1.5)
        model[2].bias.uniform_(-0.5, 0.5)
    sd = model.state_dict()
    assert isinstance(sd, collections.OrderedDict) and hasattr(sd, "_metadata")
    torch.save(sd, os.path.join(HERE, "state_dict_ordered.pt"))
    write_reference(os.path.join(HERE, "state_dict_ordered.txt"), sd)

    x = torch.randn(10, 4)
    y = torch.arange(10, dtype=torch.long) % 3
    # A strided view: the saved storage is larger than the tensor.
    plain = {"x": x, "y": y, "xt": x.t()[1:3]}
    torch.save(plain, os.path.join(HERE, "tensors_plain.pt"))
    write_reference(os.path.join(HERE, "tensors_plain.txt"), plain)


if __name__ == "__main__":
    main()
