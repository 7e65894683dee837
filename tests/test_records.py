"""Run records: JSON round trip, validation that names the bad field, arms from registry names."""

from __future__ import annotations

import doctest
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.experiments import records
from costaware.experiments.records import EvalPoint, ProxyFidelityPoint, RunId, RunResult


def _rid(**kw):
    base = dict(task="arith", method="p_star", seed=1, learning_rate=1e-4, loss_type="grpo")
    return RunId(**{**base, **kw})


def _run(**kw):
    evals = (
        EvalPoint(0, 0, 0, 0.2, 0.25),
        EvalPoint(3, 1200, 900, 0.4, None, step=6, po_seconds=1.5, po_tokens_plain=2000, po_tokens_nonzero=1100),
    )
    return RunResult(
        _rid(**kw),
        evals,
        wall_seconds=3.0,
        fidelity=(ProxyFidelityPoint(2, 400, 0.5, 0.3, 0.7),),
        counters={"rows_fed": 12.0},
        spec={"group": "headline"},
    )


def test_records_docstring_examples_run():
    assert doctest.testmod(records).failed == 0


def test_round_trip_through_json_text(tmp_path):
    run = _run(weights="raw", setting="cispo", loss_type="cispo")
    assert RunResult.from_json(json.loads(json.dumps(run.to_json()))) == run
    assert RunResult.load(run.save(tmp_path / "r.json")) == run
    assert not (tmp_path / "r.json.tmp").exists()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 50),
            st.integers(0, 10**7),
            st.integers(0, 10**7),
            st.floats(0, 1),
            st.one_of(st.none(), st.floats(0, 1)),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["none", "nonzero", "p_star", "p_smooth", "pods"]),
    st.sampled_from(["centred", "raw"]),
)
def test_any_run_result_round_trips_through_json(points, method, weights):
    cols = [sorted(c) for c in zip(*[p[:3] for p in points], strict=True)]  # monotone counts
    evals = tuple(EvalPoint(r, t, g, a, v) for r, t, g, (_, _, _, a, v) in zip(*cols, points, strict=True))
    run = RunResult(_rid(method=method, weights=weights), evals)
    assert RunResult.from_json(json.loads(json.dumps(run.to_json()))) == run


def test_arm_keys_from_registry_names_and_options():
    assert _rid(method="none").arm.key == "none"
    assert _rid(weights="raw").arm.key == "p_star:raw"
    assert _rid(method="p_smooth").arm.key == "p_smooth"
    assert _rid(method="p_smooth", alpha=0.05).arm.key == "p_smooth:a0.05"
    assert _rid(proxy_noise=0.1, step_budget="tokens").arm.key == "p_star:noise0.1:tokens"


# A record as `run_one` wrote it before the Arm record existed (commit e7f6f44, an ablation run): today's
# reader must read it, find the same arm, and write it back field for field.
RECORDED = json.loads(
    '{"schema_version": 1, "id": {"task": "sort", "method": "p_smooth", "seed": 2, "learning_rate": 0.0002, '
    '"loss_type": "grpo", "weights": "centred", "setting": "grpo", "group": "ablation", "alpha": 0.05, '
    '"proxy_noise": 0.0, "step_budget": "rows", "proxy": "auto"}, "evals": [{"rounds": 0, "po_tokens": 0, '
    '"generated_tokens": 0, "heldout_accuracy": 0.25, "validation_accuracy": 0.3, "step": 0, "po_seconds": 0.0, '
    '"po_tokens_plain": null, "po_tokens_nonzero": null}, {"rounds": 3, "po_tokens": 1200, "generated_tokens": 900, '
    '"heldout_accuracy": 0.5, "validation_accuracy": 0.45, "step": 6, "po_seconds": 1.5, "po_tokens_plain": 2000, '
    '"po_tokens_nonzero": 1100}], "po_seconds_controlled": false, "wall_seconds": 12.5, "fidelity": [{"step": 2, '
    '"po_tokens": 400, "pearson": 0.5, "chi2": 0.3, "j_vs_uniform": 0.7}], "counters": {"rows_fed": 12.0}, '
    '"spec": {"group": "ablation", "method": "p_smooth", "seed": 2, "task": "sort", "weights": "centred", '
    '"lr_scale": 1.0, "loss_type": "profile", "zvf": false, "alpha": 0.05, "proxy_noise": 0.0, "step_budget": '
    '"rows", "proxy": "auto", "budget_scale": 1.0}, "generation_seconds": 4.0, "eval_seconds": 2.0}'
)


def test_a_record_written_before_arms_reads_back_with_its_arm_and_writes_the_same_json():
    run = RunResult.from_json(RECORDED)
    assert run.id.arm.key == "p_smooth:a0.05" and run.id.arm.alpha == 0.05
    assert json.dumps(run.to_json()) == json.dumps(RECORDED)  # same fields, same order: same files


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        (dict(weights="centered"), "weights"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(seed=-1), "seed"),
        (dict(loss_type="profile"), "loss_type"),
        (dict(task=""), "task"),
        (dict(step_budget="steps"), "step_budget"),
        (dict(alpha=2.0), "alpha"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(method="p_star:raw"), "RunId.method"),
        (dict(proxy=""), "RunId.proxy"),
        (dict(proxy_noise=-1.0), "RunId.proxy_noise"),
    ],
)
def test_run_id_validation_names_field(kw, name):
    with pytest.raises(ValueError, match=name):
        _rid(**kw)


def test_eval_validation_names_field():
    with pytest.raises(ValueError, match="heldout_accuracy"):
        EvalPoint(0, 0, 0, 1.5)
    with pytest.raises(ValueError, match="validation_accuracy"):
        EvalPoint(0, 0, 0, 0.5, float("nan"))
    with pytest.raises(ValueError, match="po_tokens"):
        EvalPoint(0, -1, 0, 0.5)
    with pytest.raises(ValueError, match="rounds"):
        EvalPoint(1.5, 0, 0, 0.5)
    with pytest.raises(ValueError, match="pearson"):
        ProxyFidelityPoint(0, 0, pearson=1.5)


def test_run_result_rejects_empty_or_decreasing_evals_and_foreign_json():
    with pytest.raises(ValueError, match="evals"):
        RunResult(_rid(), ())
    with pytest.raises(ValueError, match="po_tokens"):
        RunResult(_rid(), (EvalPoint(0, 10, 0, 0.1), EvalPoint(1, 5, 0, 0.1)))
    d = _run().to_json()
    with pytest.raises(ValueError, match="schema_version"):
        RunResult.from_json({**d, "schema_version": 0})
    with pytest.raises(ValueError, match="not a RunResult"):
        RunResult.from_json({**d, "id": {**d["id"], "colour": "red"}})
