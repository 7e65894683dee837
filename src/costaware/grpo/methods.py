"""Sampling methods as objects: one small frozen dataclass per variant, each made by a factory.

In the spirit of optax (one factory per variant), a method is built once, from its own options, and
carries what it is: ``name``, and the flags below. The plan (:func:`costaware.grpo.plan.plan_minibatches`)
asks it for its part and reads no method name:

* a *drawing* method (``weighted``) draws rows i.i.d. from a distribution p, with replacement, and
  applies importance weights; :meth:`Drawing.probs` gives p from the proxy |A| and the costs;
* a *subset* method runs a subset of the pool once, unweighted; :meth:`Subset.select` gives the rows.

Flags: ``full_support`` (every row can reach the loss, as a KL term needs); ``uses_proxy`` (p is built
from the gradient-norm proxy G ≈ |A|·c^β, so β applies); ``uses_costs`` (the choice depends on the
sequence costs: the cost-aware methods); ``weighted``; ``fixed_size`` (every step has the baseline's
size before merging); ``needs_groups`` (needs rewards and the group size);
``biased`` (its expected update is not the pool's gradient up to a constant factor); ``plain`` (GRPO's
own plan: every row once, never skipped).

On bias: ``nonzero`` drops the rows with A = 0, whose policy gradient is zero, so its expected step is
(1/n_supp) Σ_{A≠0} ∇ℓ_i, the same as centred p*'s and GRPO's times N/n_supp: the direction is unbiased
(``biased`` is False; like p*, it loses the KL gradient of zero-advantage rows, which ``full_support``
says). ``pods`` and ``cost_pods`` drop rows with A ≠ 0 and recompute the advantages over the rows
they keep, so their expectation is another vector: ``biased`` is True.

Names exist only at the edges (config files, CLI, report labels): each method's class is filed in
:data:`REGISTRY` under its ``name`` by :func:`register_method` (a name taken twice raises), its dataclass
fields are its options, checked when it is built; :func:`method_from_name` is the one parser, and
:data:`METHODS` the names it knows. The lowercase factories (:func:`p_smooth`, ...) are the classes under
the method's name.

>>> p_smooth(0.1).full_support, p_star().full_support, p_star().uses_costs, pods().biased
(True, False, True, True)
>>> method_from_name("p_smooth", alpha=0.0, keep=3)        # options a method does not take are ignored
PSmooth(alpha=0.0, adaptive_max_weight=None)
>>> [m for m in METHODS if method_from_name(m).fixed_size]   # every step draws the baseline's rows
['none', 'p_star', 'p_smooth', 'inv_sqrt_cost', 'variance', 'uniform']
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch

from costaware import distributions as dist
from costaware._checks import integer, real_scalar
from costaware._registry import registrar
from costaware.grpo.pods import cost_pods_select_kernel, pods_advantages, pods_select_kernel
from costaware.grpo.proxy import adaptive_alpha_kernel, proxy_probs_kernel
from costaware.sampling_options import DEFAULT_ALPHA

__all__ = [
    "ALPHA_AUTO_MAX",
    "METHODS",
    "REGISTRY",
    "SamplingMethod",
    "Drawing",
    "Subset",
    "RowPool",
    "Selection",
    "Probs",
    "method_from_name",
    "method_names",
    "register_method",
    "none",
    "p_star",
    "p_smooth",
    "inv_sqrt_cost",
    "variance",
    "uniform",
    "nonzero",
    "pods",
    "cost_pods",
    "check_alpha",
    "check_keep",
    "check_max_weight",
]

# Adaptive smoothing never mixes in more than this much uniform: beyond it p_smooth is mostly uniform.
ALPHA_AUTO_MAX = 0.5
# The smallest α > 0: a zero-advantage row's importance weight is about 1/α, which must fit float64.
MIN_ALPHA = 1e-300


def check_alpha(alpha: Any, name: str = "alpha") -> float:
    """α of p_smooth: 0, or in [:data:`MIN_ALPHA`, 1] (numpy floats accepted, as every real)."""
    a = real_scalar(alpha, name)
    if not (a == 0.0 or MIN_ALPHA <= a <= 1.0):
        raise ValueError(f"{name} must be 0 or lie in [{MIN_ALPHA}, 1], got {a!r}")
    return a


def check_keep(keep: Any, name: str = "keep") -> int | None:
    """Rows kept per group: a positive integer, or None (half the group)."""
    return None if keep is None else integer(keep, name, minimum=1, why=" or None")


def check_max_weight(w: Any, alpha: float, name: str = "adaptive_max_weight") -> float | None:
    """W of adaptive smoothing: None, or a finite number > 1 (with the floor α <= :data:`ALPHA_AUTO_MAX`)."""
    if w is None:
        return None
    v = real_scalar(w, name)
    if not v > 1.0:
        raise ValueError(f"{name} must be a finite number > 1 or None, got {v!r}")
    if alpha > ALPHA_AUTO_MAX:
        raise ValueError(f"alpha={alpha!r} is the floor of adaptive smoothing and must be <= {ALPHA_AUTO_MAX}")
    return v


@dataclass(frozen=True)
class RowPool:
    """The checked pool a subset method reads (built once by the plan).

    advantages: (N,) float32; signal: (N,) bool, |A| above the zero tolerance; costs: (N,) float64 > 0;
    rewards: (N,) float64 (None unless the method ``needs_groups``); group_size: rows per group, each
    group contiguous (None unless ``needs_groups``); zero_tol: the plan's tolerance.
    """

    advantages: torch.Tensor
    signal: torch.Tensor
    costs: np.ndarray
    rewards: torch.Tensor | None
    group_size: int | None
    zero_tol: float


@dataclass(frozen=True)
class Selection:
    """A subset method's rows (ascending, each run once; None: every row of the pool, which spares a
    65,536-row gather), the advantages the loss uses, or why none are run."""

    rows: torch.Tensor | None
    advantages: torch.Tensor
    skipped: str | None = None


@dataclass(frozen=True)
class Probs:
    """A drawing method's p, with the β and α it used (None where the method has none)."""

    p: np.ndarray
    beta: float | None
    alpha: float | None


@dataclass(frozen=True)
class SamplingMethod(ABC):
    """What every method carries (see the module docstring for the flags)."""

    name: ClassVar[str]
    weighted: ClassVar[bool] = False
    fixed_size: ClassVar[bool] = True
    full_support: ClassVar[bool] = False
    uses_proxy: ClassVar[bool] = False
    uses_costs: ClassVar[bool] = False
    needs_groups: ClassVar[bool] = False
    biased: ClassVar[bool] = False
    plain: ClassVar[bool] = False


class Drawing(SamplingMethod):
    """Draws rows i.i.d. from p with replacement; each drawn row's loss carries its importance weight."""

    weighted: ClassVar[bool] = True

    @abstractmethod
    def probs(self, proxy: np.ndarray, costs: np.ndarray, beta: float) -> Probs:
        """p for checked inputs: ``proxy`` float64 >= 0 (with an entry > 0 unless ``full_support``),
        ``costs`` float64 > 0 of equal length, β the proxy's exponent (used when ``uses_proxy``)."""


class Subset(SamplingMethod):
    """Runs a subset of the pool once, unweighted: its steps hold fewer rows than the baseline's."""

    fixed_size: ClassVar[bool] = False

    @abstractmethod
    def select(self, pool: RowPool) -> Selection:
        """The rows to run, from a checked pool."""


# name -> class: the one place a method name meets its object, filled below in the order of METHODS
REGISTRY: dict[str, type[SamplingMethod]] = {}
register_method = registrar(REGISTRY, "sampling method")


# -- GRPO's own plan -------------------------------------------------------------------------------


@register_method
@dataclass(frozen=True)
class Plain(Subset):
    """GRPO: every row once, shuffled; a pool whose advantages are all zero is still run."""

    name: ClassVar[str] = "none"
    fixed_size: ClassVar[bool] = True
    full_support: ClassVar[bool] = True
    plain: ClassVar[bool] = True

    def select(self, pool: RowPool) -> Selection:
        return Selection(None, pool.advantages)


# -- drawing methods ------------------------------------------------------------------------------


def _proxy_base(g: np.ndarray, c: np.ndarray, beta: float) -> np.ndarray:
    # β = 0 keeps the paper's p ∝ |A|/√c expression, so the paper's plans are unchanged bit for bit
    return dist.optimal_kernel(g, c) if beta == 0.0 else proxy_probs_kernel(g, c, beta, 0.0)


@register_method
@dataclass(frozen=True)
class PStar(Drawing):
    """The paper's p* ∝ G/√c with the proxy G = |A|·c^β (β = 0: |A|); rows with A = 0 get p = 0."""

    name: ClassVar[str] = "p_star"
    uses_proxy: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True

    def probs(self, proxy: np.ndarray, costs: np.ndarray, beta: float) -> Probs:
        return Probs(_proxy_base(proxy, costs, beta), beta, 0.0)


@register_method
@dataclass(frozen=True)
class PSmooth(Drawing):
    """(1 − α)p* + α·uniform; α > 0 gives every row p > 0. With ``adaptive_max_weight`` W, the smallest α in
    [alpha, ALPHA_AUTO_MAX] keeping every raw weight of a row with A ≠ 0 at most W, chosen per pool
    (:func:`costaware.grpo.proxy.adaptive_alpha`)."""

    name: ClassVar[str] = "p_smooth"
    uses_proxy: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True
    alpha: float = DEFAULT_ALPHA
    adaptive_max_weight: float | None = None

    def __post_init__(self) -> None:
        alpha = check_alpha(self.alpha)
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "adaptive_max_weight", check_max_weight(self.adaptive_max_weight, alpha))

    @property
    def full_support(self) -> bool:  # type: ignore[override]
        return self.alpha > 0

    def probs(self, proxy: np.ndarray, costs: np.ndarray, beta: float) -> Probs:
        if not (proxy > 0).any():  # p* has no mass (a pool kept for its KL term): the uniform part alone
            return Probs(np.full(proxy.size, 1.0 / proxy.size), beta, self.alpha)
        base = _proxy_base(proxy, costs, beta)
        alpha = self.alpha
        if self.adaptive_max_weight is not None:
            alpha = adaptive_alpha_kernel(base, self.adaptive_max_weight, alpha, ALPHA_AUTO_MAX)
        return Probs(dist.smoothed_kernel(base, alpha), beta, float(alpha))


@register_method
@dataclass(frozen=True)
class InvSqrtCost(Drawing):
    """p ∝ 1/√c: the optimum when every G is replaced by 1 (the paper's G ≡ 1 ablation)."""

    name: ClassVar[str] = "inv_sqrt_cost"
    full_support: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True

    def probs(self, proxy: np.ndarray, costs: np.ndarray, beta: float) -> Probs:
        return Probs(dist.inverse_sqrt_cost_kernel(costs), None, None)


@register_method
@dataclass(frozen=True)
class Variance(Drawing):
    """p ∝ |A|: the variance-minimising, cost-blind distribution."""

    name: ClassVar[str] = "variance"

    def probs(self, proxy: np.ndarray, costs: np.ndarray, beta: float) -> Probs:
        return Probs(dist.variance_kernel(proxy), None, None)


@register_method
@dataclass(frozen=True)
class Uniform(Drawing):
    """p = 1/N: GRPO's rows drawn with replacement (weights 1)."""

    name: ClassVar[str] = "uniform"
    full_support: ClassVar[bool] = True

    def probs(self, proxy: np.ndarray, costs: np.ndarray, beta: float) -> Probs:
        return Probs(np.full(proxy.size, 1.0 / proxy.size), None, None)


# -- subset methods --------------------------------------------------------------------------------


@register_method
@dataclass(frozen=True)
class Nonzero(Subset):
    """GRPO's rows with A ≠ 0, each once (``zero_tol`` decides what counts as zero)."""

    name: ClassVar[str] = "nonzero"

    def select(self, pool: RowPool) -> Selection:
        return Selection(torch.nonzero(pool.signal).reshape(-1), pool.advantages)


@dataclass(frozen=True)
class _GroupSubset(Subset):
    """Keeps ``keep`` rows of every group (None: half of it), then recomputes the advantages over them. Biased."""

    needs_groups: ClassVar[bool] = True
    biased: ClassVar[bool] = True
    keep: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "keep", check_keep(self.keep))

    @abstractmethod
    def _mask(self, pool: RowPool, group_size: int, keep: int) -> torch.Tensor:
        """(N,) bool: the kept rows."""

    def select(self, pool: RowPool) -> Selection:
        assert pool.rewards is not None and pool.group_size is not None  # the plan checks needs_groups
        group_size = pool.group_size
        keep = self.keep or group_size // 2
        if keep > group_size:
            raise ValueError(f"pods_keep must be <= group_size={group_size}, got {keep}")
        mask = self._mask(pool, group_size, keep)
        adv = pods_advantages(pool.rewards, group_size, mask)
        a = adv.abs().double()
        rows = torch.nonzero(mask & (a > pool.zero_tol * a.max())).reshape(-1)
        skipped = None if rows.numel() else f"every kept {self.name} row has zero advantage"
        return Selection(rows, adv, skipped)


@register_method
@dataclass(frozen=True)
class Pods(_GroupSubset):
    """PODS: per group, the ``keep`` rows whose rewards vary most (:func:`costaware.grpo.pods.pods_select`)."""

    name: ClassVar[str] = "pods"

    def _mask(self, pool: RowPool, group_size: int, keep: int) -> torch.Tensor:
        assert pool.rewards is not None  # select() checked it
        return pods_select_kernel(pool.rewards, group_size, keep)


@register_method
@dataclass(frozen=True)
class CostPods(_GroupSubset):
    """Cost-aware PODS: per group, the ``keep`` rows with the most reward variance per PO token
    (:func:`costaware.grpo.pods.cost_pods_select`, which states the objective)."""

    name: ClassVar[str] = "cost_pods"
    uses_costs: ClassVar[bool] = True

    def _mask(self, pool: RowPool, group_size: int, keep: int) -> torch.Tensor:
        assert pool.rewards is not None  # select() checked it
        return cost_pods_select_kernel(pool.rewards, torch.from_numpy(pool.costs), group_size, keep)


# -- the factories: each method's class under its name (``p_smooth(0.05)``) --------------------------

none = Plain
p_star = PStar
p_smooth = PSmooth
inv_sqrt_cost = InvSqrtCost
variance = Variance
uniform = Uniform
nonzero = Nonzero
pods = Pods
cost_pods = CostPods

METHODS: tuple[str, ...] = tuple(REGISTRY)


def _options(cls: type[SamplingMethod]) -> tuple[str, ...]:
    """The options a method takes: its dataclass fields."""
    return tuple(f.name for f in fields(cls) if f.init)  # type: ignore[arg-type]


def method_names(where: Callable[[SamplingMethod], bool]) -> tuple[str, ...]:
    """The names of the methods (built with default options) for which ``where`` holds, for messages and
    engine lists, e.g. ``method_names(lambda m: m.full_support)``."""
    return tuple(name for name, cls in REGISTRY.items() if where(cls()))


def method_from_name(name: str, **options: Any) -> SamplingMethod:
    """The method called ``name`` (one of :data:`METHODS`), built with the ``options`` its class takes.

    ``options`` may hold any registered method's options (``alpha``, ``adaptive_max_weight``, ``keep``); a
    config holds every method's options, so those the method does not take are ignored.
    """
    if not (isinstance(name, str) and name in REGISTRY):
        raise ValueError(f"method must be one of {tuple(REGISTRY)}, got {name!r}")
    known = tuple(dict.fromkeys(o for cls in REGISTRY.values() for o in _options(cls)))
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"method options must be among {known}, got {unknown}")
    cls = REGISTRY[name]
    takes = _options(cls)
    return cls(**{k: v for k, v in options.items() if k in takes})
