"""Responses generated elsewhere, read for scoring: ``costaware eval --responses FILE``.

The file is JSON Lines, one problem per line (blank lines are skipped)::

    {"id": "gsm8k-0", "responses": ["... so \\\\boxed{18}", "... 17"], "answer": "18"}

Fields (other fields are ignored):

* ``id`` (string or integer, required): the problem. With ``--benchmark`` it is the problem's id in
  that benchmark, as ``costaware eval`` writes it in ``results.json`` (``gsm8k-0``, ``1990-3``,
  ``test/algebra/9003.json``); ids must be unique in the file.
* ``responses`` (list of strings, required): the sampled responses, the same number k on every line.
* ``answer`` (string or number): the gold answer. Required without ``--benchmark``; with it the gold
  comes from the benchmark, and an ``answer`` on the line must be the same.
* ``prompt`` (string, optional): the prompt the responses answer, copied into ``results.json``.
* ``num_tokens`` (list of integers or nulls, optional): each response's length in tokens, for the
  "mean tokens" column.

Each response is checked with math-verify exactly as generated ones are. Every problem with the file
is a ValueError that starts with ``FILE:LINE:`` (1-based).

    costaware eval --responses generated.jsonl --benchmark gsm8k --data gsm8k_test.jsonl --out scored/

>>> records, responses, prompts = read_responses("generated.jsonl", benchmark=gsm8k_records)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costaware._checks import string_or_integer
from costaware.evaluation.data import EvalRecord, answer_text
from costaware.evaluation.files import read_jsonl_objects
from costaware.evaluation.generate import Completion

__all__ = ["read_responses"]

FIELDS = ("id", "responses", "answer", "prompt", "num_tokens")


def _lines(path: Path, limit: int | None) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise ValueError(f"--responses {str(path)!r} " + ("is a folder" if path.is_dir() else "does not exist"))
    out = read_jsonl_objects(path, limit)  # lines past the limit are not read
    if not out:
        raise ValueError(f"{path}: holds no responses (the file is empty)")
    return out


def _parse_line(row: Mapping[str, Any]) -> tuple[str, list[str], Any, str, list[int | None] | None]:
    """``(id, responses, answer or None, prompt, num_tokens or None)``; ValueError without location."""
    missing = [f for f in ("id", "responses") if row.get(f) is None]
    if missing:
        raise ValueError(f"missing field {missing[0]!r}; the line has fields {sorted(row)} (expected {list(FIELDS)})")
    rid = string_or_integer(row["id"], "id")
    responses = row["responses"]
    if not isinstance(responses, list) or not responses or not all(isinstance(r, str) for r in responses):
        shown = repr(responses)[:80]
        raise ValueError(f"responses must be a non-empty list of strings, got {shown}")
    prompt = row.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
    tokens = row.get("num_tokens")
    if tokens is not None:
        ok = isinstance(tokens, list) and all(
            t is None or (isinstance(t, int) and not isinstance(t, bool) and t >= 0) for t in tokens
        )
        if not ok or len(tokens) != len(responses):
            raise ValueError(
                f"num_tokens must be a list of {len(responses)} non-negative integers or nulls "
                f"(one per response), got {repr(tokens)[:80]}"
            )
    return rid, responses, row.get("answer"), prompt or "", tokens


def read_responses(
    path: str | Path,
    *,
    benchmark: Sequence[EvalRecord] | None = None,
    name: str = "responses",
    limit: int | None = None,
) -> tuple[list[EvalRecord], list[list[Completion]], list[str]]:
    """The records, the k responses of each and the prompts of a ``--responses`` file (see module doc).

    ``benchmark``: the records the ids refer to (gold answers come from them); None: every line
    carries its ``answer`` and the records are labelled ``name``. ``limit`` keeps the first lines.
    """
    path = Path(path)
    by_id = {r.id: r for r in benchmark} if benchmark is not None else None
    records: list[EvalRecord] = []
    responses: list[list[Completion]] = []
    prompts: list[str] = []
    first_line: dict[str, int] = {}
    k_line: tuple[int, int] | None = None  # (k, line that set it)
    for lineno, row in _lines(path, limit):
        where = f"{path}:{lineno}"
        try:
            rid, texts, answer, prompt, tokens = _parse_line(row)
            if rid in first_line:
                raise ValueError(f"id {rid!r} appears already on line {first_line[rid]}; ids must be unique")
            if k_line is not None and len(texts) != k_line[0]:
                raise ValueError(
                    f"{len(texts)} responses, but line {k_line[1]} has {k_line[0]}: every problem "
                    "needs the same number k"
                )
            gold = answer_text(answer, index=lineno) if answer is not None else None
            if by_id is not None:
                if rid not in by_id:
                    some = ", ".join(repr(i) for i in list(by_id)[:3])
                    raise ValueError(f"id {rid!r} is not in the benchmark (its ids look like {some}, ...)")
                record = by_id[rid]
                if gold is not None and gold != record.answer:
                    raise ValueError(f"answer {gold!r} differs from the benchmark's gold {record.answer!r}")
            elif gold is None:
                raise ValueError("missing field 'answer' (the gold answer; or pass --benchmark to take it from there)")
            else:
                record = EvalRecord(id=rid, problem=prompt, answer=gold, benchmark=name)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        first_line[rid] = lineno
        k_line = k_line or (len(texts), lineno)
        records.append(record)
        responses.append([Completion(t, None if tokens is None else tokens[j]) for j, t in enumerate(texts)])
        prompts.append(prompt)
    return records, responses, prompts
