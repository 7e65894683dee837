"""A fingerprint of the main job's numbers: a short SFT and two GRPO rounds at a tiny size, through the
code every recorded run goes through (``sft.warm_up`` and ``grpo_run.run_grpo``, which
``runs.run_one`` calls in each worker).

"Same seed, same numbers" promises the same numbers on one machine; another processor takes other
floating-point paths (e.g. another matmul kernel, another thread count), which move a run's losses in
their last digits and, over a long run, flip the odd sampled token. This fingerprint is short enough
that such paths move its continuous values by far less than :data:`RTOL`, while a change of the code
(how seeds are derived, the LR schedule, the advantage normaliser, the SFT recipe, ...) moves them by
much more. ``tests/test_fingerprint.py`` compares it with recorded values.

Print the values to record (a change that is meant to move the numbers records them anew)::

    PYTHONPATH=src python -m costaware.experiments.fingerprint
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from costaware.experiments.profile import Profile
from costaware.experiments.specs import RunSpec

# Sort at 2..3 digits, a 1-layer width-32 policy: a 100-step SFT leaves it at about 20% sampled accuracy,
# so the GRPO groups have reward variance and each of the four optimiser steps moves the weights. The
# warm-up spans the steps (LR 0, 1/4, 2/4, 3/4 of peak), so a changed schedule shows.
PROFILE = Profile(
    task="sort", hidden_size=32, num_layers=1, max_size=3, sft_steps=100, sft_batch=32, sft_lr=1e-2, rounds=2,
    prompts_per_round=8, generations=4, steps_per_generation=2, warmup_rounds=2, learning_rate=1e-3,
    token_budget=0, eval_every=1, eval_prompts=32, validation_prompts=8, eval_k=2, diagnostics_rows=0,
    seeds=(1,), lr_sweep=(),
)  # fmt: skip
SPEC = RunSpec("headline", "none", 1, task="sort")  # seed 1: a seed derivation that drops the seed shows

# Continuous values (losses, norms, projections) agree to RTOL across thread counts and processors; counts
# and accuracies are compared exactly (a flipped sampled token moves them and every continuous value).
RTOL = 1e-3
DISCRETE = ("sft_greedy_accuracy", "sft_sampled_accuracy", "grpo_po_tokens", "grpo_generated_tokens",
            "grpo_heldout_accuracy", "grpo_validation_accuracy")  # fmt: skip


def _projection(tensors: dict[str, Any]) -> float:
    """``<v, r>`` for a fixed pseudo-random direction r: unlike a norm, it moves when v turns (Adam's first
    steps have a norm that hardly depends on the gradient, only on the LR)."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    total = 0.0
    for name in sorted(tensors):
        v = tensors[name].detach().double().flatten()
        total += float(v @ torch.randn(v.numel(), generator=gen, dtype=torch.float64))
    return total


def fingerprint(workdir: Path) -> dict[str, float]:
    """The fingerprint's values, training in ``workdir`` (the caller sets the thread count)."""
    from costaware.experiments.grpo_run import run_grpo
    from costaware.experiments.sft import warm_up
    from costaware.experiments.worker import load_checkpoint

    sft_dir = warm_up(PROFILE, SPEC.task, workdir)
    info = json.loads((sft_dir / "sft.json").read_text())
    sft = {k: v.detach().clone() for k, v in load_checkpoint(sft_dir)[1].state_dict().items()}
    out = run_grpo(SPEC, PROFILE, sft_dir, workdir / "grpo")
    trained = out["trainer"].model.state_dict()
    delta = {k: trained[k].detach() - sft[k] for k in sft}
    grad_norms = [float(h["grad_norm"]) for h in out["trainer"].state.log_history if "grad_norm" in h]
    last = out["evals"][-1]
    values = {
        "sft_final_loss": info["final_loss"],
        "sft_param_norm": math.sqrt(sum(float(v.double().square().sum()) for v in sft.values())),
        "sft_param_projection": _projection(sft),
        "sft_greedy_accuracy": info["greedy_accuracy"],
        "sft_sampled_accuracy": info["sampled_accuracy"],
        "grpo_update_norm": math.sqrt(sum(float(v.double().square().sum()) for v in delta.values())),
        "grpo_update_projection": _projection(delta),
        "grpo_grad_norm_sum": sum(grad_norms),
        "grpo_po_tokens": last.po_tokens,
        "grpo_generated_tokens": last.generated_tokens,
        "grpo_heldout_accuracy": last.heldout_accuracy,
        "grpo_validation_accuracy": last.validation_accuracy,
    }
    if len(grad_norms) != PROFILE.rounds or not all(map(math.isfinite, grad_norms)):  # logged once per round
        raise RuntimeError(f"expected {PROFILE.rounds} finite logged grad norms, got {grad_norms}")
    return values


def mismatches(values: dict[str, float], recorded: dict[str, float], rtol: float = RTOL) -> list[str]:
    """What differs: a missing or extra value, a discrete value not equal, a continuous one off by > rtol."""
    out = [f"{k}: recorded, not computed" for k in recorded if k not in values]
    out += [f"{k}: computed, not recorded" for k in values if k not in recorded]
    for k in sorted(set(values) & set(recorded)):
        a, b = values[k], recorded[k]
        ok = a == b if k in DISCRETE else math.isclose(a, b, rel_tol=rtol, abs_tol=rtol * 1e-3)
        if not ok:
            out.append(f"{k}: {a!r}, recorded {b!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m costaware.experiments.fingerprint", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: 1, as the job's workers)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        values = fingerprint(Path(tmp))
    print("RECORDED = {")
    for k, v in values.items():
        print(f"    {k!r}: {v!r},")
    print("}")
    print(f"# {time.perf_counter() - start:.1f} s, {args.threads} thread(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
