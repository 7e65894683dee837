"""One run of the main job, in a worker: the SFT-continuation control or a GRPO run, its
:class:`costaware.experiments.records.RunResult` written atomically to its file (``keys.run_file``)."""

from __future__ import annotations

import os
import shutil
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from costaware.experiments.arms import arm_fields
from costaware.experiments.control import run_control
from costaware.experiments.grpo_run import prompt_log, run_grpo
from costaware.experiments.profile import Profile
from costaware.experiments.quiet import Caught, quiet_libraries, run_recording
from costaware.experiments.records import RunId, RunResult
from costaware.experiments.specs import RunSpec

__all__ = ["run_one", "run_one_recorded"]


def run_one(spec_d: dict[str, Any], profile_d: dict[str, Any], sft_dir: str, out_file: str) -> str:
    """Worker entry: one run, its :class:`RunResult` written atomically to ``out_file``."""
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in profile_d.items()}
    profile = Profile(**fields)
    spec = RunSpec(**spec_d)
    profile = spec.scaled(profile)
    start = time.perf_counter()
    run = run_control if spec.method == "sft" else run_grpo
    args: tuple[Any, ...] = (spec, profile, Path(sft_dir)) + (
        () if spec.method == "sft" else (Path(out_file).with_suffix(""),)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("always", RuntimeWarning)
        out = run(*args)
    lr = profile.control_lr if spec.method == "sft" else profile.learning_rate * spec.lr_scale
    rid = RunId(
        task=spec.task,
        seed=spec.seed,
        learning_rate=lr,
        loss_type=spec.resolved_loss_type(profile),
        setting=spec.setting,
        group=spec.group,
        **arm_fields(spec),
    )
    RunResult(id=rid, evals=tuple(out["evals"]), wall_seconds=time.perf_counter() - start, fidelity=out["fidelity"],
              counters=out["counters"], spec=asdict(spec), generation_seconds=out["generation_seconds"],
              eval_seconds=out["eval_seconds"], step_errors=out.get("step_errors", ())).save(out_file)  # fmt: skip
    log = prompt_log(Path(out_file).with_suffix(""))
    if log.exists():  # the per-prompt log, beside the run file (`costaware rollouts analyse runs/*.prompts.jsonl`)
        os.replace(log, Path(out_file).with_suffix(".prompts.jsonl"))
    shutil.rmtree(Path(out_file).with_suffix(""), ignore_errors=True)  # the trainer's empty output_dir
    return out_file


def run_one_recorded(*job: Any) -> tuple[str, tuple[Caught, ...]]:
    """Worker entry of the job's pool: :func:`run_one` with its warnings recorded for the parent, which
    prints each condition once for the whole job (``quiet.WarningLog``), and no progress bar."""
    quiet_libraries()
    return run_recording(run_one, *job)
