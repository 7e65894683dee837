"""Benchmark loaders: GSM8K, MATH500, AIME 1983–2024, AMC and verl/DAPO parquet, to one record type.

Every loader reads a local file in the benchmark's public format (jsonl, json, parquet or csv, or a
folder of them, as a hub snapshot has; :mod:`.files` reads them), or the hub through
``datasets.load_dataset`` when a hub can be reached. Public formats (field names as published on the
Hugging Face hub):

* ``openai/gsm8k`` (config ``main``, split ``test``): ``question``, ``answer``; the answer is a worked
  solution whose last line is ``#### 42``. The gold answer is the text after ``####``.
* ``HuggingFaceH4/MATH-500`` (split ``test``): ``problem``, ``solution``, ``answer``, ``subject``,
  ``level``, ``unique_id`` (e.g. ``test/precalculus/807.json``).
* ``di-zhang-fdu/AIME_1983_2024`` (split ``train``, a csv file ``AIME_Dataset_1983_2024.csv``): ``ID``
  (e.g. ``1983-1``, ``2024-II-4``), ``Year``, ``Problem Number``, ``Question``, ``Answer``, ``Part``
  (``I``/``II``, empty before 2000). Mirrors that lower-case the names or call the question ``problem``
  are read too.
* ``AI-MO/aimo-validation-amc`` (split ``train``, 83 AMC12 2022–2023 problems): ``id``, ``problem``,
  ``answer`` (stored as float64, e.g. ``27.0``, turned into ``27``), ``url``.
* verl / DAPO parquet (e.g. ``BytedTsinghua-SIA/DAPO-Math-17k``, verl's ``examples/data_preprocess``):
  ``data_source``, ``prompt`` (a chat list of ``{"role", "content"}``), ``ability``,
  ``reward_model`` (``{"ground_truth", "style"}``) and ``extra_info`` (``{"index", ...}``). Rows in this
  shape are recognised in any benchmark's file; their chat prompt is used as it is.

>>> records = load_benchmark("gsm8k", fixture_path("gsm8k"))   # doctest: +SKIP
>>> records[0].answer                                          # doctest: +SKIP
'18'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costaware._checks import integer
from costaware.evaluation.files import (  # noqa: F401
    SUPPORTED_SUFFIXES,
    read_jsonl_objects,
    read_located_rows,
    read_rows,
)

# the file readers live in .files; imported here too, where they were first
from costaware.evaluation.hub import DatasetUnavailableError, hub_rows  # noqa: F401  (re-exported; hub needs no data)

QWEN_MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
FIXTURES = Path(__file__).with_name("fixtures")


@dataclass(frozen=True)
class EvalRecord:
    """One evaluation problem, whatever file it came from.

    ``messages`` is set when the source already holds a chat prompt (verl/DAPO parquet); otherwise the
    prompt is built from ``problem`` by :func:`build_prompt`.
    """

    id: str
    problem: str
    answer: str
    benchmark: str
    messages: tuple[Mapping[str, str], ...] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "problem": self.problem,
            "answer": self.answer,
            "benchmark": self.benchmark,
            "messages": [dict(m) for m in self.messages] if self.messages is not None else None,
            "meta": dict(self.meta),
        }


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives on the hub and how one of its rows becomes an :class:`EvalRecord`."""

    name: str
    hub_id: str | None
    hub_config: str | None
    split: str
    to_record: Callable[[Mapping[str, Any], int, str], EvalRecord]
    fixture: str


# ---------------------------------------------------------------------------------------------- fields


def _field(row: Mapping[str, Any], names: Sequence[str], *, index: int, required: bool = True) -> Any:
    """The first of ``names`` present in ``row`` (names compared case-insensitively)."""
    lowered = {str(k).lower(): k for k in row}
    for name in names:
        key = lowered.get(name.lower())
        if key is not None and row[key] is not None:
            return row[key]
    if required:
        raise ValueError(f"none of the fields {list(names)} is present; the row has fields {sorted(row)}")
    return None


def answer_text(value: Any, *, index: int) -> str:
    """A gold answer as text; integer-valued floats (AMC stores ``27.0``) lose the ``.0``."""
    if isinstance(value, bool):
        raise ValueError(f"answer must be a number or text, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"answer must be finite, got {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    if not text:
        raise ValueError("answer is empty")
    return text


def gsm8k_gold(solution: str) -> str:
    """The gold answer of a GSM8K solution: the text after its last ``####``, commas dropped.

    >>> gsm8k_gold("2 + 2 = 4\\n#### 1,004")
    '1004'
    """
    if "####" not in solution:
        raise ValueError(f"a GSM8K answer must end with '#### <answer>', got {solution[-80:]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _from_verl(row: Mapping[str, Any], index: int, benchmark: str) -> EvalRecord:
    prompt = row["prompt"]
    messages = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in prompt)
    if not messages:
        raise ValueError("prompt is an empty chat list")
    reward_model = row.get("reward_model") or {}
    gold = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    if gold is None:
        raise ValueError(f"reward_model.ground_truth is missing; reward_model={reward_model!r}")
    if isinstance(gold, (list, tuple)):  # some verl datasets store several accepted answers
        gold = gold[0] if len(gold) == 1 else ", ".join(map(str, gold))
    extra = row.get("extra_info") or {}
    rid = extra.get("index") if isinstance(extra, Mapping) else None
    users = [m["content"] for m in messages if m["role"] == "user"]
    return EvalRecord(
        id=f"{benchmark}-{rid if rid is not None else index}",
        problem=users[-1] if users else messages[-1]["content"],
        answer=answer_text(gold, index=index),
        benchmark=benchmark,
        messages=messages,
        meta={"data_source": row.get("data_source"), "ability": row.get("ability")},
    )


def _is_verl_row(row: Mapping[str, Any]) -> bool:
    return isinstance(row.get("prompt"), (list, tuple)) and "reward_model" in row


def _from_gsm8k(row: Mapping[str, Any], index: int, benchmark: str) -> EvalRecord:
    solution = str(_field(row, ["answer"], index=index))
    gold = gsm8k_gold(solution)
    rid = _field(row, ["id", "unique_id"], index=index, required=False)
    return EvalRecord(
        id=str(rid) if rid is not None else f"gsm8k-{index}",
        problem=str(_field(row, ["question", "problem"], index=index)),
        answer=answer_text(gold, index=index),
        benchmark=benchmark,
        meta={"solution": solution},
    )


def _from_math500(row: Mapping[str, Any], index: int, benchmark: str) -> EvalRecord:
    rid = _field(row, ["unique_id", "id"], index=index, required=False)
    return EvalRecord(
        id=str(rid) if rid is not None else f"math500-{index}",
        problem=str(_field(row, ["problem", "question"], index=index)),
        answer=answer_text(_field(row, ["answer"], index=index), index=index),
        benchmark=benchmark,
        meta={
            "subject": _field(row, ["subject", "type"], index=index, required=False),
            "level": _field(row, ["level"], index=index, required=False),
        },
    )


def _from_aime(row: Mapping[str, Any], index: int, benchmark: str) -> EvalRecord:
    year = _field(row, ["Year"], index=index, required=False)
    number = _field(row, ["Problem Number"], index=index, required=False)
    part = _field(row, ["Part"], index=index, required=False)
    part = "" if part is None or (isinstance(part, float) and math.isnan(part)) else str(part).strip()
    rid = _field(row, ["ID", "id"], index=index, required=False)
    if rid is None:
        rid = "-".join(str(x) for x in (year, part, number) if x not in (None, "")) or f"aime-{index}"
    return EvalRecord(
        id=str(rid),
        problem=str(_field(row, ["Question", "problem"], index=index)),
        answer=answer_text(_field(row, ["Answer"], index=index), index=index),
        benchmark=benchmark,
        meta={"year": year, "problem_number": number, "part": part},
    )


def _from_amc(row: Mapping[str, Any], index: int, benchmark: str) -> EvalRecord:
    rid = _field(row, ["id"], index=index, required=False)
    return EvalRecord(
        id=f"amc-{rid}" if rid is not None else f"amc-{index}",
        problem=str(_field(row, ["problem", "question"], index=index)),
        answer=answer_text(_field(row, ["answer"], index=index), index=index),
        benchmark=benchmark,
        meta={"url": _field(row, ["url"], index=index, required=False)},
    )


BENCHMARKS: dict[str, BenchmarkSpec] = {
    "gsm8k": BenchmarkSpec("gsm8k", "openai/gsm8k", "main", "test", _from_gsm8k, "gsm8k_test.jsonl"),
    "math500": BenchmarkSpec("math500", "HuggingFaceH4/MATH-500", None, "test", _from_math500, "math500_test.jsonl"),
    "aime": BenchmarkSpec(
        "aime", "di-zhang-fdu/AIME_1983_2024", None, "train", _from_aime, "AIME_Dataset_1983_2024.csv"
    ),
    "amc": BenchmarkSpec("amc", "AI-MO/aimo-validation-amc", None, "train", _from_amc, "aimo_validation_amc.jsonl"),
    # verl/DAPO parquet: no hub default, always a local file
    "verl": BenchmarkSpec("verl", None, None, "train", _from_verl, "dapo_math_verl.parquet"),
}


def fixture_path(benchmark: str) -> Path:
    """The small fixture shipped for ``benchmark``, in its public format (for tests and demos)."""
    return FIXTURES / _spec(benchmark).fixture


def _spec(benchmark: str) -> BenchmarkSpec:
    try:
        return BENCHMARKS[benchmark]
    except KeyError:
        raise ValueError(f"benchmark must be one of {sorted(BENCHMARKS)}, got {benchmark!r}") from None


def load_benchmark(
    benchmark: str,
    path: str | Path | None = None,
    *,
    split: str | None = None,
    limit: int | None = None,
) -> list[EvalRecord]:
    """Load ``benchmark`` from ``path`` (a local file or folder) or, when ``path`` is None, from the hub.

    ``limit`` keeps the first ``limit`` problems in file order. Record ids must be unique.

    >>> [r.answer for r in load_benchmark("amc", fixture_path("amc"))][:1]   # doctest: +SKIP
    ['27']
    """
    spec = _spec(benchmark)
    if limit is not None:
        limit = integer(limit, "limit", minimum=1, strict=True, why=" or None")
    if path is not None:
        rows = read_located_rows(path)
    else:
        hub_split = split or spec.split
        rows = [(r, f"{spec.hub_id} ({hub_split}): row {i}") for i, r in enumerate(hub_rows(spec, hub_split), 1)]
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise ValueError(f"benchmark {benchmark!r} from {str(path or spec.hub_id)!r} has no rows")
    records: list[EvalRecord] = []
    seen: dict[str, str] = {}
    for i, (row, where) in enumerate(rows):
        records.append(_to_record(spec, row, i, benchmark, where))
        if records[-1].id in seen:
            raise ValueError(
                f"{where}: record id {records[-1].id!r} appears already at {seen[records[-1].id]}; ids must be unique"
            )
        seen[records[-1].id] = where
    return records


def _to_record(spec: BenchmarkSpec, row: dict[str, Any], i: int, benchmark: str, where: str) -> EvalRecord:
    """One row as a record; any problem with the row is a ValueError that starts with its location."""
    try:
        return _from_verl(row, i, benchmark) if _is_verl_row(row) else spec.to_record(row, i, benchmark)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    except KeyError as err:  # a nested field that is not there (verl chat messages)
        raise ValueError(f"{where}: missing field {err.args[0]!r}") from None
    except (TypeError, AttributeError) as err:  # a field of the wrong shape
        raise ValueError(f"{where}: malformed row ({err})") from None


# ----------------------------------------------------------------------------------------------- prompts


def build_messages(
    record: EvalRecord, *, instruction: str = QWEN_MATH_INSTRUCTION, instruction_role: str = "user"
) -> list[dict[str, str]]:
    """The chat for ``record``: its own chat prompt if it has one, else the problem plus the instruction.

    ``instruction_role="user"`` appends the instruction to the problem (DeepSeek/DAPO style);
    ``"system"`` sends it as the system message (the Qwen2.5-Math README style).
    """
    if record.messages is not None:
        return [dict(m) for m in record.messages]
    if instruction_role == "system":
        return [{"role": "system", "content": instruction}, {"role": "user", "content": record.problem}]
    if instruction_role == "user":
        content = f"{record.problem}\n{instruction}" if instruction else record.problem
        return [{"role": "user", "content": content}]
    raise ValueError(f"instruction_role must be 'user' or 'system', got {instruction_role!r}")


def build_prompt(
    record: EvalRecord,
    tokenizer: Any = None,
    *,
    instruction: str = QWEN_MATH_INSTRUCTION,
    instruction_role: str = "user",
    use_chat_template: bool = True,
) -> str:
    """The text fed to the model: the tokenizer's chat template when it has one, plain text otherwise.

    Plain text joins the messages with blank lines and ends with a newline.

    >>> rec = EvalRecord("1", "What is 1+1?", "2", "demo")
    >>> build_prompt(rec)
    'What is 1+1?\\nPlease reason step by step, and put your final answer within \\\\boxed{}.\\n'
    """
    messages = build_messages(record, instruction=instruction, instruction_role=instruction_role)
    if use_chat_template and tokenizer is not None and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not isinstance(text, str):
            raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
        return text
    return "\n\n".join(m["content"] for m in messages) + "\n"
