"""TRL adapter: defaults backed by the measurements, the PO-token budget, metric names, and the
β calibration's minimum rows and groups. Tiny Qwen2 built in code, CPU, offline."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from test_integration_trl import TOK, _kwargs, _trainer  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from costaware.grpo.accounting import Counters, StepCounts  # noqa: E402
from costaware.integrations.trl import (  # noqa: E402
    SUPPORTED_LOSS_TYPES,
    CostAwareGRPOConfig,
    measure,  # noqa: E402
)
from costaware.integrations.trl.config import AUTO_METHOD, resolve_method  # noqa: E402
from costaware.tiny import tiny_qwen2  # noqa: E402

# ------------------------------------------------------------------------------------------- defaults


def test_bf16_is_chosen_only_where_a_gpu_supports_it(tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU default; on a GPU a bare config takes bf16 as stock TRL does")
    assert CostAwareGRPOConfig(output_dir=str(tmp_path)).bf16 is False  # stock TRL raises here
    assert CostAwareGRPOConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is False
    with pytest.raises(ValueError, match="bf16"):  # an explicit choice is the user's: TRL's own check
        CostAwareGRPOConfig(output_dir=str(tmp_path), bf16=True)
    for where in ("costaware.integrations.trl.config", "transformers.training_args"):
        monkeypatch.setattr(f"{where}.is_torch_bf16_gpu_available", lambda: True)
    assert CostAwareGRPOConfig(output_dir=str(tmp_path)).bf16 is True  # what stock TRL does on a GPU
    assert CostAwareGRPOConfig(output_dir=str(tmp_path), bf16=False).bf16 is False
    assert CostAwareGRPOConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is False


def test_auto_method_resolves_per_loss_family_and_is_refused_with_kl(tmp_path):
    expected = {"grpo": "p_star", "sapo": "p_star"}  # sequence-mean; every other supported loss sums tokens
    for lt in SUPPORTED_LOSS_TYPES:
        over = {"importance_sampling_level": "sequence"} if lt == "luspo" else {}
        args = CostAwareGRPOConfig(**_kwargs(tmp_path, loss_type=lt, **over))
        assert args.cost_aware_method == "auto"  # the field keeps what the user wrote
        assert args.resolved_method == args.sampling_config().method == expected.get(lt, "nonzero"), lt
    assert set(AUTO_METHOD.values()) == {"p_star", "nonzero"}
    assert resolve_method("p_smooth", loss_type="dapo", beta=0.1) == "p_smooth"  # explicit: as given
    with pytest.raises(ValueError, match=r"cost_aware_method='auto' with beta=0\.1.*p_smooth"):
        CostAwareGRPOConfig(**_kwargs(tmp_path, loss_type="grpo", beta=0.1))
    with pytest.raises(ValueError, match=r"'auto' or one of .*'bogus'"):
        CostAwareGRPOConfig(**_kwargs(tmp_path, cost_aware_method="bogus"))
    trainer = _trainer(tmp_path, loss_type="grpo", max_steps=2)
    assert trainer.sampling.method == "p_star" and trainer.sampling.proxy == "advantage"


def fraction_of_digits(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def test_the_readme_example_runs_as_is_on_cpu(tmp_path, monkeypatch):
    """The README's first TRL example, verbatim, on a CPU: no use_cpu, no bf16, TRL's defaults otherwise."""
    monkeypatch.chdir(tmp_path)
    model, tokenizer, reward = tiny_qwen2(TOK, hidden_size=32, num_layers=1, seed=0), TOK, fraction_of_digits
    ds = datasets.Dataset.from_dict({"prompt": ["1+2=", "33+4="]})
    # --- README ---
    from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: F811

    args = CostAwareGRPOConfig(output_dir="out")  # loss_type "dapo" (TRL's default): method "auto" -> "nonzero"
    trainer = CostAwareGRPOTrainer(model=model, args=args, reward_funcs=reward, train_dataset=ds,
                                   processing_class=tokenizer)  # fmt: skip
    trainer.train()
    tokens = trainer.cost_aware_counters.tokens
    # --- end ---
    assert trainer.sampling.method == "nonzero" and not args.bf16
    assert trainer.state.global_step == 6  # 2 prompts x 3 epochs, one group of 8 per step
    assert 0 < tokens <= trainer.cost_aware_counters.tokens_plain
    final = trainer.state.log_history[-1]  # 6 steps, logging_steps 10: the summary carries the totals
    assert final["cost_aware/total/tokens"] == tokens


# --------------------------------------------------------------------------------------- token budget


def _round_totals(trainer):
    """{global_step: cumulative PO tokens} at every logged step (logging_steps=1)."""
    return {h["step"]: h["cost_aware/total/tokens"] for h in trainer.state.log_history if "loss" in h}


@pytest.mark.parametrize(
    "extra,steps_per_round,where",
    [
        ({}, 2, "exact"),  # dapo, auto -> nonzero
        ({"loss_type": "grpo", "cost_aware_method": "p_star", "num_iterations": 2}, 4, "inside"),
        (
            {
                "loss_type": "grpo",
                "cost_aware_method": "p_smooth",
                "beta": 0.1,
                "cost_aware_alpha": 0.3,
                "steps_per_generation": 4,
                "gradient_accumulation_steps": 2,
            },
            2,
            "exact",
        ),  # fmt: skip
        ({"loss_type": "cispo", "cost_aware_method": "pods"}, 2, "inside"),
        ({"loss_type": "bnpo", "cost_aware_method": "none"}, 2, "exact"),
    ],
    ids=["dapo-auto", "grpo-p_star-iters2", "grpo-kl-spg4-ga2", "cispo-pods", "bnpo-none"],
)
def test_token_budget_stops_when_the_round_that_reaches_it_is_spent(tmp_path, extra, steps_per_round, where):
    """The budget is reached by round 2's plan: the run stops after round 2's last optimiser step, never
    inside a round (its tokens were counted when it was planned) and not one round late; the same
    trajectory as the run without a budget up to there; the totals logged at the stop."""
    free = _trainer(tmp_path / "free", max_steps=3 * steps_per_round, **extra)
    free.train()
    totals = _round_totals(free)
    end1, end2 = totals[steps_per_round], totals[2 * steps_per_round]
    assert 0 < end1 < end2, "round 2 fed nothing: this case would not locate the stop"
    budget = int(end2) if where == "exact" else int(end1) + 1
    capped = _trainer(tmp_path / "capped", max_steps=3 * steps_per_round, cost_aware_token_budget=budget, **extra)
    capped.train()
    assert capped.state.global_step == 2 * steps_per_round
    assert capped.cost_aware_counters.tokens == end2 >= budget
    assert _round_totals(capped) == {s: t for s, t in totals.items() if s <= 2 * steps_per_round}
    assert capped.state.log_history[-1]["cost_aware/total/tokens"] == end2  # the end-of-training summary


def test_totals_are_logged_at_the_end_whatever_logging_steps(tmp_path):
    trainer = _trainer(tmp_path, logging_steps=10, max_steps=4)  # TRL's default logging_steps: no step log
    trainer.train()
    logged = [h for h in trainer.state.log_history if "cost_aware/total/tokens" in h]
    assert len(logged) == 1 and "train_runtime" in logged[0]
    counters = trainer.cost_aware_counters
    for key, value in counters.metrics().items():
        assert logged[0][key] == value, key
    assert counters.tokens > 0


def test_metric_names_cannot_be_mistaken_for_trls_or_repeat_a_total(tmp_path):
    """No cost_aware/ name ends in a GRPOConfig field or a metric TRL itself logs (`beta` is TRL's KL
    coefficient), and none outside total/ and step/ repeats a counter (`cost_aware/tokens` did)."""
    trainer = _trainer(tmp_path, cost_aware_method="p_star", cost_aware_proxy="calibrated", max_steps=4,
                       cost_aware_calibration_interval=1, cost_aware_calibration_rows=6, per_device_train_batch_size=8,
                       cost_aware_diagnostics_interval=1, cost_aware_diagnostics_rows=6)  # fmt: skip
    trainer.train()
    keys = {k for h in trainer.state.log_history for k in h}
    ours = {k for k in keys if k.startswith("cost_aware/")}
    assert {"cost_aware/proxy_beta", "cost_aware/proxy_beta_next", "cost_aware/proxy_beta_hat",
            "cost_aware/pearson", "cost_aware/step/tokens", "cost_aware/total/tokens"} <= ours  # fmt: skip
    trl_names = {f.name for f in dataclasses.fields(GRPOConfig)} | (keys - ours)
    counters = set(Counters().to_dict()) | {f.name for f in dataclasses.fields(StepCounts)}
    for key in ours:
        parts = key.split("/")
        assert parts[-1] not in trl_names, key
        if parts[1] not in ("total", "step"):
            assert parts[-1] not in counters, f"{key} repeats cost_aware/total/{parts[-1]}"


# ----------------------------------------------------------------------------------------- calibration


def test_pooled_fit_keeps_one_intercept_per_batch():
    """G = k_b·|A|·c^β exactly, with a different scale k_b per batch: one intercept per batch recovers β;
    one intercept for all would not. A = 0 and failed (NaN) norms are left out."""
    rng = np.random.default_rng(0)
    rows = []
    for batch, scale in enumerate((1.0, 30.0, 0.05)):
        c = rng.uniform(10, 200, 6)
        a = rng.uniform(0.1, 2.0, 6)
        rows += [[batch, ai, scale * ai * ci**0.7, ci] for ai, ci in zip(a, c, strict=True)]
    rows += [[0, 0.0, 1.0, 50.0], [1, 1.0, math.nan, 50.0]]
    fit = measure.pooled_fit(rows)
    assert fit.beta_hat == pytest.approx(0.7, abs=1e-9) and fit.stderr < 1e-6
    assert fit.n_used == 18 and fit.dof == 18 - 3 - 1  # one intercept per batch, and the slope


def test_choose_rows_takes_rows_with_signal_at_most_per_group_per_group():
    adv = torch.tensor([0.5, -0.5, 1.0, -1.0] * 2 + [0.0] * 8 + [1.0, -1.0, 0.0, 0.0, 0.3, -0.3, 0.0, 0.0])
    pick = measure.choose_rows(adv, need=16, group_size=8, per_group=4, zero_tol=1e-6,
                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert pick.tolist() == sorted(pick.tolist()) and bool((adv[pick] != 0).all())
    groups = (pick // 8).tolist()
    assert groups.count(0) == 4 and groups.count(1) == 0 and groups.count(2) == 4
    again = measure.choose_rows(adv, need=16, group_size=8, per_group=4, zero_tol=1e-6,
                                generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert torch.equal(pick, again)  # the same rows on every process
    assert measure.choose_rows(adv, need=3, group_size=8, per_group=4, zero_tol=1e-6,
                               generator=torch.Generator().manual_seed(0)).numel() == 3  # fmt: skip


def test_calibration_waits_for_enough_rows_from_enough_groups_across_a_resume(tmp_path, monkeypatch):
    """Pools of one group (4 rows): 8 rows at most 2 per group need 4 pools before the first fit, so β
    stays at the prior until then; the rows measured so far survive a checkpoint."""
    measured = []
    original = measure.measure_global

    def recording(trainer, batch, plan, pool, offset, chosen):
        measured.append(chosen.tolist())
        return original(trainer, batch, plan, pool, offset, chosen)

    monkeypatch.setattr(measure, "measure_global", recording)
    kw = dict(cost_aware_method="p_star", cost_aware_proxy="calibrated", cost_aware_calibration_interval=1,
              cost_aware_calibration_rows=8, per_device_train_batch_size=4, steps_per_generation=1, max_steps=6,
              save_strategy="steps", save_steps=2)  # fmt: skip
    trainer = _trainer(tmp_path, **kw)
    trainer.train()

    def first_fit(t):
        return [h["step"] for h in t.state.log_history if "cost_aware/proxy_beta_hat" in h]

    assert first_fit(trainer) == [4]  # pools 1-4 give 2 rows each; pools 5-6 start the next fit
    assert trainer.cost_aware_calibration.calibrator.updates == 1
    assert [len(m) for m in measured] == [2] * 6 and all(len({i // 4 for i in m}) == 1 for m in measured)
    beta = [h["cost_aware/proxy_beta"] for h in trainer.state.log_history if "cost_aware/proxy_beta" in h]
    assert beta[:4] == [1.0] * 4 and beta[4] != 1.0  # the prior until the fit, the fitted β after it
    assert trainer.cost_aware_calibration.collecting and len(trainer.cost_aware_calibration.pending) == 4
    resumed = _trainer(tmp_path, **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))  # 4 rows of the fit under way
    assert first_fit(resumed) == [4] and resumed.cost_aware_calibration.calibrator.updates == 1


def test_the_main_job_stops_through_the_public_budget(tmp_path):
    from costaware.experiments.grpo_run import trainer_args
    from costaware.experiments.profile import PROFILES
    from costaware.experiments.specs import run_specs

    p = PROFILES["default"]
    spec = run_specs(p)[0]
    assert trainer_args(spec, p, tmp_path).cost_aware_token_budget == p.token_budget == 300_000
    rounds_only = dataclasses.replace(p, token_budget=0)
    assert trainer_args(spec, rounds_only, tmp_path).cost_aware_token_budget == 0  # off: the round cap ends it


def test_token_budget_accepts_any_integral_count(tmp_path):
    for value in (np.int64(1000), 1000.0, 1000):
        args = CostAwareGRPOConfig(**_kwargs(tmp_path, cost_aware_token_budget=value))
        assert args.cost_aware_token_budget == 1000 and type(args.cost_aware_token_budget) is int
    for bad in (-1, 2.5, True, "1000", float("nan")):
        with pytest.raises(ValueError, match=r"cost_aware_token_budget must be a non-negative integer"):
            CostAwareGRPOConfig(**_kwargs(tmp_path, cost_aware_token_budget=bad))


def test_calibration_state_round_trips_through_its_file(tmp_path):
    """The trainer's calibration state saves the four keys it always saved, and loads them back."""
    from costaware.integrations.trl.measure import CALIBRATOR_FILE, Calibration

    assert Calibration.for_run("advantage", "dapo", 1).calibrator is None
    cal = Calibration.for_run("calibrated", "dapo", 1)
    cal.seconds, cal.pending, cal.collecting = 1.5, [[0.0, 1.0, 2.0, 3.0]], True
    cal.save(str(tmp_path))
    assert list(json.loads((tmp_path / CALIBRATOR_FILE).read_text())) == [
        "calibrator",
        "seconds",
        "pending",
        "collecting",
    ]
    back = Calibration.for_run("calibrated", "dapo", 1)
    back.load(str(tmp_path))
    assert back == cal
    Calibration.for_run("advantage", "dapo", 1).save(str(tmp_path / "none"))  # nothing to save, nothing written
    assert not (tmp_path / "none").exists()
