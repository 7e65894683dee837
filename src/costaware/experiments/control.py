"""The SFT-continuation control: SFT continued from the same checkpoint as the RL runs, at ``control_lr``,
evaluated on their schedule, with SFT tokens on the x-axis (the report draws it beside GRPO)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from costaware.experiments.profile import Profile
from costaware.experiments.records import EvalPoint
from costaware.experiments.specs import RunSpec
from costaware.experiments.tasks import get_task
from costaware.experiments.worker import EvalSchedule, Evaluator, load_checkpoint

__all__ = ["run_control"]


def run_control(spec: RunSpec, profile: Profile, sft_dir: Path) -> dict[str, Any]:
    """SFT continued from the same checkpoint, evaluated on the RL runs' schedule (x = SFT tokens)."""
    from costaware.experiments import policy

    tok, model = load_checkpoint(sft_dir)
    evaluate = Evaluator(profile, spec.task, tok, sft_dir)
    spg = profile.steps_per_generation
    evals = [EvalPoint(0, 0, 0, *evaluate.start(model, "control"))]
    steps = profile.rounds * spg
    due = EvalSchedule(profile)

    def on_step(step: int, tokens: int) -> None:
        last = step == steps or due.done(tokens)
        if (step % spg == 0 or last) and due(step // spg, tokens, last=last):
            evals.append(EvalPoint(step // spg, tokens, 0, *evaluate(model), step=step))

    start = time.perf_counter()
    policy.sft(model, tok, get_task(spec.task), steps=steps, batch_size=profile.prompts_per_round * profile.generations
               // spg, lr=profile.control_lr, min_size=profile.min_size, max_size=profile.sizes(spec.task)[1],
               mistake_prob=profile.mistake_prob, seed=1000 + spec.seed, decay=False, on_step=on_step,
               max_tokens=profile.token_budget or None)  # fmt: skip
    return {
        "evals": evals,
        "counters": {"po_seconds": time.perf_counter() - start},
        "fidelity": (),
        "generation_seconds": 0.0,
        "eval_seconds": evaluate.seconds,
    }
