"""The SFT warm-up every run of a task starts from: trained once, cached under a key of its configuration
(``keys.sft_key``), and scored on the held-out set (greedy and sampled accuracy) for the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from costaware._io import atomic_dir, write_json_atomic
from costaware.experiments.keys import sft_key
from costaware.experiments.profile import Profile
from costaware.experiments.quiet import quiet_libraries
from costaware.experiments.tasks import get_task
from costaware.experiments.worker import eval_sets, load_checkpoint

__all__ = ["warm_up", "held_out_config"]


def _score_sft(tok: Any, model: Any, profile: Profile, task_name: str) -> dict[str, Any]:
    """Greedy and sampled (mean@k) held-out accuracy of the SFT policy."""
    from costaware.experiments import policy

    task, (held, _) = get_task(task_name), eval_sets(profile, task_name)
    kw: dict[str, Any] = dict(max_size=profile.sizes(task_name)[1], generation=profile.generation)
    return {"greedy_accuracy": policy.evaluate(model, tok, task, held, k=1, temperature=0, **kw).accuracy,
            "sampled_accuracy": policy.evaluate(model, tok, task, held, k=profile.eval_k, **kw).accuracy,
            "held_out": held_out_config(profile)}  # fmt: skip


def held_out_config(profile: Profile) -> dict[str, Any]:
    """What the SFT scores depend on besides the checkpoint (the engine only when not the recorded one)."""
    held = {"eval_prompts": profile.eval_prompts, "eval_k": profile.eval_k}
    return held if profile.generation == "transformers" else {**held, "generation": profile.generation}


def warm_up(profile: Profile, task_name: str, out: Path) -> Path:
    """SFT checkpoint shared by every run of ``task_name``, cached under a key of its configuration.

    Written into a temporary folder and renamed into place, so an interrupted warm-up leaves nothing.
    """
    import torch

    from costaware.experiments import policy

    quiet_libraries()  # no "Loading weights" / "Writing model shards" bars
    name, cfg = sft_key(profile, task_name)
    path = out / name
    held_cfg = held_out_config(profile)
    if (path / "sft.json").exists():
        info = json.loads((path / "sft.json").read_text())
        if info.get("held_out") != held_cfg:  # cached by a profile with another held-out set: re-score it
            info.update(_score_sft(*load_checkpoint(path), profile, task_name))
            write_json_atomic(path / "sft.json", info, indent=2)
        return path
    task = get_task(task_name)
    torch.manual_seed(0)
    tok, model = policy.build_policy(task.alphabet, hidden_size=profile.hidden_size, num_layers=profile.num_layers,
                                     seed=0)  # fmt: skip
    info = policy.sft(
        model,
        tok,
        task,
        steps=profile.sft_steps,
        batch_size=profile.sft_batch,
        lr=profile.sft_lr,
        min_size=profile.min_size,
        max_size=profile.sizes(task_name)[1],
        mistake_prob=profile.mistake_prob,
        seed=0,
    )
    info.update(_score_sft(tok, model, profile, task_name), parameters=policy.count_parameters(model), config=cfg)
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "sft.json").write_text(json.dumps(info, indent=2))
    return path
