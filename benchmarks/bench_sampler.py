"""Draw m indices from a p over n items: alias table (build, draw) vs torch.multinomial and numpy choice.

    OMP_NUM_THREADS=1 python benchmarks/bench_sampler.py [--n 1000000] [--m 1000000] [--repeats 5]

Prints the median wall time of each method over the repeats (same process, same p) and its ratio
to the alias table's build + draw. The numba build is compiled (and cached) before timing starts.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _timing import median_seconds

from costaware.alias import build_alias, draw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="number of items")
    ap.add_argument("--m", type=int, default=1_000_000, help="number of draws")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    G, c = rng.uniform(0, 2, args.n), rng.uniform(1, 1000, args.n)
    p = G / np.sqrt(c)
    p /= p.sum()
    p_t = torch.from_numpy(p)
    gen = torch.Generator().manual_seed(0)
    build_alias(p[:10] / p[:10].sum())  # compile outside the timing

    prob, alias = build_alias(p)
    t_build = median_seconds(lambda: build_alias(p), args.repeats)
    t_draw = median_seconds(lambda: draw(prob, alias, args.m, rng), args.repeats)
    t_alias = t_build + t_draw
    t_torch = median_seconds(lambda: torch.multinomial(p_t, args.m, replacement=True, generator=gen), args.repeats)
    t_numpy = median_seconds(lambda: rng.choice(args.n, size=args.m, p=p), args.repeats)

    print(
        f"n = {args.n:,} items, m = {args.m:,} draws, median of {args.repeats}, "
        f"torch threads = {torch.get_num_threads()}"
    )
    print(f"{'method':<32}{'seconds':>10}{'× alias total':>16}")
    rows = [
        ("alias build (numba, O(n))", t_build),
        ("alias draw (numpy, O(m))", t_draw),
        ("alias build + draw", t_alias),
        ("torch.multinomial(replacement)", t_torch),
        ("numpy Generator.choice(p=)", t_numpy),
    ]
    for name, t in rows:
        print(f"{name:<32}{t:>10.4f}{t / t_alias:>16.2f}")
    print(f"speed-up of alias (build+draw): {t_torch / t_alias:.2f}× vs torch, {t_numpy / t_alias:.2f}× vs numpy")
    print(f"re-draw from a built table:     {t_torch / t_draw:.2f}× vs torch, {t_numpy / t_draw:.2f}× vs numpy")


if __name__ == "__main__":
    main()
