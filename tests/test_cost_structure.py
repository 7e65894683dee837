"""Cost-structure statistics of per-prompt logs, against a hand computation on a tiny log."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from costaware.report.cost_structure import (
    PROG,
    cost_structure,
    cost_structure_of_logs,
    cost_structure_section,
    first_rounds,
    main,
)
from costaware.rollouts.logs import PromptRound, write_prompt_rounds

# g0: costs 6, 10, 14 (prompt 4); g1: all right (not mixed); g2: costs 10, 6 (prompt 2)
LOG = [
    PromptRound(round=0, prompt_id=0, rewards=(1.0, 0.0, 0.0), completion_lengths=(2, 6, 10), prompt_tokens=4),
    PromptRound(round=0, prompt_id=1, rewards=(1.0, 1.0, 1.0), completion_lengths=(1, 50, 99), prompt_tokens=3),
    PromptRound(round=1, prompt_id=2, rewards=(0.0, 1.0), completion_lengths=(8, 4), prompt_tokens=2),
]


def test_statistics_match_a_hand_computation(tmp_path):
    cv0, cv2 = math.sqrt(32 / 3) / 10, 2 / 8  # population std over mean
    path = tmp_path / "a.prompts.jsonl"
    write_prompt_rounds(path, LOG)
    s = cost_structure_of_logs([path])
    assert (s.groups, s.mixed_groups, s.rows) == (3, 2, 5)
    assert s.median_cv == pytest.approx((cv0 + cv2) / 2)
    assert s.p90_cv == pytest.approx(cv2 + 0.9 * (cv0 - cv2))
    # rows 6, 10, 14, 10, 6 (mean 9.2): total SS 44.8, within SS 32 + 8
    assert s.within_share == pytest.approx(40 / 44.8)
    # lengths 2, 6, 10, 8, 4 against rewards 1, 0, 0, 0, 1
    assert s.length_reward_corr == pytest.approx(-1.2 / (math.sqrt(8) * math.sqrt(0.24)))
    # centred by group: lengths -4, 0, 4, 2, -2; rewards 2/3, -1/3, -1/3, -1/2, 1/2
    assert s.within_length_reward_corr == pytest.approx(-1.2 / (math.sqrt(8) * math.sqrt((6 / 9 + 0.5) / 5)))
    assert (s.mean_length_right, s.mean_length_wrong, s.mean_within_gap) == (3.0, 8.0, 5.0)
    assert s.wrong_longer


def test_equal_lengths_give_zero_spread_and_no_mixed_group_gives_nan():
    same = [PromptRound(0, i, (1.0, 0.0), (5, 5), prompt_tokens=i + 1) for i in range(4)]
    s = cost_structure(same)
    assert s.median_cv == 0.0 and s.p90_cv == 0.0 and s.within_share == 0.0
    assert math.isnan(s.within_length_reward_corr)  # lengths do not vary within a group
    none = cost_structure([PromptRound(0, 0, (1.0, 1.0), (3, 9))])
    assert none.mixed_groups == 0 and math.isnan(none.median_cv) and not none.wrong_longer


def test_section_has_one_row_per_task_and_rejects_bad_input(tmp_path):
    path = tmp_path / "a.prompts.jsonl"
    write_prompt_rounds(path, LOG)
    lines, stats = cost_structure_section({"toy": [path]})
    row = next(line for line in lines if line.startswith("| toy |"))
    assert row == "| toy | 2 | 0.29 | 0.32 | 89.3% | -0.87 | -0.88 | 3.0 | 8.0 |"
    assert stats["toy"] == cost_structure(LOG)
    with pytest.raises(ValueError, match="paths"):
        cost_structure_of_logs([])
    with pytest.raises(TypeError, match="logs"):
        cost_structure_section([path])
    with pytest.raises(ValueError, match="right_at"):
        cost_structure(LOG, right_at=math.nan)


def test_first_rounds_keep_the_starting_policys_groups(tmp_path):
    path = tmp_path / "a.prompts.jsonl"
    write_prompt_rounds(path, LOG)
    assert first_rounds(LOG, 1) == LOG[:2] and first_rounds(LOG, 2) == LOG
    assert cost_structure_of_logs([path], rounds=1) == cost_structure(LOG[:2])
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        first_rounds(LOG, 0)


# -- python -m costaware.report.cost_structure: one-line errors --------------------------------------------------


def test_command_prints_the_statistics(tmp_path, capsys):
    path = tmp_path / "a.prompts.jsonl"
    write_prompt_rounds(path, LOG)
    assert main([str(path), "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "mixed_groups: 1" in out and "groups: 2" in out


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (lambda p: p.write_text('{"round": 0}\n'), [], r"a\.jsonl:1 is missing"),
        (lambda p: p.write_text("not json\n"), [], r"a\.jsonl:1: not valid JSON"),
        (lambda p: p.write_text('{"round": 3.7, "prompt_id": 0, "rewards": [1], "completion_lengths": [2]}\n'), [],
         r"a\.jsonl:1: round must be a non-negative integer, got 3.7"),
        (lambda p: None, [], r"a\.jsonl', which does not exist"),
        (lambda p: p.mkdir(), [], r"a\.jsonl', which is a folder"),
        (lambda p: p.write_text(""), [], r"a\.jsonl' holds no rounds"),
        (lambda p: p.write_text("\n\n"), [], r"a\.jsonl' holds no rounds"),
        (lambda p: write_prompt_rounds(p, LOG), ["--rounds", "0"], "--rounds must be a positive integer, got 0"),
        (lambda p: write_prompt_rounds(p, LOG), ["--rounds", "x"], "argument --rounds: invalid int value: 'x'"),
    ],
)  # fmt: skip
def test_command_errors_are_one_line_with_status_2(tmp_path, capsys, make, args, message):
    path = tmp_path / "a.jsonl"
    make(path)
    try:
        code = main([str(path), *args])
    except SystemExit as e:  # argparse's own checks exit from parse_args
        code = e.code
    assert code == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), err
    assert re.search(message, lines[0]), lines[0]


def test_command_in_a_real_process_has_no_traceback(tmp_path):
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "costaware.report.cost_structure", str(tmp_path / "none.jsonl")],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"{PROG}: error: paths holds '{tmp_path / 'none.jsonl'}', which does not exist"]


def test_rounds_are_checked_before_any_log_is_read(tmp_path):
    with pytest.raises(ValueError, match="rounds must be a positive integer or None, got 0"):
        cost_structure_of_logs([tmp_path / "missing.jsonl"], rounds=0)
