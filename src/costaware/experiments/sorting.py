"""Sorting digits by insertion, writing every insertion step: the second built-in task family.

A prompt is a list of ``k`` digits (``k`` drawn per prompt from ``[min_size, max_size]``), and the
response writes the sorted prefix after each insertion, comma-separated; the last one is the answer::

    prompt   "5391="
    response "35,359,1359"

Step j copies the previous prefix and inserts the (j+1)-th prompt digit in front of the first larger
one, so the trace holds k(k+1)/2 − 1 digits and k − 2 commas: prompt + response + EOS is 6 tokens at
k = 2 and 101 at k = 12, a 17× spread in cost (quadratic in k, against arithmetic's linear ~5k).
The reward is verifiable: 1 when the last segment of a well-formed response is the sorted list.

Injected mistakes (``mistake_prob``): at each step the new digit is inserted one place left or right
of its correct position with that probability, and later steps insert into the wrong list by the same
rule (a consistent but wrong trace). When a neighbour equals the digit the slip changes nothing.

>>> demonstrations(make_tasks(1, min_size=4, max_size=4, rng=np.random.default_rng(3)))  # doctest: +SKIP
['48,348,3348']
>>> sort_reward(["35,359,1359", "35,359,1395"], answer=["1359", "1359"])
[1.0, 0.0]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import integer, value_error

ALPHABET = "0123456789=,"
_RESPONSE = re.compile(r"^\s*\d+(?:,\d+)*\s*$")
_ZERO = ord("0")


@dataclass(frozen=True)
class SortTasks:
    """A batch of tasks: ``digits[i, :sizes[i]]`` is the list to sort for prompt i."""

    digits: np.ndarray  # int64 (n, max_size), zero past sizes[i]
    sizes: np.ndarray  # int64 (n,)
    prompts: list[str]
    answers: np.ndarray  # str (n,): the sorted digits, e.g. "1359"

    def __len__(self) -> int:
        return len(self.prompts)


def _rows_to_str(chars: np.ndarray, lengths: np.ndarray) -> list[str]:
    """Rows of an ASCII code matrix, each cut at its length, as Python strings (no per-row loop in numpy)."""
    width = chars.shape[1]
    if width == 0:
        return [""] * len(chars)
    buf = np.where(np.arange(width)[None, :] < lengths[:, None], chars, 0).astype(np.uint8)
    return np.ascontiguousarray(buf).view(f"S{width}").ravel().astype(str).tolist()


def make_tasks(n: int, *, min_size: int = 2, max_size: int = 12, rng: np.random.Generator | None = None) -> SortTasks:
    """``n`` random lists, ``k ~ U{min_size..max_size}`` digits each, digits ``~ U{0..9}`` (repeats allowed)."""
    n = integer(n, "n", minimum=1)
    min_size = integer(min_size, "min_size", minimum=2)
    max_size = integer(max_size, "max_size")
    if max_size < min_size:
        raise value_error("max_size", max_size, f"must be an integer >= min_size={min_size}")
    rng = np.random.default_rng() if rng is None else rng
    sizes = rng.integers(min_size, max_size + 1, size=n)
    digits = rng.integers(0, 10, size=(n, max_size))
    live = np.arange(max_size)[None, :] < sizes[:, None]
    digits[~live] = 0
    prompt_chars = np.concatenate([digits + _ZERO, np.zeros((n, 1), dtype=np.int64)], axis=1)
    prompt_chars[np.arange(n), sizes] = ord("=")
    prompts = _rows_to_str(prompt_chars, sizes + 1)
    # sorted digits of each row: padding sorts last when replaced by 10
    ordered = np.sort(np.where(live, digits, 10), axis=1)
    answers = np.array(_rows_to_str(ordered + _ZERO, sizes), dtype=str)
    return SortTasks(digits=digits, sizes=sizes, prompts=prompts, answers=answers)


def insertion_steps(
    tasks: SortTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None
) -> np.ndarray:
    """The written prefixes: ``(n, max_size - 1, max_size)``; step j's prefix is ``[:, j - 1, :j + 1]``.

    Entries past a row's size (or past the step's prefix) are meaningless.
    """
    if not 0.0 <= float(mistake_prob) < 1.0:
        raise ValueError(f"mistake_prob must lie in [0, 1), got {mistake_prob!r}")
    n, max_size = tasks.digits.shape
    rows = np.arange(n)
    slip = np.zeros((n, max_size), dtype=bool)
    side = np.ones((n, max_size), dtype=np.int64)
    if mistake_prob > 0:
        rng = np.random.default_rng() if rng is None else rng
        slip = rng.random((n, max_size)) < mistake_prob
        side = rng.choice([-1, 1], size=(n, max_size))
    prefix = np.zeros((n, max_size), dtype=np.int64)
    prefix[:, 0] = tasks.digits[:, 0]
    out = np.zeros((n, max(max_size - 1, 0), max_size), dtype=np.int64)
    cols = np.arange(max_size)[None, :]
    for j in range(1, max_size):  # sequential over steps only; every row advances at once
        d = tasks.digits[:, j]
        greater = (prefix > d[:, None]) & (cols < j)
        pos = np.where(greater.any(axis=1), greater.argmax(axis=1), j)
        wrong = np.where(pos + side[:, j] < 0, 1, np.where(pos + side[:, j] > j, j - 1, pos + side[:, j]))
        pos = np.where(slip[:, j], wrong, pos)
        # shift right everything at or past pos, then write d at pos
        shifted = np.where(cols > pos[:, None], np.roll(prefix, 1, axis=1), prefix)
        shifted[rows, pos] = d
        prefix = shifted
        out[:, j - 1] = prefix
    return out


def demonstrations(tasks: SortTasks, *, mistake_prob: float = 0.0, rng: np.random.Generator | None = None) -> list[str]:
    """The written trace for every task (no EOS; the tokenizer side adds it)."""
    steps = insertion_steps(tasks, mistake_prob=mistake_prob, rng=rng)
    n, max_size = tasks.digits.shape
    # step j (1-based) takes j + 2 characters (j + 1 digits and a comma); it starts at (j-1)j/2 + 2(j-1)
    j = np.arange(1, max_size)
    start = (j - 1) * j // 2 + 2 * (j - 1)
    width = int(start[-1] + max_size) if max_size > 1 else 0
    chars = np.zeros((n, width), dtype=np.int64)
    for s, (lo, jj) in enumerate(zip(start.tolist(), j.tolist(), strict=True)):
        chars[:, lo : lo + jj + 1] = steps[:, s, : jj + 1] + _ZERO
        if lo + jj + 1 < width:
            chars[:, lo + jj + 1] = ord(",")
    lengths = start[tasks.sizes - 2] + tasks.sizes
    return _rows_to_str(chars, lengths)


def parse_answer(response: str) -> str | None:
    """The last segment of a well-formed trace ``"d+(,d+)*"``, else ``None``.

    >>> parse_answer("35,359,1359"), parse_answer("35,,1"), parse_answer("")
    ('1359', None, None)
    """
    if not isinstance(response, str) or _RESPONSE.match(response) is None:
        return None
    return response.strip().rsplit(",", 1)[-1]


def is_correct(responses: list[str], answers: Any, parse: Callable[[str], str | None] = parse_answer) -> np.ndarray:
    """Boolean array: response i is a well-formed trace ending in ``answers[i]`` (a digit string).

    ``parse`` reads a response's final segment (None: malformed); the checked sort task passes its own."""
    answers = np.asarray(answers).reshape(-1)
    if len(responses) != len(answers):
        raise ValueError(f"responses and answers differ in length: {len(responses)} vs {len(answers)}")
    if answers.size and answers.dtype.kind not in "US":
        raise ValueError(f"answers must be digit strings (leading zeros matter), got dtype {answers.dtype}")
    parsed = [parse(r) for r in responses]
    return np.array([p is not None and p == a for p, a in zip(parsed, answers.astype(str).tolist(), strict=True)],
                    dtype=bool)  # fmt: skip


def sort_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function: 1.0 for a correctly sorted final segment, else 0.0.

    ``completions`` are strings (standard format) or ``[{"content": ...}]`` (conversational); ``answer``
    is the dataset column TRL forwards as a keyword argument.
    """
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return is_correct(texts, answer).astype(float).tolist()


def sequence_tokens(size: int) -> int:
    """Tokens of prompt + response + EOS at ``size`` digits: k + 1, k(k+1)/2 − 1 + k − 2, 1 (slips keep it)."""
    size = integer(size, "size", minimum=2)
    return size * (size + 5) // 2 - 1


def max_response_tokens(max_size: int) -> int:
    """The longest correct trace (k(k+1)/2 − 1 digits, k − 2 commas; slips keep its length) plus slack."""
    max_size = integer(max_size, "max_size", minimum=2)
    return max_size * (max_size + 1) // 2 - 1 + max_size - 2 + 4
