"""The sortcheck family: demonstrations parse back, the reward on hand-made cases, lengths that differ within a
group (self-check about 2x, rambles to the budget, all wrong), and its registration."""

from __future__ import annotations

import numpy as np
import pytest

from costaware.experiments import sortcheck, sorting
from costaware.experiments.profile import Profile
from costaware.experiments.sortcheck import CheckStyle, check_reward, demonstrations, max_response_tokens
from costaware.experiments.specs import run_specs
from costaware.experiments.tasks import get_task


def _tasks(n: int, lo: int, hi: int, seed: int = 0) -> sorting.SortTasks:
    return sorting.make_tasks(n, min_size=lo, max_size=hi, rng=np.random.default_rng(seed))


def test_reward_on_hand_made_cases():
    cases = {
        "35,359,1359.": 1.0,  # right, short
        "35,359,1359;35,359,1359.": 1.0,  # right, long (self-checked)
        "35,359,1395;35,359,1359.": 1.0,  # a slip caught by the check: the check's answer counts
        "35,359,1359;35,395,1395.": 0.0,  # right first pass, wrong check: the last answer counts
        "35,359,1395.": 0.0,  # wrong
        "35,359,1359": 0.0,  # truncated: a right list with no end mark
        "35,395,395,395,395,395,395,39": 0.0,  # ramble to the budget
        "35,359,1359;.": 0.0,
        "35,359,1359.;": 0.0,
        "35;;1359.": 0.0,
        "1359..": 0.0,
        "": 0.0,  # malformed
        "35,359,1359;35,359,1359;35,359,1359.": 0.0,  # at most one check
    }
    assert check_reward(list(cases), answer=["1359"] * len(cases)) == list(cases.values())
    assert check_reward([[{"content": "08,058."}]], answer=["058"]) == [1.0]
    assert check_reward(["8,58."], answer=["058"]) == [0.0]  # leading zeros matter
    with pytest.raises(ValueError, match="digit strings"):
        sortcheck.is_correct(["1."], np.array([1]))
    with pytest.raises(ValueError, match="differ in length"):
        sortcheck.is_correct(["1."], ["1", "2"])
    # one answer check for both sort tasks: each reads the response with its own parser
    from costaware.experiments import sorting

    responses = ["35,359,1359;35,359,1359.", "35,359,1359"]
    assert sortcheck.is_correct(responses, ["1359"] * 2).tolist() == [True, False]
    assert sorting.is_correct(responses, ["1359"] * 2).tolist() == [False, True]
    assert sorting.is_correct(responses, ["1359"] * 2, parse=sortcheck.parse_answer).tolist() == [True, False]


def test_clean_demonstrations_parse_back_checked_or_not():
    tasks = _tasks(500, 2, 9)
    demos = demonstrations(tasks, rng=np.random.default_rng(1))
    assert [sortcheck.parse_answer(d) for d in demos] == tasks.answers.tolist()
    checked = np.array([";" in d for d in demos])
    assert 0.25 < checked.mean() < 0.45  # check_prob 0.35
    plain = [d[:-1] for d in demos]
    assert [p.split(";")[0] for p in plain] == sorting.demonstrations(tasks)  # sort's trace, then the check
    assert all(p.split(";")[1] == p.split(";")[0] for p, c in zip(plain, checked, strict=True) if c)


def test_rambles_follow_an_out_of_order_list_run_to_the_budget_and_are_wrong():
    tasks = _tasks(3000, 2, 7, seed=2)
    demos = demonstrations(tasks, mistake_prob=0.2, rng=np.random.default_rng(3))
    budget = max_response_tokens(7)
    right = sortcheck.is_correct(demos, tasks.answers)
    ramble = np.array([not d.endswith(".") for d in demos])
    assert ramble.any() and not right[ramble].any()
    assert all(len(d) == budget for d, r in zip(demos, ramble, strict=True) if r)
    for d in np.array(demos)[ramble][:200]:  # stuck on its first out-of-order list
        segs = d.split(",")
        stuck = next(s for s in segs if list(s) != sorted(s))
        first = segs.index(stuck)
        assert all(s == stuck for s in segs[first:-1]) and stuck.startswith(segs[-1])
    lengths = np.array([len(p) + len(d) + 1 for p, d in zip(tasks.prompts, demos, strict=True)])
    assert lengths[~right].mean() > 1.5 * lengths[right].mean()  # wrong responses run longer
    none = demonstrations(tasks, mistake_prob=0.2, rng=np.random.default_rng(3), style=CheckStyle(ramble_prob=0.0))
    assert all(d.endswith(".") for d in none)


def test_demonstrations_of_one_prompt_differ_in_length_within_mixed_groups():
    from costaware.report.cost_structure import cost_structure
    from costaware.rollouts.logs import PromptRound

    tasks = _tasks(200, 2, 7, seed=5)
    records = []
    for i in range(len(tasks)):  # a group of 8 demonstrations per prompt, as a rollout group is
        group = sorting.SortTasks(digits=np.repeat(tasks.digits[i : i + 1], 8, axis=0),
                                  sizes=np.repeat(tasks.sizes[i], 8),
                                  prompts=[tasks.prompts[i]] * 8, answers=np.repeat(tasks.answers[i], 8))  # fmt: skip
        d = demonstrations(group, mistake_prob=0.1, rng=np.random.default_rng(i))
        records.append(PromptRound(0, i, tuple(sortcheck.is_correct(d, group.answers).astype(float).tolist()),
                                   tuple(len(x) + 1 for x in d), prompt_tokens=len(tasks.prompts[i])))  # fmt: skip
    s = cost_structure(records)
    assert s.mixed_groups > 20 and s.median_cv > 0.3 and s.wrong_longer and s.within_length_reward_corr < 0


def test_style_and_budget_reject_bad_values():
    with pytest.raises(ValueError, match="check_prob must lie in"):
        CheckStyle(check_prob=1.5)
    with pytest.raises(ValueError, match="ramble_prob must lie in"):
        CheckStyle(ramble_prob=True)
    with pytest.raises(ValueError, match="max_size must be an integer >= 2, got 1"):
        max_response_tokens(1)
    assert max_response_tokens(7) == 2 * (27 + 5) + 6


def test_registered_for_profiles_and_the_set_option():
    from costaware.experiments.runner import parse_overrides

    task = get_task("sortcheck")
    assert task.name == "sortcheck" and get_task("sortcheck:9") is task
    assert set(task.alphabet) >= set(sortcheck.ALPHABET)
    assert parse_overrides(["task=sortcheck"]) == {"task": "sortcheck"}
    specs = run_specs(Profile(task="sortcheck", seeds=(0,)), ["none"], ("headline",))
    assert [(s.task, s.method) for s in specs] == [("sortcheck", "none")]
