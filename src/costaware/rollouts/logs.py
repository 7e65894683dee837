"""Per-prompt round logs: one JSON line per generated group, and a reward wrapper that writes them.

A record is a :class:`PromptRound`: the round, the prompt's id in the train set, its G rewards, its G
completion lengths (generated tokens) and its prompt tokens. The analysis tool
(:mod:`costaware.rollouts.analysis`) reads nothing else.

>>> import tempfile, os
>>> rec = PromptRound(round=0, prompt_id=3, rewards=(1.0, 0.0), completion_lengths=(12, 7), prompt_tokens=20)
>>> path = os.path.join(tempfile.mkdtemp(), "log.jsonl")
>>> write_prompt_rounds(path, [rec])
>>> read_prompt_rounds([path]) == [rec]
True
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from costaware._checks import boolean, check_container, file_path, integer, real_scalar
from costaware.evaluation.files import read_jsonl_objects

__all__ = ["PromptRound", "write_prompt_rounds", "read_prompt_rounds", "RecordingReward"]


@dataclass(frozen=True)
class PromptRound:
    """One generated group: ``rewards`` and ``completion_lengths`` hold one entry per response."""

    round: int
    prompt_id: int
    rewards: tuple[float, ...]
    completion_lengths: tuple[int, ...]
    prompt_tokens: int = 0

    def __post_init__(self) -> None:
        if not _plain_counts((self.round, self.prompt_id, self.prompt_tokens)):
            integer(self.round, "round", minimum=0)
            integer(self.prompt_id, "prompt_id", minimum=0)
            integer(self.prompt_tokens, "prompt_tokens", minimum=0)
        if len(self.rewards) == 0 or len(self.rewards) != len(self.completion_lengths):
            raise ValueError(
                f"rewards and completion_lengths must be non-empty and of equal length, got "
                f"{len(self.rewards)} and {len(self.completion_lengths)}"
            )
        if not _plain_reals(self.rewards):
            for r in self.rewards:
                real_scalar(r, "rewards")
        if not _plain_counts(self.completion_lengths):
            for n in self.completion_lengths:
                integer(n, "completion_lengths", minimum=0)

    @classmethod
    def from_json(cls, obj: Any, where: str = "record") -> PromptRound:
        if not isinstance(obj, dict):
            raise ValueError(f"{where} must be a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("round", "prompt_id", "rewards", "completion_lengths") if k not in obj]
        if missing:
            raise ValueError(f"{where} is missing {missing}")
        # the constructor's checks, value by value: int() would truncate 3.7 to 3 and read true and "3" as numbers
        try:
            for key in ("rewards", "completion_lengths"):
                if not isinstance(obj[key], list):
                    raise ValueError(f"{key} must be a list, got {obj[key]!r}")
            rewards, lengths = obj["rewards"], obj["completion_lengths"]
            ids: tuple[Any, ...] = obj["round"], obj["prompt_id"], obj.get("prompt_tokens", 0)
            if not _plain_counts(ids):
                ids = tuple(
                    integer(v, k, minimum=0) for k, v in zip(("round", "prompt_id", "prompt_tokens"), ids, strict=True)
                )
            if not _plain_reals(rewards):
                rewards = [real_scalar(r, f"rewards[{i}]") for i, r in enumerate(rewards)]
            if not _plain_counts(lengths):
                lengths = [integer(n, f"completion_lengths[{i}]", minimum=0) for i, n in enumerate(lengths)]
            return cls(ids[0], ids[1], tuple(map(float, rewards)), tuple(lengths), ids[2])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


def _plain_reals(xs: Sequence[Any]) -> bool:
    """Every value a finite int or float (no bool): a log's common case, checked without a call per value (the
    checks per value then run only to name a bad one)."""
    return all(type(x) is float or type(x) is int for x in xs) and all(map(math.isfinite, xs))


def _plain_counts(xs: Sequence[Any]) -> bool:
    """Every value a non-negative int (no bool)."""
    return all(type(x) is int and x >= 0 for x in xs)


def write_prompt_rounds(path: str | os.PathLike[str], records: Iterable[PromptRound], *, append: bool = True) -> None:
    """Append (or write) records as JSON Lines."""
    path = file_path(path, "path")
    check_container(records, "records", "a list of PromptRound")
    records = list(records)
    bad = next((r for r in records if not isinstance(r, PromptRound)), None)
    if bad is not None:  # checked before the file is opened: a bad list leaves the log as it was
        raise TypeError(f"records must hold PromptRound, got {type(bad).__name__}")
    append = boolean(append, "append")
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(asdict(rec)) + "\n")


def read_prompt_rounds(paths: Sequence[str | os.PathLike[str]]) -> list[PromptRound]:
    """Every record of every file, in file order then line order; blank lines are skipped."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    check_container(paths, "paths", "a file path or a list of them", needs="__iter__")
    paths = [file_path(p, "paths") for p in paths]
    for p in paths:
        if not os.path.isfile(p):
            what = "is a folder" if os.path.isdir(p) else "does not exist" if not os.path.exists(p) else "is not a file"
            raise ValueError(f"paths holds {p!r}, which {what}")
    # the project's one JSON Lines reader: a bad line is a ValueError naming path:line
    return [PromptRound.from_json(obj, f"{path}:{n}") for path in paths for n, obj in read_jsonl_objects(path)]


class RecordingReward:
    """Wrap a TRL reward function so that every call also logs one :class:`PromptRound` per group.

    TRL calls reward functions as ``f(prompts=..., completions=..., completion_ids=..., **columns)``
    where ``columns`` holds the dataset's columns (so the train set needs a ``prompt_id`` column) and
    ``trainer_state``. Rows with the same ``prompt_id`` are cut into groups of ``group_size``
    consecutive rows (TRL's sampler repeats each prompt G times in a row); the round is
    ``trainer_state.global_step`` (a call counter without it). Prompt tokens come from a
    ``prompt_tokens`` column, else ``count_prompt_tokens(prompt)``, else 0. On several processes let
    one rank record, or give each rank its own file: a group split across ranks is then logged as
    two partial records.
    """

    def __init__(
        self,
        reward_fn: Callable[..., Any],
        path: str | os.PathLike[str],
        group_size: int,
        count_prompt_tokens: Callable[[Any], int] | None = None,
    ) -> None:
        if not callable(reward_fn):
            raise TypeError(f"reward_fn must be callable, got {type(reward_fn).__name__}")
        self.reward_fn = reward_fn
        self.path = file_path(path, "path")
        self.group_size = integer(group_size, "group_size", minimum=1)
        self.count_prompt_tokens = count_prompt_tokens
        self.calls = 0
        self.__name__ = getattr(reward_fn, "__name__", "reward")  # TRL logs reward functions by name

    def __call__(
        self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]] | None = None, **kwargs: Any
    ) -> list[float | None]:
        rewards = self.reward_fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        if "prompt_id" not in kwargs:
            raise ValueError(
                "RecordingReward needs a 'prompt_id' column in the train dataset (TRL passes columns as kwargs)"
            )
        state = kwargs.get("trainer_state")
        rnd = int(getattr(state, "global_step", self.calls))
        self.calls += 1
        ids = [int(i) for i in kwargs["prompt_id"]]
        lengths = [len(c) for c in completion_ids] if completion_ids is not None else [len(str(c)) for c in completions]
        if "prompt_tokens" in kwargs:
            ptok = [int(t) for t in kwargs["prompt_tokens"]]
        elif self.count_prompt_tokens is not None:
            ptok = [int(self.count_prompt_tokens(p)) for p in prompts]
        else:
            ptok = [0] * len(ids)
        r = np.asarray([0.0 if v is None else v for v in rewards], dtype=np.float64)  # None: not scored, logged as 0
        records, start = [], 0
        while start < len(ids):  # runs of one prompt id, cut every group_size rows
            stop = start + 1
            while stop < len(ids) and ids[stop] == ids[start] and stop - start < self.group_size:
                stop += 1
            records.append(
                PromptRound(
                    round=rnd,
                    prompt_id=ids[start],
                    rewards=tuple(r[start:stop].tolist()),
                    completion_lengths=tuple(lengths[start:stop]),
                    prompt_tokens=ptok[start],
                )
            )
            start = stop
        write_prompt_rounds(self.path, records)
        return rewards
