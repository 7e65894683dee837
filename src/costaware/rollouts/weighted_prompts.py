"""The unbiased, weighted prompt rules: cost-aware prompt draws and the two-stage rollout.

:class:`CostAwarePrompts` draws prompts i.i.d. from q ∝ Ĝ/√ĉ mixed with uniform, every row of a drawn prompt's
group carrying 1/(N q); :class:`TwoStage` generates m responses of each prompt first and the rest with a
probability ρ, a completed group's rows carrying 1/ρ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from costaware import distributions as dist
from costaware._checks import as_array, in_open_unit_interval, index_vector, integer, show
from costaware.rollouts.group import beta_binomial_pmf, predictive_abs_adv_sum
from costaware.rollouts.prompt_rule import FLOOR_WHY, CostModel, UniformPrompts, check_state, register_prompt_method
from costaware.rollouts.state import PromptState
from costaware.sampling_options import prompt_field

__all__ = ["CostAwarePrompts", "TwoStage"]


@register_prompt_method
@dataclass(frozen=True)
class CostAwarePrompts(UniformPrompts):
    """The paper's rule applied to prompts: q = (1 − floor)·q̂ + floor/N with q̂_j ∝ Ĝ_j/√ĉ_j (ĉ priced by
    ``generation_cost`` and ``po_rows``, :class:`CostModel`); every weight f_j ≤ 1/floor. Unbiased, weighted."""

    name: ClassVar[str] = "cost_aware"
    plain: ClassVar[bool] = False
    weighted: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True
    summary: ClassVar[str] = "q ∝ G/sqrt(c) with prompt weights 1/(N q)"
    floor: float = prompt_field("floor")
    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")
    cost: CostModel = field(init=False, repr=False, compare=False)  # built from the two above

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", CostModel(self.generation_cost, self.po_rows))
        in_open_unit_interval(self.floor, "floor", why=FLOOR_WHY)

    def sampler_inputs(self, state: PromptState, round: int) -> tuple[np.ndarray, np.ndarray]:
        """(proxies Ĝ, costs ĉ) for :class:`costaware.sampler.CostAwareSampler` with ``alpha=floor``,
        ``weights="raw"``: its p is then this q and its weights these prompt factors."""
        e = self.cost.expected(check_state(state), round)
        return e["abs_adv_sum"], e["cost"]

    def draw_inputs(self, state: PromptState, round: int) -> tuple[np.ndarray | None, np.ndarray, float]:
        g, c = self.sampler_inputs(state, round)
        return g, c, self.floor

    def probabilities(self, state: PromptState, round: int) -> np.ndarray:
        g, c = self.sampler_inputs(state, round)
        return dist.smoothed_kernel(dist.optimal(g, c), self.floor)


@dataclass(frozen=True)
class TwoStage:
    """Unbiased two-stage rollout over a base prompt sampler.

    Stage 1: m = ``first`` responses for every drawn prompt. Stage 2: the other G − m responses,
    always where the first m disagree (the group is informative whatever comes next), otherwise with
    probability ρ_j ∈ [floor, 1]. A completed group's rows carry 1/ρ_j (times the base's prompt
    factor); a stopped group feeds no rows but stays in the round's normaliser (B·G rows), as a group
    with zero gradient. ρ_j depends only on the first stages, so conditional on every reward of the
    round the expected update over the stage-2 coins is the full groups' update: unbiased.

    ρ_j minimises the round's variance × cost (docs/design.md): with a_j = f_j²·E[(Σ|A|)² | first m]
    and c_j the predicted stage-2 cost, ρ_j = clip(√(C/A)·√(a_j/c_j), floor, 1), where A sums a_j over
    the prompts that complete surely and C is the cost of every stage 1 plus those completions.
    """

    name: ClassVar[str] = "two_stage"
    biased: ClassVar[bool] = False
    weighted: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True
    first: int = prompt_field("first")
    floor: float = prompt_field("floor")
    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")
    base: UniformPrompts = UniformPrompts()  # None: uniform
    cost: CostModel = field(init=False, repr=False, compare=False)  # built from generation_cost and po_rows

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", CostModel(self.generation_cost, self.po_rows))
        if self.base is None:
            object.__setattr__(self, "base", UniformPrompts())
        integer(self.first, "first", minimum=1)
        in_open_unit_interval(self.floor, "floor", why=FLOOR_WHY)
        if not isinstance(self.base, UniformPrompts):
            raise TypeError(
                f"base must be uniform_prompts() or cost_aware_prompts(...), got {type(self.base).__name__}"
            )

    def probabilities(self, state: PromptState, round: int) -> np.ndarray:
        return self.base.probabilities(state, round)

    def continue_probabilities(
        self,
        state: PromptState,
        round: int,
        prompt_ids: Any,
        first_rewards: Any,
        first_lengths: Any | None = None,
        prompt_factors: Any | None = None,
    ) -> np.ndarray:
        """ρ of each drawn prompt given its first m rewards (B, m); 1 where they disagree."""
        st = check_state(state)
        G, m = st.config.group_size, self.first
        if m >= G:
            raise ValueError(f"first must be < group_size={G}, got {m}")
        ids = index_vector(prompt_ids, st.num_prompts, "prompt_ids", integral_floats=True)
        r1 = as_array(first_rewards, "first_rewards")
        if r1.shape != (ids.size, m) or not (np.isfinite(r1).all() and (r1 >= 0).all() and (r1 <= 1).all()):
            raise ValueError(f"first_rewards must be 0/1 rewards of shape ({ids.size}, {m}), got {show(r1)}")
        f = np.ones(ids.size) if prompt_factors is None else as_array(prompt_factors, "prompt_factors").reshape(-1)
        if f.shape != (ids.size,) or not (np.isfinite(f).all() and (f > 0).all()):
            raise ValueError(f"prompt_factors must be {ids.size} positive numbers, got {show(f)}")
        ell = st.expected_length(round, ids)
        if first_lengths is None:
            stage1 = self.cost.generation_cost * m * ell
        else:
            ln = as_array(first_lengths, "first_lengths")
            if ln.shape != r1.shape or not (np.isfinite(ln).all() and (ln >= 0).all()):
                raise ValueError(f"first_lengths must be lengths >= 0 of shape {r1.shape}, got {show(ln)}")
            stage1 = self.cost.generation_cost * ln.sum(axis=1)
        agree = r1.max(axis=1) == r1.min(axis=1)
        k1 = np.rint(r1.sum(axis=1))
        a, b = st.posterior(round, ids)
        sq = predictive_abs_adv_sum(a, b, G, first=m, first_correct=k1, moment=2, std=st.config.std, eps=st.config.eps)
        p_inf = np.where(agree, _p_informative_given_first(a, b, G, m, k1), 1.0)
        row = st.expected_prompt_tokens(ids) + ell
        rest = self.cost.generation_cost * (G - m) * ell + self.cost.po_tokens(row, G, p_inf)
        A = float((f[~agree] ** 2 * sq[~agree]).sum())
        C = float(stage1.sum() + rest[~agree].sum())
        if not A > 0:
            return np.ones(ids.size)
        rho = np.sqrt(C / A) * f * np.sqrt(sq / np.maximum(rest, 1e-12))
        return np.where(agree, np.clip(rho, self.floor, 1.0), 1.0)


def _p_informative_given_first(a: np.ndarray, b: np.ndarray, G: int, m: int, k1: np.ndarray) -> np.ndarray:
    """P(the whole group is informative | its first m agree with k1 ∈ {0, m}) under Beta(a, b)."""
    pmf = beta_binomial_pmf(a + k1, b + (m - k1), G - m)
    return np.where(k1 > 0, 1.0 - pmf[..., -1], 1.0 - pmf[..., 0])
