"""What a worker of `costaware reproduce` keeps between its runs, so that no run pays a cost that does not
grow with its work.

A job trains dozens of runs from one SFT checkpoint per task, evaluated on one held-out set. A worker
(``runner.worker_init``) imports torch, transformers and TRL once (``runner._preload``); it reads a checkpoint
from disk once and gives each run a deep copy (:func:`load_checkpoint`); it builds and tokenises the
evaluation sets once, and scores the untrained checkpoint, which every run records at step 0, once
(:class:`Evaluator`). None of this changes a number: a run computes what it computed before.

Both kinds of run evaluate the same way: on the sets of :func:`eval_sets`, when :class:`EvalSchedule` says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costaware.experiments.profile import Profile
from costaware.experiments.tasks import get_task

HELD_OUT_SEED, VALIDATION_SEED = 10_001, 10_002


@dataclass(frozen=True)
class TaskSet:
    """Prompts and answers of an evaluation set (a subset of a family's tasks)."""

    prompts: list[str]
    answers: Any

    def __len__(self) -> int:
        return len(self.prompts)


def eval_sets(profile: Profile, task_name: str) -> tuple[TaskSet, TaskSet]:
    """The reported held-out set and a validation split with no prompt in common with it."""
    import numpy as np

    task = get_task(task_name)
    lo, hi = profile.sizes(task_name)
    sizes = dict(min_size=lo, max_size=hi)
    held = task.make_tasks(profile.eval_prompts, **sizes, rng=np.random.default_rng(HELD_OUT_SEED))
    seen = set(held.prompts)
    prompts: list[str]
    rng, prompts, answers = np.random.default_rng(VALIDATION_SEED), [], []
    for _ in range(20):  # small size ranges repeat prompts: draw until enough unseen ones
        if len(prompts) >= profile.validation_prompts:
            break
        cand = task.make_tasks(max(64, 2 * profile.validation_prompts), **sizes, rng=rng)
        for p, a in zip(cand.prompts, list(cand.answers), strict=True):
            if p not in seen and len(prompts) < profile.validation_prompts:
                seen.add(p)
                prompts.append(p)
                answers.append(a)
    if len(prompts) < profile.validation_prompts:
        raise ValueError(f"validation_prompts={profile.validation_prompts} exceeds the distinct prompts of sizes "
                         f"{lo}..{hi} left after the held-out set")  # fmt: skip
    return TaskSet(list(held.prompts), np.asarray(held.answers)), TaskSet(prompts, np.asarray(answers))


class EvalSchedule:
    """When to evaluate: every ``eval_every`` rounds, or at each ``token_budget / eval_points`` crossed."""

    def __init__(self, profile: Profile) -> None:
        self.profile, self.next_tokens = profile, profile.token_budget / profile.eval_points

    def done(self, tokens: int) -> bool:
        return self.profile.token_budget > 0 and tokens >= self.profile.token_budget

    def __call__(self, rounds_done: int, tokens: int, *, last: bool = False) -> bool:
        if self.profile.token_budget <= 0:
            return rounds_done % self.profile.eval_every == 0 or last
        if tokens >= self.next_tokens or self.done(tokens) or last:
            while self.next_tokens <= tokens:
                self.next_tokens += self.profile.token_budget / self.profile.eval_points
            return True
        return False


# What a worker keeps between its runs (a job trains dozens of runs from one checkpoint, on one held-out
# set): the checkpoint as read from disk, the evaluation sets with their token ids, and the step-0
# evaluation, which every run of that checkpoint starts with and which depends on nothing the run chooses.
_CACHE_LIMIT = 4  # entries per cache (a job has one checkpoint per task)
_CHECKPOINTS: dict[tuple[Any, ...], tuple[Any, Any]] = {}
_EVAL_SETS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_START_EVALS: dict[tuple[Any, ...], tuple[float, float | None]] = {}


def _remember(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], make: Any) -> Any:
    if key not in cache:
        if len(cache) >= _CACHE_LIMIT:
            cache.pop(next(iter(cache)))
        cache[key] = make()
    return cache[key]


def checkpoint_key(sft_dir: Path) -> tuple[Any, ...]:
    """The folder and the name, size and mtime of its files (sft.json aside: a re-score rewrites only it)."""
    files = sorted(p for p in sft_dir.iterdir() if p.is_file() and p.name != "sft.json")
    return (str(sft_dir.resolve()), *((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))


def load_checkpoint(sft_dir: Path) -> tuple[Any, Any]:
    """The SFT checkpoint as a fresh (tokenizer, model): read from disk once per process, deep-copied per
    run. A copy holds the same weights (the tied embedding stays tied), so a run trains what a fresh load
    would give it, without the load."""
    import copy

    def read() -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM

        from costaware.tiny import load_char_tokenizer

        return load_char_tokenizer(str(sft_dir)), AutoModelForCausalLM.from_pretrained(str(sft_dir))

    tok, model = _remember(_CHECKPOINTS, checkpoint_key(sft_dir), read)
    return copy.deepcopy(tok), copy.deepcopy(model)


class Evaluator:
    """Held-out and validation accuracy of a run's model; ``seconds`` adds up the time spent evaluating.

    The sets and their token ids are made once per worker; :meth:`start` scores the checkpoint itself once
    per worker and ``kind`` of run (what every run of that kind records at step 0).
    """

    def __init__(self, profile: Profile, task_name: str, tok: Any, sft_dir: Path) -> None:
        from costaware.experiments import policy

        self.task, self.tok, self.seconds = get_task(task_name), tok, 0.0
        self.kw: dict[str, Any] = dict(
            max_size=profile.sizes(task_name)[1], k=profile.eval_k, generation=profile.generation
        )
        self.key = (checkpoint_key(sft_dir), task_name, profile.eval_prompts, profile.validation_prompts,
                    profile.eval_k, profile.sizes(task_name), profile.generation)  # fmt: skip

        def make() -> tuple[Any, ...]:
            held, val = eval_sets(profile, task_name)
            encode = policy.encode_prompts
            return (
                held,
                val,
                encode(tok, held.prompts, k=profile.eval_k),
                (encode(tok, val.prompts, k=profile.eval_k) if len(val) else None),
            )

        self.held, self.val, self.held_ids, self.val_ids = _remember(_EVAL_SETS, self.key, make)

    def __call__(self, model: Any) -> tuple[float, float | None]:
        from costaware.experiments import policy

        start = time.perf_counter()
        h = policy.evaluate(model, self.tok, self.task, self.held, seed=12345, encoded=self.held_ids, **self.kw)
        v = (policy.evaluate(model, self.tok, self.task, self.val, seed=54321, encoded=self.val_ids, **self.kw)
             if len(self.val) else None)  # fmt: skip
        model.train()
        self.seconds += time.perf_counter() - start
        return h.accuracy, None if v is None else v.accuracy

    def start(self, model: Any, kind: str) -> tuple[float, float | None]:
        """The untrained checkpoint's scores (``model`` must be it, unchanged), computed once per worker."""
        scores = _remember(_START_EVALS, (*self.key, kind), lambda: self(model))
        model.train()
        return scores
