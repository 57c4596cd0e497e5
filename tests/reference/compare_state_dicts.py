#!/usr/bin/env python3
"""Compares torch.save'd state dicts: compare_state_dicts.py A B [B2 ...] [--tol T] [--exact]

A and B must hold the same keys with the same shapes and dtypes. Prints, per
key, the largest absolute difference (and whether the bits are equal), then
the largest over all keys. Exit 0 when every key is within --tol (default
2e-5), or, with --exact, when every tensor is bitwise equal; 1 otherwise; 2
when a file cannot be read. More files after B are each compared with A the
same way (one Python start for several comparisons); the exit code is 0 only
when every one is.
"""
import argparse
import sys

import torch


def max_abs_diff(a, b):
    if a.numel() == 0:
        return 0.0
    if a.is_floating_point():
        d = (a.double() - b.double()).abs()
        return float("inf") if torch.isnan(d).any() else float(d.max())
    return float((a.long() - b.long()).abs().max())


def bitwise_equal(a, b):
    """Same bytes, NaNs and signed zeros included."""
    if a.is_floating_point():
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


def compare(sa, sb, name_a, name_b, tol, exact):
    """Prints the per-key lines and the verdict; True when within tol (or exact)."""
    ok = True
    ka, kb = set(sa), set(sb)
    if ka != kb:
        ok = False
        if ka - kb:
            print(f"only in {name_a}: {sorted(ka - kb)}")
        if kb - ka:
            print(f"only in {name_b}: {sorted(kb - ka)}")
    worst, worst_key = 0.0, None
    for k in sorted(ka & kb, key=lambda k: [int(p) if p.isdigit() else p for p in k.split(".")]):
        a, b = sa[k], sb[k]
        if a.shape != b.shape or a.dtype != b.dtype:
            print(f"{k}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
            ok = False
            continue
        d = max_abs_diff(a, b)
        same = bitwise_equal(a, b)
        bad = not same if exact else not (d <= tol)
        print(f"{k}: max abs diff {d:.3e}{'  bitwise equal' if same else ''}{'  FAIL' if bad else ''}")
        if bad:
            ok = False
        if d > worst or worst_key is None:
            worst, worst_key = d, k
    print(f"overall max abs diff {worst:.3e} ({worst_key}); "
          f"{'exact' if exact else f'tol {tol:g}'}: {'ok' if ok else 'FAIL'}")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description="compare torch.save'd state dicts")
    ap.add_argument("a")
    ap.add_argument("b", nargs="+", help="one or more files, each compared with A")
    ap.add_argument("--tol", type=float, default=2e-5, help="largest allowed absolute difference (default 2e-5)")
    ap.add_argument("--exact", action="store_true", help="require bitwise equal tensors")
    args = ap.parse_args(argv)
    try:
        sa = torch.load(args.a, map_location="cpu")
        sbs = [torch.load(b, map_location="cpu") for b in args.b]
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same verdict
        print(f"cannot load: {e}", file=sys.stderr)
        return 2
    ok = True
    for name, sb in zip(args.b, sbs):
        if len(args.b) > 1:
            print(f"== {args.a} vs {name}")
        ok = compare(sa, sb, args.a, name, args.tol, args.exact) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
