"""Procedural arithmetic with a written chain of partial results: the task `costaware reproduce` trains on.

A prompt is a sum of ``K`` single-digit terms, ``K`` drawn per prompt from ``[min_terms, max_terms]``;
the response writes every running partial sum, comma-separated, and the last one is the answer::

    prompt   "3+5+2+9="
    response "8,10,19"

Prompt plus response length grows linearly with ``K`` (about 5 characters per term), so with the
defaults (2..12 terms) the costs c_i of GRPO rows vary about 8x across prompts, like reasoning traces
of different lengths. The reward is verifiable: 1 when the last number of the response equals the sum.

Demonstrations can carry *injected mistakes*: each partial sum is off by ±1..3 with probability
``mistake_prob`` and the chain continues from the wrong value. A policy that imitates them well has a
high greedy accuracy but a low sampled one, which falls with the chain length, so reinforcement
learning has something to fix that more imitation cannot (see the probes in the reproduce report).

>>> rng = np.random.default_rng(0)
>>> tasks = make_tasks(4, rng=rng)
>>> tasks.prompts[0], int(tasks.answers[0])  # doctest: +SKIP
('7+6+5=', 18)
>>> arith_reward(["13,18"], answer=[18])
[1.0]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import integer

ALPHABET = "0123456789+=,"
_RESPONSE = re.compile(r"^\s*(\d+)(?:,(\d+))*\s*$")


@dataclass(frozen=True)
class ArithTasks:
    """A batch of tasks: ``terms[i, :num_terms[i]]`` are the digits summed by prompt i."""

    terms: np.ndarray  # int64 (n, max_terms), zero-padded past num_terms
    num_terms: np.ndarray  # int64 (n,)
    prompts: list[str]
    answers: np.ndarray  # int64 (n,)

    def __len__(self) -> int:
        return len(self.prompts)


def make_tasks(
    n: int, *, min_terms: int = 2, max_terms: int = 12, rng: np.random.Generator | None = None
) -> ArithTasks:
    """``n`` random tasks, ``K ~ U{min_terms..max_terms}`` terms each, digits ``~ U{1..9}``.

    >>> make_tasks(3, rng=np.random.default_rng(1)).num_terms.tolist()  # doctest: +SKIP
    [7, 12, 9]
    """
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    min_terms = integer(min_terms, "min_terms", minimum=2)
    max_terms = integer(max_terms, "max_terms", minimum=min_terms)
    rng = np.random.default_rng() if rng is None else rng
    num_terms = rng.integers(min_terms, max_terms + 1, size=n)
    terms = rng.integers(1, 10, size=(n, max_terms))
    terms[np.arange(max_terms)[None, :] >= num_terms[:, None]] = 0
    answers = terms.sum(axis=1)
    prompts = ["+".join(map(str, row[:k])) + "=" for row, k in zip(terms.tolist(), num_terms.tolist(), strict=True)]
    return ArithTasks(terms=terms, num_terms=num_terms, prompts=prompts, answers=answers)


def partial_sums(tasks: ArithTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
    """Running sums s_2..s_K as a ``(n, max_terms - 1)`` array (entries past ``K - 1`` are meaningless).

    With ``mistake_prob > 0`` each written sum is off by a random ±1..3 with that probability, and
    later sums continue from the wrong value (a consistent but wrong chain, like a slip in a trace).
    Sums never go below 0.
    """
    if not 0.0 <= float(mistake_prob) < 1.0:
        raise ValueError(f"mistake_prob must lie in [0, 1), got {mistake_prob!r}")
    n, max_terms = tasks.terms.shape
    if max_terms < 2:
        raise ValueError(f"tasks need at least 2 terms, got max_terms={max_terms}")
    errors = np.zeros((n, max_terms - 1), dtype=np.int64)
    if mistake_prob > 0:
        rng = np.random.default_rng() if rng is None else rng
        slip = rng.random((n, max_terms - 1)) < mistake_prob
        size = rng.integers(1, 4, size=(n, max_terms - 1)) * rng.choice([-1, 1], size=(n, max_terms - 1))
        errors = np.where(slip, size, 0)
    # s_j = a_1 + ... + a_{j+1} + (errors up to j); clip each step at 0 (sequential, but only over terms)
    sums = np.empty((n, max_terms - 1), dtype=np.int64)
    running = tasks.terms[:, 0].copy()
    for j in range(max_terms - 1):
        running = np.maximum(running + tasks.terms[:, j + 1] + errors[:, j], 0)
        sums[:, j] = running
    return sums


def demonstrations(
    tasks: ArithTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None
) -> list[str]:
    """The written chain for every task (no EOS; the tokenizer side adds it)."""
    sums = partial_sums(tasks, mistake_prob=mistake_prob, rng=rng).tolist()
    return [",".join(map(str, row[: k - 1])) for row, k in zip(sums, tasks.num_terms.tolist(), strict=True)]


def parse_answer(response: str) -> int | None:
    """The final number of a well-formed chain ``"d+(,d+)*"``, else ``None``.

    >>> parse_answer("8,10,19"), parse_answer("8,,1"), parse_answer("")
    (19, None, None)
    """
    if not isinstance(response, str) or _RESPONSE.match(response) is None:
        return None
    return int(response.strip().rsplit(",", 1)[-1])


def is_correct(responses: list[str], answers: Any) -> np.ndarray:
    """Boolean array: response i is a well-formed chain ending in ``answers[i]``."""
    answers = np.asarray(answers, dtype=np.int64).reshape(-1)
    if len(responses) != len(answers):
        raise ValueError(f"responses and answers differ in length: {len(responses)} vs {len(answers)}")
    parsed = [parse_answer(r) for r in responses]
    return np.array([p is not None and p == a for p, a in zip(parsed, answers.tolist(), strict=True)], dtype=bool)


def arith_reward(completions: list[Any], answer: list[int], **_: Any) -> list[float]:
    """TRL reward function: 1.0 for a correct final answer, else 0.0.

    ``completions`` are strings (standard format) or ``[{"content": ...}]`` (conversational); ``answer``
    is the dataset column TRL forwards as a keyword argument.
    """
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return is_correct(texts, answer).astype(float).tolist()


def token_range(min_terms: int, max_terms: int) -> tuple[int, int]:
    """Fewest and most tokens of prompt + correct response + EOS over sizes ``min_terms..max_terms``: every term 1
    at ``min_terms`` (sums 2, 3, ...), every term 9 at ``max_terms`` (sums 18, 27, ...); K terms write 2K prompt
    tokens, the sums s_2..s_K, K − 2 commas and EOS.

    >>> token_range(2, 6)
    (6, 27)
    """
    min_terms = integer(min_terms, "min_terms", minimum=2)
    max_terms = integer(max_terms, "max_terms", minimum=min_terms)

    def tokens(k: int, digit: int) -> int:
        return 2 * k + sum(len(str(digit * j)) for j in range(2, k + 1)) + k - 2 + 1

    return tokens(min_terms, 1), tokens(max_terms, 9)


def sequence_lengths(tasks: ArithTasks, responses: list[str]) -> np.ndarray:
    """Characters (= tokens under the char tokenizer) of prompt + response + EOS for every task."""
    return np.array([len(p) + len(r) + 1 for p, r in zip(tasks.prompts, responses, strict=True)], dtype=np.int64)
