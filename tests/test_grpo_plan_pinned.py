"""Same seed, same plan: every sampling method's plan for a fixed seed, pinned by a digest.

The recorded main-job runs depend on the plans being reproducible across code changes (refactors of
the checks, faster kernels). Each case builds a plan from a seeded generator and hashes everything the
engines read from it: every mini-batch's indices, weights, counts, draws and tokens, the probabilities,
the advantages, the token totals and the meta. A change to any of them changes the digest.

To re-pin after a deliberate change of the sampling (which re-records the runs), run this file as a
script: it prints the new table.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from costaware.grpo import SamplingConfig, plan_minibatches


def _pool(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(n, generator=gen) < 0.4).to(torch.float32)
    adv = torch.randn(n, generator=gen)
    adv[torch.rand(n, generator=gen) < 0.3] = 0.0  # zero-advantage rows, as in real GRPO pools
    cost = torch.randint(10, 4000, (n,), generator=gen)
    return adv, cost, rewards


CASES = {
    "none": dict(method="none"),
    "nonzero": dict(method="nonzero"),
    "pods": dict(method="pods"),
    "p_star rows merged": dict(method="p_star"),
    "p_star rows unmerged": dict(method="p_star", merge_duplicates=False),
    "p_star tokens merged": dict(method="p_star", budget="tokens"),
    "p_star tokens unmerged": dict(method="p_star", budget="tokens", merge_duplicates=False),
    "p_star raw": dict(method="p_star", weights="raw"),
    "p_star noised": dict(method="p_star", proxy_noise=0.5),
    "p_star calibrated": dict(method="p_star", proxy="calibrated", proxy_beta=0.8),
    "p_smooth": dict(method="p_smooth", alpha=0.1),
    "p_smooth adaptive": dict(method="p_smooth", alpha=0.01, adaptive_alpha_max_weight=4.0),
    "inv_sqrt_cost": dict(method="inv_sqrt_cost"),
    "variance": dict(method="variance"),
    "uniform": dict(method="uniform", budget="tokens"),
}


def _digest(n: int, num_minibatches: int, config: dict, seed: int = 0) -> str:
    adv, cost, rewards = _pool(n, seed)
    plan = plan_minibatches(
        adv,
        cost,
        num_minibatches=num_minibatches,
        config=SamplingConfig(**config),
        rewards=rewards,
        group_size=8,
        generator=torch.Generator().manual_seed(seed + 1),
    )
    h = hashlib.sha256()

    def add(x):
        if isinstance(x, torch.Tensor):
            h.update(str(x.dtype).encode())
            h.update(x.contiguous().numpy().tobytes())
        else:
            h.update(repr(x).encode())

    for mb in plan.minibatches:
        for x in (mb.indices, mb.weights, mb.counts, mb.num_draws, mb.tokens):
            add(x)
    for x in (plan.method, plan.probs, plan.advantages, plan.skipped, plan.tokens_plain, plan.tokens_nonzero):
        add(x)
    add(sorted(plan.meta.items()))
    return h.hexdigest()[:16]


# Recorded before the check-once refactor and the numba merge kernel (both must leave every plan unchanged).
PINNED: dict[tuple[str, int], str] = {
    ("none", 64): "aa0db2ffbfc0ec21",
    ("none", 4096): "6ef5d5a51a4c16ee",
    ("nonzero", 64): "a7ab81ea0324c0ca",
    ("nonzero", 4096): "61623a7e018865a2",
    ("pods", 64): "b6e5f1b5388267ed",
    ("pods", 4096): "839900811cd73fc8",
    ("p_star rows merged", 64): "b0c732c73f19fe01",
    ("p_star rows merged", 4096): "bdc86e0df941d9be",
    ("p_star rows unmerged", 64): "bd7b602f9aeffcf9",
    ("p_star rows unmerged", 4096): "5e537e4bda675471",
    ("p_star tokens merged", 64): "f41972927054d75b",
    ("p_star tokens merged", 4096): "e20ca8777bbe5722",
    ("p_star tokens unmerged", 64): "9c35b5cd1ca88d00",
    ("p_star tokens unmerged", 4096): "6a54172fb2db0a0b",
    ("p_star raw", 64): "6734aee4aa97db51",
    ("p_star raw", 4096): "66f2b8d554dbdab7",
    ("p_star noised", 64): "9081accea30b1dca",
    ("p_star noised", 4096): "72a299abf112573f",
    ("p_star calibrated", 64): "63e5767a4feedff4",
    ("p_star calibrated", 4096): "9015298845bb79b0",
    ("p_smooth", 64): "d7c2baa76a5ac0a7",
    ("p_smooth", 4096): "a73fdee44155be17",
    ("p_smooth adaptive", 64): "e58539783f6c44b7",
    ("p_smooth adaptive", 4096): "006310055945449e",
    ("inv_sqrt_cost", 64): "fd8178ade2b1016f",
    ("inv_sqrt_cost", 4096): "6b0916adae0a9b45",
    ("variance", 64): "327cef75717cbd36",
    ("variance", 4096): "27f6a2c038b8efd8",
    ("uniform", 64): "5b9019d860e10b88",
    ("uniform", 4096): "a80d41ecd41457e2",
    ("p_star rows merged", 65536): "2cbc168c72b65df7",
}


@pytest.mark.parametrize("name,n", [(name, n) for name in CASES for n in (64, 4096)])
def test_plan_for_a_fixed_seed_is_unchanged(name, n):
    assert _digest(n, 4 if n == 64 else 16, CASES[name]) == PINNED[(name, n)]


def test_bench_sized_plan_for_a_fixed_seed_is_unchanged():
    assert _digest(65_536, 16, CASES["p_star rows merged"]) == PINNED[("p_star rows merged", 65_536)]


if __name__ == "__main__":
    for name in CASES:
        for n in (64, 4096):
            print(f"    ({name!r}, {n}): {_digest(n, 4 if n == 64 else 16, CASES[name])!r},")
    print(f"    ('p_star rows merged', 65536): {_digest(65_536, 16, CASES['p_star rows merged'])!r},")
