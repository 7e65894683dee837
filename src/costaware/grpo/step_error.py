"""How far each optimiser step of a round lands from the pool's expected step: measured, and J's closed form.

J(p) takes one pool as the whole dataset, so what it predicts is the variance that sub-sampling the pool adds
to a step. With g_i = ∇ℓ_i the per-row gradients at the round's θ, a plan feeds step s (the row-mean family,
``grpo.factors``)

    ĝ_s = (1/M_s) Σ_{rows r of step s} w_r g_r

(M_s the step's draws, w_r the row's importance weight × draw count, 1 for a subset method). Given the pool,
every step has the same expectation ḡ = E[ĝ_s | pool]: (1/n_supp) Σ_{A≠0} g_i for ``nonzero`` and centred p*,
(1/N) Σ_i g_i for GRPO and raw p*. :class:`StepLaw` holds the coefficients of both, and :func:`step_errors`
returns, from the rows' gradients, the measured ``(1/S) Σ_s ‖ĝ_s − ḡ‖²`` over the round's S steps beside the
closed form of its expectation (``experiments/row_variance.py`` derives both):

* i.i.d. draws from p (a drawing method with a fixed number m_s of draws per step):
  V_s = (1/m_s)(Σ_i p_i w_i² ‖g_i‖² − ‖ḡ‖²); centred weights w_i = 1/(n_supp p_i) give J's
  (1/m_s)(Σ_i ‖g_i‖²/(n_supp² p_i) − ‖ḡ‖²);
* a subset run once (``nonzero``, GRPO, PODS: a random permutation of its R rows cut into chunks of m_s):
  V_s = (σ²/m_s)(|R| − m_s)/(|R| − 1), σ² = (1/|R|) Σ_R ‖g_i‖² − ‖ḡ‖² (the finite-population correction).

No closed form (``predicted`` None) where the draws per step are random (``budget="tokens"``), and no law at all
for a subset under ``normaliser="pool"`` (its steps' expectations differ). Pure torch and numpy.

>>> import torch
>>> from costaware.grpo.plan import plan_minibatches
>>> plan = plan_minibatches(torch.tensor([1.0, -1.0, 0.0, 0.0]), torch.tensor([5, 5, 5, 5]), num_minibatches=2,
...                         config=SamplingConfig("nonzero"))
>>> law = step_law(plan, SamplingConfig("nonzero"))
>>> out = step_errors(law, [(0, torch.tensor([1.0])), (1, torch.tensor([-1.0]))])  # g = ±1: each step one row
>>> out.measured, out.predicted, out.grad_sq
(1.0, 1.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from costaware import distributions as dist
from costaware.grpo.config import SamplingConfig
from costaware.grpo.factors import NORMALISERS
from costaware.grpo.plan import Plan

__all__ = ["StepLaw", "StepErrors", "step_law", "step_errors"]


@dataclass(frozen=True)
class StepLaw:
    """The round's steps as linear maps of the rows' gradients, and what the closed form needs.

    coefficients: (S, N) float64, ĝ_s = Σ_i coefficients[s, i] g_i, one line per step the plan feeds;
    expected: (N,) float64, ḡ = Σ_i expected[i] g_i; kind: ``"iid"``, ``"partition"`` or ``""`` (no closed
    form); draws: (S,) the draws of each step (i.i.d.) or its chunk size (partition); second: (N,) p_i w_i²
    (i.i.d.; zeros otherwise); population: |R| (partition; 0 otherwise).
    """

    coefficients: np.ndarray
    expected: np.ndarray
    kind: str
    draws: np.ndarray
    second: np.ndarray
    population: int = 0

    @property
    def rows(self) -> np.ndarray:
        """The rows whose gradients the measurement needs (any non-zero coefficient), ascending."""
        return np.flatnonzero((self.coefficients != 0).any(0) | (self.expected != 0))

    def predicted(self, sq_norms: np.ndarray, grad_sq: float) -> float | None:
        """The closed form of E[(1/S) Σ_s ‖ĝ_s − ḡ‖² | pool] from ``sq_norms`` = (N,) ‖g_i‖² and ‖ḡ‖²."""
        if self.kind == "iid":
            per_draw = float(self.second @ sq_norms) - grad_sq
            return max(float(np.mean(per_draw / self.draws)), 0.0)
        if self.kind == "partition":
            r = self.population
            if r < 2:
                return 0.0
            sigma2 = float(sq_norms[self.expected != 0].sum()) / r - grad_sq
            return max(float(np.mean(sigma2 / self.draws * (r - self.draws) / (r - 1))), 0.0)
        return None


@dataclass(frozen=True)
class StepErrors:
    """One round: the measured mean over its steps of ‖ĝ_s − ḡ‖², its closed form (None: none), ‖ḡ‖², steps."""

    measured: float
    predicted: float | None
    grad_sq: float
    steps: int


def step_law(plan: Plan, config: SamplingConfig, *, normaliser: str = "draws") -> StepLaw | None:
    """The law of ``plan``'s steps (drawn under ``config``), or None where it feeds no step or has no single
    expectation (a subset under ``normaliser="pool"``)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    if not isinstance(config, SamplingConfig):
        raise TypeError(f"config must be a SamplingConfig, got {type(config).__name__}")
    if normaliser not in NORMALISERS:
        raise ValueError(f"normaliser must be one of {NORMALISERS}, got {normaliser!r}")
    mbs = [mb for mb in plan.minibatches if mb.num_draws > 0]
    if not mbs:
        return None
    n = plan.advantages.numel()
    coef = np.zeros((len(mbs), n))
    draws = np.array([mb.num_draws for mb in mbs], dtype=np.float64)
    for s, mb in enumerate(mbs):  # merged rows carry weight × count, so a duplicate is added once
        np.add.at(coef[s], mb.indices.numpy(), mb.weights.double().numpy() / mb.num_draws)
    if config.rule.weighted:
        assert plan.probs is not None  # a drawing plan always has p
        p = plan.probs.double().numpy()
        p = p / p.sum()
        w = dist.importance_weights_kernel(p, config.weights)  # type: ignore[arg-type]  # checked by the config
        kind = "iid" if config.budget in ("rows", "support") else ""
        return StepLaw(coef, p * w, kind, draws, p * w * w)
    if normaliser == "pool":
        return None
    rows = np.concatenate([mb.indices.numpy() for mb in mbs])
    expected = np.zeros(n)
    expected[rows] = 1.0 / rows.size
    return StepLaw(coef, expected, "partition", draws, np.zeros(n), int(rows.size))


def step_errors(law: StepLaw, grads: Iterable[tuple[int, torch.Tensor]]) -> StepErrors:
    """The measured step error and its closed form, from ``grads``: (row, g_row) for the rows of ``law.rows``
    (one at a time, so that only S + 1 gradient-sized sums are held); a row not given has g = 0."""
    if not isinstance(law, StepLaw):
        raise TypeError(f"law must be a StepLaw, got {type(law).__name__}")
    n = law.expected.size
    steps: torch.Tensor | None = None
    mean: torch.Tensor | None = None
    sq = np.zeros(n)
    coef, expected = torch.from_numpy(law.coefficients), torch.from_numpy(law.expected)
    for i, g in grads:
        if not 0 <= int(i) < n:
            raise ValueError(f"grads holds row {i}, outside the pool of {n} rows")
        g = g.detach().double().flatten()
        if steps is None or mean is None:
            steps, mean = torch.zeros(coef.shape[0], g.numel(), dtype=torch.float64), torch.zeros_like(g)
        steps += coef[:, int(i), None] * g[None]
        mean += expected[int(i)] * g
        sq[int(i)] = float(g @ g)
    if steps is None or mean is None:  # every gradient is zero
        return StepErrors(0.0, law.predicted(sq, 0.0), 0.0, int(coef.shape[0]))
    grad_sq = float(mean @ mean)
    measured = float(((steps - mean[None]) ** 2).sum(1).mean())
    return StepErrors(measured, law.predicted(sq, grad_sq), grad_sq, int(coef.shape[0]))
