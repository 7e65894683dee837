"""The command line says what it would run and what it read: ``reproduce --show-profile`` prints the profile
that the options select, ``rollouts analyse`` how many logs and records it pooled and how to read a ratio."""

from __future__ import annotations

import dataclasses

from costaware.cli import main
from costaware.experiments.profile import PROFILES, run_specs


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
