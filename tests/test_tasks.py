"""Task families: registry, determinism, length spread, traces checked by brute force, rewards, mistakes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.experiments import arith, sorting
from costaware.experiments.tasks import TASKS, TaskFamily, describe_sizes, get_task, split_task_id


def _lengths(task, tasks, responses) -> np.ndarray:
    return np.array([len(p) + len(r) + 1 for p, r in zip(tasks.prompts, responses, strict=True)])


def _distinct(n: int, size: int, seed: int) -> sorting.SortTasks:
    """Lists of distinct digits, so that every slip changes the written list."""
    rng = np.random.default_rng(seed)
    digits = np.argsort(rng.random((n, 10)), axis=1)[:, :size].astype(np.int64)
    sizes = np.full(n, size)
    prompts = ["".join(map(str, row)) + "=" for row in digits.tolist()]
    answers = np.array(["".join(map(str, sorted(row))) for row in digits.tolist()])
    return sorting.SortTasks(digits=digits, sizes=sizes, prompts=prompts, answers=answers)


def test_get_task_returns_each_registered_family_and_rejects_unknown_names():
    assert list(TASKS) == ["arith", "sort", "sortcheck"]
    for name in TASKS:
        task = get_task(name)
        assert isinstance(task, TaskFamily) and task.name == name
    with pytest.raises(
        ValueError,
        match=r"name must be one of \['arith', 'sort', 'sortcheck'\] \(optionally ':max_size'\), got 'sorting'",
    ):
        get_task("sorting")
    with pytest.raises(ValueError, match="name"):
        get_task(None)


def test_task_ids_name_a_family_at_its_own_largest_size():
    assert split_task_id("sort:9") == ("sort", 9) and split_task_id("arith") == ("arith", None)
    assert get_task("sort:9") is get_task("sort")
    for bad in ("sort:", "sort:x", "sort:0", "sort:-2", "sort:9:1"):
        with pytest.raises(ValueError, match=f"family:max_size.*got '{bad}'"):
            get_task(bad)
    with pytest.raises(ValueError, match="got 'sorting:9'"):
        get_task("sorting:9")


def test_arith_wraps_the_arith_module():
    task = get_task("arith")
    a = task.make_tasks(50, min_size=3, max_size=7, rng=np.random.default_rng(4))
    b = arith.make_tasks(50, min_terms=3, max_terms=7, rng=np.random.default_rng(4))
    assert a.prompts == b.prompts and (task.sizes(a) == b.num_terms).all()
    demos = task.demonstrations(a, mistake_prob=0.2, rng=np.random.default_rng(1))
    assert demos == arith.demonstrations(b, mistake_prob=0.2, rng=np.random.default_rng(1))
    assert task.reward(demos, answer=list(a.answers)) == arith.arith_reward(demos, answer=list(a.answers))
    assert task.max_response_tokens(7) == 4 * 6 + 4


@pytest.mark.parametrize("name", list(TASKS))
def test_same_seed_same_tasks_and_demonstrations(name):
    task = get_task(name)

    def run(seed):
        rng = np.random.default_rng(seed)
        tasks = task.make_tasks(64, min_size=2, max_size=9, rng=rng)
        return tasks.prompts, task.demonstrations(tasks, mistake_prob=0.3, rng=rng)

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("name", list(TASKS))
def test_clean_demonstrations_are_correct_and_fit_the_budget(name):
    task = get_task(name)
    lo, hi = task.default_sizes
    tasks = task.make_tasks(400, min_size=lo, max_size=hi, rng=np.random.default_rng(0))
    demos = task.demonstrations(tasks)
    assert task.is_correct(demos, tasks.answers).all()
    assert task.reward(demos, answer=list(tasks.answers)) == [1.0] * len(demos)
    assert task.reward([[{"content": d}] for d in demos[:3]], answer=list(tasks.answers[:3])) == [1.0] * 3
    slipped = task.demonstrations(tasks, mistake_prob=0.5, rng=np.random.default_rng(1))
    assert max(map(len, demos + slipped)) <= task.max_response_tokens(hi)
    assert set("".join(tasks.prompts + demos + slipped)) <= set(task.alphabet)


def test_sort_length_spread_is_quadratic_and_over_10x():
    task = get_task("sort")
    tasks = task.make_tasks(2000, min_size=2, max_size=12, rng=np.random.default_rng(0))
    k = task.sizes(tasks)
    lengths = _lengths(task, tasks, task.demonstrations(tasks))
    np.testing.assert_array_equal(lengths, k * (k + 5) // 2 - 1)  # prompt k+1, trace k(k+1)/2-1 + k-2, EOS
    assert set(k.tolist()) == set(range(2, 13))
    assert lengths.max() / lengths.min() >= 10  # 101 / 6
    # the built-in arithmetic task stays under 10x at the same sizes: the point of the second family
    a = get_task("arith")
    at = a.make_tasks(2000, min_size=2, max_size=12, rng=np.random.default_rng(0))
    al = _lengths(a, at, a.demonstrations(at))
    assert al.max() / al.min() < 10


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lo=st.integers(2, 9), extra=st.integers(0, 5))
def test_sort_trace_is_insertion_sort_by_brute_force(seed, lo, extra):
    tasks = sorting.make_tasks(20, min_size=lo, max_size=lo + extra, rng=np.random.default_rng(seed))
    for prompt, demo, answer, k in zip(
        tasks.prompts, sorting.demonstrations(tasks), tasks.answers, tasks.sizes.tolist(), strict=True
    ):
        digits = prompt[:-1]
        assert prompt.endswith("=") and len(digits) == k
        assert demo.split(",") == ["".join(sorted(digits[: j + 1])) for j in range(1, k)]
        assert answer == "".join(sorted(digits))


def _consistent(prompt: str, demo: str) -> bool:
    """Every step is the previous step's list with the next prompt digit inserted somewhere."""
    prev = prompt[0]
    for j, seg in enumerate(demo.split(","), start=1):
        d = prompt[j]
        if len(seg) != j + 1 or not any(seg[:i] + seg[i + 1 :] == prev and seg[i] == d for i in range(len(seg))):
            return False
        prev = seg
    return True


def test_sort_mistakes_slip_at_the_given_rate_and_the_chain_continues():
    size, p = 8, 0.2
    tasks = _distinct(3000, size, seed=3)
    demos = sorting.demonstrations(tasks, mistake_prob=p, rng=np.random.default_rng(5))
    assert all(_consistent(t, d) for t, d in zip(tasks.prompts[:300], demos[:300], strict=True))
    # a step is a slip when its list differs from the correct insertion into the previous written list
    slips = 0
    for prompt, demo in zip(tasks.prompts, demos, strict=True):
        prev = prompt[0]
        for j, seg in enumerate(demo.split(","), start=1):
            d = prompt[j]
            pos = next((i for i, c in enumerate(prev) if c > d), len(prev))
            slips += seg != prev[:pos] + d + prev[pos:]
            prev = seg
    rate = slips / (len(demos) * (size - 1))
    assert abs(rate - p) < 4 * np.sqrt(p * (1 - p) / (len(demos) * (size - 1)))
    # distinct digits: a slip is never undone by a later step, so correct = no slip at all
    correct = sorting.is_correct(demos, tasks.answers)
    expected = (1 - p) ** (size - 1)
    assert abs(correct.mean() - expected) < 4 * np.sqrt(expected * (1 - expected) / len(demos))


def test_sort_mistakes_hurt_long_lists_more():
    tasks = sorting.make_tasks(6000, min_size=2, max_size=12, rng=np.random.default_rng(0))
    demos = sorting.demonstrations(tasks, mistake_prob=0.15, rng=np.random.default_rng(1))
    ok = sorting.is_correct(demos, tasks.answers)
    acc = np.array([ok[tasks.sizes == k].mean() for k in range(2, 13)])
    assert acc[0] > 0.8 and acc[-1] < 0.5 and acc[0] > acc[5] > acc[-1]
    lengths = np.array([len(d) for d in demos])
    clean = np.array([len(d) for d in sorting.demonstrations(tasks)])
    np.testing.assert_array_equal(lengths, clean)  # slips never change the trace length


def test_sort_rewards_and_parsing():
    assert sorting.sort_reward(["35,359,1359", "1359", "35,359,1395", "35,,1359", "", "0135"],
                               answer=["1359"] * 5 + ["0135"]) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]  # fmt: skip
    assert sorting.sort_reward([[{"content": " 02 "}]], answer=["02"]) == [1.0]
    assert sorting.parse_answer("12a") is None and sorting.parse_answer(None) is None
    assert not sorting.is_correct(["2"], ["02"])[0]  # leading zeros matter


def test_sort_task_helpers_reject_bad_sizes_probabilities_and_answers():
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        sorting.make_tasks(0)
    with pytest.raises(ValueError, match="min_size must be an integer >= 2, got 1"):
        sorting.make_tasks(3, min_size=1)
    with pytest.raises(ValueError, match="max_size must be an integer >= min_size=5, got 4"):
        sorting.make_tasks(3, min_size=5, max_size=4)
    tasks = sorting.make_tasks(3, rng=np.random.default_rng(0))
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="mistake_prob"):
            sorting.demonstrations(tasks, mistake_prob=bad)
    with pytest.raises(ValueError, match="answers must be digit strings"):
        sorting.is_correct(["12"], [12])
    with pytest.raises(ValueError, match="differ in length"):
        sorting.is_correct(["12", "3"], ["12"])
    with pytest.raises(ValueError, match="max_size"):
        sorting.max_response_tokens(1)


@pytest.mark.parametrize("name", list(TASKS))
@pytest.mark.parametrize(("lo", "hi"), [(2, 2), (2, 7), (3, 9), (2, 12)])
def test_token_range_bounds_the_demonstrations_and_is_reached(name, lo, hi):
    """Prompt + response + EOS of clean and slipped demonstrations lie in the family's range; the extremes
    are reached (sort, sortcheck: by the sizes; arith: by all-1 and all-9 terms)."""
    task = get_task(name)
    first, last = task.token_range(lo, hi)
    tasks = task.make_tasks(3000, min_size=lo, max_size=hi, rng=np.random.default_rng(0))
    clean = _lengths(task, tasks, task.demonstrations(tasks))
    assert first <= clean.min() and clean.max() <= last
    if name == "arith":
        for digit, k, want in ((1, lo, first), (9, hi, last)):
            terms = np.zeros((1, hi), dtype=np.int64)
            terms[0, :k] = digit
            t = arith.ArithTasks(terms=terms, num_terms=np.array([k]), prompts=["+".join([str(digit)] * k) + "="],
                                 answers=terms.sum(axis=1))  # fmt: skip
            assert _lengths(task, t, task.demonstrations(t))[0] == want
        return
    slipped = _lengths(task, tasks, task.demonstrations(tasks, mistake_prob=0.5, rng=np.random.default_rng(1)))
    assert first <= slipped.min() and slipped.max() <= last
    assert clean.min() == first and max(clean.max(), slipped.max()) == last


def test_describe_sizes_names_the_family_its_unit_and_tokens():
    assert describe_sizes("sort", 2, 7) == "sort: 2..7 digits, prompt + response 6..41 tokens"
    assert describe_sizes("sort:9", 2, 9) == "sort: 2..9 digits, prompt + response 6..62 tokens"
    assert describe_sizes("arith", 2, 6) == "arith: 2..6 terms, prompt + response 6..27 tokens"
    assert describe_sizes("sortcheck", 2, 7) == "sortcheck: 2..7 digits, prompt + response 7..79 tokens"
    with pytest.raises(ValueError, match="name must be one of"):
        describe_sizes("sorting", 2, 7)
