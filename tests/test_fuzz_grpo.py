"""Fuzz of the public grpo and sgd API (the lower-level functions), with the rule of tests/test_fuzz.py.

Every call must return within a time limit, return no NaN or ±inf, raise only ValueError or TypeError,
and name the offending argument in the message. Counts that allocate or loop (``num_steps``, ``n``,
``draws``) come in up to 10**30, so an unbounded count shows up as a hang or a MemoryError here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import (
    EXAMPLES,
    _names,
    _vector,
    check_call,
    floats,
    int_scalar,
    moderate,
    scalar,
    vector,
)

from costaware.grpo import accounting, factors, losses, proxy, shard
from costaware.grpo import config as grpo_config
from costaware.grpo import diagnostics as diag
from costaware.grpo.plan import MiniBatch
from costaware.sgd import LeastSquares, cost_aware_sgd, log_checkpoints, run_trials, step_schedule

huge_count = st.sampled_from([10**30, 2**63, 2**40, 1e300, float("nan"), -3, 0, 2.5, True, None, "3"])
count = st.one_of(int_scalar, huge_count)
real = st.one_of(scalar, st.sampled_from([1e300, -1e300, 5e-324, -5e-324, 1e-310]))


def _matrix(elems=moderate, rows=2, cols=3):
    return st.lists(st.lists(elems, min_size=cols, max_size=cols), min_size=rows, max_size=rows)


tensor2d = st.one_of(
    _matrix().map(lambda m: torch.tensor(m, dtype=torch.float64)),
    _matrix(floats).map(lambda m: torch.tensor(m, dtype=torch.float64)),
    _matrix().map(lambda m: torch.tensor(m, dtype=torch.float32)),
    _matrix().map(lambda m: torch.tensor(m, dtype=torch.complex64)),
    st.sampled_from(
        [None, "x", [[1.0, 2.0, 3.0]] * 2, np.ones((2, 3)), torch.ones(3), torch.ones(2, 3, dtype=torch.int64)]
    ),
)
row_vec = st.one_of(
    _vector(moderate, 2, 2).map(torch.tensor),
    _vector(floats, 2, 2).map(torch.tensor),
    _vector(st.complex_numbers(max_magnitude=3), 2, 2).map(torch.tensor),
    st.sampled_from([None, "ab", torch.ones(3), [1.0, 2.0], np.array([1.0, -1.0])]),
    vector,
)
mask2d = st.one_of(
    st.sampled_from([torch.ones(2, 3), torch.ones(2, 3) * (1 + 0j), [[1, 0, 1], [1, 1, 1]], None, torch.ones(3)]),
    tensor2d,
)


def _mb(indices, weights, counts):
    return MiniBatch(
        indices=torch.tensor(indices),
        weights=torch.tensor(weights),
        counts=torch.tensor(counts),
        num_draws=int(sum(counts)),
        tokens=10,
    )


plans = st.sampled_from(
    [
        (_mb([0, 1], [1.0, 2.0], [1, 2]),),
        (_mb([0, 3], [1.0, 1.0], [1, 1]), _mb([2], [3.0], [3])),
        (),
    ]
)
lengths = st.one_of(
    st.sampled_from(
        [
            torch.tensor([3.0, 7.0, 2.0, 5.0]),
            [1.0, float("nan"), 2.0, 3.0],
            [1.0, -1.0, 2.0, 3.0],
            [1.0, 2.0],
            None,
            "abcd",
            [1 + 1j, 1, 1, 1],
        ]
    ),
    vector,
)
rank_sizes = st.one_of(
    st.sampled_from([[4], [2, 2], [3, 1], [0, 4], [], None, "22", [2.5, 1.5], [10**30]]),
    _vector(st.integers(-1, 4), 0, 3),
)
weights_vec = st.one_of(
    st.sampled_from([torch.tensor([1.0, 2.0]), [float("nan"), 1.0], [-1.0, 1.0], [1 + 1j, 1.0]]), vector
)


def _finite_fit(fit: proxy.BetaFit) -> tuple:
    """The fields of a fit that must be finite (stderr and interval are documented as inf when the fit
    is uninformative, never NaN)."""
    assert not np.isnan(fit.stderr) and not np.isnan(fit.interval).any()
    assert np.isfinite(fit.stderr) == fit.informative
    return (fit.beta_hat, float(fit.n_used), fit.sxx, fit.sxy, fit.syy, fit.dof)


CASES = {
    "row_factors": (
        lambda fam, w, fl, P, d, t: factors.row_factors(fam, w, fl, num_ranks=P, draws=d, tokens=t),
        (st.sampled_from([*factors.FAMILIES, "x", None]), weights_vec, weights_vec, count, real, real),
    ),
    "step_normalisers": (
        lambda mbs, le, norm, rows, steps, sub: factors.step_normalisers(
            mbs, le, normaliser=norm, pool_rows=rows, num_steps=steps, subset=sub
        ),
        (
            plans,
            lengths,
            st.sampled_from(["draws", "pool", "x", None]),
            count,
            count,
            st.sampled_from([True, False, 1, "x"]),
        ),
    ),
    "global_tokens": (
        factors.global_tokens,
        (st.sampled_from([[factors.StepNormaliser(1.0, 2.0)], [], None, [1.0], "x"]),),
    ),
    "shard_minibatches": (shard.shard_minibatches, (plans, rank_sizes, count, st.one_of(st.none(), rank_sizes))),
    "rank_offsets": (shard.rank_offsets, (rank_sizes,)),
    "grpo_token_loss": (
        lambda lp, old, a, lo, hi, ref, beta: losses.grpo_token_loss(lp, old, a, lo, hi, ref, beta),
        (tensor2d, tensor2d, row_vec, real, real, st.one_of(st.none(), tensor2d), real),
    ),
    "cispo_token_loss": (losses.cispo_token_loss, (tensor2d, tensor2d, row_vec, real, real)),
    "importance_ratio": (losses.importance_ratio, (tensor2d, tensor2d)),
    "aggregate": (
        lambda tl, m, mode, w, nt, ns: losses.aggregate(tl, m, mode, w, num_tokens=nt, num_sequences=ns),
        (
            tensor2d,
            mask2d,
            st.sampled_from([*losses.AGG_MODES, "x", None]),
            st.one_of(st.none(), row_vec),
            st.one_of(st.none(), real),
            st.one_of(st.none(), real),
        ),
    ),
    "proxy_probs": (lambda a, c, b, al: proxy.proxy_probs(a, c, beta=b, alpha=al), (vector, vector, real, real)),
    "fit_beta": (lambda a, g, c, lv: _finite_fit(proxy.fit_beta(a, g, c, level=lv)), (vector, vector, vector, real)),
    "shrink": (
        lambda b, s, pb, ps: proxy.shrink(proxy.fit_beta([1.0, 2.0, 3.0], [1.0, 2.5, 2.0], [1.0, 2.0, b]), pb, ps),
        (st.one_of(moderate, real), real, real, real),
    ),
    "adaptive_alpha": (
        lambda p, w, lo, hi: proxy.adaptive_alpha(p, max_weight=w, alpha_min=lo, alpha_max=hi),
        (vector, real, real, real),
    ),
    "predicted_j_ratios": (proxy.predicted_j_ratios, (vector, vector, vector)),
    "loss_family": (proxy.loss_family, (st.sampled_from(["dapo", "grpo", "x", None, 1, ["dapo"]]),)),
    "BetaCalibrator": (
        lambda pb, ps, every, decay: proxy.BetaCalibrator(pb, ps, every=every, decay=decay),
        (real, real, count, real),
    ),
    "proxy_fidelity": (diag.proxy_fidelity, (vector, vector, vector)),
    "plan_seed": (grpo_config.plan_seed, (count, count, count)),
    "resolve_proxy": (
        lambda p, b, lt, m: grpo_config.resolve_proxy(p, b, loss_type=lt, method=m),
        (
            st.sampled_from(["auto", "advantage", "calibrated", "x", None]),
            st.one_of(st.none(), real),
            st.sampled_from(["dapo", "grpo", "x", None]),
            st.sampled_from(["p_star", "nonzero", "x"]),
        ),
    ),
    "SamplingConfig": (
        lambda m, a, noise, keep, tol, f, b: grpo_config.SamplingConfig(
            m,
            alpha=a,
            proxy_noise=noise,
            pods_keep=keep,
            zero_tol=tol,
            max_draws_factor=f,
            proxy_beta=b,
            proxy="length_aware" if b is not None else "advantage",
        ),
        (
            st.sampled_from([*grpo_config.METHODS, "x", None]),
            real,
            real,
            st.one_of(st.none(), count),
            real,
            real,
            st.one_of(st.none(), real),
        ),
    ),
    "StepCounts": (lambda t, s: accounting.StepCounts(tokens=t, skipped=s), (real, real)),
    "log_checkpoints": (log_checkpoints, (count, count)),
}

_NAMES = {
    "row_factors": ["family", "weights", "fed_lengths", "num_ranks", "draws", "tokens"],
    "step_normalisers": ["minibatches", "lengths", "normaliser", "pool_rows", "num_steps", "subset"],
    "grpo_token_loss": _names(losses.grpo_token_loss),
    "aggregate": _names(losses.aggregate),
    "proxy_probs": ["abs_adv", "costs", "beta", "alpha"],
    "fit_beta": ["abs_adv", "grad_norms", "costs", "level"],
    "shrink": ["fit", "prior_beta", "prior_sd", "bounds", "costs"],
    "adaptive_alpha": ["p", "max_weight", "alpha_min", "alpha_max"],
    "BetaCalibrator": ["prior_beta", "prior_sd", "every", "decay"],
    "resolve_proxy": ["proxy", "proxy_beta", "loss_type", "method"],
    "SamplingConfig": ["method", "alpha", "proxy_noise", "pods_keep", "zero_tol", "max_draws_factor", "proxy_beta"],
    "StepCounts": ["StepCounts.tokens", "StepCounts.skipped", "tokens", "skipped"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grpo_function_returns_finite_or_raises_naming_an_argument(name):
    fn, strategies = CASES[name]
    names = _NAMES.get(name) or _names(fn)

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.tuples(*strategies))
    def run(args):
        check_call(fn, names, *args)

    run()


_PROBLEM = LeastSquares(np.eye(3), np.ones(3), c=[1.0, 2.0, 3.0])


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.tuples(
        st.one_of(st.just([0.2, 0.3, 0.5]), vector),
        count,
        st.sampled_from(["convex", "strongly_convex", 0.1, -1.0, float("nan"), None, "x"]),
        st.one_of(st.none(), real),
        st.sampled_from(["raw", "centred", "x", None]),
        st.sampled_from([None, "uniform", "linear", "x"]),
    )
)
def test_fuzz_sgd_schedule_and_runs(args):
    p, steps, step_size, mu, weights, averaging = args
    names = ["p", "steps", "step_size", "mu", "weights", "averaging"]
    check_call(step_schedule, names, _PROBLEM, p, steps, step_size, mu=mu, weights=weights, averaging=averaging)
    small = steps if isinstance(steps, int) and 0 < steps <= 50 else steps if not isinstance(steps, int) else 5
    check_call(
        cost_aware_sgd,
        [*names, "rng"],
        _PROBLEM,
        p,
        small,
        step_size=step_size,
        mu=mu,
        weights=weights,
        averaging=averaging,
        rng=0,
    )
    check_call(
        run_trials,
        [*names, "trials"],
        _PROBLEM,
        p,
        small,
        2,
        step_size=step_size,
        mu=mu,
        weights=weights,
        averaging=averaging,
        checkpoints=3,
    )
