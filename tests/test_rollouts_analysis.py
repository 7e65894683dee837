"""The prompt-stage analysis: known answers on hand-made logs, online-only predictors, invariants on
synthetic logs with drifting pass rates, the logs' reader/writer, the TRL reward recorder, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from costaware.cli import main
from costaware.rollouts import PromptRound, RecordingReward, read_prompt_rounds, write_prompt_rounds
from costaware.rollouts.analysis import AnalysisConfig, analyse, format_table, j_value
from costaware.rollouts.group import abs_adv_sum
from costaware.rollouts.synthetic import simulate_prompt_rounds

HAND = [
    PromptRound(0, 0, (1.0, 0.0), (4, 8), 10),  # informative: c = 12/3 + (14 + 18) = 36
    PromptRound(0, 1, (1.0, 1.0), (6, 6), 2),  # all correct: c = 12/3 (+ 16 PO tokens under 'none')
    PromptRound(1, 1, (1.0, 0.0), (6, 2), 2),
    PromptRound(1, 0, (0.0, 0.0), (9, 9), 10),
]


@pytest.mark.parametrize("row_method, want", [("nonzero", 36 / 40), ("none", 36 / (36 + 4 + 16))])
def test_oracle_on_a_hand_made_round_is_its_cost_share(row_method, want):
    res = analyse(HAND, AnalysisConfig(row_method=row_method))
    assert res.ratio("oracle").per_round[0] == pytest.approx(want, rel=1e-12)


def test_row_level_ratio_on_a_hand_made_round():
    res = analyse(HAND)
    c = np.array([14.0, 18.0])  # prompt + completion tokens of the two non-zero rows (equal |A|)
    assert res.row_level.per_round[0] == pytest.approx(np.sqrt(c).sum() ** 2 / (2 * c.sum()), rel=1e-12)


def test_j_value_is_the_variance_times_cost_product():
    g, c, q = np.array([1.0, 2.0, 0.0]), np.array([3.0, 1.0, 5.0]), np.array([0.2, 0.5, 0.3])
    assert j_value(g, c, q) == pytest.approx((1 / 0.2 + 4 / 0.5) * (0.6 + 0.5 + 1.5))
    assert j_value(g, c, np.array([0.0, 1.0, 0.0])) == float("inf")
    G = abs_adv_sum([1], 2)[0]  # two informative groups, one dead: the oracle puts nothing on the dead one
    assert j_value(np.array([G, 0.0]), np.array([1.0, 1.0]), np.array([1.0, 0.0])) == pytest.approx(G**2)


def test_predictors_use_only_earlier_rounds():
    res = analyse(HAND)
    for r in res.prompt_level:
        if r.kind in ("predictor", "mixture"):
            assert r.per_round[0] == pytest.approx(1.0, abs=1e-12), r.name  # no history yet: uniform
    changed = HAND[:2] + [replace(HAND[2], rewards=(0.0, 1.0), completion_lengths=(50, 1)), HAND[3]]
    res2 = analyse(changed)
    for a, b in zip(res.prompt_level, res2.prompt_level, strict=True):
        assert a.per_round[0] == b.per_round[0]  # a later round cannot change an earlier prediction


def _stationary(rounds: int = 30, seed: int = 0) -> list[PromptRound]:
    """Prompts 0-7 always all correct, 8-15 right half the time: a learnable split."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(rounds):
        for j in rng.choice(16, 8, replace=False):
            r = np.ones(4) if j < 8 else (rng.random(4) < 0.5).astype(float)
            out.append(PromptRound(t, int(j), tuple(r.tolist()), tuple(int(x) for x in rng.integers(20, 40, 4)), 30))
    return out


def test_history_predictors_beat_uniform_when_status_persists():
    res = analyse(_stationary())
    assert res.ratio("posterior").overall < 0.95
    assert res.ratio("last_status+a0.5").overall < 1.0
    # unmixed, a class whose calibrated mean is still 0 gets q = 0, and a prompt of it that comes back
    # informative makes J infinite: the reason for the defensive mixture
    assert res.ratio("last_status").overall == float("inf")
    assert res.ratio("oracle").overall <= res.ratio("posterior").overall


@pytest.mark.parametrize("seed", [0, 1])
def test_invariants_on_synthetic_logs_with_drifting_pass_rates(seed):
    recs = simulate_prompt_rounds(num_prompts=96, group_size=8, batch_size=24, rounds=16, drift=0.1, seed=seed)
    res = analyse(recs, AnalysisConfig(alphas=(0.1, 0.5), first=(1, 2, 4)))
    oracle = np.array(res.ratio("oracle").per_round)
    assert np.isfinite(oracle).all() and (oracle <= 1 + 1e-12).all()
    for r in res.prompt_level:
        v = np.array(r.per_round)
        if r.kind in ("predictor", "mixture"):  # the oracle minimises J over every q on the round's prompts
            assert (oracle <= v + 1e-12).all(), r.name
        if r.kind == "mixture":  # a weight is at most 1/α: J stays finite
            assert np.isfinite(v).all()
    np.testing.assert_allclose(res.ratio("two_stage(m=1)").per_round, 1.0, rtol=1e-12)  # rho = 1: plain GRPO
    assert res.row_level.overall < 1 and np.isfinite(res.row_level.overall)
    assert {s.name for s in res.skips} == {"greso", "cost_aware_skip"}
    text = format_table(res, per_round=True)
    assert "oracle" in text and "row level: p* / nonzero" in text and "round by round" in text


def test_logs_round_trip_and_bad_records_are_named(tmp_path):
    path = tmp_path / "log.jsonl"
    write_prompt_rounds(path, HAND, append=False)
    assert read_prompt_rounds([path]) == HAND
    path.write_text('{"round": 0, "prompt_id": 1, "rewards": [1.0]}\n')
    with pytest.raises(ValueError, match=r"log.jsonl:1 is missing \['completion_lengths'\]"):
        read_prompt_rounds([path])
    with pytest.raises(ValueError, match="completion_lengths must be a non-negative integer"):
        PromptRound(0, 0, (1.0,), (-3,), 0)
    with pytest.raises(ValueError, match=r"paths holds '.*nope.jsonl', which does not exist"):
        read_prompt_rounds([tmp_path / "nope.jsonl"])
    with pytest.raises(ValueError, match=r"paths holds '.*', which is a folder"):
        read_prompt_rounds([tmp_path])


GOOD = {"round": 2, "prompt_id": 5, "rewards": [1.0, 0], "completion_lengths": [3, 4], "prompt_tokens": 7}


@pytest.mark.parametrize(
    ("field", "bad", "message"),
    [
        ("round", 3.7, "round must be a non-negative integer, got 3.7"),
        ("round", True, "round must be a non-negative integer, got True"),
        ("round", "3", "round must be a non-negative integer, got '3'"),
        ("round", -1, "round must be a non-negative integer, got -1"),
        ("prompt_id", 1.5, "prompt_id must be a non-negative integer, got 1.5"),
        ("prompt_id", None, "prompt_id must be a non-negative integer, got None"),
        ("prompt_tokens", False, "prompt_tokens must be a non-negative integer, got False"),
        ("prompt_tokens", "7", "prompt_tokens must be a non-negative integer, got '7'"),
        ("completion_lengths", [3, 4.5], r"completion_lengths\[1\] must be a non-negative integer, got 4.5"),
        ("completion_lengths", [True, 4], r"completion_lengths\[0\] must be a non-negative integer, got True"),
        ("completion_lengths", ["3", 4], r"completion_lengths\[0\] must be a non-negative integer, got '3'"),
        ("completion_lengths", "34", "completion_lengths must be a list, got '34'"),
        ("rewards", [1.0, "0"], r"rewards\[1\] must be a real number, got '0'"),
        ("rewards", [True, 0.0], r"rewards\[0\] must be a real number, got True"),
        ("rewards", "10", "rewards must be a list, got '10'"),
    ],
)
def test_log_reader_refuses_what_the_constructor_refuses(tmp_path, field, bad, message):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, field: bad}) + "\n")
    with pytest.raises(ValueError, match=rf"log.jsonl:2: {message}"):
        read_prompt_rounds([path])


def test_log_reader_reads_integral_numbers_as_integers(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({**GOOD, "round": 2.0, "completion_lengths": [3.0, 4]}) + "\n")
    (rec,) = read_prompt_rounds([path])
    assert rec == PromptRound(2, 5, (1.0, 0.0), (3, 4), 7)
    assert type(rec.round) is int and all(type(n) is int for n in rec.completion_lengths)
    assert all(type(r) is float for r in rec.rewards)


def test_recording_reward_logs_one_record_per_group_with_trl_kwargs(tmp_path):
    path = tmp_path / "rec.jsonl"

    def correct(prompts, completions, completion_ids, **kw):
        return [float(c == "yes") for c in completions]

    f = RecordingReward(correct, path, group_size=2)
    out = f(
        prompts=["p0", "p0", "p1", "p1"],
        completions=["yes", "no", "no", "no"],
        completion_ids=[[1, 2], [3], [4, 5, 6], [7]],
        prompt_id=[4, 4, 9, 9],
        prompt_tokens=[5, 5, 7, 7],
        trainer_state=SimpleNamespace(global_step=12),
    )
    assert out == [1.0, 0.0, 0.0, 0.0] and f.__name__ == "correct"
    assert read_prompt_rounds([path]) == [
        PromptRound(12, 4, (1.0, 0.0), (2, 1), 5),
        PromptRound(12, 9, (0.0, 0.0), (3, 1), 7),
    ]
    with pytest.raises(ValueError, match="prompt_id"):
        f(prompts=["p"], completions=["yes"], completion_ids=[[1]])


def test_cli_simulates_and_analyses(tmp_path, capsys):
    log, out = tmp_path / "syn.jsonl", tmp_path / "res.json"
    assert main(["rollouts", "simulate", str(log), "--prompts", "64", "--batch", "16", "--rounds", "6"]) == 0
    assert main(["rollouts", "analyse", str(log), "--per-round", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "prompt-stage J(q)/J(uniform): 6 rounds, N=64" in text and "posterior+a0.5" in text
    rec = json.loads(out.read_text())
    assert rec["num_prompts"] == 64 and len(rec["row_level"]["per_round"]) == 6
    assert main(["rollouts", "analyse", str(tmp_path / "missing.jsonl")]) == 2
    with pytest.raises(SystemExit) as exc:  # argparse's own one-line error
        main(["rollouts", "analyse", str(log), "--row-method", "pods"])
    assert exc.value.code == 2 and "invalid choice: 'pods'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (".", "--json must name a file to write, got '{dest}', which is a folder"),
        ("missing/res.json", "--json must name a file in an existing folder, got '{dest}'"),
        ("syn.jsonl/res.json", "--json must name a file in an existing folder, got '{dest}'"),
    ],
)
def test_cli_checks_the_json_destination_before_the_analysis(tmp_path, capsys, where, message):
    log = tmp_path / "syn.jsonl"
    assert main(["rollouts", "simulate", str(log), "--prompts", "16", "--batch", "4", "--rounds", "2"]) == 0
    capsys.readouterr()
    dest = str(tmp_path / where)
    assert main(["rollouts", "analyse", str(log), "--json", dest]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing read, nothing analysed
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"costaware rollouts: error: {message.format(dest=dest)}"), err


def test_cli_json_check_leaves_no_file_and_keeps_an_existing_one(tmp_path, capsys):
    log, out = tmp_path / "syn.jsonl", tmp_path / "res.json"
    assert main(["rollouts", "simulate", str(log), "--prompts", "16", "--batch", "4", "--rounds", "2"]) == 0
    assert main(["rollouts", "analyse", str(log), "--json", str(out), "--generation-cost", "1e308"]) == 2
    assert "generation_cost must be a finite number >= 0 and <= 1e+06" in capsys.readouterr().err
    assert not out.exists()  # the check made no empty file
    out.write_text("old")
    assert main(["rollouts", "analyse", str(log), "--json", str(out), "--generation-cost", "1e308"]) == 2
    assert out.read_text() == "old"
