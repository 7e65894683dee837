"""Synthetic per-prompt logs: prompts whose pass rates drift upwards as a policy learns.

Prompt j has a logit θ_j ~ N(``mean_logit``, ``spread``); each round every logit moves by ``drift``
plus N(0, ``noise``²), and its pass rate is sigmoid(θ). A finite train set is reused over epochs: each
round generates G responses for the next B prompts of a fresh permutation. Completions are longer on
hard prompts (``base_length`` × (1 + 1 − π), Poisson); prompt sizes are uniform in [20, 200].

>>> recs = simulate_prompt_rounds(num_prompts=8, group_size=4, batch_size=4, rounds=3, seed=0)
>>> len(recs), sorted({r.round for r in recs})
(12, [0, 1, 2])
"""

from __future__ import annotations

import numpy as np

from costaware._checks import integer, real_scalar
from costaware.rollouts.logs import PromptRound

__all__ = ["simulate_prompt_rounds"]


def simulate_prompt_rounds(
    num_prompts: int = 512,
    group_size: int = 8,
    batch_size: int = 64,
    rounds: int = 40,
    *,
    mean_logit: float = -0.5,
    spread: float = 2.0,
    drift: float = 0.05,
    noise: float = 0.1,
    base_length: float = 60.0,
    seed: int = 0,
) -> list[PromptRound]:
    N = integer(num_prompts, "num_prompts", minimum=1)
    G = integer(group_size, "group_size", minimum=1)
    B = integer(batch_size, "batch_size", minimum=1, maximum=N)
    T = integer(rounds, "rounds", minimum=1)
    for name, v in (("mean_logit", mean_logit), ("drift", drift)):
        real_scalar(v, name)
    for name, v in (("spread", spread), ("noise", noise), ("base_length", base_length)):
        if real_scalar(v, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}")
    rng = np.random.default_rng(integer(seed, "seed", minimum=0))
    theta = rng.normal(mean_logit, spread, N)
    ptok = rng.integers(20, 201, N)
    order, pos = rng.permutation(N), 0
    out: list[PromptRound] = []
    for t in range(T):
        if pos + B > N:
            order, pos = rng.permutation(N), 0
        ids = order[pos : pos + B]
        pos += B
        pi = 1.0 / (1.0 + np.exp(-theta[ids]))
        r = (rng.random((B, G)) < pi[:, None]).astype(float)
        ln = np.maximum(rng.poisson(base_length * (2.0 - pi)[:, None], (B, G)), 1)
        out += [
            PromptRound(t, int(j), tuple(r[b].tolist()), tuple(int(x) for x in ln[b]), int(ptok[j]))
            for b, j in enumerate(ids)
        ]
        theta = theta + drift + rng.normal(0.0, noise, N)
    return out
