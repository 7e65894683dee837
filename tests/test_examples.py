"""Every example in ``examples/`` runs as a user runs it, on a CPU, and prints what its docstring promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from process_group import run_in_group

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _run(args: list[str], tmp_path: Path) -> str:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    # in its own process group: a torchrun example's workers die with the test, also when it is interrupted
    proc = run_in_group([sys.executable, *args], timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_sampler_example_prints_both_samplers_costs(tmp_path):
    out = _run([str(EXAMPLES / "sampler_sgd.py")], tmp_path)
    lines = [ln for ln in out.splitlines() if ln.startswith("seed ")]
    assert len(lines) == 3 and all("uniform" in ln and "cost-aware" in ln and "inf" not in ln for ln in lines)


@pytest.fixture
def trl():
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")


def test_trl_example_on_one_process(tmp_path, trl):
    out = _run([str(EXAMPLES / "trl_cost_aware_grpo.py")], tmp_path)
    assert "method=p_star: reward" in out and "policy-optimisation tokens" in out


def test_trl_prompt_stage_example_trains_an_epoch_and_logs_each_round(tmp_path, trl):
    out = _run([str(EXAMPLES / "trl_prompt_stage.py")], tmp_path)
    # 32 prompts, 8 per round, 4 optimiser steps per round: one epoch is 4 rounds, 16 steps
    assert "cost_aware: 16 optimiser steps, 4 rounds of 8 prompts from 32" in out
    assert out.count("  step ") == 4


def test_trl_example_on_two_processes_with_torchrun(tmp_path, trl):
    out = _run(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(EXAMPLES / "trl_two_processes.py"),
        ],
        tmp_path,
    )
    assert "2 processes (distributed)" in out and out.count("policy-optimisation tokens") == 1


def test_verl_cpu_example_runs_verls_own_loop_with_the_plugin(tmp_path):
    """examples/verl/run_cpu.sh as a user runs it: main_ppo under its own Ray on the CPU, p* on, 1 step, with
    the user's ``+algorithm.cost_aware.*`` overrides of a key the script sets (alpha) and of one it does not
    (seed); the per-step metrics it prints hold the plugin's (the loop itself: tests/test_verl_e2e.py)."""
    python = Path(os.environ.get("COSTAWARE_VERL_PYTHON", ROOT / ".venv-verl" / "bin" / "python"))
    if not python.exists():
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"CI: the verl environment {python} is missing (bash scripts/setup.sh --engine verl)")
        pytest.skip(f"no verl environment at {python}: run `bash scripts/setup.sh --engine verl`")
    out = tmp_path / "verl"
    path = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "METHOD": "p_star", "OUT": str(out), "PYTHON": str(python), "PYTHONPATH": path}
    args = ["--steps", "1", "--batch", "4", "--mini", "2", "--micro", "8", "--sft-steps", "50"]
    user = ["+algorithm.cost_aware.alpha=0.05", "+algorithm.cost_aware.seed=3"]
    proc = subprocess.run(["bash", str(EXAMPLES / "verl" / "run_cpu.sh"), *args, *user],
                          capture_output=True, text=True, timeout=900, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json

    steps = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(steps) == 1 and any(k.startswith("cost_aware/") for k in steps[0]), proc.stdout[-2000:]
    log = (out / "run.log").read_text()  # the trainer logs the config it runs with
    assert "alpha=0.05" in log and "seed=3" in log and "alpha=0.01" not in log, log[-3000:]
