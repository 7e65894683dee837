"""A profile's runs: :func:`run_specs` turns a :class:`~costaware.experiments.profile.Profile` into the list of
:class:`RunSpec` to train, each of which maps one to one onto a :class:`~costaware.experiments.records.RunId`, and
whose sampling is one :class:`~costaware.experiments.arms.Arm`.

>>> p = Profile(seeds=(0, 1), token_budget=1000)
>>> [s.slug for s in run_specs(p) if s.seed == 0 and s.group != "rollout"]
['none', 'nonzero', 'p_star', 'p_star:raw', 'p_smooth', 'pods', 'none:lr0.5', 'none:lr2']
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import KW_ONLY, dataclass
from typing import Any

from costaware.experiments.arms import Arm, ArmOptions
from costaware.experiments.profile import (
    GROUPS,
    HEADLINE,
    LONG_ARMS,
    PROXY_ARMS,
    PROXY_METHODS,
    ROLLOUT_ARMS,
    TOKEN_SUM_SETTINGS,
    Profile,
)

__all__ = ["RunSpec", "run_specs"]


@dataclass(frozen=True)
class RunSpec(ArmOptions):
    """One run. ``lr_scale`` multiplies the profile's learning rate (the GRPO LR sweep). The arm's options
    (``weights``, ``alpha``, ...) come from :class:`~costaware.experiments.arms.ArmOptions`, keyword-only."""

    group: str  # one of GROUPS
    method: str  # a grpo.plan method id, or "sft" for the SFT-continuation control
    seed: int
    task: str = "arith"
    _: KW_ONLY  # a fifth positional argument was ``weights``: an error now, never another field
    lr_scale: float = 1.0
    loss_type: str = "profile"  # "profile": the profile's loss_type; "cispo"/"dapo" for those settings
    zvf: bool = False
    budget_scale: float = 1.0  # the "long" group: token budget, round cap and evaluations x this
    train_prompts: int = 0  # the "rollout" group: a finite train set of this many prompts (0: the profile's)

    @property
    def setting(self) -> str:
        base = "grpo+zvf" if self.zvf else ("grpo" if self.loss_type == "profile" else self.loss_type)
        return (
            base
            + (f"-{self.budget_scale:g}x-budget" if self.budget_scale != 1.0 else "")
            + (f"-{self.train_prompts}-prompts" if self.train_prompts else "")
        )

    def scaled(self, profile: Profile) -> Profile:
        """The profile this run trains under: the long group's budget, round cap and evaluations scaled."""
        if self.train_prompts:
            profile = dataclasses.replace(profile, train_prompts=self.train_prompts)
        if self.budget_scale == 1.0:
            return profile
        x = self.budget_scale
        return dataclasses.replace(
            profile,
            token_budget=round(profile.token_budget * x),
            rounds=math.ceil(profile.rounds * x),
            eval_points=math.ceil(profile.eval_points * min(x, 2.0)),
        )  # evaluations cost time

    @property
    def arm(self) -> Arm:
        """The run's sampling (what its record's ``RunId.arm`` is too)."""
        return Arm.of(self)

    @property
    def slug(self) -> str:
        """The run's id in file names and logs: its arm's key, then its LR multiple when not x1 (the record
        keeps the LR itself), e.g. ``p_star:raw``, ``none:lr0.5``."""
        return self.arm.key + (f":lr{self.lr_scale:g}" if self.lr_scale != 1.0 else "")

    def resolved_loss_type(self, profile: Profile) -> str:
        return "sft" if self.method == "sft" else (profile.loss_type if self.loss_type == "profile" else self.loss_type)


def run_specs(profile: Profile, methods: list[str] | None = None, groups: tuple[str, ...] = GROUPS) -> list[RunSpec]:
    """The runs of a reproduction: the headline and the LR sweep with every seed, the rest with fewer.

    ``methods`` restricts the headline to these method ids ("p_star" keeps both weight modes).
    """
    head = [
        (m, w)
        for m, w in HEADLINE
        if (methods is None or m in methods)
        and (not profile.headline_arms or Arm(m, weights=w).key in profile.headline_arms)
    ]
    swept = [(m, w) for m, w in HEADLINE
             if (methods is None or m in methods) and Arm(m, weights=w).key in profile.lr_sweep_arms]  # fmt: skip

    def arm(m: str, w: str) -> dict[str, Any]:  # the arm's options: its weights, and the profile's proxy
        proxy = {"proxy": profile.headline_proxy} if m in PROXY_METHODS and profile.headline_proxy != "auto" else {}
        return {"weights": w, **proxy}

    def headline(task: str, seeds: tuple[int, ...] = profile.seeds) -> list[RunSpec]:
        out: list[RunSpec] = []
        for s in seeds:
            out += [RunSpec("headline", m, s, task=task, **arm(m, w)) for m, w in head]
            out += [RunSpec("lr_sweep", m, s, task=task, lr_scale=x, **arm(m, w)) for m, w in swept
                    for x in profile.lr_sweep]  # fmt: skip
        return out

    if profile.run_order == "seed":  # the headline seed by seed across the tasks, then the rest
        specs = [x for s in profile.seeds for task in profile.tasks() for x in headline(task, (s,))]
        rest = [x for x in run_specs(dataclasses.replace(profile, run_order="task"), methods, groups)
                if x.group not in ("headline", "lr_sweep")]  # fmt: skip
        return [spec for spec in specs if spec.group in groups] + rest

    t = profile.task
    specs = headline(t)  # first, so that an interrupted job has its headline (the order is the run order)
    for s in profile.setting_seeds:
        specs += [RunSpec("zvf", m, s, task=t, zvf=True) for m in ("none", "p_star")]
        for loss in TOKEN_SUM_SETTINGS:
            specs += [RunSpec(loss, m, s, task=t, loss_type=loss, proxy=x) for m, x in PROXY_ARMS]
        specs.append(RunSpec("proxy", "p_star", s, task=t, proxy="calibrated"))  # beside the headline's p*
    if profile.long_budget:
        specs += [
            RunSpec("long", m, s, task=t, budget_scale=profile.long_budget) for s in profile.seeds for m in LONG_ARMS
        ]
    for s in profile.ablation_seeds:
        specs += [
            RunSpec("ablation", "p_star", s, task=t, proxy_noise=0.1),
            RunSpec("ablation", "p_star", s, task=t, proxy_noise=1.0),
            RunSpec("ablation", "inv_sqrt_cost", s, task=t),
            RunSpec("ablation", "p_smooth", s, task=t, alpha=0.05),
            RunSpec("ablation", "p_smooth", s, task=t, alpha=0.1),
            RunSpec("ablation", "p_star", s, task=t, step_budget="tokens"),
            RunSpec("control", "sft", s, task=t),
        ]
    if profile.ablation_seeds:  # p* drawing nonzero's rows per step, beside the headline's p* and nonzero: the
        # lead of experiments/row_variance.py (with the pool's noise counted, p* loses by drawing the baseline's rows)
        specs += [RunSpec("support", "p_star", s, task=t, step_budget="support") for s in profile.seeds]
    specs += [
        RunSpec("rollout", m, s, task=t, rollout=r, train_prompts=profile.rollout_train_prompts)
        for s in profile.seeds
        for m, r in ROLLOUT_ARMS[profile.rollout_arms]
    ]
    if profile.second_task:
        specs += headline(profile.second_task)
    for task_id in profile.extra_tasks:
        specs += headline(task_id)
    return [spec for spec in specs if spec.group in groups]
