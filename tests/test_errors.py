"""The exception rule of costaware._checks, and the overflow/underflow cases.

Every extreme-value result is checked against a brute-force value in 60-digit arithmetic (mpmath),
and scale-free quantities are checked to be scale-free over the whole float64 exponent range.
"""

from __future__ import annotations

import doctest

import mpmath as mp
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from costaware import _checks, alias, subset, theory
from costaware import distributions as dist
from costaware.grpo.advantages import group_advantages
from costaware.sampler import CostAwareSampler
from costaware.theory import cost, lower_bounds, proxy_quality

mp.mp.dps = 60


def _mp(x):
    return [mp.mpf(float(v)) for v in np.asarray(x, dtype=np.float64)]


def _close(got, want, rtol=1e-12):
    """got (float64) vs want (mpf): relative, or both below the normal range."""
    want = float(want)  # rounds to nearest float64 (0 if the true value underflows)
    if abs(want) < 1e-300:
        return abs(got) < 1e-290
    return abs(got - want) <= rtol * abs(want)


# -- the cases, against brute force ------------------------------------------------------


def test_optimal_extreme_ratio_matches_brute_force():
    p = dist.optimal([1e300, 1], [1e-300, 1])
    G, c = _mp([1e300, 1]), _mp([1e-300, 1])
    q = [g / mp.sqrt(ci) for g, ci in zip(G, c, strict=True)]
    assert all(_close(pi, qi / sum(q)) for pi, qi in zip(p, q, strict=True))
    assert p.tolist() == [1.0, 0.0]


def test_variance_near_float_max_and_subnormal():
    np.testing.assert_array_equal(dist.variance([1e308] * 2), [0.5, 0.5])
    np.testing.assert_array_equal(dist.variance([5e-324, 5e-324]), [0.5, 0.5])
    np.testing.assert_array_equal(dist.inverse_sqrt_cost([5e-324, 1.7e308 / 4]).sum(), 1.0)


def test_ratio_optimal_to_uniform_is_scale_free_at_1e_minus_200():
    assert theory.ratio_optimal_to_uniform([1e-200] * 3, [1, 2, 3]) == pytest.approx(
        theory.ratio_optimal_to_uniform([1.0] * 3, [1, 2, 3]), rel=1e-14
    )


def test_pearson_at_1e200_equals_the_unit_scale_value():
    assert theory.pearson([1e200, -1e200, 0], [1, 2, 3]) == pytest.approx(-0.5, rel=1e-14)


def test_cost_biased_with_subnormal_costs():
    np.testing.assert_array_equal(theory.cost_biased([0.5, 0.5], [5e-324] * 2), [0.5, 0.5])


def test_expected_cost_with_tiny_eps_raises_only_when_k_overflows():
    # convex: D²J/ε² = 1e400 does not fit float64 -> ValueError naming eps, not ZeroDivisionError
    with pytest.raises(ValueError, match="expected_cost overflows.*eps = 1e-200"):
        theory.expected_cost(1e-200, [0.5, 0.5], [1, 1], [1, 1], D=1.0)
    # strongly convex: 4J/(με) = 4e200 fits, although ε² underflows
    assert theory.expected_cost(1e-200, [0.5, 0.5], [1, 1], [1, 1], mu=1.0) == pytest.approx(4e200, rel=1e-14)
    # D large and ε small: D²/ε² = 1e300 fits, D² alone does not overflow... but 1e200² does
    assert theory.expected_cost(1e-100, [0.5, 0.5], [1, 1], [1, 1], D=1e50) == pytest.approx(1e300, rel=1e-13)


def test_group_advantages_at_1e200_keep_signs_and_match_unit_scale():
    r = np.array([1e200, -1e200, 0.0, 1e200, 3e200, 1e200])
    want = group_advantages(r / 1e200, 3, eps=1e-6 / 1e200).numpy()  # eps is not scale-free
    got = group_advantages(r, 3).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert (np.sign(got) == np.sign(want)).all() and got[0] > 0 and got[1] < 0
    # a plain list of floats beyond float32 (result float32, computed in float64)
    got32 = group_advantages([1e200, 0.0], 2)
    assert got32.dtype == torch.float32 and got32.tolist() == pytest.approx([0.7071063, -0.7071063], rel=1e-6)
    # Dr. GRPO: r − mean = ±1.7e308 fits; 2.27e308 does not
    big = np.array([1.7e308, -1.7e308])
    np.testing.assert_array_equal(group_advantages(big, 2, scale_by_std=False), big)
    with pytest.raises(ValueError, match="rewards span too wide"):
        group_advantages(np.array([1.7e308, -1.7e308, -1.7e308]), 3, scale_by_std=False)


def test_group_advantages_moderate_inputs_are_bit_identical_to_the_plain_formula():
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        r = torch.randn(64, generator=gen, dtype=dtype) * 3
        g = r.view(-1, 8)
        plain = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).reshape(-1)
        assert torch.equal(group_advantages(r, 8), plain)


def test_S_J_chi2_overflow_is_a_value_error_not_inf():
    with pytest.raises(ValueError, match=r"S\(p\) overflows"):
        theory.S([0.5, 0.5], [1e200, 1e200])
    # S = 1e300 and J = S·C = 1e305 fit; S·C with C = 1e10 does not
    G, p = [1e150, 1e150], [0.5, 0.5]
    want = sum(mp.mpf(g) ** 2 / mp.mpf(q) for g, q in zip(G, p, strict=True)) / 4
    assert _close(theory.S(p, G), want)
    assert _close(theory.J(p, G, [1e5, 1e5]), want * mp.mpf(1e5))
    with pytest.raises(ValueError, match=r"J\(p\) overflows"):
        theory.J(p, G, [1e10, 1e10])
    # S of tiny G: G²/p underflows termwise, S = 1e-320·... computed through logs
    want = sum(mp.mpf(1e-160) ** 2 / mp.mpf(q) for q in p) / 4
    assert _close(theory.S(p, [1e-160, 1e-160]), want)
    with pytest.raises(ValueError, match="chi2_divergence overflows"):
        theory.chi2_divergence([0.5, 0.5], [1.0, 5e-324])


def test_importance_weight_overflow_is_a_value_error():
    with pytest.raises(ValueError, match="importance weight 1/\\(n·p\\) overflows"):
        dist.importance_weights([1.0, 5e-324], [1])


def test_alias_draw_validates_its_table():
    with pytest.raises(ValueError, match=r"alias entries must lie in \[0, 2\), got -1"):
        alias.draw([0.5, 0.5], [-1, 0], 5, 0)
    with pytest.raises(ValueError, match=r"prob must lie in \[0, 1\], got 1.5"):
        alias.draw([1.5, 0.5], [0, 0], 5, 0)
    with pytest.raises(ValueError, match="size must be a non-negative integer.*, got -1"):
        alias.draw([1.0, 1.0], [0, 1], -1, 0)
    prob, al = alias.build_alias([0.25, 0.75])
    r1, r2 = np.random.default_rng(3), np.random.default_rng(3)
    np.testing.assert_array_equal(alias.draw(prob, al, 50, r1), alias.draw(prob, al, 50, r2, validate=False))


def test_sampler_weights_for_empty_and_bad_indices():
    s = CostAwareSampler([1.0, 2.0, 4.0])
    assert s.weights_for([]).shape == (0,)
    assert s.weights_for(np.array([], dtype=np.int64)).shape == (0,)
    with pytest.raises(ValueError, match="indices must be integers"):
        s.weights_for([0.5])
    with pytest.raises(TypeError, match="indices must be an array-like"):
        s.weights_for(None)
    s.update_proxies([], [])  # a no-op, not an IndexError
    np.testing.assert_array_equal(s.proxies, [1.0, 1.0, 1.0])


def test_subset_with_huge_G_is_the_same_subset_as_unit_G():
    G, c = np.array([1.0, 2.0, 0.5, 3.0]), np.array([1.0, 9.0, 4.0, 2.0])
    for f in (subset.greedy_subset, subset.exact_subset):
        np.testing.assert_array_equal(f(G * 1e307, c, 1.4e307, 1.0), f(G, c, 1.4, 1.0))
        np.testing.assert_array_equal(f(G, c, 1.4, 1.0), [0])
    assert subset.bias([1e308, 1e308, 1e308], [0]) == pytest.approx(2 * (1e308 / 3), rel=1e-14)


# -- scale-freeness over the exponent range, against brute force -----------------------------------

_mantissa = st.floats(1.0, 10.0)
_exponent = st.integers(-150, 150)
_vec = st.lists(st.tuples(_mantissa, _exponent), min_size=2, max_size=6)


def _values(pairs, shift=0):
    return np.array([m * 10.0 ** (e + shift) for m, e in pairs])


@settings(max_examples=60, deadline=None)
@given(_vec, _vec, st.integers(-150, 150), st.integers(-150, 150))
def test_ratios_and_optimum_are_scale_free_and_exact(gp, cp, a, b):
    n = min(len(gp), len(cp))
    G, c = _values(gp[:n]), _values(cp[:n])
    Gm, cm = _mp(G), _mp(c)
    sg = sum(g * mp.sqrt(x) for g, x in zip(Gm, cm, strict=True))
    want = {
        "ratio_optimal_to_uniform": sg**2 / (sum(g * g for g in Gm) * sum(cm)),
        "ratio_optimal_to_variance": sg**2 / (sum(Gm) * sum(g * x for g, x in zip(Gm, cm, strict=True))),
        "ratio_variance_to_uniform": sum(Gm)
        * sum(g * x for g, x in zip(Gm, cm, strict=True))
        / (sum(g * g for g in Gm) * sum(cm)),
    }
    for name, w in want.items():
        f = getattr(theory, name)
        got = f(G, c)
        assert _close(got, w, rtol=1e-10), (name, got, float(w))
        # scale-free: G → 10^a G and c → 10^b c (the scaled inputs stay inside float64)
        got_scaled = f(G * 10.0**a, c * 10.0**b)
        assert np.isfinite(got_scaled) and _close(got_scaled, w, rtol=1e-9), (name, got_scaled, float(w))
    p = dist.optimal(G, c)
    q = [g / mp.sqrt(x) for g, x in zip(Gm, cm, strict=True)]
    assert all(_close(pi, qi / sum(q), rtol=1e-10) for pi, qi in zip(p, q, strict=True))
    np.testing.assert_allclose(dist.optimal(G * 10.0**a, c * 10.0**b), p, rtol=1e-9, atol=1e-300)
    if sg**2 / n**2 > mp.mpf("1.7976931348623157e308"):
        with pytest.raises(ValueError, match="J_optimal overflows"):
            theory.J_optimal(G, c)
    else:
        assert _close(theory.J_optimal(G, c), sg**2 / n**2, rtol=1e-10)


@settings(max_examples=60, deadline=None)
@given(_vec, st.integers(-250, 250))
@example(xp=[(1.0, 0), (1.0, -65)], a=-250)  # once failed: the scaled cost 1e-315 was subnormal
def test_pearson_and_cost_biased_scale_free(xp, a):
    x = _values(xp) * np.where(np.arange(len(xp)) % 2, -1.0, 1.0)
    y = np.arange(len(xp), dtype=float) ** 2
    if np.ptp(x) == 0:
        return
    xm, ym = _mp(x), _mp(y)
    mx, my = sum(xm) / len(xm), sum(ym) / len(ym)
    dx, dy = [v - mx for v in xm], [v - my for v in ym]
    want = sum(u * v for u, v in zip(dx, dy, strict=True)) / mp.sqrt(sum(u * u for u in dx) * sum(v * v for v in dy))
    s = 10.0**a
    with np.errstate(over="ignore"):
        xs, cs = x * s, np.abs(x) * s
    if np.isfinite(xs).all() and (np.abs(xs)[x != 0] >= np.finfo(float).tiny).all():
        assert theory.pearson(x * s, y) == pytest.approx(float(want), rel=1e-9, abs=1e-12)
    p = dist.optimal(np.abs(x), np.abs(x))
    # Subnormal costs (< 2.2e-308) have lost mantissa bits before the call, so they are no test of scale-freeness.
    c = cs if np.isfinite(cs).all() and (cs >= np.finfo(float).tiny).all() else np.abs(x)
    np.testing.assert_allclose(theory.cost_biased(p, c), theory.cost_biased(p, np.abs(x)), rtol=1e-9, atol=1e-300)


# -- the exception rule ----------------------------------------------------------------------------

_BAD_SCALARS = [True, np.bool_(False), 1 + 0j, float("nan"), float("inf"), -float("inf"), None, "0.5", [0.5]]


@pytest.mark.parametrize("bad", _BAD_SCALARS, ids=repr)
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda v: dist.smoothed([0.5, 0.5], v), "alpha"),
        (lambda v: dist.noisy_proxy([1.0, 2.0], v, 0), "sigma2"),
        (lambda v: theory.expected_cost(v, [0.5, 0.5], [1, 1], [1, 1], D=1.0), "eps"),
        (lambda v: theory.expected_cost(1.0, [0.5, 0.5], [1, 1], [1, 1], mu=v), "mu"),
        (lambda v: theory.noise_variance_from_pearson(v, 1.0), "rho"),
        (lambda v: theory.lower_bound([1.0, 2.0], v, 0.5), "G"),
        (lambda v: subset.greedy_subset([1.0, 1.0], [1.0, 2.0], v, 1.0), "gamma"),
        (lambda v: group_advantages([1.0, 0.0], 2, eps=v), "eps"),
        (lambda v: CostAwareSampler([1.0, 2.0], alpha=v), "alpha"),
        (lambda v: CostAwareSampler([1.0, 2.0], momentum=v), "momentum"),
    ],
)
def test_bad_real_scalars_raise_value_error_naming_the_argument(call, name, bad):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call(bad)


@pytest.mark.parametrize("bad", [*_BAD_SCALARS, 2.5, -1, 0.0], ids=repr)
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda v: dist.uniform(v), "n"),
        (lambda v: group_advantages([1.0, 0.0], v), "group_size"),
        (lambda v: CostAwareSampler([1.0, 2.0], num_samples=-1 if v is None else v), "num_samples"),
        (lambda v: CostAwareSampler([1.0, 2.0], chunk_size=v), "chunk_size"),
        (lambda v: alias.AliasTable([0.5, 0.5]).sample(v if v != 0.0 else -2, 0), "size"),
    ],
)
def test_bad_integers_raise_value_error_naming_the_argument(call, name, bad):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call(bad)


def test_numpy_and_integral_scalars_are_accepted():
    assert group_advantages([1.0, 0.0], np.int64(2)).shape == (2,)
    assert group_advantages([1.0, 0.0], 2.0).shape == (2,)
    assert dist.uniform(np.uint8(3)).size == 3
    assert len(CostAwareSampler([1.0, 2.0], num_samples=np.int32(5))) == 5
    assert dist.smoothed([0.5, 0.5], np.float32(0.5)).tolist() == [0.5, 0.5]
    assert dist.smoothed([0.5, 0.5], np.array(0.25)).tolist() == [0.5, 0.5]
    assert theory.expected_cost(np.float64(1.0), [0.5, 0.5], [1, 1], [1, 1], D=np.int64(1)) == 1.0


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda v: dist.variance(v), "G"),
        (lambda v: dist.optimal([1.0, 1.0], v), "c"),
        (lambda v: theory.pearson(v, [1.0, 2.0]), "x"),
        (lambda v: subset.bias([1.0, 2.0], v), "subset"),
        (lambda v: group_advantages(v, 1), "rewards"),
        (lambda v: CostAwareSampler(v), "costs"),
        (lambda v: dist.importance_weights([0.5, 0.5], v), "indices"),
        (lambda v: alias.draw([0.5, 0.5], v, 2, 0), "alias"),
        (lambda v: _plan(v), "advantages"),
        (lambda v: _shard(v), "rank_sizes"),
        (lambda v: _analysis(v), "records"),
        (lambda v: _read_logs(v), "paths"),
        (lambda v: _kv_prompts(v), "prompts"),
    ],
)
@pytest.mark.parametrize("bad", [None, "12", {1: 2}, {1.0, 2.0}, frozenset({1.0}), {1: 2}.keys()], ids=repr)
def test_wrong_containers_raise_type_error_naming_the_argument(call, name, bad):
    if (name, bad) == ("indices", None) or (name == "paths" and isinstance(bad, str)):
        pytest.skip("None: every index; a str: one file path")
    with pytest.raises(TypeError, match=rf"^{name} must be .*, got .* \({type(bad).__name__}\)$"):
        call(bad)


def _plan(v):
    from costaware.grpo.plan import plan_minibatches

    return plan_minibatches(v, [1, 2], num_minibatches=1)


def _shard(v):
    from costaware.grpo.shard import rank_offsets

    return rank_offsets(v)


def _analysis(v):
    from costaware.rollouts.analysis import analyse

    return analyse(v)


def _read_logs(v):
    from costaware.rollouts.logs import read_prompt_rounds

    return read_prompt_rounds(v)


def _kv_prompts(v):
    from costaware.generation.kv_sampler import _prompt_rows

    return _prompt_rows(v)


def test_the_container_rule_is_written_once():
    """Only costaware._checks names the containers that are never arrays; every other module calls it."""
    import re
    from pathlib import Path

    src = Path(_checks.__file__).parent
    rule = re.compile(r"isinstance\([^)]*\(\s*(str|bytes)\s*,\s*bytes?|isinstance\([^)]*\bdict\s*,\s*set\b")
    copies = [f"{p.relative_to(src)}:{n}" for p in sorted(src.rglob("*.py")) if p.name != "_checks.py"
              for n, line in enumerate(p.read_text().splitlines(), 1) if rule.search(line)]  # fmt: skip
    assert copies == []
    assert not _checks.is_array_like({}.keys()) and _checks.is_array_like(range(3))


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: dist.variance([1 + 1j, 2.0]), "G"),
        (lambda: dist.variance([True, False]), "G"),
        (lambda: dist.variance(np.array([1.0, 2.0], dtype=np.complex128)), "G"),
        (lambda: theory.pearson([[1.0, 2.0]], [1.0, 2.0]), "x"),
        (lambda: theory.pearson([1.0, [2.0, 3.0]], [1.0, 2.0]), "x"),
        (lambda: group_advantages(np.array([1 + 1j, 0]), 2), "rewards"),
        (lambda: group_advantages(torch.tensor([1 + 1j, 0]), 2), "rewards"),
        (lambda: group_advantages(["a", "b"], 2), "rewards"),
        (lambda: alias.draw([0.5, 0.5j], [0, 1], 2, 0), "prob"),
        (lambda: alias.draw([0.5, 0.5], [0, 1], 2, -3), "rng"),
    ],
)
def test_complex_bool_ragged_values_raise_value_error(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_checks_docstring_states_the_rule():
    doc = _checks.__doc__
    assert "ValueError" in doc and "TypeError" in doc and "np.int64(2)" in doc


@pytest.mark.parametrize(
    "module", [dist, theory, cost, proxy_quality, lower_bounds, alias, subset, _checks], ids=lambda m: m.__name__
)
def test_module_doctests_pass(module):
    res = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0


# -- generation_cost: one rule wherever it is taken ------------------------------------------------------------


def _generation_cost_takers():
    from report_fixtures import make_runs

    from costaware.experiments.profile import Profile
    from costaware.report import curves
    from costaware.rollouts.analysis import AnalysisConfig
    from costaware.rollouts.prompts import CostModel, cost_aware_prompts

    run = make_runs("none", seeds=[0])[0]
    return {
        "Profile": lambda v: Profile(generation_cost=v),
        "CostModel": lambda v: CostModel(generation_cost=v),
        "cost_aware_prompts": lambda v: cost_aware_prompts(generation_cost=v),
        "AnalysisConfig": lambda v: AnalysisConfig(generation_cost=v),
        "axis_values": lambda v: curves.axis_values(run, "total_cost", generation_cost=v),
    }


@pytest.mark.parametrize("bad", [1e308, 1e6 * (1 + 1e-15), float("inf"), float("nan"), -1.0, -1e-300, True, "1"])
def test_generation_cost_is_refused_above_a_million_po_tokens_everywhere(bad):
    for name, take in _generation_cost_takers().items():
        with pytest.raises(ValueError, match=r"generation_cost must be a finite number >= 0 and <= 1e\+06") as exc:
            take(bad)
        assert "not a real price" in str(exc.value) and repr(bad) in str(exc.value), name


def test_generation_cost_bounds_are_accepted_everywhere():
    for take in _generation_cost_takers().values():
        for ok in (0.0, 1 / 3, 1e6):
            take(ok)
    assert _checks.generation_cost(np.float32(0.5)) == 0.5
    with pytest.raises(ValueError, match="generation_cost"):
        _checks.generation_cost(np.float32(0.5), strict=True)  # records and configs hold Python numbers


def _loss(**clip):
    from costaware.grpo.losses import grpo_token_loss

    logp = torch.zeros(1, 2)
    return grpo_token_loss(logp, logp, [1.0], **clip)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: CostAwareSampler([1.0], momentum=1.0), r"momentum must lie in \[0, 1\), got 1.0"),
        (lambda: CostAwareSampler([1.0], seed=-1), "seed must be a non-negative integer, got -1"),
        (lambda: CostAwareSampler([1.0], world_size=0), "world_size must be a positive integer, got 0"),
        (lambda: _loss(clip_low=1.0), r"clip_low must lie in \[0, 1\), got 1.0"),
        (lambda: _loss(clip_high=-0.5), "clip_high must be >= 0 and finite, got -0.5"),
        (lambda: _sampling(zero_tol=1.0), r"zero_tol must lie in \[0, 1\), got 1.0"),
        (
            lambda: _rollouts().CostModel(generation_cost=-1.0),
            r"generation_cost must be a finite number >= 0 and <= 1e\+06",
        ),
        (lambda: _rollouts().greso(step=1.0), r"step must lie in \(0, 1\), got 1.0"),
        (lambda: _rollouts().Greso(p_easy=0.0), r"p_easy must lie in \(0, 1\) \(0 lets a weight"),
    ],
)
def test_the_validators_are_checks_calls_with_their_messages(call, message):
    with pytest.raises(ValueError, match=rf"^{message}"):
        call()
    assert _checks.in_interval(0.0, "x", 0.0, 1.0, open_high=True) == 0.0


def _sampling(**options):
    from costaware.grpo.config import SamplingConfig

    return SamplingConfig(**options)


def _rollouts():
    from costaware.rollouts import prompts

    return prompts
