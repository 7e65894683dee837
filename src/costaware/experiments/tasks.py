"""Built-in procedural task families, by name: what an experiment needs to know about a task.

Every family makes prompts of a chosen *size* (the number of terms or digits), writes demonstrations
with a trace whose length grows with the size (optionally with injected mistakes, so that RL has
something to fix after SFT), and verifies responses with a 0/1 reward.

- ``arith``: ``3+5+2+9=`` → ``8,10,19``; about 5 tokens per term, so sizes 2..12 span 8× in cost
  (:mod:`costaware.experiments.arith`).
- ``sort``: ``5391=`` → ``35,359,1359``; k(k+5)/2 − 1 tokens for k digits, so sizes 2..12 span 17×
  (:mod:`costaware.experiments.sorting`).
- ``sortcheck``: sort's prompts and trace, ended by ``.``, with an optional self-check (the trace written
  twice) and a failure mode that repeats an out-of-order list until the response budget, scored wrong: the
  responses to one prompt differ in length severalfold, and wrong ones run longer
  (:mod:`costaware.experiments.sortcheck`).

>>> import numpy as np
>>> task = get_task("sort")
>>> tasks = task.make_tasks(2, min_size=3, max_size=3, rng=np.random.default_rng(0))
>>> task.is_correct(task.demonstrations(tasks), tasks.answers).tolist()
[True, True]
>>> sorted(TASKS)
['arith', 'sort', 'sortcheck']

A *task id* names a family, optionally at its own largest size: ``"sort"``, or ``"sort:9"`` for sort at
sizes ``min_size..9`` (what ``Profile.extra_tasks`` holds).

>>> split_task_id("sort:9"), split_task_id("arith")
(('sort', 9), ('arith', None))
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from costaware.experiments import arith, sortcheck, sorting

__all__ = [
    "TASKS",
    "ArithFamily",
    "SortCheckFamily",
    "SortFamily",
    "TaskFamily",
    "describe_sizes",
    "get_task",
    "split_task_id",
]


@runtime_checkable
class TaskFamily(Protocol):
    """One kind of procedural task. ``alphabet`` holds every character of prompts and responses."""

    name: str
    alphabet: str
    default_sizes: tuple[int, int]  # (min_size, max_size) the demo uses
    size_unit: str  # what a size counts ("terms", "digits")

    def make_tasks(self, n: int, *, min_size: int, max_size: int, rng: np.random.Generator | None = None) -> Any: ...

    def sizes(self, tasks: Any) -> np.ndarray: ...

    def demonstrations(
        self, tasks: Any, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None
    ) -> list[str]: ...

    def is_correct(self, responses: list[str], answers: Any) -> np.ndarray: ...

    def reward(self, completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]: ...

    def max_response_tokens(self, max_size: int) -> int: ...

    def token_range(self, min_size: int, max_size: int) -> tuple[int, int]: ...


class ArithFamily:
    """Sums of single-digit terms with running partial sums (:mod:`costaware.experiments.arith`); size = terms."""

    name = "arith"
    alphabet = arith.ALPHABET
    default_sizes = (2, 12)
    size_unit = "terms"

    def make_tasks(
        self, n: int, *, min_size: int, max_size: int, rng: np.random.Generator | None = None
    ) -> arith.ArithTasks:
        return arith.make_tasks(n, min_terms=min_size, max_terms=max_size, rng=rng)

    def sizes(self, tasks: arith.ArithTasks) -> np.ndarray:
        return tasks.num_terms

    def demonstrations(
        self, tasks: arith.ArithTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None
    ) -> list[str]:
        return arith.demonstrations(tasks, mistake_prob=mistake_prob, rng=rng)

    def is_correct(self, responses: list[str], answers: Any) -> np.ndarray:
        return arith.is_correct(responses, answers)

    def reward(self, completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
        return arith.arith_reward(completions, answer, **kwargs)

    def max_response_tokens(self, max_size: int) -> int:
        from costaware.experiments.policy import max_response_tokens  # imports torch: only when asked

        return max_response_tokens(max_size)

    def token_range(self, min_size: int, max_size: int) -> tuple[int, int]:
        """Fewest and most tokens of prompt + correct response + EOS: all terms 1 at ``min_size`` terms, all 9
        at ``max_size`` (K terms: 2K prompt tokens, the sums s_2..s_K with K − 2 commas, EOS)."""
        return arith.token_range(min_size, max_size)


class SortFamily:
    """Sorting k digits, writing each insertion step (:mod:`costaware.experiments.sorting`); size = k."""

    name = "sort"
    alphabet = sorting.ALPHABET
    default_sizes = (2, 12)
    size_unit = "digits"

    def make_tasks(
        self, n: int, *, min_size: int, max_size: int, rng: np.random.Generator | None = None
    ) -> sorting.SortTasks:
        return sorting.make_tasks(n, min_size=min_size, max_size=max_size, rng=rng)

    def sizes(self, tasks: sorting.SortTasks) -> np.ndarray:
        return tasks.sizes

    def demonstrations(
        self, tasks: sorting.SortTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None
    ) -> list[str]:
        return sorting.demonstrations(tasks, mistake_prob=mistake_prob, rng=rng)

    def is_correct(self, responses: list[str], answers: Any) -> np.ndarray:
        return sorting.is_correct(responses, answers)

    def reward(self, completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
        return sorting.sort_reward(completions, answer, **kwargs)

    def max_response_tokens(self, max_size: int) -> int:
        return sorting.max_response_tokens(max_size)

    def token_range(self, min_size: int, max_size: int) -> tuple[int, int]:
        """Tokens of prompt + response + EOS at ``min_size`` and at ``max_size`` digits (k(k+5)/2 − 1; slips keep
        the length)."""
        return sorting.sequence_tokens(min_size), sorting.sequence_tokens(max_size)


class SortCheckFamily(SortFamily):
    """Sort with an optional self-check and a rambling failure mode (:mod:`costaware.experiments.sortcheck`);
    size = k. The prompts, sizes and answers are sort's; the responses end with ``.``."""

    name = "sortcheck"
    alphabet = sortcheck.ALPHABET

    def __init__(self, style: sortcheck.CheckStyle | None = None) -> None:
        self.style = sortcheck.CheckStyle() if style is None else style

    def demonstrations(
        self, tasks: sorting.SortTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None
    ) -> list[str]:
        return sortcheck.demonstrations(tasks, mistake_prob=mistake_prob, rng=rng, style=self.style)

    def is_correct(self, responses: list[str], answers: Any) -> np.ndarray:
        return sortcheck.is_correct(responses, answers)

    def reward(self, completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
        return sortcheck.check_reward(completions, answer, **kwargs)

    def max_response_tokens(self, max_size: int) -> int:
        return sortcheck.max_response_tokens(max_size)

    def token_range(self, min_size: int, max_size: int) -> tuple[int, int]:
        """Fewest tokens: an unchecked response at ``min_size`` digits (sort's trace, ``.``, EOS); most: a ramble
        to the response budget on a ``max_size``-digit prompt, then EOS (as the demonstrations end it; a rollout is
        cut at the budget + 1)."""
        return sorting.sequence_tokens(min_size) + 1, max_size + 1 + sortcheck.max_response_tokens(max_size) + 1


TASKS: dict[str, TaskFamily] = {"arith": ArithFamily(), "sort": SortFamily(), "sortcheck": SortCheckFamily()}


def describe_sizes(task_id: str, min_size: int, max_size: int) -> str:
    """``"sort: 2..7 digits, prompt + response 6..41 tokens"``: the task's sizes and the tokens they span.

    >>> describe_sizes("arith", 2, 6)
    'arith: 2..6 terms, prompt + response 6..27 tokens'
    """
    task = get_task(task_id)
    lo, hi = task.token_range(min_size, max_size)
    return f"{task.name}: {min_size}..{max_size} {task.size_unit}, prompt + response {lo}..{hi} tokens"


def split_task_id(task_id: str) -> tuple[str, int | None]:
    """``(family, largest size or None)`` of a task id ``"family"`` or ``"family:max_size"``."""
    if not isinstance(task_id, str):
        raise ValueError(f"task id must be a string 'family' or 'family:max_size', got {task_id!r}")
    family, sep, size = task_id.partition(":")
    if not sep:
        return family, None
    if not size.isdigit() or int(size) < 1:
        raise ValueError(
            f"task id must be 'family' or 'family:max_size' with an integer max_size >= 1, got {task_id!r}"
        )
    return family, int(size)


def get_task(name: str) -> TaskFamily:
    """The task family of the task id ``name`` (see :data:`TASKS`; ``"sort:9"`` is the ``sort`` family)."""
    try:
        family = split_task_id(name)[0]
    except ValueError as e:
        raise ValueError(f"name: {e}") from None
    try:
        return TASKS[family]
    except KeyError:
        raise ValueError(f"name must be one of {sorted(TASKS)} (optionally ':max_size'), got {name!r}") from None
