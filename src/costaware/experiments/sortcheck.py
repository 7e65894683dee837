"""Sorting with an optional self-check and a rambling failure mode: responses of uneven length within a group.

The prompts and the insertion trace are those of ``sort`` (:mod:`costaware.experiments.sorting`); the
demonstrations differ in two ways that a sampled policy inherits, so that the G responses to one prompt
differ in length the way reasoning traces do:

- **self-check**: with probability ``check_prob`` the trace is written a second time after ``;`` (a
  re-derivation, with its slips at ``check_mistake_scale`` x the first pass's rate); the answer is then
  the second pass's last segment. A checked response costs about twice an unchecked one.
- **ramble**: after the first slip that leaves a written list out of order, with probability
  ``ramble_prob`` the trace stops progressing and repeats that list until the response budget
  (:func:`max_response_tokens`) is spent, with no end mark: scored wrong, as a truncated response is.

A complete response ends with ``.``; the reward is 1 only for a well-formed response ``trace(;trace)?.``
whose last segment is the sorted list, so a truncated response (no end mark) scores 0::

    prompt   "5391="
    short    "35,359,1359."
    checked  "35,359,1359;35,359,1359."
    ramble   "35,395,395,395,395,395,..."      (to the budget)

>>> check_reward(["35,359,1359.", "35,359,1359;35,359,1359.", "35,359,1395.", "35,359,1359"], answer=["1359"] * 4)
[1.0, 1.0, 0.0, 0.0]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import integer, is_real_number, value_error
from costaware.experiments import sorting

ALPHABET = "0123456789=,;."
END, CHECK = ".", ";"
_TRACE = r"\d+(?:,\d+)*"
_RESPONSE = re.compile(rf"^\s*{_TRACE}(?:;{_TRACE})?\.\s*$")


@dataclass(frozen=True)
class CheckStyle:
    """How demonstrations are written: the self-check and ramble rates (a family's fixed parameters)."""

    check_prob: float = 0.35
    ramble_prob: float = 0.5
    check_mistake_scale: float = 0.5

    def __post_init__(self) -> None:
        for name in ("check_prob", "ramble_prob", "check_mistake_scale"):
            v = getattr(self, name)
            if not (is_real_number(v) and 0.0 <= v <= 1.0):
                raise value_error(name, v, "must lie in [0, 1]")


def _trace_lengths(max_size: int) -> int:
    """Characters of the longest single insertion trace: k(k+1)/2 − 1 digits and k − 2 commas."""
    return max_size * (max_size + 1) // 2 - 1 + max_size - 2


def max_response_tokens(max_size: int) -> int:
    """The response budget: a checked trace of ``max_size`` digits (two passes, ``;`` and ``.``) plus slack.

    A ramble runs until it; a complete response never reaches it.
    """
    max_size = integer(max_size, "max_size", minimum=2)
    return 2 * _trace_lengths(max_size) + 2 + 4


def _segments(steps: np.ndarray, size: int) -> list[str]:
    """The written lists of one row's trace (``steps`` as :func:`sorting.insertion_steps` gives it)."""
    return ["".join(map(str, steps[j - 1, : j + 1].tolist())) for j in range(1, size)]


def demonstrations(
    tasks: sorting.SortTasks,
    *,
    mistake_prob: float = 0.0,
    rng: np.random.Generator | None = None,
    style: CheckStyle = CheckStyle(),
) -> list[str]:
    """The written response for every task (no EOS; the tokenizer side adds it).

    The budget of a ramble is that of the batch's largest size (``tasks.digits.shape[1]``), as in training,
    where every response of a run has the budget of the run's largest size. With ``mistake_prob = 0`` no
    slip happens, so no demonstration rambles and every one is right (checked or not).
    """
    rng = np.random.default_rng() if rng is None else rng
    first = sorting.insertion_steps(tasks, mistake_prob=mistake_prob, rng=rng)
    second = sorting.insertion_steps(tasks, mistake_prob=mistake_prob * style.check_mistake_scale, rng=rng)
    n: int  # numpy's stubs give shape entries as Any, which would pick rng.random's scalar overload
    n, max_size = tasks.digits.shape
    checked = rng.random(n) < style.check_prob
    rambles = rng.random(n) < style.ramble_prob
    budget = max_response_tokens(max(int(max_size), 2))
    out: list[str] = []
    for i, k in enumerate(tasks.sizes.tolist()):
        segs = _segments(first[i], k)
        unsorted = [j for j, s in enumerate(segs) if list(s) != sorted(s)]
        if unsorted and rambles[i]:  # stuck on its first out-of-order list, repeated to the budget
            text = ",".join(segs[: unsorted[0] + 1])
            while len(text) < budget:
                text += "," + segs[unsorted[0]]
            out.append(text[:budget])
            continue
        text = ",".join(segs)
        if checked[i]:
            text += CHECK + ",".join(_segments(second[i], k))
        out.append(text + END)
    return out


def parse_answer(response: str) -> str | None:
    """The last segment of a well-formed response ``trace(;trace)?.``, else ``None`` (no end mark: truncated).

    >>> parse_answer("35,359,1359;35,359,1359."), parse_answer("35,359,1359"), parse_answer("35;;1.")
    ('1359', None, None)
    """
    if not isinstance(response, str) or _RESPONSE.match(response) is None:
        return None
    return response.strip()[:-1].rsplit(CHECK, 1)[-1].rsplit(",", 1)[-1]


def is_correct(responses: list[str], answers: Any) -> np.ndarray:
    """Boolean array: response i is well-formed, ends with the end mark, and its last segment is ``answers[i]``."""
    return sorting.is_correct(responses, answers, parse=parse_answer)


def check_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function: 1.0 for a complete response whose last segment is the sorted list, else 0.0."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return is_correct(texts, answer).astype(float).tolist()
