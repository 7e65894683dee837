"""The command line says what it would run and what it read: ``reproduce --show-profile`` prints the profile
that the options select, ``rollouts analyse`` how many logs and records it pooled and how to read a ratio."""

from __future__ import annotations

import dataclasses

import pytest

from costaware.cli import main
from costaware.experiments.profile import PROFILES
from costaware.experiments.specs import run_specs


def test_show_profile_prints_the_profile_that_would_run(tmp_path, capsys):
    assert (
        main(
            [
                "reproduce",
                "--show-profile",
                "--profile",
                "quick",
                "--set",
                "hidden_size=96",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    quick = PROFILES["quick"]
    runs = len(run_specs(dataclasses.replace(quick, hidden_size=96)))
    assert out.splitlines()[0] == f"profile 'quick' with the options given: {runs} runs"
    assert f"  hidden_size = 96 (changed; 'quick' has {quick.hidden_size!r})" in out
    assert f"  rounds = {quick.rounds!r}:" in out  # the quick profile's own value, not the default's
    assert quick.rounds != PROFILES["default"].rounds
    assert not (tmp_path / "out").exists()  # nothing written


def test_show_profile_applies_the_named_options(tmp_path, capsys):
    assert main(["reproduce", "--show-profile", "--token-budget", "12345", "--out", str(tmp_path)]) == 0
    assert "  token_budget = 12345 (changed; 'default' has" in capsys.readouterr().out


def test_rollouts_analyse_says_what_it_read_and_how_to_read_the_ratio(tmp_path, capsys):
    log = tmp_path / "a.jsonl"
    assert main(["rollouts", "simulate", str(log), "--prompts", "32", "--batch", "8", "--rounds", "5"]) == 0
    capsys.readouterr()
    assert main(["rollouts", "analyse", str(log), str(log)]) == 0
    out = capsys.readouterr().out
    assert f"read 80 group records from 2 log(s) ({log}: 40, {log}: 40), pooled into 5 rounds" in out
    assert "a ratio below 1 predicts a cheaper run than uniform prompts" in out


@pytest.mark.parametrize(
    ("options", "max_size_help"),
    [
        ([], "largest task size (sort: 2..7 digits, prompt + response 6..41 tokens)"),
        (["--set", "task=sortcheck"], "largest task size (sortcheck: 2..7 digits, prompt + response 7..79 tokens)"),
        (["--set", "task=arith"], "largest task size (arith: 2..7 terms, prompt + response 6..32 tokens)"),
        (
            ["--set", "task=arith", "max_size=6"],
            "largest task size (arith: 2..6 terms, prompt + response 6..27 tokens)",
        ),
    ],
)
def test_show_profile_describes_the_sizes_of_the_chosen_task(tmp_path, capsys, options, max_size_help):
    assert main(["reproduce", "--show-profile", *options, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("  max_size = ")]
    assert line.endswith(": " + max_size_help), line
    assert "second task (no second task)" in out


def test_show_profile_describes_the_second_and_extra_tasks(tmp_path, capsys):
    assert main(["reproduce", "--show-profile", "--profile", "full", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "largest size of the second task (arith: 2..6 terms, prompt + response 6..27 tokens)" in out
    assert "(sort: 2..9 digits, prompt + response 6..62 tokens; sortcheck: 2..7 digits, prompt + response 7..79" in out
