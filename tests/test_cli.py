"""The `costaware` command: bad input is one line `costaware <job>: error: ...`, exit 2, no traceback,
refused before any work; --debug shows the traceback; a second job on one --out is refused by a lock."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from costaware.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "src" / "costaware" / "evaluation" / "fixtures"


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "costaware.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def _one_line_error(proc: subprocess.CompletedProcess, job: str, needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"costaware {job}: error: "), lines[0]
    assert needle in lines[0], lines[0]


REPRODUCE_BAD = [
    (["--jobs", "0"], "--jobs"),
    (["--methods", "bogus"], "--methods"),
    (["--methods", "p_star", "bogus"], "bogus"),
    (["--loss-type", "bogus"], "--loss-type"),
    (["--seeds", "-1"], "--seeds"),
    (["--seeds", "1", "1"], "--seeds"),
    (["--learning-rate", "0"], "--learning-rate"),
    (["--learning-rate", "-1"], "--learning-rate"),
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--rounds", "0"], "--rounds"),
    (["--token-budget", "-5"], "--token-budget"),
    (["--task", "bogus"], "--task"),
    (["--jobs", "x"], "--jobs"),
    (["--profile", "bogus"], "--profile"),
    (["--only", "control"], "--only"),  # no baseline run: the report could not be written
    (["--set", "bogus=1"], "--set"),
    (["--set", "hidden_size"], "--set"),
    (["--set", "hidden_size=wide"], "--set hidden_size"),
    (["--set", "hidden_size=4"], "hidden_size must be an integer >= 8"),
    (["--set", "seeds=0,x"], "--set seeds"),
    (["--set", "seeds="], "seeds must hold at least one seed"),
    (["--set", "eval_k=1", "eval_k=2"], "twice"),
]


@pytest.mark.parametrize(("extra", "needle"), REPRODUCE_BAD, ids=[" ".join(e) for e, _ in REPRODUCE_BAD])
def test_reproduce_bad_arguments_are_refused_before_any_work(tmp_path, capsys, extra, needle):
    out = tmp_path / "out"
    try:
        code = main(["reproduce", "--quick", "--out", str(out), *extra])
    except SystemExit as e:  # argparse's own checks (type, choices) exit from parse_args
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("costaware reproduce: error: ") and needle in err[0], err
    assert not out.exists()  # nothing was started: no SFT, no folder


def test_reproduce_bad_arguments_in_a_real_process(tmp_path):
    for extra, needle in (REPRODUCE_BAD[0], REPRODUCE_BAD[1]):
        _one_line_error(_cli("reproduce", "--quick", "--out", str(tmp_path / "o"), *extra), "reproduce", needle)
    assert not (tmp_path / "o").exists()


def test_reproduce_out_pointing_at_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    _one_line_error(_cli("reproduce", "--quick", "--out", str(target)), "reproduce", "--out")


def test_synthetic_bad_arguments(tmp_path):
    _one_line_error(_cli("synthetic", "--quick", "--trials", "-1", "--out", str(tmp_path / "o")), "synthetic", "--trials")
    (tmp_path / "f").write_text("x")
    _one_line_error(_cli("synthetic", "--quick", "--out", str(tmp_path / "f")), "synthetic", "--out")


def test_eval_missing_or_corrupt_inputs(tmp_path):
    data = FIXTURES / "gsm8k_test.jsonl"
    base = ["eval", "--benchmark", "gsm8k", "--out", str(tmp_path / "o")]
    _one_line_error(_cli(*base, "--model", str(tmp_path / "none"), "--data", str(tmp_path / "missing.jsonl")),
                    "eval", "missing.jsonl")  # fmt: skip
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{bad\n")
    _one_line_error(_cli(*base, "--model", str(tmp_path / "none"), "--data", str(bad)), "eval", "bad.jsonl")
    _one_line_error(_cli(*base, "--model", str(tmp_path / "none"), "--data", str(data)), "eval", "none")
    _one_line_error(_cli(*base, "--model", str(tmp_path / "none")), "eval", "gsm8k")  # offline, no --data
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    _one_line_error(_cli("eval", "--benchmark", "gsm8k", "--out", str(a_file), "--model", str(tmp_path)), "eval", "--out")


def test_debug_shows_the_traceback(tmp_path):
    proc = _cli("--debug", "reproduce", "--quick", "--jobs", "0", "--out", str(tmp_path / "o"))
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ValueError: --jobs" in proc.stderr
    proc = _cli("synthetic", "--quick", "--trials", "-1", "--debug", "--out", str(tmp_path / "o"))
    assert "Traceback" in proc.stderr and "--trials" in proc.stderr


def test_library_value_error_inside_a_job_is_one_line(monkeypatch, capsys, tmp_path):
    from costaware.experiments import synthetic

    def boom(**_):
        raise ValueError("n must be a positive integer, got -3")

    monkeypatch.setattr(synthetic, "run", boom)
    assert main(["synthetic", "--quick", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["costaware synthetic: error: n must be a positive integer, got -3"]


def test_a_second_job_on_one_out_is_refused_by_the_lock(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".lock", "a+") as held:  # another job holds the folder
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["reproduce", "--quick", "--out", str(out), "--jobs", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "in use by another costaware reproduce" in err[0] and str(out) in err[0]
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # no SFT, no runs
