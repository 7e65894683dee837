"""CostAwareGRPOTrainer on a tiny Qwen2 built in code (CPU, offline)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402

TOK = char_tokenizer()


def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def _dataset():
    # prompts of very different lengths, so that costs vary across rows
    return datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" * (1 + i % 5) for i in range(32)]})


def _kwargs(tmp_path, **over):
    kw = dict(
        output_dir=str(tmp_path),
        max_completion_length=8,
        num_generations=4,
        per_device_train_batch_size=4,
        steps_per_generation=2,
        max_steps=4,
        report_to="none",
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        beta=0.0,
        loss_type="dapo",
        learning_rate=1e-3,
    )
    kw.update(over)
    return kw


def _trainer(tmp_path, cls=CostAwareGRPOTrainer, cfg=CostAwareGRPOConfig, **over):
    torch.manual_seed(0)
    model = tiny_qwen2(TOK, hidden_size=32, num_layers=1, seed=0)
    args = cfg(**_kwargs(tmp_path, **over))
    return cls(model=model, args=args, reward_funcs=digit_reward, train_dataset=_dataset(), processing_class=TOK)


@pytest.mark.parametrize(
    "method,extra",
    [("p_star", {}), ("none", {}), ("nonzero", {}), ("pods", {}), ("p_smooth", {"cost_aware_zvf": True})],
)
def test_trainer_runs_and_counts_the_tokens_it_feeds(tmp_path, method, extra):
    trainer = _trainer(tmp_path, cost_aware_method=method, **extra)
    fed = []
    original = trainer.compute_loss

    def counting(model, inputs, *a, **k):
        fed.append(int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()))
        return original(model, inputs, *a, **k)

    trainer.compute_loss = counting
    trainer.train()
    state = trainer.cost_aware_state
    assert trainer.state.global_step == 4
    assert state["generations"] == 2
    assert state["tokens"] == sum(fed) > 0
    logged = [h for h in trainer.state.log_history if "cost_aware/tokens" in h]
    assert logged and logged[-1]["cost_aware/tokens"] == sum(fed)
    if method == "none":
        assert state["tokens"] == state["tokens_plain"]
    assert state["tokens_nonzero"] <= state["tokens_plain"]


def test_method_none_reproduces_stock_trl(tmp_path):
    ours = _trainer(tmp_path / "a", cost_aware_method="none")
    ours.train()
    stock = _trainer(tmp_path / "b", cls=GRPOTrainer, cfg=GRPOConfig)
    stock.train()
    for p, q in zip(ours.model.parameters(), stock.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def _generation(trainer):
    trainer.model.train()
    inputs = next(iter(trainer.get_train_dataloader()))
    batch = trainer._generate_and_score_completions(inputs)
    rewards = trainer._local_rewards(batch["advantages"].shape[0])
    return batch, rewards


def _total_grad(trainer, micro):
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    trainer.model.zero_grad()
    for mb in micro:
        trainer.compute_loss(trainer.model, mb).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
def test_merging_duplicates_leaves_the_gradient_unchanged(tmp_path, loss_type):
    trainer = _trainer(tmp_path, cost_aware_method="p_star", loss_type=loss_type)
    batch, rewards = _generation(trainer)
    grads = {}
    for merge in (True, False):
        trainer.sampling = dataclasses.replace(trainer.sampling, merge_duplicates=merge)
        trainer.cost_aware_state["generations"] = 0  # same generator, hence the same draws
        micro = trainer._split(batch, rewards)
        grads[merge] = _total_grad(trainer, micro)
    assert grads[True].abs().max() > 0
    torch.testing.assert_close(grads[True], grads[False], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_raw_weighted_plans_are_unbiased_for_the_baseline_gradient(tmp_path, loss_type):
    """Monte-Carlo: the mean over many plans of the summed micro-step gradients is stock TRL's."""
    trainer = _trainer(tmp_path, cost_aware_method="p_star", cost_aware_weights="raw", loss_type=loss_type)
    batch, rewards = _generation(trainer)
    trainer.sampling = dataclasses.replace(trainer.sampling, method="none")
    full = _total_grad(trainer, trainer._split(batch, rewards))
    trainer.sampling = dataclasses.replace(trainer.sampling, method="p_star")
    draws = [_total_grad(trainer, trainer._split(batch, rewards)) for _ in range(300)]
    mean = torch.stack(draws).mean(0)
    # relative error of the mean, against the spread of a single draw / sqrt(300)
    spread = torch.stack(draws).std(0).norm() / 300**0.5
    assert (mean - full).norm() < 4 * spread + 1e-6
    assert (mean - full).norm() < 0.25 * full.norm()


def test_weights_reach_the_loss_row_by_row(tmp_path):
    """With dapo, the micro-batch loss is Σ_rows w_i·(token-sum loss_i) / normaliser."""
    trainer = _trainer(tmp_path, cost_aware_method="p_star")
    batch, rewards = _generation(trainer)
    micro = trainer._split(batch, rewards)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    mb = micro[0]
    total = trainer.compute_loss(trainer.model, mb).item()
    by_row = 0.0
    for i in range(mb["advantages"].shape[0]):
        one = {k: (v[i : i + 1] if torch.is_tensor(v) and v.ndim >= 1 else v) for k, v in mb.items()}
        by_row += trainer.compute_loss(trainer.model, one).item()
    assert total == pytest.approx(by_row, rel=1e-4, abs=1e-6)


def test_checkpoint_keeps_the_counters(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_method="p_star", save_strategy="steps", save_steps=2)
    trainer.train()
    saved = dict(trainer.cost_aware_state)
    resumed = _trainer(tmp_path, cost_aware_method="p_star", save_strategy="steps", save_steps=2, max_steps=6)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert resumed.cost_aware_state["generations"] == saved["generations"] + 1
    assert resumed.cost_aware_state["tokens"] > saved["tokens"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("cost_aware_method", "bogus"),
        ("cost_aware_alpha", 1.5),
        ("cost_aware_weights", "mean"),
        ("cost_aware_proxy_noise", -0.1),
        ("cost_aware_budget", "flops"),
        ("beta", 0.04),
        ("loss_type", "vespo"),
    ],
)
def test_bad_config_is_refused_naming_the_value(tmp_path, field, value):
    with pytest.raises(ValueError, match=str(value)):
        CostAwareGRPOConfig(**_kwargs(tmp_path, **{field: value}))
