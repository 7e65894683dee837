"""``CostAwareSampler`` in a plain PyTorch loop: least squares where examples cost different amounts.

    python examples/sampler_sgd.py [--steps 3000]

Each example i has a cost c_i (think: its tokens) and a gradient norm that varies with it. The sampler
draws i with p ∝ G_i/√c_i (G_i a proxy of example i's gradient norm, here ‖x_i‖ times its last seen
|residual|, refreshed online after every batch), and every drawn example's loss is multiplied by its
importance weight, so each step is an unbiased estimate of the full gradient. The script prints the
total cost each sampler pays to bring the training loss to the same target: uniform sampling against
cost-aware sampling, same data, same step size schedule, three seeds. It exits with an error when a
sampler does not reach the target within ``--steps`` (the comparison would then say nothing).
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from costaware.sampler import CostAwareSampler, WeightedIndexDataset


def make_data(n: int = 2000, d: int = 20, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    costs = torch.empty(n).uniform_(1.0, 1000.0, generator=g)
    x = torch.randn(n, d, generator=g)  # gradient norms independent of the costs, as in the paper's Figure 2
    w_true = torch.randn(d, generator=g)
    y = x @ w_true + 0.1 * torch.randn(n, generator=g)
    return x, y, costs


def cost_to_target(x, y, costs, *, cost_aware: bool, steps: int, target: float, seed: int) -> float:
    """Cumulative cost of the examples drawn until the full-data loss is <= target (inf if never)."""
    w = torch.zeros(x.shape[1])
    lr = 0.5 / float((x**2).sum(1).mean())
    if cost_aware:  # start from G ∝ ‖x_i‖·|y_i| (w = 0), refresh from each batch's residuals
        sampler = CostAwareSampler(
            costs,
            (x.norm(dim=1) * y.abs()),
            alpha=0.1,
            num_samples=steps * 8,
            weights="raw",
            seed=seed,
            yield_weights=True,
        )
        loader = DataLoader(WeightedIndexDataset(TensorDataset(x, y)), batch_size=8, sampler=sampler)
    else:
        g = torch.Generator().manual_seed(seed)
        sampler = RandomSampler(range(len(y)), replacement=True, num_samples=steps * 8, generator=g)
        loader = DataLoader(TensorDataset(torch.arange(len(y))), batch_size=8, sampler=sampler)
    spent = 0.0
    for step, batch in enumerate(loader):
        if cost_aware:
            (xb, yb), idx, weight = batch
        else:
            (idx,) = batch
            xb, yb, weight = x[idx], y[idx], torch.ones(len(idx))
        residual = xb @ w - yb
        w -= lr * (weight[:, None] * residual[:, None] * xb).mean(0)  # importance-weighted SGD step
        spent += float(costs[idx].sum())
        if cost_aware:
            sampler.update_proxies(idx, xb.norm(dim=1) * residual.abs() + 1e-6)
        if step % 25 == 0 and float(((x @ w - y) ** 2).mean()) <= target:
            return spent
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="SGD steps at most (batches of 8)")
    opts = parser.parse_args()
    x, y, costs = make_data()
    target = 2.0 * 0.1**2 * 10  # a loss well above the noise floor (0.01), so both samplers reach it
    for seed in range(3):
        uniform = cost_to_target(x, y, costs, cost_aware=False, steps=opts.steps, target=target, seed=seed)
        aware = cost_to_target(x, y, costs, cost_aware=True, steps=opts.steps, target=target, seed=seed)
        for name, cost in (("uniform", uniform), ("cost-aware", aware)):
            if math.isinf(cost):
                sys.exit(f"seed {seed}: {name} sampling did not reach loss {target:.2f} in --steps {opts.steps}")
        print(
            f"seed {seed}: cost of the examples fed until the loss reached {target:.2f}: uniform {uniform:,.0f}, "
            f"cost-aware {aware:,.0f} ({aware / uniform:.2f}x)"
        )


if __name__ == "__main__":
    main()
