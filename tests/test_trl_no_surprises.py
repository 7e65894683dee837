"""Ordinary configurations that used to do something silently wrong: each is now correct behaviour or one
error or warning that names the option the user wrote."""

from __future__ import annotations

import logging
import os
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from process_group import run_in_group  # noqa: E402
from trl_fixtures import has_digit, tiny_run  # noqa: E402

from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402

TOK = char_tokenizer()


def _trainer(tmp_path, n=8, **over):
    kw = tiny_run(tmp_path, **{"max_completion_length": 4, "loss_type": "grpo", "cost_aware_method": "nonzero", **over})
    torch.manual_seed(0)
    data = datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" * (1 + i % 3) for i in range(n)]})
    return CostAwareGRPOTrainer(
        model=tiny_qwen2(TOK, hidden_size=16, num_layers=1, seed=0),
        args=CostAwareGRPOConfig(**kw),
        reward_funcs=has_digit,
        train_dataset=data,
        processing_class=TOK,
    )


# -- the prompt stage with epoch-based training -------------------------------------------------------


@pytest.mark.parametrize("rollout", ["greso", "cost_aware"])
def test_the_prompt_stage_trains_as_many_epoch_steps_as_trl_without_it(tmp_path, rollout):
    # max_steps=-1: TRL sizes the run from the sampler's length (N=8 prompts, 2 per round, 2 steps per round)
    stock = _trainer(tmp_path / "stock", max_steps=-1, num_train_epochs=1, cost_aware_method="none")
    stock.train()
    staged = _trainer(
        tmp_path / "staged", max_steps=-1, num_train_epochs=1, cost_aware_method="none", cost_aware_rollout=rollout
    )
    staged.train()
    assert stock.state.global_step == 8  # 8 prompts / 2 per round x 2 steps per round
    assert staged.state.global_step == stock.state.global_step
    assert staged.prompt_stage.round == 4


# -- the prompt stage's counts reach TRL's logs ------------------------------------------------------


def test_the_prompt_stage_logs_its_counts_under_cost_aware_prompts(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_rollout="greso", max_steps=4)
    trainer.train()
    # once per generation round, in the log of the step that generated it (as TRL logs "reward")
    logs = [h for h in trainer.state.log_history if "cost_aware/prompts/examined" in h]
    assert len(logs) == trainer.prompt_stage.round == 2
    assert all("reward" in h for h in logs)
    h = logs[-1]
    assert h["cost_aware/prompts/generated"] == 2
    assert h["cost_aware/prompts/examined"] >= h["cost_aware/prompts/generated"]
    assert h["cost_aware/prompts/skipped"] == h["cost_aware/prompts/examined"] - h["cost_aware/prompts/generated"]
    assert 0.0 <= h["cost_aware/prompts/zero_variance_share"] <= 1.0
    assert h["cost_aware/prompts/weight_max"] == 1.0  # GRESO is unweighted


# -- the token budget says why it stopped ------------------------------------------------------------


def test_the_token_budget_logs_why_it_stopped_with_the_totals(tmp_path, caplog):
    trainer = _trainer(tmp_path, max_steps=40, cost_aware_token_budget=1)
    assert trainer.cost_aware_stop_reason is None
    with caplog.at_level(logging.WARNING, logger="costaware.integrations.trl.callbacks"):
        trainer.train()
    assert trainer.state.global_step == 2  # one generation batch (2 steps), then the budget
    tokens = int(trainer.cost_aware_counters.tokens)
    [record] = [r for r in caplog.records if "cost_aware_token_budget" in r.getMessage()]
    message = record.getMessage()
    assert f"cost_aware_token_budget=1 reached: {tokens} policy-optimisation tokens" in message
    assert "before max_steps=40" in message and trainer.cost_aware_stop_reason == message


def test_a_run_that_ends_by_max_steps_logs_no_budget_stop(tmp_path, caplog):
    trainer = _trainer(tmp_path, max_steps=2, cost_aware_token_budget=10**9)
    with caplog.at_level(logging.WARNING, logger="costaware.integrations.trl.callbacks"):
        trainer.train()
    assert trainer.cost_aware_stop_reason is None
    assert not [r for r in caplog.records if "cost_aware_token_budget" in r.getMessage()]


# -- config errors name the user's field -------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "name"),
    [
        (dict(cost_aware_method="p_smooth", cost_aware_alpha=2.0), "cost_aware_alpha must"),
        (dict(cost_aware_proxy="x"), "cost_aware_proxy must"),
        (dict(cost_aware_rollout="cost_aware", cost_aware_rollout_floor=1.0), "cost_aware_rollout_floor must"),
        (dict(cost_aware_rollout_floor=0.0), "cost_aware_rollout_floor must"),  # checked whatever the method
        (dict(cost_aware_generation_cost=-1.0), "cost_aware_generation_cost must"),
        (dict(cost_aware_generation_cost=1e308), r"cost_aware_generation_cost must be .* <= 1e\+06"),
        (dict(cost_aware_proxy_noise=-1.0), "cost_aware_proxy_noise must"),
        (dict(cost_aware_weights="x"), "cost_aware_weights must"),
        (dict(cost_aware_budget="x"), "cost_aware_budget must"),
        (dict(cost_aware_zero_tol=2.0), "cost_aware_zero_tol must"),
        (
            dict(cost_aware_method="p_star", cost_aware_proxy="length_aware", cost_aware_proxy_beta=99.0),
            "cost_aware_proxy_beta must",
        ),
    ],
)
def test_config_errors_name_the_cost_aware_field(tmp_path, over, name):
    with pytest.raises(ValueError, match=name):
        CostAwareGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **over)


def test_generation_cost_zero_is_one_rule_in_trl_and_the_main_job(tmp_path):
    import dataclasses

    from costaware.experiments.profile import PROFILES

    CostAwareGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, cost_aware_generation_cost=0.0)
    assert dataclasses.replace(PROFILES["default"], generation_cost=0.0).generation_cost == 0.0
    with pytest.raises(ValueError, match="generation_cost must be a finite number >= 0"):
        dataclasses.replace(PROFILES["default"], generation_cost=-1.0)


# -- one proxy advice ----------------------------------------------------------------------------------


def test_the_proxy_advice_under_a_token_sum_loss_is_the_measured_one(tmp_path):
    with pytest.warns(UserWarning, match="set cost_aware_proxy='advantage'"):
        CostAwareGRPOConfig(
            output_dir=str(tmp_path), report_to="none", use_cpu=True, loss_type="dapo", cost_aware_method="p_star"
        )
    with warnings.catch_warnings():  # the advice itself draws no warning, nor the default method
        warnings.simplefilter("error")
        for over in (dict(cost_aware_method="p_star", cost_aware_proxy="advantage"), {}):
            CostAwareGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, loss_type="dapo", **over)


# -- a two-process launch left unparallel ------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import os, pathlib, sys, tempfile
    from costaware.integrations.trl import CostAwareGRPOConfig
    args = CostAwareGRPOConfig(output_dir=tempfile.mkdtemp(), report_to="none", use_cpu=sys.argv[1] == "cpu")
    # one file per rank: two processes printing to one pipe interleave their lines
    pathlib.Path(sys.argv[2], "rank" + os.environ["RANK"]).write_text(f"world_size {args.world_size}")
""")


@pytest.mark.parametrize("use_cpu", [False, True])
def test_torchrun_two_processes_without_use_cpu_is_refused_with_the_fix(tmp_path, use_cpu):
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine the bare config is parallel")
    script = tmp_path / "launch.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = run_in_group(  # torchrun and its workers die with the test, also when it is interrupted
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--standalone",
            str(script),
            "cpu" if use_cpu else "bare",
            str(tmp_path),
        ],
        timeout=300,
        env=env,
    )
    out = proc.stdout + proc.stderr
    if use_cpu:
        assert proc.returncode == 0, out
        assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["world_size 2"] * 2, out
    else:
        assert proc.returncode != 0
        assert "WORLD_SIZE=2 processes were launched" in out and "use_cpu=True" in out
