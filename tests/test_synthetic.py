"""`costaware synthetic`: runs through the CLI, writes the three files, shows the paper's outcome."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costaware.cli import main
from costaware.report.synthetic import cost_table, cost_to_reach
from costaware.sgd.figure import STRATEGIES, make_problem


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    assert main(["synthetic", "--quick", "--out", str(out), "--seed", "3"]) == 0
    return out


def test_writes_figure_curves_and_table(quick_run):
    assert (quick_run / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((quick_run / "curves.json").read_text())
    assert data["config"]["trials"] == 64 and data["config"]["seed"] == 3
    assert set(data["curves"]) == set(STRATEGIES)
    for cv in data["curves"].values():
        k = len(cv["steps"])
        for key in ("cost_mean", "cost_std", "error_avg_mean", "error_avg_std", "error_last_mean"):
            assert len(cv[key]) == k and np.isfinite(cv[key]).all()
        assert cv["steps"][-1] == data["config"]["steps"]
        assert cv["J"] == pytest.approx(cv["S"] * cv["C"])
        assert np.all(np.diff(cv["cost_mean"]) > 0)
    table = (quick_run / "table.md").read_text()
    assert sum(line.startswith("| ") for line in table.splitlines()) == 1 + 4  # header + 4 ε rows
    assert "optimal/uniform measured" in table


def test_outcome_matches_the_paper(quick_run):
    data = json.loads((quick_run / "curves.json").read_text())
    cv = data["curves"]
    assert "cost_table" not in data  # the raw curves only: the report derives its table from them
    for row in cost_table(data):  # optimal is cheapest at every ε of the table
        assert row["cost_optimal"] < row["cost_variance"] < row["cost_uniform"]
    final = {k: cv[k]["error_avg_mean"][-1] for k in STRATEGIES}  # variance fastest per iteration
    assert final["variance"] < min(final["uniform"], final["optimal"])
    assert data["closed_form_J_ratios"]["optimal/uniform"] < 1


def test_measured_ratios_follow_the_bias_limited_prediction(quick_run):
    # With the convex theory step the quick run stays bias-dominated: the mean paths differ only
    # through η_p ∝ 1/√S(p), so the measured cost ratio is √S·C, within 3 % (measured: ≤ 1 %).
    data = json.loads((quick_run / "curves.json").read_text())
    pred = data["bias_limited_sqrtS_C_ratios"]
    for row in cost_table(data):
        assert row["measured_optimal/uniform"] == pytest.approx(pred["optimal/uniform"], rel=0.03)
        assert row["measured_optimal/variance"] == pytest.approx(pred["optimal/variance"], rel=0.03)


def test_same_seed_same_curves(tmp_path, quick_run):
    assert main(["synthetic", "--quick", "--out", str(tmp_path), "--seed", "3"]) == 0
    assert (
        json.loads((tmp_path / "curves.json").read_text())["curves"]["optimal"]["error_avg_mean"]
        == json.loads((quick_run / "curves.json").read_text())["curves"]["optimal"]["error_avg_mean"]
    )


def test_instance_follows_the_paper():
    prob = make_problem(3000, 50, 10.0, 1.0, 1000.0, seed=0)
    norms = np.linalg.norm(prob.A, axis=1)
    assert norms.max() <= 10.0 and norms.min() >= 1.0 and norms.std() > 1.0
    assert prob.c.min() >= 1 and prob.c.max() <= 1000 and prob.d == 50


def test_cost_to_reach_interpolates_in_log_space_and_is_inf_when_never_reached():
    assert cost_to_reach([10, 100], [1.0, 0.01], 0.1) == pytest.approx(np.sqrt(10) * 10)
    assert cost_to_reach([10, 100], [1.0, 0.5], 0.1) == float("inf")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--trials", "0"], "--trials"),
        (["--trials", "-1"], "--trials"),
        (["--steps", "0"], "--steps"),
        (["--seed", "-2"], "--seed"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(tmp_path, capsys, extra, needle):
    out = tmp_path / "o"
    assert main(["synthetic", "--quick", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("costaware synthetic: error: ") and needle in err[0]
    assert not out.exists()  # refused before any work


def test_out_pointing_at_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["synthetic", "--quick", "--out", str(target)]) == 2
    assert "--out" in capsys.readouterr().err
