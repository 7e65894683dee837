"""PO tokens verl's plugin feeds per pool, against stock, with and without merged duplicates (plans only).

    python benchmarks/verl_plan_tokens.py [--pools 20] [--constant-groups 0.3] [--profile default]

Why p* without merging feeds more tokens than stock on verl: every one of the N draws is fed (a row
drawn twice runs twice), and under verl's default ``token-mean`` the proxy is length-aware (beta 1,
p ∝ |A|·c^(1/2)), which tilts the draws toward long rows; the rows with A != 0 are already the longer
ones. Merged, each step feeds its unique rows once (padded to one size per pool with the cheapest row).
Pools are ``bench_po_time``'s; the plans are the plugin's own (``plan_resampling``, one rank).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_po_time import make_pool  # noqa: E402

from costaware.experiments import policy  # noqa: E402
from costaware.experiments.reproduce import PROFILES  # noqa: E402
from costaware.experiments.tasks import get_task  # noqa: E402
from costaware.integrations.verl import CostAwareConfig, plan_resampling  # noqa: E402

ARMS = {
    "p*, not merged, beta 1 (before)": dict(
        method="p_star", merge_duplicates=False, proxy="length_aware", proxy_beta=1.0
    ),
    "p*, not merged, beta 0": dict(method="p_star", merge_duplicates=False, proxy="advantage"),
    "p*, merged, beta 1 (default)": dict(method="p_star", merge_duplicates=True, proxy="length_aware", proxy_beta=1.0),
    "nonzero": dict(method="nonzero"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", choices=sorted(PROFILES))
    ap.add_argument("--pools", type=int, default=20)
    ap.add_argument("--constant-groups", type=float, default=0.3)
    args = ap.parse_args()
    prof = PROFILES[args.profile]
    tok, _ = policy.build_policy(get_task(prof.task).alphabet, hidden_size=prof.hidden_size,
                                 num_layers=prof.num_layers, seed=0)  # fmt: skip
    mbs = prof.prompts_per_round // prof.steps_per_generation * prof.generations
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in ARMS}
    longer = []
    for seed in range(args.pools):
        pool = make_pool(tok, prof, seed, args.constant_groups, prof.task)
        adv, cost, lengths = pool.advantages, pool.costs.long(), pool.completion_mask.sum(1)
        longer.append(float(cost[adv != 0].double().mean() / cost.double().mean()))
        for name, kw in ARMS.items():
            res = plan_resampling(adv, cost, CostAwareConfig(**kw), minibatch_size=mbs, dp_size=1, seed=0, step=seed,
                                  lengths=lengths, loss_agg_mode="token-mean")  # fmt: skip
            c = res.counts
            out[name].append(((c.tokens + c.tokens_padding) / c.tokens_plain, c.rows_unique / len(adv)))
    print(f"profile {args.profile}: {len(adv)} rows a pool, {mbs} a mini-batch, {args.pools} pools; "
          f"mean cost of the A != 0 rows / all rows {np.mean(longer):.3f}")  # fmt: skip
    for name, values in out.items():
        a = np.array(values)
        print(f"{name:34s} fed tokens / stock {a[:, 0].mean():.3f} (min {a[:, 0].min():.3f}, max {a[:, 0].max():.3f}); "
              f"unique rows {a[:, 1].mean():.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
