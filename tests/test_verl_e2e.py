"""verl 0.9's own trainer loop (``python -m verl.trainer.main_ppo``) with the plugin, under Ray on the CPU.

Each run is verl's real entry point (Ray, FSDP2 actor/ref workers, TransferQueue, the agent loop, the
reward loop) in the verl environment (``.venv-verl``, made by ``scripts/setup.sh --engine verl``: verl
cannot build a model where TRL 1.16 is installed), with the CPU support of ``costaware.integrations.verl.cpu``.
The policy is a tiny Qwen2 warmed up on ``sort``; the reward is the exact verifier. Every assertion reads
the metrics verl's own ``file`` logger wrote.

Runs (about 1 min each on 2 cores, most of it Ray start-up): stock and ``none`` (1 worker, same seed),
``p_smooth`` with KL (2 workers), ``p_star`` on a 2-node ``ray.cluster_utils.Cluster`` with a token budget,
and trainer v0 with the prompt-stage sampler, straight to step 3 and saved at step 2 then resumed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from costaware.integrations.verl.cpu.run import environment, launch, overrides  # stdlib only at import

REPO = Path(__file__).resolve().parents[1]

VERL_PYTHON = Path(os.environ.get("COSTAWARE_VERL_PYTHON", REPO / ".venv-verl" / "bin" / "python"))
STEPS, BATCH, N = 2, 4, 8
ROWS = BATCH * N

if not VERL_PYTHON.exists():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"CI: the verl environment {VERL_PYTHON} is missing (bash scripts/setup.sh --engine verl)")
    pytest.skip(
        f"no verl environment at {VERL_PYTHON}: run `bash scripts/setup.sh --engine verl`", allow_module_level=True
    )

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root():
    # its own folder, not pytest's basetemp: a concurrent pytest session prunes old basetemps mid-run
    root = Path(tempfile.mkdtemp(prefix="costaware_verl_e2e_"))
    subprocess.run(
        [str(VERL_PYTHON), "-m", "costaware.integrations.verl.cpu.fixture", str(root)],
        env=environment(),
        check=True,
        capture_output=True,
        timeout=600,
    )
    yield root
    shutil.rmtree(root, ignore_errors=True)


def run(root: Path, name: str, extra: list[str] = (), *, module: str = "verl.trainer.main_ppo", **kw) -> list[dict]:
    args = overrides(root, name=name, **({"steps": STEPS} | kw)) + list(extra)
    metrics, _ = launch(root, args, name=name, python=str(VERL_PYTHON), module=module)
    return metrics


def plugin(method: str, **options) -> list[str]:
    return [f"+algorithm.cost_aware.method={method}"] + [f"+algorithm.cost_aware.{k}={v}" for k, v in options.items()]


def check_counters(metrics: list[dict], first_step: int = 1) -> None:
    """The cumulative counters are the per-step plans summed; every draw was fed, once per distinct row
    (``merge_duplicates``, the default, runs a row drawn k times once with k times its weight)."""
    steps = [m["step"] for m in metrics]
    assert steps == list(range(first_step, first_step + len(metrics))), steps
    for m in metrics:
        assert m["cost_aware/step/rows_drawn"] == ROWS
        assert m["cost_aware/total/rows_drawn"] == ROWS * m["step"]
        assert m["cost_aware/step/rows_unique"] <= m["cost_aware/step/rows_fed"] <= m["cost_aware/step/rows_drawn"]
        assert m["cost_aware/total/generations"] == m["step"]
        assert 1 <= m["cost_aware/step/rows_unique"] <= ROWS
    if first_step == 1:
        for key in ("tokens", "rows_fed"):
            np.testing.assert_allclose(
                np.cumsum([m[f"cost_aware/step/{key}"] for m in metrics]),
                [m[f"cost_aware/total/{key}"] for m in metrics],
            )


def check_loss_ran(metrics: list[dict], workers: int) -> None:
    """verl's reduction of the worker-side loss metrics: rank 0 and rank ``workers - 1`` ran the weighted
    loss, and the mean loss factor they saw is the plan's."""
    for m in metrics:
        if m["cost_aware/step/skipped"]:
            continue
        assert m["actor/cost_aware/loss/rank_min"] == 0
        assert m["actor/cost_aware/loss/rank_max"] == workers - 1
        assert m["actor/cost_aware/loss/factors_mean"] == pytest.approx(m["cost_aware/factors/mean"], rel=1e-5)


def test_stock_and_none_same_update(root):
    stock = run(root, "stock")
    none = run(root, "none", plugin("none"))
    assert len(stock) == len(none) == STEPS
    assert not any(k.startswith("cost_aware/") for k in stock[0])
    check_counters(none)
    check_loss_ran(none, 1)
    assert all(m["cost_aware/weights/mean"] == 1.0 for m in none)
    # the same seed gives the same rollouts, and `none` (every row once, factor 1) the same update
    for key in ("critic/score/mean", "response_length/mean"):
        assert none[0][key] == stock[0][key], key
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert none[0][key] == pytest.approx(stock[0][key], rel=1e-5, abs=1e-7), key


def test_p_smooth_with_kl_two_workers(root):
    metrics = run(
        root,
        "p_smooth_kl",
        plugin("p_smooth", alpha=0.1)
        + [
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.kl_loss_coef=0.1",
            "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        ],
        workers=2,
    )
    assert len(metrics) == STEPS
    check_counters(metrics)
    check_loss_ran(metrics, 2)
    assert all(np.isfinite(m["actor/kl_loss"]) for m in metrics)


def test_p_star_two_node_cluster_token_budget(root):
    """Two raylets; the budget (one step's tokens) is crossed at step 1, so both workers stop after it."""
    metrics = run(
        root,
        "cluster",
        plugin("p_star", alpha=0.01, token_budget=1) + ["trainer.nnodes=2", "trainer.n_gpus_per_node=1"],
        module="costaware.integrations.verl.cpu.cluster",
        workers=2,
        steps=3,
    )
    assert [m["step"] for m in metrics] == [1]
    check_counters(metrics)
    check_loss_ran(metrics, 2)


def test_v0_prompt_stage_checkpoint_resume(root):
    """Trainer v0 with the prompt-stage sampler: saved at step 2 and resumed to step 3, against a run
    straight to step 3. The resumed step draws the same prompts (the sampler's state), gets the same
    rollouts (the weights) and continues the plugin's counters."""
    extra = plugin("p_smooth", alpha=0.1) + [
        "+data.sampler.class_path=pkg://costaware.integrations.verl.prompts",
        "+data.sampler.class_name=CostAwarePromptSampler",
        "+data.sampler.costaware.method=greso",
    ]
    straight = run(root, "v0_straight", extra, trainer_v1=False, steps=3)
    check_counters(straight)
    first = run(root, "v0", extra, trainer_v1=False, save_freq=2)
    check_counters(first)
    ckpt = root / "ckpt" / "v0" / "global_step_2"
    state = json.loads((ckpt / "cost_aware_state.json").read_text())
    assert state, "the plugin's counters were not saved"
    resumed = run(root, "v0", extra, trainer_v1=False, save_freq=2, steps=3)
    assert [m["step"] for m in resumed] == [3]
    check_counters(resumed, first_step=3)
    assert resumed[0]["cost_aware/total/tokens"] == pytest.approx(
        first[-1]["cost_aware/total/tokens"] + resumed[0]["cost_aware/step/tokens"]
    )
    for key in (
        "prompt_length/mean",
        "response_length/mean",
        "critic/score/mean",
        "cost_aware/total/tokens",
        "cost_aware/total/rows_unique",
    ):
        assert resumed[0][key] == pytest.approx(straight[2][key], rel=1e-6), key
