"""Every example in ``examples/`` runs as a user runs it, on a CPU, and prints what its docstring promises:
with its defaults no warning of the library fires, the tokens it prints are those it fed (padding rows
included), and a run without a learning signal exits non-zero with one line saying so.

The examples run through ``tests/_example_runner.py``, which exits non-zero when the library warned."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from process_group import run_in_group

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
RUNNER = Path(__file__).resolve().parent / "_example_runner.py"
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
FED = re.compile(r"fed (\d+) policy-optimisation tokens .*\(padding rows (\d+) included\)")


def _launch(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    # in its own process group: a torchrun example's workers die with the test, also when it is interrupted
    return run_in_group([sys.executable, *args], timeout=600, cwd=tmp_path, env=env)


def _run(args: list[str], tmp_path: Path) -> str:
    """The example's stdout; fails when it exits non-zero or the library warned (the runner's status 3)."""
    proc = _launch(args, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "costaware warned:" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


def _no_signal(args: list[str], tmp_path: Path) -> str:
    """The example run with a reward of 0 for every completion: it must fail, and say why in one line."""
    proc = _launch(args, tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("no learning signal: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _fed(out: str) -> tuple[int, int]:
    """(tokens fed, of which padding) from the example's fed-token line, which names its padding."""
    found = FED.findall(out)
    assert len(found) == 1, out[-2000:]
    return int(found[0][0]), int(found[0][1])


def test_the_runner_reports_a_library_warning(tmp_path):
    """The check the examples' tests rest on: a warning from a costaware module makes the runner fail,
    although its stacklevel points at the caller's line."""
    script = tmp_path / "warns.py"
    script.write_text(
        "from costaware.integrations.trl import CostAwareGRPOConfig\n"
        "def main():\n"
        "    CostAwareGRPOConfig(output_dir='o', cost_aware_method='p_star', report_to='none')  # dapo: warns\n"
    )
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    proc = _launch([str(RUNNER), str(script)], tmp_path)
    assert proc.returncode == 3 and "costaware warned: costaware.integrations.trl.config" in proc.stderr


def test_sampler_example_prints_both_samplers_costs(tmp_path):
    out = _run([str(RUNNER), str(EXAMPLES / "sampler_sgd.py")], tmp_path)
    lines = [ln for ln in out.splitlines() if ln.startswith("seed ")]
    assert len(lines) == 3 and all("uniform" in ln and "cost-aware" in ln and "inf" not in ln for ln in lines)


def test_sampler_example_fails_when_a_sampler_never_reaches_the_target(tmp_path):
    proc = _launch([str(EXAMPLES / "sampler_sgd.py"), "--steps", "10"], tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "seed 0: uniform sampling did not reach loss 0.20 in --steps 10"
    ]


@pytest.fixture
def trl():
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")


def test_trl_example_on_one_process(tmp_path, trl):
    out = _run([str(RUNNER), str(EXAMPLES / "trl_cost_aware_grpo.py")], tmp_path)
    # the default is what the library recommends: auto under the paper's grpo loss, p* with |A|
    assert "method p_star (loss grpo): reward" in out
    fed, padding = _fed(out)
    assert fed > 0 and padding == 0  # one process: no padding rows


def test_trl_example_without_a_signal_fails(tmp_path, trl):
    line = _no_signal([str(RUNNER), "--flat-reward", "number_reward", str(EXAMPLES / "trl_cost_aware_grpo.py"),
                       "--steps", "2"], tmp_path)  # fmt: skip
    assert line == "no learning signal: every reward was equal within every group in 2 batches"


def test_trl_prompt_stage_example_trains_an_epoch_and_logs_each_round(tmp_path, trl):
    out = _run([str(RUNNER), str(EXAMPLES / "trl_prompt_stage.py")], tmp_path)
    # 32 prompts, 8 per round, 4 optimiser steps per round: one epoch is 4 rounds, 16 steps
    assert "cost_aware: 16 optimiser steps, 4 rounds of 8 prompts from 32" in out
    assert out.count("  step ") == 4
    assert _fed(out)[0] > 0


def test_trl_prompt_stage_example_without_a_signal_fails(tmp_path, trl):
    _no_signal([str(RUNNER), "--flat-reward", "digit_reward", str(EXAMPLES / "trl_prompt_stage.py"),
                "--epochs", "0.25"], tmp_path)  # fmt: skip


def test_trl_example_on_two_processes_with_torchrun(tmp_path, trl):
    out = _run([*TORCHRUN, str(RUNNER), str(EXAMPLES / "trl_two_processes.py")], tmp_path)
    assert "2 processes (distributed)" in out and out.count("policy-optimisation tokens") == 1
    fed, padding = _fed(out)
    # the counters' padding is what the line adds to the rows drawn: here the processes' shares differ
    assert 0 < padding < fed


def test_trl_two_process_example_without_a_signal_fails(tmp_path, trl):
    _no_signal([*TORCHRUN, str(RUNNER), "--flat-reward", "digit_reward", str(EXAMPLES / "trl_two_processes.py")],
               tmp_path)  # fmt: skip


def _random_checkpoint(path: Path, task: str) -> Path:
    """A randomly initialised policy saved as an SFT folder of ``task`` (sizes 2..3): it never answers right."""
    from costaware.experiments.policy import build_policy
    from costaware.experiments.tasks import get_task

    tok, model = build_policy(get_task(task).alphabet, hidden_size=16, num_layers=1, seed=0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "sft.json").write_text(json.dumps({"config": {"task": task, "min_size": 2, "max_size": 3}}))
    return path


def test_proxy_probe_reads_the_checkpoints_task_and_fails_without_a_signal(tmp_path, trl):
    """A policy that never sorts right: every reward 0, so the probe stops with one line naming the task
    it read from sft.json (it used to draw arith prompts for any checkpoint and print nothing)."""
    sft = _random_checkpoint(tmp_path / "sft-sort", "sort")
    line = _no_signal([str(RUNNER), str(EXAMPLES / "proxy_fidelity_probe.py"), "--sft", str(sft), "--prompts", "2",
                       "--rounds", "1", "--loss-type", "grpo"], tmp_path)  # fmt: skip
    assert line == (
        "no learning signal: every reward was equal within every group in 1 generation batches of sort prompts "
        "(sizes 2..3, loss_type=grpo)"
    )


def test_proxy_probe_refuses_a_folder_without_sft_json(tmp_path, trl):
    proc = _launch([str(EXAMPLES / "proxy_fidelity_probe.py"), "--sft", str(tmp_path)], tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        f"--sft {str(tmp_path)!r}: no sft.json"
    )


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
