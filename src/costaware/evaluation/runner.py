"""``evaluate``: k samples per problem, verified, summarised as mean@k and pass@k; resumable.

This is the library entry point the GRPO experiment calls on a checkpoint, and what ``costaware eval``
runs. It takes either a generate function ``fn(prompts, k) -> k responses per prompt`` (any engine, or
a stand-in in tests) or a ``model`` + ``tokenizer`` pair, which it wraps in a
:class:`~costaware.evaluation.generate.TransformersGenerator`.

>>> records = load_benchmark("gsm8k", fixture_path("gsm8k"))                      # doctest: +SKIP
>>> oracle = lambda prompts, k: [[f"\\\\boxed{{{gold[p]}}}"] * k for p in prompts]     # doctest: +SKIP
>>> evaluate(records, oracle, k=4).mean_at_k                                       # doctest: +SKIP
1.0
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from costaware._checks import integer
from costaware.evaluation.data import EvalRecord, build_prompt
from costaware.evaluation.generate import Completion, SamplingConfig, TransformersGenerator
from costaware.evaluation.metrics import summarize_correctness

GenerateFn = Callable[[Sequence[str], int], Sequence[Sequence[Any]]]
Verifier = Callable[[str, str], bool]


@dataclass
class ProblemResult:
    """Everything about one problem's k samples: responses, extracted answers, verdicts, token counts."""

    id: str
    benchmark: str
    gold: str
    prompt: str
    responses: list[str]
    extracted: list[str | None]
    correct: list[bool]
    num_tokens: list[int | None] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return float(np.mean(self.correct))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accuracy"] = self.accuracy
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProblemResult:
        names = ("id", "benchmark", "gold", "prompt", "responses", "extracted", "correct", "num_tokens")
        return cls(**{n: d[n] for n in names})


@dataclass
class EvalReport:
    """Per-problem results in record order, the summary (mean@k, s.e., pass@k, ...) and the run config."""

    problems: list[ProblemResult]
    summary: dict[str, Any]
    config: dict[str, Any]

    @property
    def correct(self) -> np.ndarray:
        """Boolean matrix (problems × k)."""
        return np.array([p.correct for p in self.problems], dtype=bool)

    @property
    def mean_at_k(self) -> float:
        return float(self.summary["mean_at_k"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "summary": self.summary,
            "problems": [p.to_dict() for p in self.problems],
        }


def default_pass_ks(k: int) -> list[int]:
    """1, the powers of two below k, and k itself."""
    return sorted({1, k} | {2**i for i in range(1, max(1, k).bit_length()) if 2**i <= k})


def _as_completion(item: Any) -> Completion:
    if isinstance(item, Completion):
        return item
    if isinstance(item, str):
        return Completion(item, None)
    raise ValueError(f"a generate function must return str or Completion items, got {type(item).__name__}")


def _check_verdict(verifier: Any, response: str, gold: str) -> tuple[bool, str | None]:
    if hasattr(verifier, "check"):
        v = verifier.check(response, gold)
        return bool(v.correct), v.extracted
    return bool(verifier(response, gold)), None


def _fingerprint(header: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(header, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read_checkpoint(path: Path, header: dict[str, Any], k: int) -> dict[str, ProblemResult]:
    """Results already saved at ``path`` for this exact run; a different run's file is refused."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        return {}
    saved = json.loads(lines[0]).get("header")
    if saved is None or _fingerprint(saved) != _fingerprint(header):
        raise ValueError(
            f"checkpoint {str(path)!r} belongs to a different run (its settings differ from these); "
            "use another output folder or delete the file to start over"
        )
    done: dict[str, ProblemResult] = {}
    for i, line in enumerate(lines[1:], start=2):
        try:
            res = ProblemResult.from_dict(json.loads(line))
        except (json.JSONDecodeError, KeyError):
            if i == len(lines):  # a run killed mid-write leaves one torn last line: redo that problem
                break
            raise ValueError(f"{path}:{i}: unreadable result line") from None
        if len(res.correct) != k:
            raise ValueError(f"{path}:{i}: problem {res.id!r} has {len(res.correct)} samples, expected {k}")
        done[res.id] = res
    return done


def evaluate(
    records: Sequence[EvalRecord],
    generate_fn: GenerateFn | None = None,
    *,
    model: Any = None,
    tokenizer: Any = None,
    k: int = 32,
    verifier: Verifier | Any = None,
    sampling: SamplingConfig | None = None,
    batch_size: int = 32,
    pass_ks: Sequence[int] | None = None,
    prompts: Sequence[str] | None = None,
    prompt_options: Mapping[str, Any] | None = None,
    responses: Sequence[Sequence[Any]] | None = None,
    chunk_size: int | None = None,
    checkpoint: str | Path | None = None,
    run_config: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> EvalReport:
    """Sample ``k`` responses per record, verify each against the gold answer, and summarise.

    Parameters
    ----------
    generate_fn:
        ``fn(prompts, k)`` returning k responses (``str`` or :class:`Completion`) per prompt. When
        omitted, ``model`` and ``tokenizer`` are wrapped in a ``TransformersGenerator(sampling, batch_size)``.
    verifier:
        ``verifier(response, gold) -> bool``, or an object with ``check(response, gold) -> Verdict`` such
        as :class:`~costaware.evaluation.verify.MathVerifier` (the default).
    prompts, prompt_options:
        The prompt texts, one per record; by default :func:`build_prompt` with ``prompt_options`` and
        the tokenizer (the generator's when not given), i.e. its chat template when it has one.
    responses:
        Responses generated elsewhere, k per record (``str`` or :class:`Completion`): scored as they
        are, instead of calling a generator (see :mod:`costaware.evaluation.responses`).
    chunk_size:
        Problems per ``generate_fn`` call; default the generator's ``preferred_chunk(k)``, else 8.
        Results are saved to ``checkpoint`` after every chunk.
    checkpoint:
        A jsonl file of finished problems. An interrupted run called again with the same settings
        skips the problems already there; each call is seeded from its own prompts, so the result is
        the one an uninterrupted run gives.
    run_config:
        Settings recorded in the report and in the checkpoint header (engine, model, sampling ...).
    """
    records = list(records)
    if not records:
        raise ValueError("records must not be empty")
    k = integer(k, "k", minimum=1)
    ids = [r.id for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError("record ids must be unique")
    if responses is not None:
        if generate_fn is not None or model is not None:
            raise ValueError("pass responses, or a generator (generate_fn or model), not both")
        if len(responses) != len(records):
            raise ValueError(f"responses has {len(responses)} entries for {len(records)} records")
        chunk_size = 64 if chunk_size is None else chunk_size
    elif generate_fn is None:
        if model is None or tokenizer is None:
            raise ValueError("pass either generate_fn or both model and tokenizer")
        generate_fn = TransformersGenerator(model, tokenizer, sampling, batch_size=batch_size)
    if tokenizer is None:
        tokenizer = getattr(generate_fn, "tokenizer", None)
    if verifier is None:
        from costaware.evaluation.verify import MathVerifier

        verifier = MathVerifier()
    if prompts is None:
        prompts = [build_prompt(r, tokenizer, **dict(prompt_options or {})) for r in records]
    elif len(prompts) != len(records):
        raise ValueError(f"prompts has {len(prompts)} entries for {len(records)} records")
    pass_ks = sorted({integer(x, "pass_ks", minimum=1) for x in pass_ks}) if pass_ks is not None else default_pass_ks(k)
    if chunk_size is None:
        assert generate_fn is not None  # set above when there are no responses, which set chunk_size
        chunk_size = generate_fn.preferred_chunk(k) if hasattr(generate_fn, "preferred_chunk") else 8
    chunk_size = integer(chunk_size, "chunk_size", minimum=1)

    config: dict[str, Any] = {"k": k, "pass_ks": pass_ks, "chunk_size": chunk_size, **dict(run_config or {})}
    if hasattr(verifier, "config"):
        config["verifier"] = verifier.config()
    header = {**config, "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}

    done: dict[str, ProblemResult] = {}
    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    if ckpt_path is not None:
        done = _read_checkpoint(ckpt_path, header, k)
        if not ckpt_path.exists() or not ckpt_path.read_text(encoding="utf-8").strip():
            ckpt_path.parent.mkdir(parents=True, exist_ok=True)
            ckpt_path.write_text(json.dumps({"header": header}, default=str) + "\n", encoding="utf-8")

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(records), initial=sum(i in done for i in ids), desc="eval", unit="problem")
    try:
        # chunks are fixed from the first record on, so a resumed run regenerates identical calls
        for start in range(0, len(records), chunk_size):
            chunk = range(start, min(start + chunk_size, len(records)))
            todo = [i for i in chunk if records[i].id not in done]
            if not todo:
                continue
            if responses is not None:
                outputs: Sequence[Sequence[Any]] = [list(responses[i]) for i in chunk]
            else:
                assert generate_fn is not None  # set above when there are no responses
                outputs = generate_fn([prompts[i] for i in chunk], k)
            if len(outputs) != len(chunk):
                raise ValueError(f"generate_fn returned {len(outputs)} lists for {len(chunk)} prompts")
            new: list[ProblemResult] = []
            for i, out in zip(chunk, outputs, strict=True):
                if records[i].id in done:
                    continue
                comps = [_as_completion(x) for x in out]
                if len(comps) != k:
                    raise ValueError(
                        f"{'responses' if responses is not None else 'generate_fn'} holds {len(comps)} "
                        f"responses for problem {records[i].id!r}, expected k={k}"
                    )
                verdicts = [_check_verdict(verifier, c.text, records[i].answer) for c in comps]
                res = ProblemResult(
                    id=records[i].id,
                    benchmark=records[i].benchmark,
                    gold=records[i].answer,
                    prompt=prompts[i],
                    responses=[c.text for c in comps],
                    extracted=[v[1] for v in verdicts],
                    correct=[v[0] for v in verdicts],
                    num_tokens=[c.num_tokens for c in comps],
                )
                done[res.id] = res
                new.append(res)
            if ckpt_path is not None and new:
                with ckpt_path.open("a", encoding="utf-8") as fh:
                    fh.write("".join(json.dumps(r.to_dict()) + "\n" for r in new))
                    fh.flush()
                    os.fsync(fh.fileno())
            if bar is not None:
                bar.update(len(new))
    finally:
        if bar is not None:
            bar.close()

    problems = [done[i] for i in ids]
    return EvalReport(problems=problems, summary=summarize(problems, pass_ks), config=config)


def summarize(problems: Sequence[ProblemResult], pass_ks: Sequence[int]) -> dict[str, Any]:
    """mean@k, its standard error, pass@k, plus answer-extraction rate and mean response length."""
    correct = np.array([p.correct for p in problems], dtype=bool)
    summary = summarize_correctness(correct, pass_ks)
    extracted = np.array([[e is not None for e in p.extracted] for p in problems], dtype=bool)
    tokens = [t for p in problems for t in p.num_tokens if t is not None]
    summary.update(
        benchmarks=sorted({p.benchmark for p in problems}),
        n_responses=int(correct.size),
        answer_extracted=float(extracted.mean()),
        mean_response_tokens=float(np.mean(tokens)) if tokens else None,
    )
    return summary


def markdown_table(summary: Mapping[str, Any], *, title: str | None = None) -> str:
    """A Markdown table of one summary (percentages with one decimal, as the paper's Table 1)."""
    ks = list(summary["pass_at_k"])
    k = summary["k"]
    se = summary.get("mean_at_k_stderr")
    head = [
        "benchmark",
        "problems",
        "k",
        f"mean@{k} (%)",
        "± s.e. (pp)",
        *[f"pass@{x} (%)" for x in ks],
        "answer found (%)",
        "mean tokens",
    ]
    tokens = summary.get("mean_response_tokens")
    row = [
        ", ".join(summary.get("benchmarks", [])),
        str(summary["n_problems"]),
        str(k),
        f"{100 * summary['mean_at_k']:.1f}",
        f"{100 * se:.1f}" if se is not None else "n/a",
        *[f"{100 * summary['pass_at_k'][x]:.1f}" for x in ks],
        f"{100 * summary['answer_extracted']:.1f}",
        f"{tokens:.0f}" if tokens is not None else "n/a",
    ]
    lines = [f"## {title}", ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), "| " + " | ".join(row) + " |"]
    return "\n".join(lines) + "\n"
