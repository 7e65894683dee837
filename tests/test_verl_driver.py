"""The plugin's settings are checked on verl's driver, in ``main_ppo``, before Ray starts.

verl's own entry point runs here (``verl.trainer.main_ppo.main`` under Hydra, and ``python -m
verl.trainer.main_ppo`` in a fresh process); ``ray.init`` is replaced by a stand-in that records the call, so
a bad setting must raise its error before it, with Ray never initialised, and a good one must reach it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
main_ppo = pytest.importorskip("verl.trainer.main_ppo", reason="verl's trainer dependencies missing")
ray = pytest.importorskip("ray")

# a config verl's own validate_config accepts: the plugin's check is what must stop a bad one
BASE = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=4",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.shuffle=false",
    "trainer.n_gpus_per_node=1",
]
# Hydra in this process: no log files, no output folder, the exception itself rather than a printed report
QUIET = ["hydra/job_logging=disabled", "hydra/hydra_logging=disabled", "hydra.output_subdir=null", "hydra.run.dir=."]
V0 = "trainer.use_v1=false"
PROMPTS = [
    V0,
    "data.dataloader_num_workers=0",
    "+data.sampler.class_path=pkg://costaware.integrations.verl.prompts",
    "+data.sampler.class_name=CostAwarePromptSampler",
]


class RayStarted(Exception):
    """What the stand-in ``ray.init`` raises: the driver got past the plugin's check."""


@pytest.fixture
def driver(monkeypatch, tmp_path):
    """Run ``main_ppo.main()`` with these overrides; returns the ``ray.init`` calls it made."""
    calls: list[dict] = []

    def init(*args, **kwargs):
        calls.append(kwargs)
        raise RayStarted

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.chdir(tmp_path)

    def run(*overrides: str) -> list[dict]:
        monkeypatch.setattr(sys, "argv", ["main_ppo", *BASE, *QUIET, *overrides])
        main_ppo.main()
        return calls

    run.calls = calls  # type: ignore[attr-defined]
    return run


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+algorithm.cost_aware.method=bogus"], "algorithm.cost_aware.method must be 'auto' or one of"),
        (["+algorithm.cost_aware.alpha=-1"], "algorithm.cost_aware.alpha must be 0 or lie in [1e-300, 1], got -1.0"),
        (
            ["+algorithm.cost_aware.method=p_star", "actor_rollout_ref.actor.ppo_epochs=2"],
            "needs actor_rollout_ref.actor.ppo_epochs=1",
        ),
        # a method trainer v1 (verl's default) cannot run
        (["+algorithm.cost_aware.method=pods"], "method='pods' recomputes group advantages"),
        # the curriculum hook on trainer v1, and the prompt sampler's own options on trainer v0
        (PROMPTS[2:], "data.sampler.class_path='pkg://costaware.integrations.verl.prompts' is not supported"),
        ([*PROMPTS, "+data.sampler.costaware.method=bogus"], "data.sampler.costaware.method must be one of"),
    ],
)
def test_bad_setting_fails_on_the_driver_before_ray_starts(driver, overrides, message):
    with pytest.raises(ValueError) as info:
        driver(*overrides)
    assert message in str(info.value)
    assert driver.calls == [] and not ray.is_initialized()


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # no plugin key: stock verl
        ["+algorithm.cost_aware.enable=false", "+algorithm.cost_aware.method=bogus"],  # off: nothing is read
        ["+algorithm.cost_aware.method=p_star", "+algorithm.cost_aware.alpha=0.01"],
        [V0, "+algorithm.cost_aware.method=pods"],  # trainer v0 runs PODS
        [*PROMPTS, "+data.sampler.costaware.method=greso"],
    ],
)
def test_good_setting_reaches_ray_init(driver, overrides):
    with pytest.raises(RayStarted):
        driver(*overrides)
    assert len(driver.calls) == 1


def test_python_m_main_ppo_fails_before_ray_starts(tmp_path):
    """``python -m verl.trainer.main_ppo`` runs the module as ``__main__``: the check still runs, through
    verl's ``validate_config``, and the driver never reaches ``ray.init`` (whose arguments it prints first)."""
    import costaware

    src = str(Path(costaware.__file__).resolve().parents[1])  # this costaware, from the folder the run starts in
    path = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": path}
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)
    args = [*BASE, *QUIET, "+algorithm.cost_aware.alpha=-1"]
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "algorithm.cost_aware.alpha must be 0 or lie in [1e-300, 1], got -1.0" in out, out[-3000:]
    assert "ray init kwargs" not in out and "Started a local Ray instance" not in out, out[-3000:]
