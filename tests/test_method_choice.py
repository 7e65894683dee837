"""Which method at which price, from a settled record's rows: the rule on hand-made rows, and the wrong rules it
is not."""

from __future__ import annotations

import math

import pytest

from costaware.report.curves import Estimate
from costaware.report.method_choice import choice_sentence, choices, choose, task_sentence
from costaware.report.settled import Row


def _row(control: str, method: str, value: float, half: float, g: float = 1.0, estimator: str = "band") -> Row:
    est = (
        Estimate(value, value - half, value + half, seeds=30)
        if half == half
        else Estimate(value, math.nan, math.nan, seeds=2)
    )
    return Row("sort", f"{method} beats {control}", control, method, g, estimator, est, 0.8)


def _one(rows):
    (c,) = choices(rows, "band")
    return c


def test_the_only_shown_candidate_is_the_choice():
    c = _one([_row("none", "nonzero", 0.05, 0.08), _row("none", "p_star", 0.2, 0.05), _row("none", "pods", 0.0, 0.1)])
    assert c.left == ("p_star",)
    assert choice_sentence(c) == "at g = 1, use p\\*: it saves +20% [+15%, +25%] over GRPO"


def test_a_candidate_another_shown_one_beats_drops_out_read_in_either_direction():
    base = [_row("none", "nonzero", 0.15, 0.05), _row("none", "p_star", 0.2, 0.05), _row("none", "pods", 0.33, 0.05)]
    # "p* beats PODS": no, it is worse (PODS beats p*); "PODS beats nonzero": yes
    c = _one(base + [_row("pods", "p_star", -0.2, 0.1), _row("nonzero", "pods", 0.2, 0.1)])
    assert c.left == ("pods",)
    # "p* beats nonzero": yes, and no claim between PODS and the others: p* and PODS are not told apart
    c = _one(base + [_row("nonzero", "p_star", 0.1, 0.08)])
    assert c.left == ("p_star", "pods")
    assert choice_sentence(c) == (
        "at g = 1, use p\\*: it saves +20% [+15%, +25%] over GRPO (not told apart from it: PODS +33% [+28%, +38%])"
    )


def test_candidates_whose_comparisons_include_zero_are_all_named_simplest_first():
    """A rule that picks the largest point estimate would name PODS alone here: the simplest is used."""
    rows = [
        _row("none", "pods", 0.19, 0.07),
        _row("none", "p_star", 0.11, 0.1),
        _row("none", "nonzero", 0.12, 0.07),
        _row("nonzero", "p_star", -0.01, 0.08),
        _row("pods", "p_star", -0.09, 0.12),
        _row("nonzero", "pods", 0.07, 0.1),
    ]
    assert _one(rows).left == ("nonzero", "p_star", "pods")


def test_nothing_shown_keeps_grpo_and_too_few_seeds_decides_nothing():
    c = _one([_row("none", "nonzero", 0.02, 0.05), _row("none", "pods", -0.3, 0.1)])
    assert c.left == () and choice_sentence(c) == "at g = 1, no method is shown to save over GRPO: keep GRPO"
    c = _one([_row("none", "nonzero", 0.3, math.nan)])
    assert not c.decided and "too few seeds" in choice_sentence(c)


def test_each_price_and_only_the_asked_estimator():
    rows = [
        _row("none", "nonzero", 0.2, 0.05, g=1 / 3),
        _row("none", "nonzero", 0.0, 0.05, g=3.0),
        _row("none", "p_star", 0.3, 0.05, g=1 / 3, estimator="crossing"),
    ]
    cs = choices(rows, "band")
    assert [(c.price, c.left) for c in cs] == [(1 / 3, ("nonzero",)), (3.0, ())]
    assert task_sentence("sort", cs) == (
        "**Which method on sort.** At g = 1/3, use nonzero: it saves +20% [+15%, +25%] over GRPO; "
        "at g = 3, no method is shown to save over GRPO: keep GRPO."
    )


@pytest.mark.parametrize("value,half", [(0.2, 0.25), (-0.2, 0.25)])
def test_a_pair_comparison_that_includes_zero_drops_nobody(value, half):
    rows = [_row("none", "nonzero", 0.15, 0.05), _row("none", "pods", 0.3, 0.05), _row("nonzero", "pods", value, half)]
    assert _one(rows).left == ("nonzero", "pods")


def test_the_rule_on_any_keys_with_no_comparison_between_two():
    over = {"a": Estimate(0.2, 0.1, 0.3, seeds=5), "b": Estimate(0.4, 0.3, 0.5, seeds=5), "c": None}
    assert choose(["a", "b", "c"], over, lambda x, y: None) == ("a", "b")
    shown_better = {("a", "b"): Estimate(0.2, 0.1, 0.3, seeds=5)}  # b beats a
    assert choose(["a", "b", "c"], over, lambda x, y: shown_better.get((x, y))) == ("b",)
