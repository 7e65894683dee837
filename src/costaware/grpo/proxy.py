"""A calibrated gradient-norm proxy G_i ≈ |A_i| · c_i^β and adaptive smoothing. Pure numpy.

The paper samples with p ∝ |A|/√c, i.e. it takes G_i ≈ |A_i| (β = 0), which fits a loss that averages
over each sequence's tokens. A loss that sums over a sequence's tokens makes G grow with length:
with c_i token gradients of similar norm, β = ½ when they are independent and β = 1 when aligned.
The cost-aware optimum p* ∝ G/√c then becomes p ∝ |A| · c^(β − ½).

Pipeline (wired by the caller every k rounds):
    fit = fit_beta(|A|, exact G on a few rows, c)        # OLS of log(G/|A|) on log c
    beta = calibrator.update(fit)                         # pooled over rounds, shrunk toward the prior
    p = proxy_probs(|A|, c, beta=beta, alpha=adaptive_alpha(proxy_probs(|A|, c, beta=beta)))

>>> p = proxy_probs([1.0, 1.0], [1.0, 4.0], beta=0.0)        # the paper's p ∝ |A|/√c
>>> p.round(4).tolist()
[0.6667, 0.3333]
>>> proxy_probs([1.0, 1.0], [1.0, 4.0], beta=1.0).round(4).tolist()   # token-sum, aligned: favours long
[0.3333, 0.6667]
>>> loss_family("dapo").name, loss_family("seq-mean-token-mean").name
('token_sum', 'sequence_mean')
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from costaware import distributions as dist
from costaware import theory
from costaware._checks import (
    as_array,
    in_unit_interval,
    nonnegative_vector,
    positive_vector,
    real_scalar,
    same_length,
)

__all__ = [
    "BETA_BOUNDS",
    "LOSS_FAMILY_PRIOR_BETA",
    "LossFamily",
    "loss_family",
    "proxy_probs",
    "BetaFit",
    "fit_beta",
    "shrink",
    "BetaCalibrator",
    "adaptive_alpha",
    "predicted_j_ratios",
]

# β outside this range has no mechanism behind it: a mean of independent token gradients gives −½,
# a sum of aligned ones 1, and the largest measured slope was 1.60; 2 leaves margin above it.
BETA_BOUNDS: tuple[float, float] = (-0.5, 2.0)


@dataclass(frozen=True)
class LossFamily:
    """How a loss aggregates a row's tokens, and the prior on β it implies.

    name: ``"sequence_mean"`` (a row's loss is the mean over its tokens) or ``"token_sum"`` (the sum
        over its tokens, divided by something that does not depend on that row's length).
    prior_beta, prior_sd: the normal prior on β used by :func:`shrink`.
    source: where the prior numbers come from.
    """

    name: str
    prior_beta: float
    prior_sd: float
    source: str


# Measured slopes of log(G/|A|) on log c (exact per-row gradients, TRL, lr ≈ 0 pools):
#   demo default-profile SFT (examples/proxy_fidelity_probe.py): grpo 0.01-0.41, dapo 1.17-1.60;
#   quick-profile SFT (benchmarks/bench_proxy_calibration.py --sft): grpo -0.71..-0.31, dapo 0.56-0.77,
#   on the same pools dapo - grpo = 1.1-1.3.
# Theory (c token gradients of similar norm): row mean -1/2 (independent) to 0 (aligned), row sum 1/2 to 1.
_SEQUENCE_MEAN = LossFamily(
    "sequence_mean",
    prior_beta=0.0,
    prior_sd=0.35,
    source=(
        "paper §G.3 (G ≈ |A|, beta 0, the aligned-token value); measured -0.71..0.41 over two checkpoints "
        "(examples/proxy_fidelity_probe.py; bench_proxy_calibration --sft), within 0 ± 2 sd"
    ),
)
_TOKEN_SUM = LossFamily(
    "token_sum",
    prior_beta=1.0,
    prior_sd=0.4,
    source=(
        "measured 1.17-1.60 under TRL dapo on the demo SFT (examples/proxy_fidelity_probe.py) and "
        "0.56-0.77 on the quick-profile SFT (bench_proxy_calibration --sft); 1.0 (aligned tokens) sits "
        "mid-range, sd 0.4 keeps every measured slope within 1.5 sd"
    ),
)

LOSS_FAMILY_PRIOR_BETA: dict[str, float] = {f.name: f.prior_beta for f in (_SEQUENCE_MEAN, _TOKEN_SUM)}

# Engine loss names -> family, read off each loss's aggregation (TRL 1.16 GRPOTrainer._compute_loss,
# verl core_algos.agg_loss). What matters is whether a row's loss is divided by its own length.
_LOSS_FAMILIES: dict[str, LossFamily] = {
    # TRL: ((l·m).sum(-1) / m.sum(-1)).mean() -> mean over the row's tokens
    "grpo": _SEQUENCE_MEAN,
    "sapo": _SEQUENCE_MEAN,
    # TRL bnpo: (l·m).sum() / m.sum() over the micro-batch; dr_grpo: (l·m).sum() / (B · max_len);
    # dapo, cispo, vespo: (l·m).sum() / global token count. Each row enters as its token sum.
    "bnpo": _TOKEN_SUM,
    "dr_grpo": _TOKEN_SUM,
    "dapo": _TOKEN_SUM,
    "cispo": _TOKEN_SUM,
    "vespo": _TOKEN_SUM,
    # TRL luspo: (l·m).sum(-1).mean(): a sequence-level ratio (a mean over tokens) times the length, so the
    # row's gradient is the sum of its token gradients ("length-unbiased").
    "luspo": _TOKEN_SUM,
    # verl agg_loss modes
    "seq-mean-token-mean": _SEQUENCE_MEAN,
    "token-mean": _TOKEN_SUM,  # sum over all tokens / global token count
    "token-sum": _TOKEN_SUM,
    "seq-mean-token-sum": _TOKEN_SUM,  # per-row token sum, mean over rows
    "seq-mean-token-sum-norm": _TOKEN_SUM,  # the same divided by a constant horizon
}


def loss_family(loss_type: str) -> LossFamily:
    """The :class:`LossFamily` of a TRL ``loss_type`` or a verl ``loss_agg_mode``."""
    try:
        return _LOSS_FAMILIES[loss_type]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_LOSS_FAMILIES))
        raise ValueError(f"loss_type must be one of {known}; got {loss_type!r}") from None


def _finite(x: float, name: str) -> float:
    try:
        return real_scalar(x, name)  # the rule of costaware._checks: ValueError naming the argument
    except ValueError:
        raise ValueError(f"{name} must be a finite number, got {x!r}") from None


def _sd(x: Any, name: str) -> float:
    """A standard deviation: a real number >= 0, +inf allowed (an uninformative prior)."""
    v = _unwrap_real(x, name)
    if not v >= 0:
        raise ValueError(f"{name} must be >= 0 (inf allowed), got {x!r}")
    return v


def _unwrap_real(x: Any, name: str) -> float:
    if isinstance(x, float) and math.isinf(x):
        return x
    if isinstance(x, (np.floating, np.ndarray)) and np.ndim(x) == 0 and np.isinf(x):
        return float(x)
    return real_scalar(x, name)


def proxy_probs(abs_adv: Any, costs: Any, *, beta: float, alpha: float = 0.0) -> np.ndarray:
    """p ∝ |A_i| · c_i^(β − ½), then smoothed: (1 − α)·p + α/n.

    Computed in log space, so long rows and large β cannot overflow. Rows with A = 0 get p = 0 unless
    α > 0. β = 0 is the paper's p ∝ |A|/√c.
    """
    a = nonnegative_vector(abs_adv, "abs_adv", not_all_zero=True)
    c = positive_vector(costs, "costs")
    same_length(abs_adv=a, costs=c)
    return _proxy_probs(a, c, _finite(beta, "beta"), in_unit_interval(alpha, "alpha"))


def _proxy_probs(a: np.ndarray, c: np.ndarray, beta: float, alpha: float) -> np.ndarray:
    """Kernel of :func:`proxy_probs` for checked inputs (a >= 0 with an entry > 0, c > 0, equal lengths)."""
    logw = np.full(a.size, -np.inf)
    nz = a > 0
    logw[nz] = np.log(a[nz]) + (beta - 0.5) * np.log(c[nz])
    w = np.exp(logw - logw[nz].max())
    return dist._smoothed(w / w.sum(), alpha)


@dataclass(frozen=True)
class BetaFit:
    """The least-squares slope of log(G/|A|) on log c, with what is needed to pool fits.

    beta_hat: the slope (0.0 when the data cannot identify it; then stderr is inf).
    stderr: its standard error; ``inf`` for an uninformative fit, never NaN.
    interval: the ``level`` confidence interval (Student t with ``dof`` degrees of freedom).
    n_used: rows that entered (A ≠ 0, finite G > 0).
    sxx, sxy, syy: centred sums of squares and products of x = log c, y = log(G/|A|).
    dof: residual degrees of freedom (n_used − 2 for one fit).
    """

    beta_hat: float
    stderr: float
    interval: tuple[float, float]
    n_used: int
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    dof: float = 0.0
    level: float = 0.95

    @property
    def informative(self) -> bool:
        return math.isfinite(self.stderr)


def _from_stats(sxx: float, sxy: float, syy: float, dof: float, n_used: int, level: float) -> BetaFit:
    # Costs that all round to the same log (relative spread < 1e-9) carry no slope information.
    if not (dof > 0 and sxx > 1e-18 * max(n_used, 1)):
        return BetaFit(0.0, math.inf, (-math.inf, math.inf), n_used, sxx, sxy, syy, dof, level)
    slope = sxy / sxx
    rss = max(syy - sxy * slope, 0.0)
    se = math.sqrt(rss / dof / sxx)
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return BetaFit(slope, se, (slope - half, slope + half), n_used, sxx, sxy, syy, dof, level)


def _norms(grad_norms: Any) -> np.ndarray:
    """Measured gradient norms: a real 1-D array; NaN/inf entries allowed (a failed measurement)."""
    g = as_array(grad_norms, "grad_norms")
    if g.ndim != 1:
        raise ValueError(f"grad_norms must be 1-D, got shape {g.shape}")
    return g


def fit_beta(abs_adv: Any, grad_norms: Any, costs: Any, *, level: float = 0.95) -> BetaFit:
    """Fit G_i ≈ k · |A_i| · c_i^β: OLS of log(G/|A|) on log c over rows with A ≠ 0 and finite G > 0.

    ``grad_norms`` may hold NaN/inf (a failed or overflowing norm): those rows are dropped, as are rows
    with G = 0. Fewer than 3 usable rows, or equal costs, give an uninformative fit (stderr = inf).

    >>> c = np.array([10.0, 20.0, 40.0, 80.0])
    >>> fit = fit_beta([1.0, 2.0, 1.0, 3.0], np.array([1.0, 2.0, 1.0, 3.0]) * c**0.5, c)
    >>> round(fit.beta_hat, 6), fit.stderr < 1e-6, fit.n_used
    (0.5, True, 4)
    """
    a = nonnegative_vector(abs_adv, "abs_adv")
    c = positive_vector(costs, "costs")
    g = _norms(grad_norms)
    same_length(abs_adv=a, grad_norms=g, costs=c)
    if (g < 0).any():  # NaN compares False: kept for the mask below
        i = int(np.flatnonzero(g < 0)[0])
        raise ValueError(f"grad_norms must be >= 0 (or NaN to skip a row), got {g[i]} at index {i}")
    level = _finite(level, "level")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    use = (a > 0) & np.isfinite(g) & (g > 0)
    n = int(use.sum())
    if n < 3:
        return _from_stats(0.0, 0.0, 0.0, 0.0, n, level)
    x = np.log(c[use])
    y = np.log(g[use]) - np.log(a[use])
    dx, dy = x - x.mean(), y - y.mean()
    return _from_stats(float(dx @ dx), float(dx @ dy), float(dy @ dy), float(n - 2), n, level)


def shrink(
    fit: BetaFit, prior_beta: float, prior_sd: float, *, bounds: tuple[float, float] = BETA_BOUNDS
) -> float:
    """Normal–normal posterior mean of β, clipped to ``bounds`` (default :data:`BETA_BOUNDS`).

    (prior/sd² + β̂/se²) / (1/sd² + 1/se²): an uninformative fit (se = inf) returns the prior, a
    prior_sd of 0 pins β to the prior, prior_sd = inf trusts the fit alone. The clip means no fit,
    however confident, moves β outside the range a loss aggregation can produce.
    """
    if not isinstance(fit, BetaFit):
        raise TypeError(f"fit must be a BetaFit, got {type(fit).__name__}")
    prior_beta = _finite(prior_beta, "prior_beta")
    prior_sd = _sd(prior_sd, "prior_sd")
    if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2):
        raise ValueError(f"bounds must be a (low, high) pair, got {bounds!r}")
    lo, hi = (_finite(b, "bounds") for b in bounds)
    if not lo <= hi:
        raise ValueError(f"bounds must satisfy low <= high, got {bounds!r}")
    se = float(fit.stderr)
    if math.isnan(se) or math.isnan(fit.beta_hat):
        raise ValueError(f"fit must not hold NaN, got {fit!r}")
    if prior_sd == 0 or math.isinf(se):
        post = prior_beta
    elif se == 0 or math.isinf(prior_sd):
        post = float(fit.beta_hat)
    else:
        try:
            wp, wf = 1.0 / prior_sd**2, 1.0 / se**2
            post = (wp * prior_beta + wf * fit.beta_hat) / (wp + wf)
        except (OverflowError, ZeroDivisionError):  # a square beyond float64: the same mean, by the ratio
            t = (prior_sd / se) ** 2 if prior_sd / se < 1e150 else math.inf  # (sd/se)²: the fit's share
            post = float(fit.beta_hat) if math.isinf(t) else (prior_beta + t * fit.beta_hat) / (1.0 + t)
        if not math.isfinite(post):
            raise ValueError(f"fit and prior give no finite posterior: fit={fit!r}, prior_beta={prior_beta!r}")
    return float(min(max(post, lo), hi))


@dataclass
class BetaCalibrator:
    """β across rounds: pools each round's fit (exponentially weighted), shrinks toward the prior.

    Each round keeps its own intercept (its sums are centred), so a drifting scale of G between
    rounds does not bias the pooled slope. Older rounds are down-weighted by ``decay`` per update.
    ``every`` = 8: 16 exact per-row gradients cost ~0.5-0.6 of a 128-row forward/backward on the
    tiny Qwen2 (CPU), i.e. ~3.7% of policy-optimisation time at one calibration per 8 rounds of two
    128-row mini-batches, 7.3% at every 4 (benchmarks/bench_proxy_calibration.py).

    >>> cal = BetaCalibrator.for_loss("dapo")
    >>> cal.beta, cal.due(0), cal.due(1)
    (1.0, True, False)
    >>> c = np.geomspace(10, 200, 16)
    >>> round(cal.update(fit_beta(np.ones(16), c**1.0 * np.exp(0.01 * np.sin(c)), c)), 2)
    1.0
    """

    prior_beta: float
    prior_sd: float
    every: int = 8
    decay: float = 0.7
    bounds: tuple[float, float] = BETA_BOUNDS
    level: float = 0.95
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    centred_n: float = 0.0
    n_used: float = 0.0
    updates: int = 0
    beta: float = field(default=math.nan)

    def __post_init__(self) -> None:
        _finite(self.prior_beta, "prior_beta")
        _sd(self.prior_sd, "prior_sd")
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"every must be an integer >= 1, got {self.every!r}")
        if not 0.0 < _finite(self.decay, "decay") <= 1.0:
            raise ValueError(f"decay must lie in (0, 1], got {self.decay!r}")
        if not (isinstance(self.bounds, (tuple, list)) and len(self.bounds) == 2):
            raise ValueError(f"bounds must be a (low, high) pair, got {self.bounds!r}")
        self.bounds = (_finite(self.bounds[0], "bounds"), _finite(self.bounds[1], "bounds"))
        if not self.bounds[0] <= self.bounds[1]:
            raise ValueError(f"bounds must satisfy low <= high, got {self.bounds!r}")
        if math.isnan(self.beta):
            self.beta = shrink(self.pooled(), self.prior_beta, self.prior_sd, bounds=self.bounds)

    @classmethod
    def for_loss(cls, loss_type: str, **kwargs: Any) -> BetaCalibrator:
        fam = loss_family(loss_type)
        return cls(prior_beta=fam.prior_beta, prior_sd=fam.prior_sd, **kwargs)

    def due(self, round_index: int) -> bool:
        """Whether round ``round_index`` (0-based) should measure gradients and update."""
        return round_index % self.every == 0

    def pooled(self) -> BetaFit:
        """The fit from every update so far (weighted), before shrinkage."""
        # pooled with one intercept per round: dof = Σ (n_r − 1) − 1
        dof = self.centred_n - 1.0
        return _from_stats(self.sxx, self.sxy, self.syy, dof, int(round(self.n_used)), self.level)

    def update(self, fit: BetaFit) -> float:
        """Fold in one round's fit; return the new β."""
        if not isinstance(fit, BetaFit):
            raise ValueError(f"fit must be a BetaFit, got {type(fit).__name__}")
        d = float(self.decay)
        self.sxx = d * self.sxx + fit.sxx
        self.sxy = d * self.sxy + fit.sxy
        self.syy = d * self.syy + fit.syy
        # a fit of n rows has n − 2 dof; n − 1 of its centred points remain once its intercept is out
        self.centred_n = d * self.centred_n + (fit.dof + 1.0 if fit.dof > 0 else 0.0)
        self.n_used = d * self.n_used + fit.n_used
        self.updates += 1
        self.beta = shrink(self.pooled(), self.prior_beta, self.prior_sd, bounds=self.bounds)
        return self.beta

    def metrics(self) -> dict[str, float]:
        """What to log: current β, the pooled β̂, its stderr and interval, and rows behind it."""
        f = self.pooled()
        return {
            "beta": self.beta,
            "beta_hat": f.beta_hat,
            "beta_stderr": f.stderr,
            "beta_low": f.interval[0],
            "beta_high": f.interval[1],
            "beta_rows": float(self.n_used),
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bounds"] = list(self.bounds)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BetaCalibrator:
        d = dict(d)
        d["bounds"] = tuple(d["bounds"])
        return cls(**d)


def adaptive_alpha(
    p: Any, *, max_weight: float = 10.0, alpha_min: float = 0.0, alpha_max: float = 0.5
) -> float:
    """The smallest α in [alpha_min, alpha_max] with max_i 1/(n p_α,i) ≤ ``max_weight``.

    p_α = (1 − α) p + α/n is the smoothed distribution, and the bound runs over rows with p_i > 0: rows
    with p_i = 0 (A = 0) carry no policy gradient, so their weight multiplies zero. The largest weight
    sits on the smallest p_i, and 1/(n(1 − α)p_min + α) ≤ W solves in closed form; if even alpha_max
    cannot reach W, alpha_max is returned. A single huge weight is what makes an importance-weighted
    mini-batch noisy when the proxy underrates a row, so bounding it caps the damage a wrong proxy does.

    >>> adaptive_alpha([0.5, 0.5]), round(adaptive_alpha([0.98, 0.01, 0.01], max_weight=10.0), 4)
    (0.0, 0.0722)
    """
    p = dist.smoothed(p, 0.0)  # validates a probability vector
    W = _finite(max_weight, "max_weight")
    if not W > 1.0:
        raise ValueError(f"max_weight must be > 1 (uniform sampling has weight 1), got {max_weight!r}")
    lo = in_unit_interval(alpha_min, "alpha_min")
    hi = in_unit_interval(alpha_max, "alpha_max")
    if lo > hi:
        raise ValueError(f"alpha_min must be <= alpha_max, got {alpha_min!r} > {alpha_max!r}")
    return _adaptive_alpha(p, W, lo, hi)


def _adaptive_alpha(p: np.ndarray, W: float, lo: float, hi: float) -> float:
    """Kernel of :func:`adaptive_alpha` for a checked probability vector and checked bounds."""
    q = p.size * p[p > 0].min()
    need = 0.0 if q >= 1.0 / W else (1.0 / W - q) / (1.0 - q)
    return float(min(max(need, lo), hi))


def predicted_j_ratios(p: Any, grad_norms: Any, costs: Any) -> dict[str, float]:
    """J(p)/J(p*_true) and J(p)/J(uniform) on the rows whose exact gradient norms were measured.

    ``p`` is the sampling distribution restricted to those rows (renormalised here); J = S·C from
    :mod:`costaware.theory`. ``j_vs_optimal`` ≥ 1 is the price of the proxy; ``j_vs_uniform`` < 1 says
    cost-aware sampling is predicted to beat uniform sampling. Rows with non-finite G are dropped.
    """
    w = nonnegative_vector(p, "p", not_all_zero=True)
    c = positive_vector(costs, "costs")
    g = _norms(grad_norms)
    same_length(p=w, grad_norms=g, costs=c)
    keep = np.isfinite(g)
    if (g[keep] < 0).any() or not (g[keep] > 0).any() or not (w[keep] > 0).any():
        raise ValueError(f"grad_norms must be >= 0 with one finite entry > 0 where p > 0, got {g}")
    # J ratios are scale-free in G and c: scaled by powers of two (exact), no J underflows to 0
    w, g, c = w[keep] / w[keep].sum(), theory._scaled(g[keep]), theory._scaled(c[keep])
    j = theory.J(w, g, c)
    return {
        "j_vs_optimal": j / theory.J_optimal(g, c),
        "j_vs_uniform": j / theory.J(dist.uniform(g.size), g, c),
    }
