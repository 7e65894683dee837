"""The main job's ablations of the gap between J and practice: the profile fields (the optimiser, the arms the LR
sweep runs, the headline's proxy, the step-error measurement), their run keys, what reaches TRL, and the named
profiles gap, gap-sgd, gap-pool4x and gap-oracle."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from costaware.experiments.keys import run_file
from costaware.experiments.profile import HEADLINE, PROFILES, PROXY_METHODS, Profile
from costaware.experiments.specs import RunSpec, run_specs

GAPS = ("gap", "gap-sgd", "gap-pool4x", "gap-oracle")


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(optimizer="adam"), "optimizer"),
        (dict(lr_sweep_arms=("nonzer",)), "lr_sweep_arms"),
        (dict(lr_sweep_arms="none"), "lr_sweep_arms"),
        (dict(headline_arms=("none", "p_star"), lr_sweep_arms=("nonzero",)), "lr_sweep_arms"),
        (dict(headline_proxy="exact"), "headline_proxy"),
        (dict(mse_every=-1), "mse_every"),
    ],
)
def test_bad_values_are_one_error_naming_the_field(bad, field):
    with pytest.raises(ValueError, match=f"^{field} must"):
        Profile(**bad)


def test_proxy_methods_are_the_headline_methods_that_read_the_proxy():
    from costaware.grpo.methods import method_from_name

    assert set(PROXY_METHODS) == {m for m, _ in HEADLINE if method_from_name(m).uses_proxy}


def _names(profile: Profile) -> list[str]:
    return sorted(run_file(Path("o"), s, profile).name for s in run_specs(profile))


def test_new_fields_at_their_defaults_keep_every_run_file_name():
    """The recorded runs keep their files: the new fields are out of the key at their defaults, and the fields
    that choose which runs (lr_sweep_arms, headline_proxy) never enter it."""
    for name in ("default", "quick", "settle"):
        p = PROFILES[name]
        assert (p.optimizer, p.mse_every, p.lr_sweep_arms, p.headline_proxy) == ("adamw", 0, ("none",), "auto")
        more = dataclasses.replace(p, lr_sweep_arms=("none", "nonzero", "p_star"))
        assert set(_names(p)) <= set(_names(more))  # the same runs, and the new sweeps beside them
    p = PROFILES["default"]
    spec = RunSpec("headline", "nonzero", 0, task="sort")
    for changed in (dict(optimizer="sgd"), dict(mse_every=10)):  # another computation, or another record: new runs
        assert run_file(Path("o"), spec, dataclasses.replace(p, **changed)) != run_file(Path("o"), spec, p)
    # the proxy is the spec's: the arms without one keep their files, p*'s are other runs with their own keys
    oracle = dataclasses.replace(p, headline_proxy="oracle")
    kept = [n for n in _names(oracle) if "oracle" not in n]
    assert kept and set(kept) <= set(_names(p)) and len(kept) < len(_names(p))


def test_the_lr_sweep_runs_the_arms_it_names_each_seed_each_multiple():
    p = Profile(seeds=(0, 1), lr_sweep=(0.5, 2.0), lr_sweep_arms=("none", "nonzero", "p_star"), rollout_arms="off")
    sweep = [(s.seed, s.slug) for s in run_specs(p) if s.group == "lr_sweep"]
    assert sweep == [(s, f"{a}:lr{x:g}") for s in (0, 1) for a in ("none", "nonzero", "p_star") for x in (0.5, 2.0)]
    default = [s.slug for s in run_specs(dataclasses.replace(p, lr_sweep_arms=("none",))) if s.group == "lr_sweep"]
    assert default == ["none:lr0.5", "none:lr2"] * 2  # GRPO alone, as before
    # --methods selects the sweep's arms too; the baseline GRPO is always swept when named
    only = [s.slug for s in run_specs(p, ["none", "p_star"]) if s.group == "lr_sweep" and s.seed == 0]
    assert only == ["none:lr0.5", "none:lr2", "p_star:lr0.5", "p_star:lr2"]


def test_headline_proxy_reaches_the_p_star_arms_of_the_headline_and_the_sweep_alone(tmp_path):
    from costaware.experiments.grpo_run import trainer_args

    p = Profile(seeds=(0,), headline_proxy="oracle", lr_sweep_arms=("none", "p_star"), rollout_arms="off")
    proxies = {s.slug: s.proxy for s in run_specs(p)}
    assert proxies == {"none": "auto", "nonzero": "auto", "p_star:oracle": "oracle", "p_star:raw:oracle": "oracle",
                       "p_smooth:oracle": "oracle", "pods": "auto", "none:lr0.5": "auto", "none:lr2": "auto",
                       "p_star:oracle:lr0.5": "oracle", "p_star:oracle:lr2": "oracle"}  # fmt: skip
    spec = next(s for s in run_specs(p) if s.slug == "p_star:oracle")
    args = trainer_args(spec, p, tmp_path)
    assert args.cost_aware_proxy == "oracle" and args.sampling_config().proxy == "oracle"


def test_the_optimizer_and_the_step_errors_reach_trl(tmp_path):
    from trl import GRPOConfig

    from costaware.experiments.grpo_run import trainer_args

    spec = RunSpec("headline", "p_star", 0, task="sort")
    p = PROFILES["default"]
    stock = trainer_args(spec, p, tmp_path)
    default = GRPOConfig.__dataclass_fields__["optim"].default
    assert stock.optim == default and stock.max_grad_norm == GRPOConfig.__dataclass_fields__["max_grad_norm"].default
    assert stock.cost_aware_mse_interval == 0
    sgd = trainer_args(spec, dataclasses.replace(p, optimizer="sgd", mse_every=10), tmp_path)
    assert (sgd.optim, sgd.max_grad_norm, sgd.cost_aware_mse_interval) == ("sgd", 0.0, 10)
    with pytest.raises(ValueError, match="cost_aware_mse_interval=10 with loss_type='dapo'"):
        trainer_args(RunSpec("dapo", "p_star", 0, task="sort", loss_type="dapo"),
                     dataclasses.replace(p, mse_every=10), tmp_path)  # fmt: skip


@pytest.mark.parametrize("name", GAPS)
def test_each_gap_profile_is_an_arm_pair_nonzero_against_p_star_with_20_seeds(name, tmp_path):
    from costaware.experiments.grpo_run import trainer_args

    p = PROFILES[name]
    specs = run_specs(p)
    assert len(p.seeds) >= 20 and p.task == "sort" and not p.extra_tasks and not p.second_task
    assert p.mse_every > 0  # every ablation records its step errors beside J's closed form
    for s in p.seeds:
        arms = {x.arm.method for x in specs if x.seed == s and x.group == "headline"}
        assert arms == {"none", "nonzero", "p_star"}  # the pair, and GRPO, the report's baseline
    assert {x.group for x in specs} <= {"headline", "lr_sweep"}
    for spec in {dataclasses.replace(s, seed=0) for s in specs}:  # what TRL would refuse, before any work
        trainer_args(spec, p, tmp_path)
    base = PROFILES["default"]
    rows = {k: getattr(p, k) for k in ("hidden_size", "num_layers", "max_size", "sft_steps", "token_budget")}
    assert rows == {k: getattr(base, k) for k in rows}  # the default's policy, SFT and budget


def test_what_each_gap_profile_changes():
    gap, sgd, pool, oracle = (PROFILES[n] for n in GAPS)
    assert set(gap.lr_sweep_arms) == {"nonzero", "p_star"} and len(gap.lr_sweep) >= 2 and gap.validation_prompts
    assert sgd.optimizer == "sgd" and set(sgd.lr_sweep_arms) == {"nonzero", "p_star"} and len(sgd.lr_sweep) >= 2
    rows = pool.prompts_per_round * pool.generations
    assert rows == 4 * PROFILES["default"].prompts_per_round * PROFILES["default"].generations
    assert rows // pool.steps_per_generation == 128  # the default's rows per step
    assert oracle.headline_proxy == "oracle"
    assert (pool.optimizer, oracle.optimizer, gap.optimizer) == ("adamw",) * 3


def test_a_record_keeps_its_step_errors_and_one_without_is_written_as_before(tmp_path):
    from costaware.experiments.records import EvalPoint, RunId, RunResult, StepErrorPoint

    rid = RunId(task="sort", method="p_star", seed=0, learning_rate=2e-4, loss_type="grpo")
    plain = RunResult(rid, (EvalPoint(rounds=0, po_tokens=0, generated_tokens=0, heldout_accuracy=0.5),))
    assert "step_errors" not in plain.to_json()  # the records written before them: the same bytes
    points = (StepErrorPoint(step=2, po_tokens=300, measured=0.5, predicted=0.4, grad_sq=0.1),
              StepErrorPoint(step=4, po_tokens=600, measured=0.3))  # fmt: skip
    run = dataclasses.replace(plain, step_errors=points)
    again = RunResult.load(run.save(tmp_path / "r.json"))
    assert again == run and again.step_errors == points
    assert list(run.to_json())[-1] == "step_errors"  # after every field a record had before
    with pytest.raises(ValueError, match="StepErrorPoint.measured"):
        StepErrorPoint(step=0, po_tokens=0, measured=-1.0)


def test_gap_oracle_reuses_gaps_grpo_and_nonzero_runs():
    gap, oracle = set(_names(PROFILES["gap"])), _names(PROFILES["gap-oracle"])
    shared = [n for n in oracle if n in gap]
    assert len(shared) == 40 and all("-none-" in n or "-nonzero-" in n for n in shared)
    assert len(oracle) == 60 and all("p_star_oracle" in n for n in oracle if n not in gap)
