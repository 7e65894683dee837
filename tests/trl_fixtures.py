"""What the TRL tests share: the arguments of a tiny CPU run and a 0/1 reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# A tiny CPU run: 4 generations a prompt, 2 optimiser steps a generation, 4 steps, no checkpoints, no
# reference model (beta 0), deterministic; a test names only what it changes.
TINY_RUN: dict[str, Any] = dict(
    max_completion_length=8,
    num_generations=4,
    per_device_train_batch_size=4,
    steps_per_generation=2,
    max_steps=4,
    report_to="none",
    use_cpu=True,
    bf16=False,
    logging_steps=1,
    save_strategy="no",
    seed=0,
    beta=0.0,
    loss_type="dapo",
    learning_rate=1e-3,
    disable_tqdm=True,
)


def tiny_run(output_dir: str | Path, **over: Any) -> dict[str, Any]:
    """``CostAwareGRPOConfig`` keyword arguments of :data:`TINY_RUN` writing to ``output_dir``, ``over`` applied."""
    return {**TINY_RUN, "output_dir": str(output_dir), **over}


def has_digit(completions: list[str], **kwargs: Any) -> list[float]:
    """1 when the completion holds a digit: a 0/1 reward, so some groups are constant, as with verifiers."""
    return [float(any(ch.isdigit() for ch in c)) for c in completions]
