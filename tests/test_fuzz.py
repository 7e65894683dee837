"""Fuzz of the public math API, bounded in CI time.

Each public function is called with hypothesis-drawn arguments that mix plausible values with
adversarial ones (nan, ±inf, 1e±300, subnormals, negatives, bool, complex, numpy scalars, None,
strings, dicts, empty, ragged and 2-D arrays, tensors). Every call must

* return within a per-call timeout (no hang),
* return no NaN or ±inf (except S/J/χ²'s documented +inf when p misses a component),
* raise only ValueError or TypeError (the rule of :mod:`costaware._checks`),
* raise with a message that names one of the function's arguments.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import signal
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costaware import alias, subset, theory
from costaware import distributions as dist
from costaware.grpo import advantages as adv
from costaware.sampler import CostAwareSampler

# A hang never returns; a numba kernel's first compile takes tens of seconds on a loaded 2-core machine (two
# test workers, a job beside them). 60 s tells the two apart without a warm-up per kernel.
TIMEOUT_S = 60
# COSTAWARE_FUZZ_EXAMPLES=500 for a deeper local run; CI keeps the default
EXAMPLES = int(os.environ.get("COSTAWARE_FUZZ_EXAMPLES", "40"))


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    """SIGALRM after ``seconds`` (main thread, POSIX): a hang fails the test instead of stalling CI."""

    def handler(signum, frame):
        raise Hang(f"call did not return within {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- strategies --------------------------------------------------------------------------------------

_EXTREME = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1e-300,
    5e-324,
    1e300,
    1.7e308,
    -1e300,
    float("nan"),
    float("inf"),
    -float("inf"),
]
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_EXTREME), st.floats(0.01, 100))
moderate = st.floats(0.01, 100)
_not_numbers = st.sampled_from(
    [True, False, np.bool_(True), 1 + 0j, 0.5j, None, "1", b"1", [1.0], {1: 1}, np.array([1.0, 2.0])]
)
weird_scalar = st.one_of(
    _not_numbers,
    st.integers(-(2**70), 2**70),
    st.integers(-3, 10).map(np.int64),
    st.floats(-3, 10).map(np.float32),
    floats,
)
scalar = st.one_of(moderate, st.integers(0, 8), weird_scalar)
# sizes and counts: huge valid values would only test the machine's memory, so ints stay small;
# the huge ones that must be rejected (2**70, 1e300, inf) still come in as floats or beyond int64
int_scalar = st.one_of(
    st.integers(-2, 12),
    st.integers(1, 8).map(np.int64),
    st.sampled_from([2.0, 2.5, -(2**70), 2**70, 1e300, float("nan"), float("inf")]),
    _not_numbers,
)


def _vector(elems, min_size=0, max_size=6):
    return st.lists(elems, min_size=min_size, max_size=max_size)


good_vec = _vector(moderate, 1, 6)
extreme_vec = _vector(st.sampled_from([1e-300, 5e-324, 1e300, 1.7e308, 1.0, 1e-160, 1e160]), 1, 6)
weird_vec = st.one_of(
    _vector(floats),
    _vector(st.integers(-3, 3)),
    _vector(st.booleans(), 1, 4),
    _vector(st.complex_numbers(max_magnitude=10), 1, 4),
    st.sampled_from(
        [None, "abc", {1: 2.0}, {1.0, 2.0}, [[1.0, 2.0], [3.0, 4.0]], [1.0, [2.0]], [], np.zeros((2, 2)), [None, 1.0]]
    ),
)


@st.composite
def prob_vec(draw):
    v = np.asarray(
        draw(st.lists(st.one_of(st.just(0.0), moderate, st.sampled_from([1e-300, 1e300])), min_size=1, max_size=6))
    )
    return (v / v.sum()).tolist() if v.sum() > 0 and np.isfinite(v.sum()) else v.tolist()


vector = st.one_of(good_vec, extreme_vec, weird_vec, good_vec.map(np.asarray), good_vec.map(torch.tensor))
pvec = st.one_of(prob_vec(), vector)
index_vec = st.one_of(
    _vector(st.integers(-2, 7)),
    st.sampled_from([[], [0.5], [True], None, "0"]),
    _vector(st.integers(0, 3)).map(np.asarray),
)
rng = st.one_of(st.none(), st.integers(-2, 2**70), st.sampled_from([np.random.default_rng(0), "x", 1.5]))


# -- result checks -----------------------------------------------------------------------------------


def _nonfinite(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return bool(x.is_floating_point() and not torch.isfinite(x).all())
    if isinstance(x, np.ndarray):
        return bool(np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all())
    if isinstance(x, float):
        return not np.isfinite(x)
    if isinstance(x, (tuple, list)):
        return any(_nonfinite(v) for v in x)
    if dataclasses.is_dataclass(x):
        return any(_nonfinite(getattr(x, f.name)) for f in dataclasses.fields(x))
    return False


_COMPILED: set[Callable] = set()


def compile_first(fn: Callable) -> None:
    """Compile ``fn``'s numba kernel once, outside the time limit (``run_trials``, ``runner_indices``); one takes
    seconds to compile, tens on a loaded 2-core machine: a first compile is not a hang."""
    from costaware.sgd import LeastSquares, run_trials
    from costaware.sgd.rng import runner_indices

    if fn in _COMPILED:
        return
    if fn is run_trials:
        run_trials(LeastSquares(np.eye(3), np.ones(3), c=[1.0, 2.0, 3.0]), [0.2, 0.3, 0.5], 5, 2, checkpoints=3)
    elif fn is runner_indices:
        runner_indices([0.5, 0.5], 2, 0, 0)
    _COMPILED.add(fn)


def check_call(fn: Callable, names: list[str], *args: Any, may_inf: bool = False, **kwargs: Any) -> Any:
    """Call, then assert the rule; returns the result (None if it raised)."""
    compile_first(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with time_limit(TIMEOUT_S):
                out = fn(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            msg = str(exc)
            assert any(re.search(rf"\b{re.escape(n)}\b", msg) for n in names), (
                f"{type(exc).__name__} does not name an argument of {names}: {msg!r}"
            )
            return None
        except Hang:
            pytest.fail(f"hang: {fn.__qualname__}{args}{kwargs}")
        except Exception as exc:  # any other type breaks the rule
            pytest.fail(f"{type(exc).__name__} (not ValueError/TypeError) from {fn.__qualname__}: {exc!r}")
    numeric = [w for w in caught if issubclass(w.category, (RuntimeWarning, np.exceptions.ComplexWarning))]
    assert not numeric, f"numeric warning from {fn.__qualname__}: {numeric[0].message}"
    if not may_inf or not (isinstance(out, float) and out == np.inf):
        assert not _nonfinite(out), f"non-finite output from {fn.__qualname__}{args}: {out!r}"
    return out


def _names(fn: Callable, extra: tuple[str, ...] = ()) -> list[str]:
    # the message may name an argument, or the vector it checked (G for a noisy proxy of G, etc.)
    return [*inspect.signature(fn).parameters, *extra]


# -- one registry entry per public function ----------------------------------------------------------

CASES: dict[str, tuple[Callable, tuple, dict]] = {
    "uniform": (dist.uniform, (int_scalar,), {}),
    "variance": (dist.variance, (vector,), {}),
    "optimal": (dist.optimal, (vector, vector), {}),
    "inverse_sqrt_cost": (dist.inverse_sqrt_cost, (vector,), {}),
    "smoothed": (dist.smoothed, (pvec, scalar), {}),
    "noisy_proxy": (dist.noisy_proxy, (vector, scalar, rng), {}),
    "support_size": (dist.support_size, (pvec,), {}),
    "importance_weights": (
        dist.importance_weights,
        (pvec, st.one_of(st.none(), index_vec), st.sampled_from(["centred", "raw", "x", None])),
        {},
    ),
    "S": (theory.S, (pvec, vector), {"may_inf": True}),
    "C": (theory.C, (pvec, vector), {}),
    "J": (theory.J, (pvec, vector, vector), {"may_inf": True}),
    "J_optimal": (theory.J_optimal, (vector, vector), {}),
    "expected_cost": (
        lambda eps, p, G, c, D: theory.expected_cost(eps, p, G, c, D=D),
        (scalar, pvec, vector, vector, scalar),
        {"may_inf": True},
    ),
    "expected_cost_mu": (
        lambda eps, p, G, c, mu: theory.expected_cost(eps, p, G, c, mu=mu),
        (scalar, pvec, vector, vector, scalar),
        {"may_inf": True},
    ),
    "ratio_optimal_to_uniform": (theory.ratio_optimal_to_uniform, (vector, vector), {}),
    "ratio_optimal_to_variance": (theory.ratio_optimal_to_variance, (vector, vector), {}),
    "ratio_variance_to_uniform": (theory.ratio_variance_to_uniform, (vector, vector), {}),
    "cost_biased": (theory.cost_biased, (pvec, vector), {}),
    "chi2_divergence": (theory.chi2_divergence, (pvec, pvec), {"may_inf": True}),
    "suboptimality": (theory.suboptimality, (pvec, vector, vector), {"may_inf": True}),
    "pearson": (theory.pearson, (vector, vector), {}),
    "noise_variance_from_pearson": (theory.noise_variance_from_pearson, (scalar, scalar), {}),
    "expected_suboptimality_noisy": (theory.expected_suboptimality_noisy, (vector, vector, scalar), {}),
    "expected_suboptimality_pearson": (theory.expected_suboptimality_pearson, (vector, vector, scalar), {}),
    "lower_bound": (theory.lower_bound, (vector, scalar, scalar), {}),
    "build_alias": (alias.build_alias, (pvec,), {}),
    "draw": (alias.draw, (vector, st.one_of(index_vec, vector), int_scalar, rng), {}),
    "alias_probabilities": (alias.alias_probabilities, (vector, st.one_of(index_vec, vector)), {}),
    "AliasTable": (lambda p, size, r: alias.AliasTable(p).sample(size, r), (pvec, int_scalar, rng), {}),
    "required_mass": (subset.required_mass, (vector, scalar, scalar), {}),
    "greedy_subset": (subset.greedy_subset, (vector, vector, scalar, scalar), {}),
    "exact_subset": (subset.exact_subset, (vector, vector, scalar, scalar), {}),
    "subset_cost": (subset.subset_cost, (vector, vector, index_vec), {}),
    "bias": (subset.bias, (vector, index_vec), {}),
    "restricted_optimal": (subset.restricted_optimal, (vector, vector, index_vec), {}),
    "biased_cost": (subset.biased_cost, (vector, vector, index_vec, scalar, scalar), {}),
    "group_advantages": (adv.group_advantages, (vector, int_scalar, st.booleans(), scalar), {}),
    "sequence_costs": (adv.sequence_costs, (st.one_of(vector, _vector(_vector(st.integers(-1, 2), 1, 3), 1, 3)),), {}),
    "sequence_costs_from_masks": (
        adv.sequence_costs_from_masks,
        (
            _vector(_vector(st.integers(0, 1), 2, 2), 0, 3),
            _vector(_vector(st.sampled_from([0, 1, 2, 0.5]), 1, 1), 0, 3),
        ),
        {},
    ),
}

# lambdas hide the real argument names: give them explicitly
_NAMES = {
    "expected_cost": _names(theory.expected_cost),
    "expected_cost_mu": _names(theory.expected_cost),
    "AliasTable": ["p", "size", "rng"],
    "suboptimality": ["p_proxy", "G", "c", "P", "Q", "p"],
    "draw": ["prob", "alias", "size", "rng"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_public_function_returns_finite_or_raises_naming_an_argument(name):
    fn, strategies, opts = CASES[name]
    names = _NAMES.get(name) or _names(fn)

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.tuples(*strategies))
    def run(args):
        check_call(fn, names, *args, **opts)

    run()


def _sampler_session(costs, proxies, alpha, num_samples, weights, momentum, idx, values):
    s = CostAwareSampler(costs, proxies, alpha=alpha, num_samples=num_samples, weights=weights, momentum=momentum)
    drawn = list(s)
    assert all(0 <= i < len(s.costs) for i in drawn)
    out = s.weights_for(idx)
    s.update_proxies(idx, values)
    return out, s.probabilities


@settings(max_examples=2 * EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.tuples(
        st.one_of(good_vec, vector),
        st.one_of(st.none(), vector),
        st.one_of(st.sampled_from([0.0, 0.1]), scalar),
        st.one_of(st.none(), st.integers(1, 20), int_scalar),
        st.sampled_from(["centred", "raw", "both"]),
        st.one_of(st.just(0.0), scalar),
        index_vec,
        st.one_of(vector, good_vec),
    )
)
def test_sampler_session_returns_finite_or_raises_naming_an_argument(args):
    names = [*_names(CostAwareSampler.__init__), "indices", "values", "G", "c"]
    check_call(_sampler_session, names, *args)


# -- grpo.plan as a black box (owned by another module; defects are reported, not fixed here) --------

from costaware.grpo import plan as grpo_plan  # noqa: E402


def _plan(advantages, costs, num_minibatches, method, budget, rewards, group_size):
    cfg = grpo_plan.SamplingConfig(method, budget=budget)
    out = grpo_plan.plan_minibatches(
        advantages,
        costs,
        num_minibatches=num_minibatches,
        config=cfg,
        rewards=rewards,
        group_size=group_size,
        generator=torch.Generator().manual_seed(0),
    )
    for mb in out.minibatches:
        assert torch.isfinite(mb.weights).all() and (mb.indices >= 0).all()
    return out


@settings(max_examples=2 * EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.tuples(
        st.one_of(_vector(st.sampled_from([0.0, 1.0, -1.0, 1e-8, 3e-16, 0.5]), 4, 4), vector),
        st.one_of(_vector(st.sampled_from([1.0, 0.3, 1e19, 1000.0, 7.0]), 4, 4), vector),
        int_scalar,
        st.sampled_from(sorted(grpo_plan.METHODS)),
        st.sampled_from(["rows", "tokens"]),
        st.one_of(st.none(), _vector(st.sampled_from([0.0, 1.0, 1e300, 1 / 3]), 4, 4)),
        st.one_of(st.none(), st.sampled_from([2, 4, np.int64(2)])),
    )
)
def test_plan_minibatches_returns_finite_or_raises_naming_an_argument(args):
    names = [*_names(grpo_plan.plan_minibatches), "group_size", "pods_keep"]
    check_call(_plan, names, *args)


# -- the lower-level calls the first-hour fuzz found (each now a clear error naming its argument) -----

from costaware.grpo import diagnostics, factors, losses, proxy, shard  # noqa: E402

_LP = torch.zeros(2, 3)
_MB = (grpo_plan.MiniBatch(torch.tensor([0, 1]), torch.tensor([1.0, 2.0]), torch.tensor([1, 2]), 3, 10),)
_FOUND = [
    # (call, the exception it must raise, the argument its message must name)
    (lambda: grpo_plan.plan_minibatches([1.0, 2.0], [1 + 1j, 2.0], num_minibatches=1), ValueError, "costs"),
    (lambda: grpo_plan.plan_minibatches([1.0, 2.0], [1.0, 2.0], num_minibatches=10**30), ValueError, "num_minibatches"),
    (
        lambda: grpo_plan.plan_minibatches([1.0, 2.0], [1.0, 2.0], num_minibatches=2, minibatch_size=2**62),
        ValueError,
        "minibatch_size",
    ),
    (lambda: losses.cispo_token_loss(_LP, _LP, torch.tensor([1 + 1j, 1.0])), ValueError, "advantages"),
    (lambda: losses.aggregate(_LP, torch.ones(2, 3) * (1 + 0j)), ValueError, "mask"),
    (
        lambda: losses.aggregate(_LP, torch.ones(2, 3), seq_weights=torch.tensor([1 + 1j, 1.0])),
        ValueError,
        "seq_weights",
    ),
    (lambda: proxy.fit_beta([1.0, 2.0, 3.0], np.array([1 + 1j, 2, 3]), [1.0, 2.0, 3.0]), ValueError, "grad_norms"),
    (
        lambda: factors.row_factors(
            "row_mean", torch.ones(2), torch.ones(2), num_ranks=1, draws=float("nan"), tokens=1.0
        ),
        ValueError,
        "draws",
    ),
    (
        lambda: factors.row_factors("row_mean", torch.ones(2), torch.ones(2), num_ranks=1, draws=-3, tokens=1.0),
        ValueError,
        "draws",
    ),
    (
        lambda: factors.row_factors(
            "row_mean", torch.tensor([float("nan"), 1.0]), torch.ones(2), num_ranks=1, draws=2, tokens=1.0
        ),
        ValueError,
        "weights",
    ),
    (
        lambda: factors.row_factors("token_mean", torch.ones(2), torch.ones(2), num_ranks=1, draws=2, tokens=5e-324),
        ValueError,
        "tokens",
    ),
    (
        lambda: factors.step_normalisers(_MB, [1.0, float("nan")], normaliser="draws", pool_rows=2, num_steps=1),
        ValueError,
        "lengths",
    ),
    (
        lambda: factors.step_normalisers(_MB, [1.0, 2.0], normaliser="draws", pool_rows=2, num_steps=10**30),
        ValueError,
        "num_steps",
    ),
    (lambda: shard.shard_minibatches(_MB, [2], 10**30), ValueError, "num_steps"),
    (lambda: dist.uniform(2**40), ValueError, "n"),
    (lambda: subset.biased_cost([1e200, 1e200], [1.0, 1.0], [0, 1], 1e-300, 1.0), ValueError, "eps"),
    (lambda: losses.grpo_token_loss(_LP, _LP, None), TypeError, "advantages"),
    (lambda: losses.grpo_token_loss(_LP, _LP, torch.ones(2), ref_logp=_LP, beta=1e300), ValueError, "beta"),
    (
        lambda: proxy.shrink(proxy.fit_beta([1.0, 2.0, 3.0], [1.0, 2.5, 2.0], [1.0, 2.0, 4.0]), 0.0, 5e-324) * 0,
        None,
        None,
    ),
]


@pytest.mark.parametrize("k", range(len(_FOUND)))
def test_calls_the_fuzz_found_raise_a_clear_error_naming_the_argument(k):
    call, exc_type, name = _FOUND[k]
    if exc_type is None:  # a documented result (a tiny prior_sd pins β to the prior), not an exception
        assert check_call(call, []) == 0.0
        return
    with pytest.raises(exc_type, match=rf"\b{name}\b"):
        with time_limit(TIMEOUT_S):
            call()


def test_proxy_fidelity_with_tiny_gradient_norms_is_finite():
    out = check_call(
        diagnostics.proxy_fidelity, ["abs_adv", "grad_norms", "costs"], [1.0, 2.0], [1e-320, 3e-320], [1, 2]
    )
    assert out["j_ratio"] >= 1.0 and 0 < out["j_vs_uniform"]
