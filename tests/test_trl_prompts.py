"""The prompt stage in the TRL adapter (integrations/trl/prompts.py): the trainer generates the prompts a
PromptStage draws, feeds it the gathered rewards, scales a weighted stage's advantages, and resumes it."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from trl_fixtures import has_digit, tiny_run  # noqa: E402

from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.integrations.trl.prompts import STATE_FILE, PromptStageSampler, fold_round  # noqa: E402
from costaware.rollouts.prompts import greso  # noqa: E402
from costaware.rollouts.stage import PromptStage  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402

TOK = char_tokenizer()
N = 24


def _trainer(tmp_path, seen=None, **over):
    def reward(completions, prompt_id, **kwargs):
        if seen is not None:
            seen.append(list(prompt_id))
        return has_digit(completions)

    reward.__name__ = "has_digit"
    mine = dict(max_completion_length=6, max_steps=6, loss_type="grpo", cost_aware_method="nonzero")
    kw = tiny_run(tmp_path, **{**mine, "cost_aware_rollout": "greso", **over})
    torch.manual_seed(0)
    data = datasets.Dataset.from_dict(
        {"prompt": [f"{i}+{i}=" * (1 + i % 3) for i in range(N)], "prompt_id": list(range(N))}
    )
    return CostAwareGRPOTrainer(
        model=tiny_qwen2(TOK, hidden_size=32, num_layers=1, seed=0),
        args=CostAwareGRPOConfig(**kw),
        reward_funcs=reward,
        train_dataset=data,
        processing_class=TOK,
    )


def test_the_trainer_generates_the_prompts_the_stage_draws_from_its_rewards(tmp_path):
    seen: list[list[int]] = []
    trainer = _trainer(tmp_path, seen)
    folded = []
    real = trainer.prompt_stage.update
    trainer.prompt_stage.update = lambda ids, r, ln, prompt_tokens=None: (
        folded.append((ids.copy(), r.copy(), ln.copy())),
        real(ids, r, ln, prompt_tokens),
    )[1]
    trainer.train()
    assert isinstance(trainer._get_train_sampler(), PromptStageSampler)
    assert len(folded) == 3 == trainer.prompt_stage.round  # 6 steps, 2 per round
    # replay: a fresh stage with the same seed, fed the same rewards, draws the same prompts in the same order
    replay = PromptStage(greso(), num_prompts=N, group_size=4, prompts_per_round=2, seed=0)
    for (ids, r, ln), generated in zip(folded, seen, strict=True):
        assert replay.draw().prompt_ids.tolist() == ids.tolist()
        assert generated == np.repeat(ids, 4).tolist()  # each drawn prompt's G completions, in draw order
        assert set(np.unique(r)) <= {0.0, 1.0} and (ln >= 1).all()
        replay.update(ids, r, ln)


def test_a_weighted_stage_scales_each_groups_advantages_by_its_prompt_factor(tmp_path, monkeypatch):
    from costaware.integrations.trl import prompts as trl_prompts

    out = {}
    for name, factor in (("one", 1.0), ("scaled", 2.5)):
        trainer = _trainer(tmp_path / name, cost_aware_method="none", cost_aware_rollout="cost_aware", max_steps=2)
        monkeypatch.setattr(
            trl_prompts,
            "fold_round",
            lambda stage, r, ln, c, f=factor: (
                stage.update(
                    stage.draw().prompt_ids, r.double().reshape(-1, 4).numpy(), ln.double().reshape(-1, 4).numpy()
                ),
                np.full(r.numel(), f),
            )[1],
        )
        captured = []
        split = trainer._split
        trainer._split = lambda batch, rewards, c=captured, s=split: c.append(s(batch, rewards)) or c[-1]
        trainer.train()
        out[name] = torch.cat([mb["advantages"] for mb in captured[0]])
    assert out["one"].abs().sum() > 0
    torch.testing.assert_close(out["scaled"].sort().values, 2.5 * out["one"].sort().values)


def test_fold_round_refuses_a_round_that_is_not_the_drawn_one():
    stage = PromptStage(greso(), num_prompts=N, group_size=4, prompts_per_round=2, seed=0)
    with pytest.raises(ValueError, match="ZVF or a custom sampler"):
        fold_round(stage, torch.zeros(12), torch.ones(12))
    with pytest.raises(ValueError, match="rewards must lie in"):
        fold_round(stage, torch.full((8,), 3.0), torch.ones(8))


def test_a_resumed_run_continues_the_prompt_stage(tmp_path):
    whole = _trainer(tmp_path / "whole")
    whole.train()
    first = _trainer(tmp_path / "cut", save_strategy="steps", save_steps=4)
    first.train()
    with open(tmp_path / "cut" / "checkpoint-4" / STATE_FILE) as fh:
        saved = json.load(fh)
    assert saved["round"] == 2
    resumed = _trainer(tmp_path / "cut", save_strategy="steps", save_steps=4)
    resumed.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-4"))
    assert resumed.prompt_stage.round == whole.prompt_stage.round == 3
    assert resumed.prompt_stage.state_dict() == whole.prompt_stage.state_dict()


@pytest.mark.parametrize(
    ("over", "name"),
    [
        (dict(cost_aware_rollout="everything"), "cost_aware_rollout"),
        (dict(cost_aware_rollout="greso", cost_aware_zvf=True), "cost_aware_zvf"),
        (dict(cost_aware_rollout="cost_aware", cost_aware_method="p_smooth", cost_aware_alpha=0.1, beta=0.1), "beta"),
        (dict(cost_aware_rollout="cost_aware", cost_aware_rollout_floor=1.0), "floor"),
        (dict(cost_aware_rollout="cost_aware", cost_aware_method="pods"), "recomputes the advantages"),
        (dict(cost_aware_rollout="cost_aware_skip", cost_aware_generation_cost=-1.0), "generation_cost"),
    ],
)
def test_bad_rollout_options_are_one_error_naming_them(tmp_path, over, name):
    with pytest.raises(ValueError, match=name):
        _trainer(tmp_path, **over)


# -- the prompt rule's own options: cost_aware_prompt_kwargs --------------------------------------------


def test_the_prompt_kwargs_reach_the_stages_rule(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_rollout="cost_aware_skip", cost_aware_prompt_kwargs={"min_keep": 0.2})
    rule = trainer.prompt_stage.method
    assert (rule.name, rule.min_keep, rule.reference) == ("cost_aware_skip", 0.2, 0.5)
    assert rule.po_rows == "nonzero" and rule.generation_cost == trainer.args.cost_aware_generation_cost
    plain = _trainer(tmp_path / "plain", cost_aware_method="none", cost_aware_prompt_kwargs={"min_keep": 0.3},
                     cost_aware_rollout="cost_aware_skip")  # fmt: skip
    assert (plain.prompt_stage.method.min_keep, plain.prompt_stage.method.po_rows) == (0.3, "all")


def test_the_prompt_kwargs_are_parsed_from_the_command_line(tmp_path):
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(CostAwareGRPOConfig).parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--use_cpu",
            "--report_to",
            "none",
            "--cost_aware_rollout",
            "greso",
            "--cost_aware_prompt_kwargs",
            '{"p_easy": 0.25, "oversample": 2}',
        ]  # fmt: skip
    )
    assert args.cost_aware_prompt_kwargs == {"p_easy": 0.25, "oversample": 2}
    assert args.prompt_rule(po_rows="nonzero").initial.p_easy == 0.25


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            dict(cost_aware_rollout="greso", cost_aware_prompt_kwargs={"min_keep": 0.1, "taget": 0.3}),
            r"cost_aware_prompt_kwargs has unknown key\(s\) \['min_keep', 'taget'\] for cost_aware_rollout='greso'; "
            r"its keys are \['target', 'easy_split', 'step', 'p_easy', 'p_hard', 'oversample', 'min_p', 'max_p'\]$",
        ),
        (
            dict(cost_aware_rollout="cost_aware", cost_aware_prompt_kwargs={"floor": 0.2}),
            r"unknown key\(s\) \['floor'\] .* \(floor is set by cost_aware_rollout_floor\)$",
        ),
        (
            dict(cost_aware_rollout="cost_aware_skip", cost_aware_prompt_kwargs={"po_rows": "all"}),
            r"\(po_rows is set by cost_aware_method \(rows the row plan feeds\)\)$",
        ),
        (dict(cost_aware_prompt_kwargs={"target": 0.3}), r"unknown key\(s\) \['target'\] for cost_aware_rollout='all'"),
        (
            dict(cost_aware_rollout="cost_aware_skip", cost_aware_prompt_kwargs={"min_keep": 1.5}),
            r"^cost_aware_prompt_kwargs\['min_keep'\] must lie in \(0, 1\)",
        ),
        (
            dict(cost_aware_rollout="greso", cost_aware_prompt_kwargs=[("target", 0.3)]),
            r"cost_aware_prompt_kwargs must be a dict of option names to values, got \[\('target', 0.3\)\]",
        ),
    ],
)
def test_bad_prompt_kwargs_are_refused_before_a_model_is_built(tmp_path, over, message):
    with pytest.raises(ValueError, match=message):
        CostAwareGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **over)
