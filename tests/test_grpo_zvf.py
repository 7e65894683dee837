"""Zero-variance filtering with scripted generators."""

from __future__ import annotations

import pytest
import torch

from costaware.grpo.zvf import fill_batch, nonzero_variance_groups


def test_nonzero_variance_groups_flags_groups_with_unequal_rewards():
    r = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5])
    assert nonzero_variance_groups(r, 3).tolist() == [False] * 3 + [True] * 3 + [False] * 3 + [False] * 3
    with pytest.raises(ValueError, match="finite"):
        nonzero_variance_groups(torch.tensor([1.0, float("nan")]), 2)
    with pytest.raises(ValueError, match="multiple of group_size"):
        nonzero_variance_groups(torch.ones(3), 2)


class Scripted:
    """Returns pre-scripted group rewards; each row's "id" tells which group of which call it came from."""

    def __init__(self, script: list[list[list[float]]]):
        self.script = script
        self.calls: list[int] = []
        self.next_id = 0

    def __call__(self, num_groups: int):
        groups = self.script[len(self.calls)][:num_groups]
        assert len(groups) == num_groups, "script too short"
        self.calls.append(num_groups)
        r = torch.tensor(groups, dtype=torch.float32).reshape(-1)
        ids = torch.arange(self.next_id, self.next_id + num_groups).repeat_interleave(len(groups[0]))
        self.next_id += num_groups
        return {"id": ids, "tokens": torch.arange(r.numel() * 2).reshape(-1, 2) + 100 * len(self.calls)}, r


def test_fill_over_rounds_keeps_order_and_truncates():
    gen = Scripted(
        [
            [[1, 1], [0, 1], [0, 0]],  # round 1: asks 3, keeps group 1
            [[1, 0], [1, 1]],  # round 2: asks the 2 missing, keeps group 3
            [[0, 1]],  # round 3: asks 1, keeps group 5
        ]
    )
    out = fill_batch(gen, target_groups=3, group_size=2, max_rounds=5)
    assert gen.calls == [3, 2, 1]
    assert out.batch["id"].tolist() == [1, 1, 3, 3, 5, 5]
    assert out.rewards.tolist() == [0, 1, 1, 0, 0, 1]
    assert out.batch["tokens"].shape == (6, 2)
    rep = out.report
    assert (rep.rounds, rep.groups_generated, rep.groups_kept, rep.filled) == (3, 6, 3, True)
    assert rep.fill_fraction == 1.0 and rep.keep_rate == pytest.approx(0.5)


def test_fixed_round_size_truncates_surplus():
    gen = Scripted([[[0, 1], [1, 0], [0, 1], [1, 1]]])
    out = fill_batch(gen, target_groups=2, group_size=2, groups_per_round=4)
    assert gen.calls == [4]
    assert out.batch["id"].tolist() == [0, 0, 1, 1]  # group 2 dropped as surplus
    assert out.report.groups_kept == 3 and out.report.fill_fraction == 1.0


def test_gives_up_after_max_rounds():
    gen = Scripted([[[1, 1, 1], [0, 1, 0]], [[0, 0, 0]], [[1, 1, 1]]])
    out = fill_batch(gen, target_groups=2, group_size=3, max_rounds=3)
    assert gen.calls == [2, 1, 1]
    assert out.batch["id"].tolist() == [1, 1, 1]
    assert not out.report.filled and out.report.fill_fraction == 0.5 and out.report.rounds == 3


def test_nothing_kept_gives_empty_batch_with_shapes():
    gen = Scripted([[[1, 1]], [[0, 0]]])
    out = fill_batch(gen, target_groups=1, group_size=2, max_rounds=2)
    assert out.batch["tokens"].shape == (0, 2) and out.batch["id"].dtype == torch.int64
    assert out.rewards.numel() == 0 and out.report.fill_fraction == 0.0 and not out.report.filled


@pytest.mark.parametrize(
    ("generate", "match"),
    [
        (lambda k: ({"x": torch.zeros(2 * k)}, torch.zeros(2 * k + 1)), "rewards, expected"),
        (lambda k: ({"x": torch.zeros(3)}, torch.tensor([0.0, 1.0] * k)), "batch\\['x'\\]"),
        (lambda k: ([1, 2], torch.tensor([0.0, 1.0] * k)), "dict"),
        (lambda k: ({"x": torch.zeros(2 * k)}, torch.tensor([float("nan"), 1.0] * k)), "finite"),
    ],
)
def test_bad_generate_output_is_a_value_error(generate, match):
    with pytest.raises(ValueError, match=match):
        fill_batch(generate, target_groups=1, group_size=2)


def test_fill_batch_rejects_non_positive_sizes_naming_them():
    def gen(k):
        return {"x": torch.zeros(2 * k)}, torch.tensor([0.0, 1.0] * k)

    for kwargs, match in [
        ({"target_groups": 0}, "target_groups"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"group_size": 0}, "group_size"),
        ({"groups_per_round": 0}, "groups_per_round"),
    ]:
        args = {"target_groups": 1, "group_size": 2, "max_rounds": 2} | kwargs
        with pytest.raises(ValueError, match=match):
            fill_batch(gen, **args)
