"""scripts/gpu_check.py: its CPU dry run (the same code path as on CUDA) and its checks."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the 'trl' extra is not installed")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return sys.modules["gpu_check"]


def _run(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_cpu_tiny_dry_run_passes_its_checks(tmp_path):
    out = _run("--cpu", "--tiny", "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "OK: all checks passed" in out.stdout and "p_star vs stock" in out.stdout
    assert "nonzero vs stock" in out.stdout
    if importlib.util.find_spec("verl") and importlib.util.find_spec("ray"):  # the verl part ran
        rows = [line.split()[0] for line in out.stdout.splitlines() if line.split()[:1] and line.split()[0] in
                {"stock", "nonzero", "p_star", "pods", "cost_pods"}]  # fmt: skip
        assert rows.count("stock") == 2 and {"nonzero", "p_star", "pods", "cost_pods"} <= set(rows)
    results = {r["method"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert set(results) == {"none", "nonzero", "p_star"}
    for r in results.values():
        assert r["finite"] and r["steps"] == 4 and len(r["losses"]) == 4
        assert r["tokens_logged"] == r["tokens_fed"] > 0
        assert r["po_seconds_per_round"] > 0 and r["peak_memory_mb"] > 0
    assert results["none"]["tokens_logged"] == results["none"]["tokens_plain_logged"]  # stock feeds the pool
    assert results["p_star"]["tokens_logged"] <= results["p_star"]["tokens_plain_logged"]


def _result(gpu_check, **over):
    base = dict(
        method="p_star",
        params_m=1.0,
        rounds=2,
        steps=4,
        finite=True,
        losses=[0.1],
        tokens_logged=10.0,
        tokens_fed=10,
        tokens_plain_logged=12.0,
        po_seconds_per_round=0.1,
        train_seconds=1.0,
        peak_memory_mb=1.0,
    )
    return gpu_check.Result(**{**base, **over})


@pytest.mark.parametrize(
    "over,message",
    [
        ({"finite": False}, "NaN"),
        ({"losses": []}, "no loss"),
        ({"tokens_logged": 5.0}, "tokens logged 5.0 != tokens fed 10"),
        ({"tokens_logged": float("nan")}, "tokens logged nan"),
        ({"po_seconds_per_round": float("nan")}, "PO seconds"),
    ],
)
def test_checks_catch_each_failure(over, message):
    gpu_check = _load()
    assert gpu_check.check([_result(gpu_check)]) == []
    bad = gpu_check.check([_result(gpu_check, **over)])
    assert len(bad) == 1 and message in bad[0]


@pytest.mark.parametrize("args,message", [(["--batch", "3"], "--batch 3"), (["--rounds", "-1"], "--rounds")])
def test_bad_arguments_are_refused_naming_the_value(args, message):
    out = _run("--cpu", "--tiny", *args, timeout=120)
    assert out.returncode == 2 and message in out.stderr
