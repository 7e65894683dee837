"""GRESO's skip and the cost-aware skip reproduce their rules on hand-made reward histories."""

from __future__ import annotations

import numpy as np
import pytest

from costaware.rollouts import (
    GresoControl,
    PromptState,
    StateConfig,
    cost_aware_skip,
    fill_prompt_batch,
    greso,
)
from costaware.rollouts.prompts import CostAwarePrompts, TwoStage, UniformPrompts

ALL1, ALL0, MIX = [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]


def _history() -> PromptState:
    """Prompt 0: easy twice in a row; 1: hard three times; 2: easy then informative; 3: informative then
    hard; 4: never seen."""
    st = PromptState(StateConfig(group_size=4), 5)
    L = np.full((4, 4), 10)
    st.update([0, 1, 2, 3], [ALL1, ALL0, ALL1, MIX], L, round=0)
    st.update([0, 1, 2, 3], [ALL1, ALL0, MIX, ALL0], L, round=1)
    st.update([1], [ALL0], L[:1], round=2)
    return st


def test_greso_keeps_with_p_to_the_power_of_the_zero_variance_streak():
    st = _history()
    assert st.zero_streak.tolist() == [2, 3, 0, 1, 0]
    keep = greso().keep_probabilities(st, GresoControl(p_easy=0.6, p_hard=0.3))
    np.testing.assert_allclose(keep, [0.6**2, 0.3**3, 1.0, 0.3, 1.0])


def test_greso_adapts_each_class_by_one_step_towards_its_target_share():
    g, c = greso(), GresoControl(0.5, 0.5)
    # 8 groups: 3 all correct (37.5% >= 25%/3), 1 all wrong (12.5% < 25%·2/3), 4 informative
    rewards = np.array([ALL1] * 3 + [ALL0] + [MIX] * 4)
    assert g.adapt(c, rewards, epoch=0) == c  # nothing moves in the first epoch
    nxt = g.adapt(c, rewards, epoch=1)
    assert nxt.p_easy == pytest.approx(0.49) and nxt.p_hard == pytest.approx(0.51)
    # clipped to [min_p, max_p]
    assert g.adapt(GresoControl(0.05, 0.95), rewards, epoch=3) == GresoControl(0.05, 0.95)
    # exactly at the target counts as "at or above": skip more
    at = np.array([ALL1] + [MIX] * 11)  # 1/12 = 0.25/3
    assert g.adapt(c, at, epoch=1).p_easy == pytest.approx(0.49)


def test_greso_labels_and_oversampled_batch():
    g = greso()
    assert (g.biased, g.weighted, g.uses_costs) == (True, False, False)
    assert g.sampling_batch_size(256) == 384


def test_fill_prompt_batch_keeps_drawing_until_the_batch_is_full():
    keep = np.array([1.0, 0.0, 1.0, 0.0])
    stream = iter(np.arange(100) % 4)
    got, seen = fill_prompt_batch(
        lambda m: [next(stream) for _ in range(m)], keep, batch_size=5, candidates_per_call=3, rng=0
    )
    assert got.tolist() == [0, 2, 0, 2, 0] and seen == 9  # calls (0,1,2) (3,0,1) (2,3,0)


def test_cost_aware_skip_rises_as_the_predicted_gain_per_root_cost_falls():
    st = _history()
    s = cost_aware_skip(min_keep=0.1, reference=0.5)
    assert (s.biased, s.weighted, s.uses_costs) == (True, False, True)
    keep = s.keep_probabilities(st, round=3)
    e = s.cost.expected(st, 3)
    score = e["abs_adv_sum"] / np.sqrt(e["cost"])
    order = np.argsort(score)
    assert (np.diff(keep[order]) >= 0).all()  # keep is monotone in Ĝ/√ĉ
    assert keep.min() >= 0.1 and (keep[score >= np.quantile(score, 0.5)] == 1).all()
    np.testing.assert_allclose(keep, np.clip(score / np.quantile(score, 0.5), 0.1, 1.0))


def test_unbiased_samplers_are_labelled_unbiased():
    for s in (UniformPrompts(), CostAwarePrompts(), TwoStage()):
        assert s.biased is False
    assert CostAwarePrompts().weighted and not UniformPrompts().weighted
