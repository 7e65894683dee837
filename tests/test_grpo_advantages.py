"""group_advantages / sequence_costs against brute force, verl's and TRL's own code."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.grpo.advantages import group_advantages, sequence_costs, sequence_costs_from_masks


def _brute(rewards, m, eps, unbiased=True, scale=True):
    out = []
    for g in np.asarray(rewards, dtype=np.float64).reshape(-1, m):
        sd = g.std(ddof=1 if unbiased else 0)
        out.extend((g - g.mean()) / (sd + eps) if scale else g - g.mean())
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(1, 5),
    m=st.integers(2, 6),
    data=st.data(),
    unbiased=st.booleans(),
    scale=st.booleans(),
)
def test_group_advantages_match_brute_force(groups, m, data, unbiased, scale):
    r = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=groups * m, max_size=groups * m))
    got = group_advantages(torch.tensor(r, dtype=torch.float64), m, scale_by_std=scale, unbiased_std=unbiased)
    np.testing.assert_allclose(got.numpy(), _brute(r, m, 1e-6, unbiased, scale), rtol=1e-10, atol=1e-12)


def test_known_values_and_constant_groups():
    a = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0]), 3)
    s = np.sqrt(1 / 3)  # unbiased std of (1, 0, 0)
    np.testing.assert_allclose(
        a.numpy(), [(2 / 3) / (s + 1e-6), -(1 / 3) / (s + 1e-6), -(1 / 3) / (s + 1e-6), 0, 0, 0], rtol=1e-6
    )
    assert (a[3:] == 0).all()  # constant group: exact zeros, no NaN
    assert a.dtype == torch.float32
    assert (group_advantages(torch.tensor([3.0, 4.0]), 1) == 0).all()  # singleton groups


def test_matches_verl_grpo_outcome_advantage():
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    gen = torch.Generator().manual_seed(0)
    m, groups, length = 4, 6, 5
    r = torch.randint(0, 2, (groups * m,), generator=gen).float()
    r[:m] = 1.0  # one constant group
    token_rewards = torch.zeros(groups * m, length)
    token_rewards[:, -1] = r
    index = np.repeat(np.arange(groups), m)
    ref, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, torch.ones(groups * m, length), index)
    np.testing.assert_allclose(group_advantages(r, m).numpy(), ref[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    ref_dr, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, torch.ones(groups * m, length), index, norm_adv_by_std_in_grpo=False
    )
    np.testing.assert_allclose(group_advantages(r, m, scale_by_std=False).numpy(), ref_dr[:, 0].numpy(), atol=1e-6)


def test_matches_trl_formula_with_eps_1e4():
    trl_utils = pytest.importorskip("trl.trainer.utils")
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    m = 4
    mean = r.view(-1, m).mean(1).repeat_interleave(m)
    std = trl_utils.nanstd(r.view(-1, m), dim=1).repeat_interleave(m)
    ref = (r - mean) / (std + 1e-4)  # grpo_trainer.py, scale_rewards="group"
    np.testing.assert_allclose(group_advantages(r, m, eps=1e-4).numpy(), ref.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    ("rewards", "m", "match"),
    [
        ([1.0, float("nan")], 2, "finite"),
        ([1.0, float("inf")], 2, "finite"),
        ([1.0, 0.0, 1.0], 2, "multiple of group_size"),
        ([[1.0, 0.0]], 2, "1-D"),
        ([], 2, "empty"),
        ([1.0, 0.0], 0, "group_size"),
    ],
)
def test_bad_rewards_raise_value_error(rewards, m, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(torch.tensor(rewards), m)


def test_eps_zero_constant_group_raises():
    with pytest.raises(ValueError, match="eps=0"):
        group_advantages(torch.tensor([1.0, 1.0]), 2, eps=0.0)
    with pytest.raises(ValueError, match="eps"):
        group_advantages(torch.tensor([1.0, 0.0]), 2, eps=-1.0)


def test_sequence_costs_count_the_real_tokens():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]])
    c = sequence_costs(mask)
    assert c.dtype == torch.int64 and c.tolist() == [3, 5, 1]
    assert sequence_costs(mask.bool()).tolist() == [3, 5, 1]
    pm = torch.tensor([[0, 1, 1], [1, 1, 1]])
    cm = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    c2 = sequence_costs_from_masks(pm, cm)
    assert c2.dtype == torch.int64 and c2.tolist() == [5, 4]
    # equals the concatenated attention mask, as TRL builds it
    assert c2.tolist() == sequence_costs(torch.cat([pm, cm], dim=1)).tolist()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: sequence_costs(torch.tensor([1, 1])), "2-D"),
        (lambda: sequence_costs(torch.tensor([[1, 2]])), "0/1"),
        (lambda: sequence_costs(torch.tensor([[1, 1], [0, 0]])), "row 1 has no tokens"),
        (lambda: sequence_costs(torch.zeros(0, 3)), "at least one row"),
        (lambda: sequence_costs_from_masks(torch.ones(2, 2), torch.ones(3, 2)), "mismatched rows"),
        (lambda: sequence_costs_from_masks(torch.zeros(1, 2), torch.zeros(1, 2)), "no tokens"),
    ],
)
def test_bad_masks_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
