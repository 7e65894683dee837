"""Per-prompt online state: updates, decay, save/resume, the sampler's online cost updates, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costaware.rollouts import PromptState, StateConfig, cost_aware_prompts
from costaware.rollouts.state import ALL_CORRECT, ALL_WRONG, INFORMATIVE, UNSEEN
from costaware.sampler import CostAwareSampler


def _history(n: int = 6, G: int = 4, rounds: int = 5, seed: int = 0) -> PromptState:
    rng = np.random.default_rng(seed)
    st = PromptState(StateConfig(group_size=G, decay=0.7, prior_pass_rate=0.3), n, prompt_tokens=rng.integers(5, 50, n))
    for t in range(rounds):
        ids = rng.integers(0, n, 4)
        st.update(ids, (rng.random((4, G)) < 0.6).astype(float), rng.integers(1, 30, (4, G)), round=2 * t)
    return st


def test_status_and_zero_variance_streak_follow_the_groups_in_order():
    st = PromptState(StateConfig(group_size=3), 4)
    st.update([0, 1, 2], [[1, 1, 1], [0, 0, 0], [1, 0, 1]], np.ones((3, 3)), round=0)
    assert st.status.tolist() == [ALL_CORRECT, ALL_WRONG, INFORMATIVE, UNSEEN]
    assert st.zero_streak.tolist() == [1, 1, 0, 0]
    # prompt 0 drawn twice in one round: zero, zero -> streak 3; prompt 1: zero then informative -> 0;
    # prompt 2: informative then zero -> 1
    st.update(
        [0, 1, 2, 0, 1, 2], [[1, 1, 1], [0, 0, 0], [0, 1, 1], [1, 1, 1], [1, 0, 0], [0, 0, 0]], np.ones((6, 3)), 1
    )
    assert st.zero_streak.tolist() == [3, 0, 1, 0]
    assert st.status.tolist() == [ALL_CORRECT, INFORMATIVE, ALL_WRONG, UNSEEN]


def test_posterior_decays_by_age_in_rounds():
    cfg = StateConfig(group_size=2, prior_pass_rate=0.25, prior_strength=4.0, decay=0.5)
    st = PromptState(cfg, 2)
    st.update([0], [[1, 1]], [[3, 5]], round=2)
    a, b = st.posterior(round=5)  # age 3: 2 successes weigh 2 · 0.5³
    np.testing.assert_allclose(a, [1.0 + 2 * 0.125, 1.0])
    np.testing.assert_allclose(b, [3.0, 3.0])
    st.update([0], [[0, 0]], [[7, 9]], round=4)  # old successes aged 2 rounds, then 2 failures
    a, b = st.posterior(round=4)
    np.testing.assert_allclose([a[0], b[0]], [1 + 2 * 0.25, 3 + 2])
    # expected length: decayed mean shrunk to the mean of every completion so far (prior weight 1)
    prior = (3 + 5 + 7 + 9) / 4
    want = (prior + 0.25 * 8 + 16) / (1 + 0.25 * 2 + 2)
    assert st.expected_length(round=4)[0] == pytest.approx(want) and st.expected_length(4)[1] == pytest.approx(prior)


def test_state_survives_save_and_resume_through_json_with_identical_draws():
    st = _history()
    restored = PromptState.from_state_dict(json.loads(json.dumps(st.state_dict())))
    for name in ("successes", "failures", "length_sum", "length_weight", "last_round", "status", "zero_streak"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(st, name))
    s = cost_aware_prompts(floor=0.1)
    q1, q2 = s.probabilities(st, 9), s.probabilities(restored, 9)
    np.testing.assert_array_equal(q1, q2)

    def draws(state):
        g, c = s.sampler_inputs(state, 9)
        return list(CostAwareSampler(c, g, alpha=0.1, weights="raw", num_samples=50, seed=3, yield_weights=True))

    assert draws(st) == draws(restored)
    # and both keep evolving identically
    for x in (st, restored):
        x.update([1, 2], [[1, 0, 0, 1], [1, 1, 1, 1]], [[4] * 4, [6] * 4], round=9)
    assert draws(st) == draws(restored)


def test_sampler_cost_updates_take_effect_at_the_next_draw_and_are_saved():
    s = CostAwareSampler(np.ones(4), num_samples=300, chunk_size=100, seed=0, weights="raw", yield_weights=True)
    it = iter(s)
    head = [next(it) for _ in range(37)]  # inside the first chunk of 100
    s.update_costs([0, 1, 2], [1e16, 1e16, 1e16])  # p ∝ 1/√c moves (almost) all mass to example 3
    p = s.probabilities
    rest = list(it)
    assert len(head) + len(rest) == 300
    assert all(w == pytest.approx(1 / (4 * p[i])) for i, w in rest)  # every later draw is under the new p
    assert sum(i == 3 for i, _ in rest) == len(rest)
    state = s.state_dict()
    t = CostAwareSampler(np.ones(4), num_samples=300, chunk_size=100, seed=0, weights="raw")
    t.load_state_dict(state)
    np.testing.assert_array_equal(t.costs, s.costs)
    with pytest.raises(ValueError, match="values must be > 0"):
        s.update_costs([0], [0.0])


def test_prompt_sampler_follows_state_updates_through_the_sampler():
    st = _history()
    s = cost_aware_prompts(floor=0.2)
    g, c = s.sampler_inputs(st, 9)
    sampler = CostAwareSampler(c, g, alpha=0.2, weights="raw", num_samples=40, seed=0)
    st.update([0, 1, 2, 3], np.ones((4, 4)), np.full((4, 4), 50), round=9)  # four prompts turn all-correct
    g, c = s.sampler_inputs(st, 10)
    n = st.num_prompts
    sampler.update_proxies(np.arange(n), g)
    sampler.update_costs(np.arange(n), c)
    np.testing.assert_allclose(sampler.probabilities, s.probabilities(st, 10), rtol=1e-12)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: cost_aware_prompts(floor=0.0), "floor must lie in \\(0, 1\\)"),
        (lambda: cost_aware_prompts(floor=1.0), "floor must lie in \\(0, 1\\)"),
        (lambda: cost_aware_prompts(floor=-0.5), "floor must lie in \\(0, 1\\)"),
        (lambda: StateConfig(group_size=4, prior_pass_rate=1.2), "prior_pass_rate must lie in"),
        (lambda: StateConfig(group_size=4, prior_pass_rate=-0.1), "prior_pass_rate must lie in"),
        (lambda: StateConfig(group_size=4, decay=0.0), "decay must lie in"),
        (lambda: StateConfig(group_size=4, length_prior=-3.0), "length_prior must be > 0"),
        (
            lambda: PromptState(StateConfig(group_size=2), 3).update([0], [[1, 0]], [[5, -1]], 0),
            "completion_lengths must be finite and >= 0",
        ),
        (lambda: PromptState(StateConfig(group_size=2), 3).update([3], [[1, 0]], [[5, 1]], 0), "prompt_ids must be"),
        (
            lambda: PromptState(StateConfig(group_size=2), 3).update([0], [[1, 0, 1]], [[5, 1, 1]], 0),
            "rewards must have shape",
        ),
        (lambda: PromptState(StateConfig(group_size=2), 3).update([0], [[2, 0]], [[5, 1]], 0), "rewards must lie in"),
    ],
)
def test_bad_input_gets_one_clear_error_naming_the_argument(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_rounds_must_not_go_back():
    st = PromptState(StateConfig(group_size=2), 2)
    st.update([0], [[1, 0]], [[1, 1]], round=3)
    with pytest.raises(ValueError, match="round must not go back"):
        st.update([0], [[1, 0]], [[1, 1]], round=2)
    with pytest.raises(ValueError, match="round must be >="):
        st.pass_rate(round=1)
