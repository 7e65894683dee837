"""The `costaware` command: bad input is one line `costaware <job>: error: ...`, exit 2, no traceback,
refused before any work; --debug shows the traceback; a second job on one --out is refused by a lock."""

from __future__ import annotations

import fcntl
import json
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
    (["--set", "generation_cost=1e308"], "generation_cost must be a finite number >= 0 and <= 1e+06"),
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


def test_synthetic_bad_trials_or_out_file_is_a_one_line_error(tmp_path):
    _one_line_error(
        _cli("synthetic", "--quick", "--trials", "-1", "--out", str(tmp_path / "o")), "synthetic", "--trials"
    )
    (tmp_path / "f").write_text("x")
    _one_line_error(_cli("synthetic", "--quick", "--out", str(tmp_path / "f")), "synthetic", "--out")


def _fake_model(tmp_path):
    """A folder that passes --model's checks (config.json); loading it would fail, so no test may."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return model


def test_eval_missing_or_corrupt_inputs(tmp_path):
    data = FIXTURES / "gsm8k_test.jsonl"
    model = _fake_model(tmp_path)
    base = ["eval", "--benchmark", "gsm8k", "--out", str(tmp_path / "o")]
    _one_line_error(_cli(*base, "--model", str(model), "--data", str(tmp_path / "missing.jsonl")),
                    "eval", "missing.jsonl")  # fmt: skip
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n{bad\n")
    _one_line_error(_cli(*base, "--model", str(model), "--data", str(bad)), "eval", "bad.jsonl:2: not valid JSON")
    _one_line_error(_cli(*base, "--model", str(tmp_path / "none"), "--data", str(data)), "eval", "none")
    _one_line_error(_cli(*base, "--model", str(model)), "eval", "gsm8k")  # offline, no --data
    assert not (tmp_path / "o").exists()
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    _one_line_error(_cli("eval", "--benchmark", "gsm8k", "--out", str(a_file), "--model", str(model)), "eval", "--out")


def test_debug_shows_the_traceback(tmp_path):
    proc = _cli("--debug", "reproduce", "--quick", "--jobs", "0", "--out", str(tmp_path / "o"))
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ValueError: --jobs" in proc.stderr
    proc = _cli("synthetic", "--quick", "--trials", "-1", "--debug", "--out", str(tmp_path / "o"))
    assert "Traceback" in proc.stderr and "--trials" in proc.stderr


def test_library_value_error_inside_a_job_is_one_line(monkeypatch, capsys, tmp_path):
    from costaware.sgd import figure

    def boom(**_):
        raise ValueError("n must be a positive integer, got -3")

    monkeypatch.setattr(figure, "run", boom)
    assert main(["synthetic", "--quick", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["costaware synthetic: error: n must be a positive integer, got -3"]


def test_reproduce_runs_the_job_with_the_reports_writer(monkeypatch, tmp_path):
    """The experiments' runner writes no report of its own: the command hands it report.grpo's writer."""
    from costaware import jobs
    from costaware.experiments import runner

    seen = {}
    monkeypatch.setattr(runner, "reproduce", lambda args, **kw: seen.update(kw, out=args.out) or 0)
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "o")]) == 0
    assert seen == {
        "command": "costaware reproduce",
        "write_report": jobs.write_reproduce_report,
        "out": str(tmp_path / "o"),
    }


def test_a_second_job_on_one_out_is_refused_by_the_lock(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".lock", "a+") as held:  # another job holds the folder
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["reproduce", "--quick", "--out", str(out), "--jobs", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "in use by another costaware reproduce" in err[0] and str(out) in err[0]
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # no SFT, no runs


# -- costaware eval: every argument is checked before --out exists and before any model loads -------

EVAL_BAD = [
    (["--k", "0"], "--k must be a positive integer, got 0"),
    (["--k", "-2"], "--k"),
    (["--limit", "0"], "--limit"),
    (["--pass-k", "0"], "--pass-k"),
    (["--k", "4", "--pass-k", "8"], "--pass-k must be at most --k (4), got 8"),
    (["--temperature", "-1"], "--temperature"),
    (["--temperature", "nan"], "--temperature"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-k", "-1"], "--top-k"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--seed", "-1"], "--seed"),
    (["--batch-size", "0"], "--batch-size"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (["--verify-timeout", "0"], "--verify-timeout"),
    (["--device", "bogus"], "--device"),
    (["--dtype", "int8"], "--dtype"),
    (["--k", "x"], "--k"),
    (["--model", "MISSING"], "--model must be a local checkpoint folder"),
    (["--model", "EMPTY"], "config.json"),
    (["--model", None], "--model is required (or --responses FILE"),
    (["--benchmark", None], "--benchmark is required with --model"),
    (["--data", "MISSING"], "--data must be an existing file or folder"),
    (["--data", "BAD"], "bad.jsonl:2: none of the fields ['answer']"),
    (["--responses", "GEN"], "--model and --responses exclude each other"),
]


def _eval_argv(tmp_path, extra):
    model, gen = _fake_model(tmp_path), tmp_path / "gen.jsonl"
    gen.write_text(json.dumps({"id": "gsm8k-0", "responses": ["\\boxed{18}"]}) + "\n")
    (tmp_path / "empty").mkdir(exist_ok=True)
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q"}\n')
    names = {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty"), "GEN": str(gen),
             "BAD": str(tmp_path / "bad.jsonl")}  # fmt: skip
    argv = {"--model": str(model), "--benchmark": "gsm8k", "--data": str(FIXTURES / "gsm8k_test.jsonl")}
    flags = []
    for i in range(0, len(extra), 2):
        key, value = extra[i], extra[i + 1] if i + 1 < len(extra) else None
        if key in argv:
            argv[key] = names.get(value, value)
        else:
            flags += [key, names.get(value, value)]
    out = ["eval", "--out", str(tmp_path / "out"), "--no-progress"]
    return out + [x for k, v in argv.items() if v is not None for x in (k, v)] + flags


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if anything tries to load a tokenizer or a model."""
    from costaware.evaluation import generate

    def forbidden(*a, **k):
        raise AssertionError("a model or tokenizer was loaded before the arguments were checked")

    for name in ("load_tokenizer", "load_model", "make_generator"):
        monkeypatch.setattr(generate, name, forbidden)


@pytest.mark.parametrize(("extra", "needle"), EVAL_BAD, ids=[" ".join(map(str, e)) for e, _ in EVAL_BAD])
def test_eval_bad_arguments_are_refused_before_out_and_model(tmp_path, capsys, no_model_load, extra, needle):
    try:
        code = main(_eval_argv(tmp_path, extra))
    except SystemExit as e:  # argparse's own checks (type, choices)
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("costaware eval: error: ") and needle in err[0], err
    assert not (tmp_path / "out").exists()


def test_eval_responses_errors_and_k(tmp_path, capsys, no_model_load):
    gen = tmp_path / "gen.jsonl"
    gen.write_text(
        json.dumps({"id": "gsm8k-0", "responses": ["a", "b"]}) + "\n" + '{"id": "gsm8k-1", "responses": ["a"\n'
    )
    base = ["eval", "--responses", str(gen), "--benchmark", "gsm8k", "--data", str(FIXTURES / "gsm8k_test.jsonl"),
            "--out", str(tmp_path / "out")]  # fmt: skip
    for extra, needle in (([], "gen.jsonl:2: not valid JSON"), (["--limit", "1", "--k", "3"], "--k must equal"),
                          (["--limit", "1", "--pass-k", "4"], "--pass-k must be at most k (2)"),
                          (["--limit", "1", "--benchmark", "amc"],
                           "id 'gsm8k-0' is not in the benchmark")):  # fmt: skip
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "out").exists()
    assert main(["eval", "--responses", str(gen), "--data", str(gen), "--out", str(tmp_path / "out")]) == 2
    assert "--data and --split need --benchmark" in capsys.readouterr().err


def test_eval_responses_end_to_end_in_a_real_process(tmp_path):
    gen = tmp_path / "gen.jsonl"
    rows = [{"id": "gsm8k-0", "responses": ["so \\boxed{18}", "17"]}, {"id": "gsm8k-2", "responses": ["1500", "x"]}]
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scored"
    proc = _cli("eval", "--responses", str(gen), "--benchmark", "gsm8k", "--data", str(FIXTURES / "gsm8k_test.jsonl"),
                "--out", str(out), "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "results.json").read_text())
    assert [p["correct"] for p in result["problems"]] == [[True, False], [True, False]]
    assert result["summary"]["mean_at_k"] == 0.5 and result["config"]["responses"] == str(gen.resolve())
    assert "| gsm8k | 2 | 2 | 50.0 |" in (out / "summary.md").read_text()


def test_eval_offline_without_data_is_one_line_without_hub_retries(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}  # not told it is offline
    env["PYTHONPATH"] = str(ROOT / "src")
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: the hub cannot be reached from here
    cmd = [sys.executable, "-m", "costaware.cli", "eval", "--benchmark", "gsm8k",
           "--model", str(_fake_model(tmp_path)), "--out", str(tmp_path / "o")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    _one_line_error(proc, "eval", "benchmark 'gsm8k': the hub (http://127.0.0.1:9) cannot be reached")
    assert "--data gsm8k.jsonl" in proc.stderr and "Retry" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_eval_help_shows_every_default():
    import argparse

    from costaware.cli import build_parser

    parser = build_parser(["eval"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["eval"]
    text = sub.format_help()
    for action in sub._actions:
        if not action.option_strings or action.dest in ("help", "out", "model", "responses", "benchmark"):
            continue  # the three inputs have no default: one of --model or --responses is required
        assert "default" in (action.help or ""), f"{action.option_strings[0]} does not state its default"
    for shown in ("(default: 0.6)", "(default: 0.95)", "(default: 2048)", "(default: 32, as in the paper",
                  "(default: 0)", "(default: auto)", "(default: 5)", "(default: 'Please reason step"):  # fmt: skip
        assert shown in " ".join(text.split()), shown
