"""How a pool of rollouts becomes policy-optimisation mini-batches: :class:`SamplingConfig`.

A config names its sampling method (``method``, a string, so that config files, the CLI and recorded run
keys stay plain) and holds every method's options; it parses them once, into the method object
:attr:`SamplingConfig.rule` (:mod:`costaware.grpo.methods`), which is what the plan calls.

>>> SamplingConfig("p_smooth", alpha=0.1).full_support
True
>>> SamplingConfig("p_star").full_support   # rows with A = 0 get p = 0
False
>>> SamplingConfig("pods", pods_keep=3).rule
Pods(keep=3)
>>> SamplingConfig("p_star", proxy="length_aware", proxy_beta=1.0).proxy_beta
1.0
>>> resolve_proxy("auto", None, loss_type="dapo", method="p_star")   # token-sum loss: fitted online
('calibrated', 1.0)
>>> resolve_proxy("auto", None, loss_type="dapo", method="p_star", fitted=False)   # an engine that cannot fit
('length_aware', 1.0)
>>> resolve_proxy("auto", None, loss_type="grpo", method="p_star")   # sequence-mean: the paper's
('advantage', 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from costaware._checks import in_interval, integer, is_real_number, real_scalar
from costaware.grpo.methods import (
    ALPHA_AUTO_MAX,
    METHODS,
    SamplingMethod,
    check_alpha,
    check_keep,
    check_max_weight,
    method_from_name,
    method_names,
)
from costaware.sampling_options import AUTO_METHOD, BUDGETS, PROXIES, WEIGHTS, core_field

__all__ = [
    "METHODS",
    "AUTO_METHOD",
    "SamplingConfig",
    "plan_seed",
    "PROXIES",
    "ALPHA_AUTO_MAX",
    "MAX_STEPS",
    "resolve_method",
    "resolve_proxy",
    "paper_proxy_warning",
]

# The most optimiser steps (mini-batches) one pool may be split into: a bound on the arrays and loops
# sized by a step count (10**30 would otherwise run for ever); real runs use a handful per pool.
MAX_STEPS = 1 << 20
# The proxies without a β: the paper's |A| and the oracle's exact ‖∇ℓ‖ (p ∝ G/√c with G itself).
BETA_FREE = {"advantage": "the paper's, beta 0", "oracle": "the exact gradient norms, beta 0"}


@dataclass(frozen=True)
class SamplingConfig:
    """How a pool of rollouts is turned into policy-optimisation mini-batches.

    Its fields, defaults and one-line help come from :data:`costaware.sampling_options.SAMPLING_OPTIONS`,
    the records TRL's and verl's configs are built from too. It takes resolved values: where the engines
    default to ``"auto"`` (``method``, ``proxy``), the default here is what ``"auto"`` gives for a
    sequence-mean loss (``p_star`` with the paper's proxy, ``advantage``; :func:`resolve_method`,
    :func:`resolve_proxy`).

    Attributes:
        method: one of :data:`METHODS`. ``none`` is plain GRPO; ``p_star`` the paper's method (the default).
        alpha: ``p_smooth`` mixing weight, (1−α)p* + α·uniform.
        proxy_noise: σ² of zero-mean Gaussian noise added to |A| before p is formed (ablation).
        weights: ``"centred"`` (1/(n_supp p_i), E_p[w] = 1) or ``"raw"`` (1/(n p_i)).
        merge_duplicates: a row drawn k times into one mini-batch runs once with weight k·w.
        budget: ``"rows"`` draws as many rows per step as the baseline runs; ``"support"`` draws as many
            rows over the pool as it has rows with A ≠ 0, split over the steps as ``nonzero`` splits them
            (``nonzero``'s step size, with cost-aware rows: the count is fixed by the pool, so Σ w·g stays
            unbiased); ``"tokens"`` draws
            until the baseline's tokens (Σ c_i over the pool) are matched: the tokens drawn, or
            with ``merge_duplicates`` the tokens fed, mini-batch by mini-batch. The stopping rule
            depends only on past draws, so Σ w·g is unbiased up to the constant E[draws]
            (Wald's identity).
        pods_keep: ``pods`` and ``cost_pods``, rows kept per group (default: half the group).
        zero_tol: an advantage with |A| <= zero_tol · max|A| over the pool counts as zero (the
            row gets p = 0 under p*, and is not in the support). Group normalisation leaves float
            rounding (|A| ~ 1e-8 in float32, ~1e-16 in float64) on rows equal to their group's
            mean; without the tolerance those rows hold p ~ 1e-9 and a token budget would need
            ~1e9 draws to feed them. 0 keeps exact zeros only.
        proxy: the gradient-norm proxy behind ``p_star``/``p_smooth``, p ∝ |A|·c^(β−½): one of
            :data:`PROXIES`. ``"advantage"`` is the paper's (β = 0, right for sequence-mean losses);
            ``"length_aware"`` uses ``proxy_beta``; ``"calibrated"`` is ``"length_aware"`` with a β
            the engine fits online (:class:`costaware.grpo.proxy.BetaCalibrator`) and sets per pool;
            ``"oracle"`` takes every row's exact gradient norm from the engine (``grad_norms`` of
            :func:`~costaware.grpo.plan.plan_minibatches`): p ∝ ‖∇ℓ_i‖/√c_i, an ablation.
        proxy_beta: β for ``"length_aware"``/``"calibrated"`` (required there, within
            :data:`costaware.grpo.proxy.BETA_BOUNDS`); must stay None (or 0) for ``"advantage"`` and
            ``"oracle"``.
        adaptive_alpha_max_weight: ``p_smooth`` only (its ``adaptive_max_weight``). When set (W > 1),
            each plan uses the smallest α in [``alpha``, :data:`ALPHA_AUTO_MAX`] for which no row with
            A ≠ 0 gets a raw weight
            1/(n p_i) above W (:func:`costaware.grpo.proxy.adaptive_alpha`); ``alpha`` is the floor
            (rows with A = 0 get weight 1/α: keep the floor > 0 when a KL term needs them).
            ``Plan.meta["alpha"]`` records the α used. A single huge weight is what makes a
            mini-batch noisy when the proxy underrates a row.
        max_draws_factor: the token budget stops each mini-batch after at most
            ``max_draws_factor × (baseline rows per mini-batch)`` draws (a documented fallback:
            the capped stopping time still depends only on past draws, so Wald's identity and
            unbiasedness hold; memory and time stay bounded). ``Plan.meta["draw_cap_hit"]`` says
            when it happened.
    """

    # defaults and one-line help: costaware.sampling_options (the engines' configs read the same records)
    method: str = core_field("method")
    alpha: float = core_field("alpha")
    proxy_noise: float = core_field("proxy_noise")
    weights: str = core_field("weights")
    merge_duplicates: bool = core_field("merge_duplicates")
    budget: str = core_field("budget")
    pods_keep: int | None = core_field("pods_keep")
    zero_tol: float = core_field("zero_tol")
    max_draws_factor: float = core_field("max_draws_factor")
    proxy: str = core_field("proxy")
    proxy_beta: float | None = core_field("proxy_beta")
    adaptive_alpha_max_weight: float | None = core_field("adaptive_alpha_max_weight")

    def __post_init__(self) -> None:
        check_alpha(self.alpha)  # every method's options are checked, whichever method uses them
        if not is_real_number(self.proxy_noise) or self.proxy_noise < 0:
            raise ValueError(f"proxy_noise must be a finite variance >= 0, got {self.proxy_noise!r}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be 'centred' or 'raw', got {self.weights!r}")
        if not isinstance(self.merge_duplicates, bool):
            raise ValueError(f"merge_duplicates must be a bool, got {self.merge_duplicates!r}")
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {BUDGETS}, got {self.budget!r}")
        check_keep(self.pods_keep, "pods_keep")
        in_interval(self.zero_tol, "zero_tol", 0.0, 1.0, strict=True, open_high=True)
        if not (is_real_number(self.max_draws_factor) and self.max_draws_factor >= 1.0):
            raise ValueError(f"max_draws_factor must be a finite number >= 1, got {self.max_draws_factor!r}")
        w = check_max_weight(self.adaptive_alpha_max_weight, self.alpha, "adaptive_alpha_max_weight")
        rule = method_from_name(self.method, alpha=self.alpha, adaptive_max_weight=w, keep=self.pods_keep)
        if w is not None and getattr(rule, "adaptive_max_weight", None) is None:
            takers = method_names(lambda m: hasattr(m, "adaptive_max_weight"))
            raise ValueError(
                f"adaptive_alpha_max_weight={w!r} with method={self.method!r}: adaptive smoothing needs "
                f"method={' or '.join(map(repr, takers))}"
            )
        object.__setattr__(self, "_rule", rule)  # parsed once; not a field (equality, repr, asdict unchanged)
        self._check_proxy(rule)

    def _check_proxy(self, rule: SamplingMethod) -> None:
        from costaware.grpo.proxy import BETA_BOUNDS

        if self.proxy not in PROXIES:
            raise ValueError(f"proxy must be one of {PROXIES}, got {self.proxy!r}")
        beta = self.proxy_beta
        if beta is not None and not is_real_number(beta):
            raise ValueError(f"proxy_beta must be a finite number or None, got {beta!r}")
        if self.proxy in BETA_FREE and beta not in (None, 0, 0.0):
            raise ValueError(
                f"proxy_beta={beta!r} with proxy={self.proxy!r} ({BETA_FREE[self.proxy]}); use proxy='length_aware'"
            )
        if self.proxy == "oracle" and not rule.uses_proxy:
            raise ValueError(
                f"proxy='oracle' with method={self.method!r}: only {method_names(lambda m: m.uses_proxy)} build p "
                "from the gradient norms; use proxy='advantage'"
            )
        if self.proxy not in BETA_FREE:
            if beta is None:
                raise ValueError(f"proxy={self.proxy!r} needs proxy_beta (a number), got None")
            lo, hi = BETA_BOUNDS
            if not lo <= beta <= hi:
                raise ValueError(f"proxy_beta must lie in [{lo}, {hi}] (BETA_BOUNDS), got {beta!r}")
            if not rule.uses_proxy:
                raise ValueError(
                    f"proxy={self.proxy!r} with method={self.method!r}: only "
                    f"{method_names(lambda m: m.uses_proxy)} build p from the proxy; use proxy='advantage'"
                )

    @property
    def rule(self) -> SamplingMethod:
        """The sampling method object ``method`` names, built with this config's options (parsed once)."""
        return self._rule  # type: ignore[attr-defined]

    @property
    def beta(self) -> float:
        """The β the plan uses: 0 for the paper's proxy and the oracle, else ``proxy_beta``."""
        return 0.0 if self.proxy in BETA_FREE or self.proxy_beta is None else float(self.proxy_beta)

    @property
    def full_support(self) -> bool:
        """True when every row of a pool can be drawn (p_i > 0 for every i, whatever A is)."""
        return self.rule.full_support


def plan_seed(seed: int, generation: int, salt: int = 0) -> int:
    """The plan generator's seed for generation batch ``generation`` of a run seeded ``seed``.

    One derivation for every engine: every rank computes the same value (the plan is global), and a
    resumed run gets the same plans as an uninterrupted one.

    >>> plan_seed(0, 3) == plan_seed(0, 3) != plan_seed(0, 4)
    True
    """
    seed, generation, salt = (
        integer(v, name, minimum=0) for name, v in (("seed", seed), ("generation", generation), ("salt", salt))
    )
    return ((seed * 1_000_003 + generation) * 1_009 + salt) % (2**63 - 1)


def resolve_method(method: str, *, loss_type: str, beta: float = 0.0, names: Mapping[str, str] | None = None) -> str:
    """An engine's method option -> the method the plan uses: ``"auto"`` resolved per loss family, else as given.

    ``"auto"`` (both engines' default) gives :data:`AUTO_METHOD` of the loss family
    (:func:`costaware.grpo.proxy.loss_family`: TRL's ``loss_type`` or verl's ``loss_agg_mode``). It is
    refused when ``beta`` (the weight of a term with a gradient on every row: TRL's KL ``beta``, verl's
    ``use_kl_loss`` or ``entropy_coeff``) is not 0: both measured choices give zero-advantage rows p = 0,
    which loses that term's gradient on them, and no measurement covers a full-support method.
    ``names`` spells ``method``, ``alpha`` and ``beta`` as the caller's config does, for the errors.

    >>> resolve_method("auto", loss_type="grpo"), resolve_method("auto", loss_type="dapo")
    ('p_star', 'nonzero')
    >>> resolve_method("auto", loss_type="seq-mean-token-mean"), resolve_method("auto", loss_type="token-mean")
    ('p_star', 'nonzero')
    """
    from costaware.grpo.proxy import loss_family

    name = {"method": "method", "alpha": "alpha", "beta": "beta", **(names or {})}
    if method != "auto":
        try:
            method_from_name(method)  # the one parser of method names
        except ValueError:
            raise ValueError(f"{name['method']} must be 'auto' or one of {METHODS}, got {method!r}") from None
        return method
    if beta != 0.0:
        off = "false" if isinstance(beta, bool) else "0"
        raise ValueError(
            f"{name['method']}='auto' with {name['beta']}={beta!r}: the measured defaults (p_star, nonzero) never "
            "draw zero-advantage rows, so that term's gradient on them would be lost, and no training run measured a "
            f"method with full support; set {name['method']}='p_smooth' (with {name['alpha']} > 0), or 'none', "
            f"or {name['beta']}={off}"
        )
    return AUTO_METHOD[loss_family(loss_type).name]


def _uses_proxy(method: str) -> bool:
    return method_from_name(method).uses_proxy


def resolve_proxy(
    proxy: str, proxy_beta: float | None, *, loss_type: str, method: str, fitted: bool = True
) -> tuple[str, float]:
    """An engine's proxy option -> (proxy, β) for :class:`SamplingConfig`, given the loss it runs.

    ``"auto"`` (the engines' default) gives ``"advantage"`` (the paper's, β = 0) for sequence-mean
    losses and, for token-sum losses (:func:`costaware.grpo.proxy.loss_family`), ``"calibrated"`` where
    the engine fits β online (``fitted``) or ``"length_aware"`` with the family's prior β where it cannot
    (verl draws the plan on the driver, away from the gradients); ``"advantage"`` for methods that ignore
    the proxy. The token-sum default rests on the per-pool J measurements quoted in ``LossFamily.source``
    (J(p_|A|)/J(uniform) 0.75-0.82 under dapo), not yet on a training-curve comparison.
    ``"length_aware"``/``"calibrated"`` without a β start from the loss family's prior β.
    """
    from costaware.grpo.proxy import loss_family

    if not (isinstance(proxy, str) and proxy in ("auto", *PROXIES)):
        raise ValueError(f"proxy must be one of {('auto', *PROXIES)}, got {proxy!r}")
    if proxy_beta is not None:
        proxy_beta = real_scalar(proxy_beta, "proxy_beta")
    fam = loss_family(loss_type)
    if proxy == "auto":
        if not _uses_proxy(method) or proxy_beta is not None:
            if proxy_beta is not None:
                raise ValueError(
                    f"proxy_beta={proxy_beta!r} with proxy='auto'; set proxy='length_aware' for a fixed beta"
                )
            return "advantage", 0.0
        if fam.name != "token_sum":
            proxy = "advantage"
        else:
            proxy = "calibrated" if fitted else "length_aware"
    if proxy in BETA_FREE:
        if proxy_beta not in (None, 0, 0.0):
            raise ValueError(
                f"proxy_beta={proxy_beta!r} with proxy={proxy!r} ({BETA_FREE[proxy]}); use proxy='length_aware'"
            )
        return proxy, 0.0
    return proxy, float(fam.prior_beta if proxy_beta is None else proxy_beta)


def paper_proxy_warning(proxy: str, *, loss_type: str, method: str, field: str = "proxy") -> str | None:
    """The advice when ``proxy="auto"`` meets a proxy-using method under a token-sum loss, else None.

    There ``"auto"`` resolves to a length-aware proxy (p ∝ |A|·c^(β−½)): closer to the optimum on single
    pools, but in training the paper's proxy measured ahead, and ``nonzero`` (no proxy) ahead of both.
    A proxy named explicitly is the user's choice and gets no advice. ``field`` is the option's name as
    the user wrote it (``cost_aware_proxy`` in TRL).
    """
    from costaware.grpo.proxy import loss_family

    if proxy != "auto" or not _uses_proxy(method) or loss_family(loss_type).name != "token_sum":
        return None
    return (
        f"{field}='auto' with method {method!r} under loss {loss_type!r} (a token-sum loss) picks a length-aware "
        "proxy, p ∝ |A|·c^(β−½); in training (`costaware reproduce --profile full`, sort, dapo, 3 seeds) p* with the "
        "calibrated one needed 22% [16%, 30%] more policy-optimisation tokens than p* with the paper's proxy and "
        "9% [1%, 25%] "
        f"more than 'nonzero'; set {field}='advantage' (the paper's |A|) to follow those measurements, or use "
        "method 'nonzero' (what method 'auto' picks for this loss)"
    )
