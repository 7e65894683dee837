"""The sampling options, each declared once: its name, default, one help text and group.

Two kinds: :data:`SAMPLING_OPTIONS`, how the row plan draws a pool's rows, and :data:`PROMPT_OPTIONS`, the
options of the prompt rules (:mod:`costaware.rollouts.prompts`), which choose the prompts a round generates.

:class:`costaware.grpo.config.SamplingConfig`, TRL's ``CostAwareGRPOConfig`` (``cost_aware_<name>``) and
verl's ``CostAwareConfig`` (``algorithm.cost_aware.<name>``) build their fields from these records with
:func:`core_field`, :func:`trl_field` and :func:`verl_field`, so a default or a help text is written here
only. The configs stay flat dataclasses with their own annotated types, because TRL's argument parser
and verl's Hydra read real fields; ``tests/test_option_spec.py`` checks that each one still carries every
option with the spec's default and help.

The prompt rules' fields take their defaults and help from :data:`PROMPT_OPTIONS` (:func:`prompt_field`);
TRL sets them through ``cost_aware_prompt_kwargs`` (``cost_aware_rollout_floor`` and
``cost_aware_generation_cost`` have fields of their own), verl under ``data.sampler.costaware``.

A new option is one :class:`Option` line here plus one annotated line per config (the engines pass
it on to :class:`~costaware.grpo.config.SamplingConfig` by name); a new value of an option is one
entry in its choices below and a word in its help.

The engines default ``method`` and ``proxy`` to ``"auto"``, resolved per loss family
(:func:`costaware.grpo.config.resolve_method`, :func:`costaware.grpo.config.resolve_proxy`);
:class:`~costaware.grpo.config.SamplingConfig` takes resolved values only and defaults to what
``"auto"`` gives under a sequence-mean loss (:attr:`Option.core_default`).

This module imports nothing heavy: verl's config and the main job's arms read it at import time.

>>> option("method").default, option("method").core_default, option("alpha").default, option("floor").default
('auto', 'p_star', 0.01, 0.1)
>>> trl_help(option("alpha"))
'[sampling] p_smooth: p = (1-α)p* + α·uniform.'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AUTO_METHOD",
    "BUDGETS",
    "DEFAULT_ALPHA",
    "DEFAULT_GENERATION_COST",
    "Option",
    "PO_ROWS",
    "PROMPT_OPTIONS",
    "PROXIES",
    "SAMPLING_OPTIONS",
    "WEIGHTS",
    "core_field",
    "option",
    "prompt_field",
    "trl_field",
    "trl_help",
    "verl_field",
]

# method="auto", per loss family (costaware.grpo.loss_families): of the methods that keep GRPO's expected step
# (PODS recomputes advantages, and verl's trainer v1 cannot run it), the one measured best.
AUTO_METHOD = {
    # grpo: the evidence profile's record (evidence/settle/settled.json, 30 seeds a task): p* tied `nonzero` on
    # sort and beat it on sortcheck at g <= 1, nowhere shown worse (README, "What to expect")
    "sequence_mean": "p_star",
    # dapo: p* (calibrated proxy) needed 9% [1%, 25%] more PO tokens than `nonzero`, p* with |A| was not
    # shown to beat it (+10% [-9%, +23%]); cispo: p* (calibrated) needed 150% [7%, 197%] more (3 seeds;
    # the main job's --profile full, docs/main-job.md)
    "token_sum": "nonzero",
}
# Gradient-norm proxies G_i ≈ |A_i| · c_i^β (costaware.grpo.proxy): "advantage" is the paper's (β = 0),
# "length_aware" a fixed β, "calibrated" a β the engine fits online and passes in as proxy_beta; "oracle" is
# no proxy: every row's exact ‖∇ℓ_i‖, which the engine measures and passes to the plan (an ablation).
PROXIES = ("advantage", "length_aware", "calibrated", "oracle")
# How many rows a drawing method draws per pool: the baseline's, as many as the pool has rows with A != 0
# (`nonzero`'s count), or until the baseline's tokens are matched.
BUDGETS = ("rows", "support", "tokens")
WEIGHTS = ("centred", "raw")
# p_smooth's share of uniform in p: the engines' default and the method's.
DEFAULT_ALPHA = 0.01
# A generated token's cost in PO tokens. Decoding one costs ~2N FLOPs, a trained token's forward and backward
# ~6N: 1/3 where decoding is compute-bound. The prompt rules' cost model, the engines' and the main job's default.
DEFAULT_GENERATION_COST = 1 / 3
# Which rows the row plan feeds, as the prompt rules' cost model counts them: every row (GRPO, ``none``), or
# those of groups with A != 0 (``nonzero``, p*: a zero-variance group feeds nothing).
PO_ROWS = ("all", "nonzero")


@dataclass(frozen=True)
class Option:
    """One sampling option.

    Attributes:
        name: the core's field name (TRL: ``cost_aware_<name>``; verl: ``algorithm.cost_aware.<name>``).
        default: the engines' default.
        help: one help text, shared by every config (TRL prefixes ``[group]``).
        group: ``"sampling"`` (how the plan draws rows), ``"proxy"`` (the gradient-norm proxy behind p) or
            ``"rollouts"`` (a prompt rule's option).
        auto: :class:`~costaware.grpo.config.SamplingConfig`'s default where the engines' is ``"auto"``:
            what ``"auto"`` gives under a sequence-mean loss (None: the same as ``default``).
        verl_omits: why verl's config has no such key ("" where it has one).
    """

    name: str
    default: Any
    help: str
    group: str
    auto: str | None = None
    verl_omits: str = ""

    @property
    def core_default(self) -> Any:
        """:class:`~costaware.grpo.config.SamplingConfig`'s default (it takes resolved values, never "auto")."""
        return self.default if self.auto is None else self.auto


SAMPLING_OPTIONS: tuple[Option, ...] = (
    Option(
        "method",
        "auto",
        "Mini-batch sampling method: 'auto' or a name in costaware.grpo.METHODS (none, p_star, p_smooth, "
        "nonzero, pods, ...). 'auto' picks, per loss family, the method measured best among those that keep "
        "GRPO's expected step (AUTO_METHOD): 'p_star' for sequence-mean losses (TRL grpo, sapo; verl "
        "seq-mean-token-mean), 'nonzero' (zero-advantage rows dropped) for token-sum losses (TRL dapo, cispo, "
        "bnpo, dr_grpo, luspo, vespo; verl token-mean and the seq-mean-token-sum modes). Refused with a KL term "
        "(choose 'p_smooth' or 'none').",
        "sampling",
        auto=AUTO_METHOD["sequence_mean"],
    ),
    Option("alpha", DEFAULT_ALPHA, "p_smooth: p = (1-α)p* + α·uniform.", "sampling"),
    Option("proxy_noise", 0.0, "σ² of zero-mean noise added to |A| before p is formed (ablation).", "sampling"),
    Option("weights", "centred", "'centred' 1/(n_supp p_i) (mean 1 under p) or 'raw' 1/(n p_i).", "sampling"),
    Option("merge_duplicates", True, "Run a row drawn k times into one mini-batch once, weight k·w.", "sampling"),
    Option(
        "budget",
        "rows",
        "'rows': the baseline's draws per step; 'support': as many draws per pool as it has rows with "
        "A != 0 (nonzero's step size); 'tokens': the baseline's tokens.",
        "sampling",
        verl_omits="verl runs the baseline's row budget only: its workers cut each pool into mini-batches of "
        "one fed size, and the other budgets have no verl test",
    ),
    Option(
        "pods_keep",
        None,
        "pods, cost_pods: rows kept per group (None: half the group).",
        "sampling",
        verl_omits="verl's PODS keeps the core's default, half of rollout.n",
    ),
    Option(
        "zero_tol",
        1e-6,
        "|A| <= zero_tol · max|A| counts as zero (float rounding).",
        "sampling",
        verl_omits="float rounding of group-normalised advantages, the same in verl; the core's default serves",
    ),
    Option(
        "max_draws_factor",
        64.0,
        "budget='tokens': at most this × (baseline rows per step) draws per step.",
        "sampling",
        verl_omits="only budget='tokens' reads it, which verl does not run",
    ),
    Option(
        "proxy",
        "auto",
        f"Gradient-norm proxy G ≈ |A|·c^β behind p_star/p_smooth, p ∝ |A|·c^(β-½): 'auto' or one of {PROXIES}. "
        "'auto': 'advantage' (the paper's, β=0) for sequence-mean losses; for token-sum losses 'calibrated' "
        "(β fitted online) where the engine fits β (TRL), else 'length_aware' with the loss family's prior β "
        "(verl, which refuses 'calibrated'). Unused by the other methods, so by method 'auto' under a "
        "token-sum loss ('nonzero'). 'oracle' (TRL only; an ablation, not a proxy): every row's exact gradient "
        "norm ‖∇ℓ_i‖ in place of |A_i|, p ∝ ‖∇ℓ_i‖/√c_i, measured each round by one backward pass per row with "
        "A != 0: expensive.",
        "proxy",
        auto="advantage",
    ),
    Option("proxy_beta", None, "'length_aware': the fixed β (None: the loss family's prior β).", "proxy"),
    Option(
        "adaptive_alpha_max_weight",
        None,
        "p_smooth: choose α per pool, the smallest in [alpha, 0.5] keeping every weight 1/(n p_i) <= this "
        "(None = fixed α).",
        "proxy",
    ),
)
# The prompt rules' options, by the name of the rule's field (a name means one thing in every rule that has it).
PROMPT_OPTIONS: tuple[Option, ...] = (
    Option("floor", 0.1, "'cost_aware': the uniform share of q, so every weight <= 1/floor.", "rollouts"),
    Option(
        "generation_cost",
        DEFAULT_GENERATION_COST,
        "A generated token's cost in PO tokens, in the predicted prompt cost.",
        "rollouts",
    ),
    Option(
        "po_rows", "nonzero", f"Rows the row plan feeds, in the predicted prompt cost: one of {PO_ROWS}.", "rollouts"
    ),
    Option("min_keep", 0.05, "'cost_aware_skip': the least probability of keeping a prompt.", "rollouts"),
    Option(
        "reference",
        0.5,
        "'cost_aware_skip': the quantile of s = G/sqrt(c) over the prompts at which a prompt is kept surely "
        "(below it, with probability s/s_ref).",
        "rollouts",
    ),
    Option("target", 0.25, "'greso': the share of zero-variance groups its exploration aims at.", "rollouts"),
    Option("easy_split", 1 / 3, "'greso': the all-correct part of target (the rest is all-wrong).", "rollouts"),
    Option("step", 0.01, "'greso': how far a keep probability moves per adaptation.", "rollouts"),
    Option("p_easy", 0.5, "'greso': the initial probability of keeping an all-correct prompt.", "rollouts"),
    Option("p_hard", 0.5, "'greso': the initial probability of keeping an all-wrong prompt.", "rollouts"),
    Option("oversample", 1.5, "'greso': the candidate batch, as a multiple of the train batch.", "rollouts"),
    Option("min_p", 0.05, "'greso': the least keep probability.", "rollouts"),
    Option("max_p", 0.95, "'greso': the largest keep probability.", "rollouts"),
    Option("first", 2, "'two_stage': the responses generated first for every drawn prompt.", "rollouts"),
)
_BY_NAME = {o.name: o for o in (*SAMPLING_OPTIONS, *PROMPT_OPTIONS)}


def option(name: str) -> Option:
    """The option named ``name`` (its core field name, or a prompt rule's field name)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"no sampling option {name!r}; the options are {tuple(_BY_NAME)}") from None


def trl_help(opt: Option) -> str:
    """TRL's help for ``opt``: its group in brackets, then the shared text."""
    return f"[{opt.group}] {opt.help}"


def core_field(name: str) -> Any:
    """:class:`~costaware.grpo.config.SamplingConfig`'s field ``name``: the core default, the shared help."""
    opt = option(name)
    return dataclasses.field(default=opt.core_default, metadata={"help": opt.help, "group": opt.group})


def prompt_field(name: str) -> Any:
    """A prompt rule's field ``name``: the option's default and help."""
    opt = option(name)
    return dataclasses.field(default=opt.default, metadata={"help": opt.help, "group": opt.group})


def trl_field(name: str) -> Any:
    """TRL's field ``cost_aware_<name>``: the engines' default, help ``[group] text`` (HfArgumentParser's)."""
    opt = option(name)
    return dataclasses.field(default=opt.default, metadata={"help": trl_help(opt)})


def verl_field(name: str) -> Any:
    """verl's field ``name`` under ``algorithm.cost_aware``: the engines' default, the shared help."""
    opt = option(name)
    if opt.verl_omits:
        raise ValueError(f"verl's config has no {name!r}: {opt.verl_omits}")
    return dataclasses.field(default=opt.default, metadata={"help": opt.help, "group": opt.group})
