"""The biased prompt rules: they skip prompts before generation and carry no weights.

:class:`Greso` is GRESO's pre-rollout filter with its adaptive exploration probabilities
(:class:`GresoControl`); :class:`CostAwareSkip` skips as the predicted Ĝ/√ĉ falls. Both fill a round from the
epoch permutations' candidates as :class:`~costaware.rollouts.prompt_rule.SkipRule` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from costaware._checks import as_array, in_open_unit_interval, in_unit_interval, integer, real_scalar
from costaware.rollouts.prompt_rule import FLOOR_WHY, CostModel, SkipRule, check_state, register_prompt_method
from costaware.rollouts.state import ALL_CORRECT, ALL_WRONG, PromptState
from costaware.sampling_options import prompt_field

__all__ = ["GresoControl", "Greso", "CostAwareSkip"]


@dataclass(frozen=True)
class GresoControl:
    """GRESO's adaptive exploration probabilities (the probability of *keeping*), one per class."""

    p_easy: float = prompt_field("p_easy")
    p_hard: float = prompt_field("p_hard")

    def __post_init__(self) -> None:
        for name in ("p_easy", "p_hard"):
            object.__setattr__(self, name, in_unit_interval(getattr(self, name), name))


@register_prompt_method
@dataclass(frozen=True)
class Greso(SkipRule):
    """BIASED. GRESO's pre-rollout filter (Zheng et al. 2025, "Act Only When It Pays").

    A prompt whose last z ≥ 1 groups all had zero variance is kept with probability p^z (skipped with
    1 − p^z), p = ``p_easy`` if its last group was all correct, ``p_hard`` if all wrong; any other prompt
    is kept. :meth:`adapt` moves each p by ``step`` towards a target share of zero-variance groups among
    those generated (``target`` in total, ``easy_split`` of it easy, the rest hard): a share at or above
    its target lowers p (skip more), below it raises p, clipped to [min_p, max_p]; nothing moves
    during the first epoch. GRESO's reference code calls it once per training step (its notes say per
    epoch): the cadence is the caller's. The candidate batch is ``oversample`` × the train batch
    (384/256), filtered, and refilled until the train batch is full (:func:`fill_prompt_batch`).

    Its state, :attr:`control` (:attr:`initial` at the start), moves by :meth:`observe`, once per round.
    """

    name: ClassVar[str] = "greso"
    summary: ClassVar[str] = "GRESO's pre-rollout skip"
    target: float = prompt_field("target")
    easy_split: float = prompt_field("easy_split")
    step: float = prompt_field("step")
    p_easy: float = prompt_field("p_easy")
    p_hard: float = prompt_field("p_hard")
    oversample: float = prompt_field("oversample")
    min_p: float = prompt_field("min_p")
    max_p: float = prompt_field("max_p")
    control: GresoControl = field(init=False, repr=False, compare=False)  # the state: initial, then observe()'s

    def __post_init__(self) -> None:
        for name in ("p_easy", "p_hard"):
            object.__setattr__(self, name, in_open_unit_interval(getattr(self, name), name, why=FLOOR_WHY))
        for name in ("target", "easy_split", "min_p", "max_p"):
            in_open_unit_interval(getattr(self, name), name, why=FLOOR_WHY)
        in_open_unit_interval(self.step, "step")
        if not self.min_p <= self.max_p:
            raise ValueError(f"min_p must be <= max_p, got {self.min_p!r} > {self.max_p!r}")
        if real_scalar(self.oversample, "oversample") < 1:
            raise ValueError(f"oversample must be >= 1, got {self.oversample!r}")
        object.__setattr__(self, "control", self.initial)

    @property
    def initial(self) -> GresoControl:
        """The exploration probabilities at the start: ``p_easy``, ``p_hard``."""
        return GresoControl(self.p_easy, self.p_hard)

    def candidates_per_call(self, batch: int) -> int:
        return self.sampling_batch_size(batch)

    def keep(self, state: PromptState, round: int) -> np.ndarray:
        return self.keep_probabilities(state, self.control)

    def observe(self, rewards: np.ndarray, epoch: int) -> None:
        """GRESO adapts every step from its second epoch on."""
        object.__setattr__(self, "control", self.adapt(self.control, rewards, epoch))

    def rule_state(self) -> dict[str, Any] | None:
        return asdict(self.control)

    def load_rule_state(self, saved: dict[str, Any] | None) -> None:
        if not isinstance(saved, dict):
            raise ValueError(f"greso's saved control must be a dict of p_easy, p_hard, got {saved!r}")
        object.__setattr__(self, "control", GresoControl(**saved))

    def sampling_batch_size(self, train_batch_size: int) -> int:
        return int(np.ceil(self.oversample * integer(train_batch_size, "train_batch_size", minimum=1)))

    def keep_probabilities(self, state: PromptState, control: GresoControl) -> np.ndarray:
        st = check_state(state)
        p = np.where(st.status == ALL_CORRECT, control.p_easy, np.where(st.status == ALL_WRONG, control.p_hard, 1.0))
        return np.where(st.zero_streak > 0, p**st.zero_streak, 1.0)

    def adapt(self, control: GresoControl, rewards: Any, epoch: int) -> GresoControl:
        """The next control from one step's generated groups' rewards (B, G) at ``epoch`` (0-based)."""
        r = as_array(rewards, "rewards")
        if r.ndim != 2 or r.shape[0] == 0:
            raise ValueError(f"rewards must have shape (groups, group_size) with groups >= 1, got {r.shape}")
        if integer(epoch, "epoch", minimum=0) == 0:
            return control
        zero = r.max(axis=1) == r.min(axis=1)
        easy = float((zero & (r[:, 0] >= 1.0)).mean())
        hard = float((zero & (r[:, 0] <= 0.0)).mean())

        def move(p: float, share: float, target: float) -> float:
            return max(p - self.step, self.min_p) if share >= target else min(p + self.step, self.max_p)

        return replace(
            control,
            p_easy=move(control.p_easy, easy, self.target * self.easy_split),
            p_hard=move(control.p_hard, hard, self.target * (1.0 - self.easy_split)),
        )


@register_prompt_method
@dataclass(frozen=True)
class CostAwareSkip(SkipRule):
    """BIASED. Keep prompt j with min(1, max(min_keep, s_j / s_ref)), s = Ĝ/√ĉ, s_ref = the
    ``reference`` quantile of s over all prompts: the skip probability rises as Ĝ/√ĉ falls. No weights."""

    name: ClassVar[str] = "cost_aware_skip"
    uses_costs: ClassVar[bool] = True
    summary: ClassVar[str] = "skip as the predicted G/sqrt(c) falls"
    min_keep: float = prompt_field("min_keep")
    reference: float = prompt_field("reference")
    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")
    cost: CostModel = field(init=False, repr=False, compare=False)  # built from the two above

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", CostModel(self.generation_cost, self.po_rows))
        in_open_unit_interval(self.min_keep, "min_keep", why=FLOOR_WHY)
        in_open_unit_interval(self.reference, "reference", why=FLOOR_WHY)

    def keep_probabilities(self, state: PromptState, round: int) -> np.ndarray:
        e = self.cost.expected(check_state(state), round)
        s = e["abs_adv_sum"] / np.sqrt(e["cost"])
        ref = float(np.quantile(s, self.reference))
        if not ref > 0:
            return np.ones_like(s)
        return np.clip(s / ref, self.min_keep, 1.0)

    def keep(self, state: PromptState, round: int) -> np.ndarray:
        return self.keep_probabilities(state, round)
