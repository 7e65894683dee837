"""A code change that silently moves the main job's recorded runs fails here.

:mod:`costaware.experiments.fingerprint` trains a 100-step SFT and two GRPO rounds at a tiny size through
the job's own code and compares losses, norms, projections, token counts and accuracies with the values
below: continuous ones to a relative 1e-3 (1 and 2 threads differ by about 5e-6), counts and accuracies
exactly. A change that is meant to move the numbers (a new default sampler, a new recipe) records them
anew, from the repository root::

    PYTHONPATH=src python -m costaware.experiments.fingerprint

and pastes its ``RECORDED = {...}`` over the one below.
"""

from __future__ import annotations

import pytest

from costaware.experiments.fingerprint import DISCRETE, RTOL, mismatches

RECORDED = {
    'sft_final_loss': 0.8751923352479934,
    'sft_param_norm': 14.487520739373178,
    'sft_param_projection': -11.611289229806433,
    'sft_greedy_accuracy': 0.40625,
    'sft_sampled_accuracy': 0.140625,
    'grpo_update_norm': 0.07834679356390784,
    'grpo_update_projection': -0.029959365241697296,
    'grpo_grad_norm_sum': 2.1472601294517517,
    'grpo_po_tokens': 558,
    'grpo_generated_tokens': 330,
    'grpo_heldout_accuracy': 0.125,
    'grpo_validation_accuracy': 0.125,
}  # fmt: skip


def test_mismatches_compares_continuous_values_to_rtol_and_counts_exactly():
    assert mismatches(dict(RECORDED), RECORDED) == []
    near = {k: v * (1 + RTOL / 4) if k not in DISCRETE else v for k, v in RECORDED.items()}
    assert mismatches(near, RECORDED) == []
    far = {**RECORDED, "grpo_update_projection": RECORDED["grpo_update_projection"] * (1 + 3 * RTOL)}
    assert [m.split(":")[0] for m in mismatches(far, RECORDED)] == ["grpo_update_projection"]
    moved = RECORDED["grpo_po_tokens"] + 1
    assert mismatches({**RECORDED, "grpo_po_tokens": moved}, RECORDED) == [
        f"grpo_po_tokens: {moved}, recorded {RECORDED['grpo_po_tokens']}"
    ]
    assert mismatches({k: v for k, v in RECORDED.items() if k != "sft_final_loss"}, RECORDED) == [
        "sft_final_loss: recorded, not computed"
    ]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_job_still_computes_the_recorded_fingerprint(tmp_path, threads):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    import torch

    from costaware.experiments.fingerprint import fingerprint

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        values = fingerprint(tmp_path)
    finally:
        torch.set_num_threads(before)
    assert mismatches(values, RECORDED) == [], (
        "the main job's numbers moved; if the change means to move them, record them anew (see this file's docstring)"
    )
