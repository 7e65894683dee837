"""The names of a job's cached files: a run's result (:func:`run_file`) and a task's SFT warm-up
(:func:`sft_key`), each keyed by every setting that changes what it computes.

Recorded runs are found again by these names, so a field added to ``Profile`` or ``RunSpec`` keeps the
names of the runs recorded before it (see the lists below); ``tests/test_arms.py`` pins every profile's
run file names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from costaware.experiments.profile import Profile
from costaware.experiments.specs import RunSpec
from costaware.experiments.tasks import split_task_id

__all__ = [
    "key",
    "run_file",
    "sft_key",
    "NOT_IN_RUN_KEY",
    "SPEC_FIELDS_ADDED",
    "PROFILE_FIELDS_ADDED",
    "PROFILE_FIELDS_OLD_VALUE",
]


def key(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


# Profile fields that choose WHICH runs a job holds, not what one run does (the spec carries its task,
# seed and LR multiple; the run's own largest size is keyed as max_size): left out of a run's key, so
# `--profile full` reuses the default profile's runs.
NOT_IN_RUN_KEY = (
    "task",
    "second_task",
    "second_max_size",
    "extra_tasks",
    "seeds",
    "setting_seeds",
    "ablation_seeds",
    "lr_sweep",
    "long_budget",
    "rollout_arms",
    "rollout_train_prompts",
    "headline_arms",
    "run_order",
    "lr_sweep_arms",
    "headline_proxy",  # the spec carries it: a run's proxy
)


# RunSpec and Profile fields added after runs were recorded: at their default they stay out of the key,
# so the results recorded before them stay valid.
SPEC_FIELDS_ADDED = ("budget_scale", "rollout", "train_prompts")
PROFILE_FIELDS_ADDED = ("logprob_rows", "train_prompts", "numeric_jitter", "optimizer", "mse_every")
# Profile fields added with a default that changes what runs do: they stay out of the key only at the
# value the runs recorded before them had, so those keep their files and the new default makes new runs.
PROFILE_FIELDS_OLD_VALUE = {"generation": "transformers"}


def run_file(out: Path, spec: RunSpec, profile: Profile) -> Path:
    """A run's result file, keyed by its spec and every profile field that changes what the run does:
    a changed default is a new run."""
    name = f"{spec.task.replace(':', '-')}-{spec.group}-{spec.setting}-{spec.slug.replace(':', '_')}-s{spec.seed}"
    spec_d = {k: v for k, v in dataclasses.asdict(spec).items()
              if not (k in SPEC_FIELDS_ADDED and v == RunSpec.__dataclass_fields__[k].default)}  # fmt: skip
    fields = {k: v for k, v in dataclasses.asdict(profile).items() if k not in NOT_IN_RUN_KEY
              and not (k in PROFILE_FIELDS_ADDED and v == Profile.__dataclass_fields__[k].default)
              and not (k in PROFILE_FIELDS_OLD_VALUE and v == PROFILE_FIELDS_OLD_VALUE[k])}  # fmt: skip
    fields["max_size"] = profile.sizes(spec.task)[1]  # the largest size this run's task uses
    return out / "runs" / f"{name}-{key([spec_d, fields])}.json"


def sft_key(profile: Profile, task_name: str) -> tuple[str, dict[str, Any]]:
    """The SFT checkpoint's folder name and the configuration it is keyed by (shared by every run of the task)."""
    cfg = {k: getattr(profile, k) for k in ("hidden_size", "num_layers", "min_size", "mistake_prob",
                                            "sft_steps", "sft_batch", "sft_lr")}  # fmt: skip
    cfg["max_size"] = profile.sizes(task_name)[1]
    cfg["task"] = split_task_id(task_name)[0]  # the family: "sort:9" is sort with max_size 9
    return f"sft-{task_name.replace(':', '-')}-{key(cfg)}", cfg
