"""CostAwareGRPOTrainer on a tiny Qwen2 built in code (CPU, offline)."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl_fixtures import tiny_run  # noqa: E402

from costaware.grpo.advantages import sequence_costs_from_masks  # noqa: E402
from costaware.grpo.config import plan_seed  # noqa: E402
from costaware.grpo.plan import plan_minibatches  # noqa: E402
from costaware.grpo.zvf import nonzero_variance_groups  # noqa: E402
from costaware.integrations.trl import (  # noqa: E402
    STATE_FILE,
    SUPPORTED_LOSS_TYPES,
    CostAwareGRPOConfig,
    CostAwareGRPOTrainer,
)
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402

TOK = char_tokenizer()
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL's experimental hook


def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def has_digit_reward(completions, **kwargs):  # 0/1: some groups are constant, as with verifiable rewards
    return [float(c[-1:].isdigit()) for c in completions]


def half_constant_reward(completions, prompts, **kwargs):
    """Constant (all-zero advantages) on the groups of prompts with an even number of '=', else 0/1."""
    return [
        0.0 if p.count("=") % 2 == 0 else float(c[-1:].isdigit()) for p, c in zip(prompts, completions, strict=True)
    ]


def constant_reward(completions, **kwargs):
    return [1.0 for _ in completions]


def unequal_rollout(prompts, trainer):
    """TRL's rollout_func hook: completions of unequal lengths (1..max) and varied digits.

    A random tiny model almost never emits EOS, so its completions all have the maximum length, which
    hides normaliser bugs (grpo, bnpo and dapo coincide) and leaves nothing for padding trimming.
    """
    tok = trainer.processing_class
    calls = getattr(trainer, "_test_rollouts", 0)
    trainer._test_rollouts = calls + 1
    gen = torch.Generator().manual_seed(1000 + calls)
    max_len = trainer.args.max_completion_length
    lengths = torch.randint(1, max_len + 1, (len(prompts),), generator=gen).tolist()
    chars = "0123456789abcdef"
    texts = ["".join(chars[int(i)] for i in torch.randint(0, 16, (k,), generator=gen)) for k in lengths]
    return {
        "prompt_ids": [tok(p, add_special_tokens=False)["input_ids"] for p in prompts],
        "completion_ids": [tok(t, add_special_tokens=False)["input_ids"] for t in texts],
        "logprobs": None,
    }


def _dataset():
    # prompts of very different lengths, so that costs vary across rows
    return datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" * (1 + i % 5) for i in range(32)]})


def _kwargs(tmp_path, **over):
    return tiny_run(tmp_path, **over)


def _trainer(tmp_path, cls=CostAwareGRPOTrainer, cfg=CostAwareGRPOConfig, reward=digit_reward, **over):
    torch.manual_seed(0)
    model = tiny_qwen2(TOK, hidden_size=32, num_layers=1, seed=0)
    if over.get("beta"):  # TRL builds the reference model from the policy's path
        model.save_pretrained(tmp_path / "init")
        model = type(model).from_pretrained(tmp_path / "init")
        # move the policy off the reference, so that the KL term and its gradient are not 0
        with torch.no_grad():
            gen = torch.Generator().manual_seed(1)
            for p in model.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    args = cfg(**_kwargs(tmp_path, **over))
    return cls(
        model=model,
        args=args,
        reward_funcs=reward,
        train_dataset=_dataset(),
        processing_class=TOK,
        rollout_func=unequal_rollout,
    )


def _count_fed(trainer):
    """Instrument compute_loss: non-pad tokens of every micro-batch the loss actually sees."""
    fed, shapes = [], []
    original = trainer.compute_loss

    def counting(model, inputs, *a, **k):
        if "prompt_mask" in inputs:
            fed.append(int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()))
            shapes.append((inputs["prompt_mask"], inputs["completion_mask"]))
        return original(model, inputs, *a, **k)

    trainer.compute_loss = counting
    return fed, shapes


@pytest.mark.parametrize(
    "method,extra",
    [
        ("p_star", {}),
        ("none", {}),
        ("nonzero", {}),
        ("pods", {}),
        ("p_smooth", {"cost_aware_zvf": True}),
        ("p_smooth", {"beta": 0.05, "loss_type": "grpo"}),
        ("p_star", {"num_iterations": 2, "loss_type": "bnpo"}),
        ("p_star", {"steps_per_generation": 4, "gradient_accumulation_steps": 2, "loss_type": "grpo"}),
        ("inv_sqrt_cost", {"cost_aware_budget": "tokens", "loss_type": "bnpo"}),
    ],
)
def test_trainer_runs_and_counts_the_tokens_it_feeds(tmp_path, method, extra):
    reward = has_digit_reward if extra.get("cost_aware_zvf") else digit_reward
    trainer = _trainer(tmp_path, cost_aware_method=method, reward=reward, **extra)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    fed, shapes = _count_fed(trainer)
    trainer.train()
    state = trainer.cost_aware_state
    assert trainer.state.global_step == 4
    a = trainer.args
    micro_steps = 4 * a.gradient_accumulation_steps
    assert state["generations"] == micro_steps // (a.steps_per_generation * trainer.num_iterations)
    assert state["tokens"] == sum(fed) > 0
    logged = [h for h in trainer.state.log_history if "cost_aware/total/tokens" in h]
    assert len(logged) == 5 and logged[-1]["cost_aware/total/tokens"] == sum(fed)  # 4 steps + the summary
    assert "train_runtime" in logged[-1] and logged[-2]["cost_aware/total/tokens"] == sum(fed)
    assert logged[-1]["cost_aware/total/tokens_plain"] == state["tokens_plain"]
    assert 0 < logged[-1]["cost_aware/total/po_seconds"] == pytest.approx(state["po_seconds"])
    # every forward/backward is counted (each plan runs num_iterations times): tokens == sum(fed) above
    if method == "none":
        assert state["tokens"] == state["tokens_plain"]
    else:  # padding columns are trimmed: no all-pad prompt column on the left, completion column on the right
        for pm, cm in shapes:
            assert bool(pm[:, 0].any()) and bool(cm[:, -1].any())
    assert state["tokens_nonzero"] <= state["tokens_plain"]
    assert any((p - q).abs().max() > 0 for p, q in zip(trainer.model.parameters(), before, strict=True))


def test_method_none_reproduces_stock_trl(tmp_path):
    ours = _trainer(tmp_path / "a", cost_aware_method="none")
    ours.train()
    stock = _trainer(tmp_path / "b", cls=GRPOTrainer, cfg=GRPOConfig)
    stock.train()
    for p, q in zip(ours.model.parameters(), stock.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    loss_ours = [h["loss"] for h in ours.state.log_history if "loss" in h]
    loss_stock = [h["loss"] for h in stock.state.log_history if "loss" in h]
    assert len(loss_ours) == 4 and loss_ours == loss_stock


def test_same_seed_same_run(tmp_path):
    a = _trainer(tmp_path / "a", cost_aware_method="p_star")
    a.train()
    b = _trainer(tmp_path / "b", cost_aware_method="p_star")
    b.train()
    assert a.cost_aware_state["tokens"] == b.cost_aware_state["tokens"]
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def _plan_of(trainer, batch, rewards):
    """The plan the trainer draws for its first pool on one process, rebuilt from the public core."""
    costs = sequence_costs_from_masks(batch["prompt_mask"], batch["completion_mask"])
    return plan_minibatches(
        batch["advantages"],
        costs,
        num_minibatches=trainer.args.steps_per_generation,
        minibatch_size=trainer.args.per_device_train_batch_size,
        config=trainer.sampling,
        rewards=rewards,
        group_size=trainer.num_generations,
        generator=torch.Generator().manual_seed(plan_seed(trainer.args.seed, 0)),
    )


def _generation(trainer):
    trainer.model.train()
    # set by the training loop; the calibration of the default proxy (dapo: calibrated) runs TRL's loss in _split
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    inputs = next(iter(trainer.get_train_dataloader()))
    return trainer._generate_filtered(inputs)


def _loss(trainer, mb):
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    return trainer.compute_loss(trainer.model, mb)


def _total_grad(trainer, micro):
    trainer.model.zero_grad()
    for mb in micro:
        _loss(trainer, mb).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()


def _loss_type_kwargs(loss_type):
    return {"importance_sampling_level": "sequence"} if loss_type == "luspo" else {}


@pytest.mark.parametrize(
    "loss_type,beta,normaliser",
    [(lt, 0.0, "draws") for lt in SUPPORTED_LOSS_TYPES]
    + [("dapo", 0.0, "pool"), ("bnpo", 0.0, "pool"), ("grpo", 0.1, "draws"), ("dapo", 0.1, "pool")],
)
def test_merging_duplicates_leaves_the_gradient_unchanged(tmp_path, loss_type, beta, normaliser):
    trainer = _trainer(
        tmp_path,
        cost_aware_method="p_smooth" if beta else "p_star",
        loss_type=loss_type,
        beta=beta,
        cost_aware_normaliser=normaliser,
        # the paper's p, fixed: no calibrator state between the splits, and it draws duplicates on this pool
        cost_aware_proxy="advantage",
        **_loss_type_kwargs(loss_type),
    )
    batch, rewards = _generation(trainer)
    grads, rows = {}, {}
    for merge in (True, False):
        trainer.sampling = dataclasses.replace(trainer.sampling, merge_duplicates=merge)
        trainer.cost_aware_counters.generations = 0  # same generator, hence the same draws
        micro = trainer._split(batch, rewards)
        rows[merge] = sum(mb["advantages"].numel() for mb in micro)
        grads[merge] = _total_grad(trainer, micro)
    assert rows[True] < rows[False]  # duplicates were drawn and merged: this test compares something
    scale = grads[False].abs().max()
    assert scale > 0
    # float32: merged rows sum their weights before the backward, so an element where large row terms
    # cancel differs at the rounding of those terms (seen: 6e-7 where max|g| is 0.1-3, with 2 threads and
    # the suite's order); a wrong merge moves the gradient by O(|g|)
    torch.testing.assert_close(grads[True], grads[False], rtol=1e-4, atol=1e-5 * float(scale))


KL = {"beta": 0.1, "cost_aware_alpha": 0.3}  # KL on needs full support: p_smooth


@pytest.mark.parametrize(
    "loss_type,method,extra",
    [
        ("dapo", "p_star", {}),
        ("grpo", "nonzero", {}),
        ("cispo", "pods", {}),
        ("bnpo", "p_star", {"num_iterations": 2}),
        ("grpo", "p_smooth", KL),  # both passes deferred: the old and the reference one
        ("dapo", "p_smooth", {**KL, "gradient_accumulation_steps": 2}),  # spg = GA: TRL makes no old pass, only ref
        ("grpo", "p_smooth", {**KL, "cost_aware_diagnostics_interval": 1, "cost_aware_diagnostics_rows": 6}),
        ("grpo", "p_star", {"steps_per_generation": 4, "gradient_accumulation_steps": 2}),
        ("dapo", "p_star", {"cost_aware_zvf": True}),  # refilled batches: TRL's pass skipped in every round
    ],
)
def test_logprobs_of_the_fed_rows_only_equal_stocks(tmp_path, loss_type, method, extra):
    """'fed' skips TRL's old-logp and reference passes over the whole batch and runs them on the rows the
    plan feeds: every micro-batch the loss sees holds stock's values ('all'), so loss and gradient are
    stock's (KL term included), the diagnostics measure the same norms, and fewer rows went through."""
    micro, grads, computed, fidelity = {}, {}, {}, {}
    old_pass = extra.get("gradient_accumulation_steps", 1) % extra.get("steps_per_generation", 2) != 0 or bool(
        extra.get("num_iterations", 1) > 1)  # fmt: skip
    for mode in ("all", "fed"):
        trainer = _trainer(tmp_path / mode, reward=half_constant_reward, loss_type=loss_type, cost_aware_method=method,
                           cost_aware_logprob_rows=mode, cost_aware_proxy="advantage" if method == "p_star" else "auto",
                           **extra, **_loss_type_kwargs(loss_type))  # fmt: skip
        batch, rewards = _generation(trainer)
        # 'fed': TRL's passes over the whole batch were skipped
        assert ("old_per_token_logps" in batch) == (mode == "all" and old_pass)
        assert ("ref_per_token_logps" in batch) == (mode == "all" and "beta" in extra)
        n = batch["advantages"].shape[0]
        micro[mode] = trainer._split(batch, rewards)
        assert ("old_per_token_logps" in batch) == (mode == "all" and old_pass)  # the caller's batch is untouched
        computed[mode] = trainer._metrics["train"]["cost_aware/logprob_rows"][-1] if mode == "fed" else n
        fidelity[mode] = list(trainer._metrics["train"].get("cost_aware/pearson", []))
        grads[mode] = _total_grad(trainer, micro[mode])
    assert len(micro["fed"]) == len(micro["all"])
    for a, b in zip(micro["all"], micro["fed"], strict=True):
        mask = a["completion_mask"].bool()
        torch.testing.assert_close(b["completion_mask"], a["completion_mask"], rtol=0, atol=0)
        for key in ("old_per_token_logps", "ref_per_token_logps"):
            assert (key in a) == (key in b), key
            if key in a:
                torch.testing.assert_close(b[key][mask], a[key][mask], rtol=1e-5, atol=1e-6)
    assert grads["all"].abs().max() > 0
    torch.testing.assert_close(grads["fed"], grads["all"], rtol=1e-4, atol=1e-7)
    assert fidelity["fed"] == pytest.approx(fidelity["all"], rel=1e-4)
    if extra.get("cost_aware_diagnostics_interval"):
        assert fidelity["fed"], "the diagnostics did not run: this case would compare nothing"
    fed_rows = len({int(i) for pm in _plan_of(trainer, batch, rewards).minibatches for i in pm.indices})
    assert computed["fed"] == fed_rows <= computed["all"]
    if method != "p_smooth" and not extra.get("cost_aware_zvf"):  # p = 0 on zero-advantage rows: their pass is saved
        assert computed["fed"] < computed["all"]


@pytest.mark.parametrize("extra", [{}, {"cost_aware_method": "p_star"},
                                   {"cost_aware_method": "p_smooth", "loss_type": "grpo", **KL}],
                         ids=["old-auto", "old-p_star-calibrated", "old+ref"])  # fmt: skip
def test_logprob_rows_fed_or_all_train_to_the_same_parameters(tmp_path, extra):
    """Four optimiser steps, two per pool (the second one off-policy; KL on in the second case): the same
    parameters either way."""
    params = {}
    for mode in ("all", "fed"):
        trainer = _trainer(tmp_path / mode, reward=half_constant_reward, cost_aware_logprob_rows=mode,
                           learning_rate=1e-2, **extra)  # fmt: skip
        init = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
        trainer.train()
        params[mode] = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    assert float((params["all"] - init).norm()) > 1e-3
    torch.testing.assert_close(params["fed"], params["all"], rtol=1e-4, atol=1e-6)


def _row_loss(trainer, mb, i, advantage):
    """Stock TRL's loss on row i alone, with the given (unweighted) advantage."""
    one = {k: (v[i : i + 1] if torch.is_tensor(v) and v.ndim >= 1 else v) for k, v in mb.items()}
    one.pop("cost_aware_weight")
    one["advantages"] = advantage.reshape(1)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    return GRPOTrainer._compute_loss(trainer, trainer.model, one)


@pytest.mark.parametrize(
    "loss_type,beta,bias_kl",
    [
        ("dapo", 0.0, False),
        ("grpo", 0.0, False),
        ("bnpo", 0.0, False),
        ("cispo", 0.0, False),
        ("grpo", 0.2, False),
        ("dapo", 0.2, False),
        ("grpo", 0.2, True),
        ("bnpo", 0.2, True),
    ],
)
def test_weights_reach_the_loss_row_by_row(tmp_path, loss_type, beta, bias_kl):
    """The micro-batch loss is Σ_i f_i ℓ_i with ℓ_i TRL's own single-row loss (KL included when β > 0)."""
    method = "p_smooth" if beta else "p_star"  # beta > 0 needs full support
    trainer = _trainer(
        tmp_path,
        cost_aware_method=method,
        loss_type=loss_type,
        beta=beta,
        use_bias_correction_kl=bias_kl,
        cost_aware_alpha=0.3,
        cost_aware_logprob_rows="all" if bias_kl else "fed",  # bias_kl perturbs the pool's old logps
    )
    batch, rewards = _generation(trainer)
    if bias_kl:  # off-policy rows, so that the KL's importance ratio is not 1
        old = batch["old_per_token_logps"]
        batch["old_per_token_logps"] = old + 0.2 * torch.randn(old.shape, generator=torch.Generator().manual_seed(2))
    trainer.cost_aware_counters.generations = 0
    plan = _plan_of(trainer, batch, rewards)
    micro = trainer._split(batch, rewards)
    lengths = batch["completion_mask"].sum(1).double()
    for mb, pm in zip(micro, plan.minibatches, strict=True):
        f = mb["cost_aware_weight"].double()
        k, m = pm.indices.numel(), pm.num_draws
        # the factor, recomputed from the plan and the normalisation rule of the loss type
        if loss_type == "grpo":
            expected_f = pm.weights.double() * k / m
        elif loss_type == "bnpo":
            t = lengths[pm.indices]
            expected_f = pm.weights.double() * t.sum() / (t * pm.counts).sum()
        else:
            expected_f = pm.weights.double()
        torch.testing.assert_close(f, expected_f, rtol=1e-6, atol=0)
        a = plan.advantages[pm.indices]
        per_row = torch.stack([_row_loss(trainer, mb, i, a[i]) for i in range(k)]).double().detach()
        if loss_type == "grpo":
            expected = (f * per_row).sum() / k
        elif loss_type == "bnpo":  # single-row bnpo divides by that row's tokens
            t = lengths[pm.indices]
            expected = (f * per_row * t).sum() / t.sum()
        else:  # dapo, cispo: fixed normaliser num_items_in_batch
            expected = (f * per_row).sum()
        assert float(_loss(trainer, mb)) == pytest.approx(float(expected), rel=1e-4, abs=1e-7)
    if loss_type in ("dapo", "cispo"):  # num_items_in_batch = completion tokens of every draw
        draws = sum(float((lengths[pm.indices] * pm.counts).sum()) for pm in plan.minibatches)
        assert float(micro[0]["num_items_in_batch"]) == draws


@pytest.mark.parametrize(
    "loss_type,beta,method",
    [("dapo", 0.0, "p_star"), ("grpo", 0.0, "p_star"), ("grpo", 0.1, "p_smooth"), ("dapo", 0.1, "p_smooth")],
)
def test_raw_weighted_plans_are_unbiased_for_the_baseline_gradient(tmp_path, loss_type, beta, method):
    """Monte-Carlo: with raw weights and the pool normaliser, plans average to stock TRL's gradient.

    The pool has a zero-advantage group and completions of unequal lengths; with beta > 0 the KL term
    has a gradient on the zero-advantage rows, which full support (p_smooth) must keep reaching.
    """
    trainer = _trainer(
        tmp_path,
        cost_aware_method=method,
        cost_aware_alpha=0.3,
        cost_aware_weights="raw",
        loss_type=loss_type,
        cost_aware_normaliser="pool",
        cost_aware_proxy="length_aware",  # a fixed β (the family's prior): every plan from the same p
        beta=beta,
    )
    drawing = trainer.sampling
    batch, rewards = _generation(trainer)
    batch["advantages"] = batch["advantages"].clone()
    batch["advantages"][:4] = 0.0  # one group without signal, as a constant-reward group
    lengths = batch["completion_mask"].sum(1)
    assert lengths.unique().numel() > 2  # unequal lengths: the normalisers differ
    trainer.sampling = dataclasses.replace(trainer.sampling, method="none", proxy="advantage", proxy_beta=None)
    full = _total_grad(trainer, trainer._split(batch, rewards))
    trainer.sampling = drawing
    draws = torch.stack([_total_grad(trainer, trainer._split(batch, rewards)) for _ in range(300)])
    mean = draws.mean(0)
    spread = draws.std(0).norm() / 300**0.5  # standard error of the mean, as a norm
    assert (mean - full).norm() < 4 * spread + 1e-6
    assert (mean - full).norm() < 0.25 * full.norm()


def test_a_pool_without_signal_is_skipped_without_moving_the_parameters(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_method="p_star", reward=constant_reward, weight_decay=0.1)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    fed, _ = _count_fed(trainer)
    trainer.train()
    assert trainer.state.global_step == 4 and fed == []  # no forward at all
    for p, q in zip(trainer.model.parameters(), before, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    state = trainer.cost_aware_state
    assert state["skipped"] == 2 and state["tokens"] == 0 and state["tokens_plain"] > 0
    assert [h["cost_aware/step/skipped"] for h in trainer.state.log_history if "cost_aware/step/skipped" in h] == [
        1.0,
        1.0,
    ]


def test_skipped_pools_keep_stock_lr_schedule_and_warn(tmp_path):
    """A skipped pool still counts its optimiser steps, so the LR schedule is stock TRL's step for step."""
    ours = _trainer(
        tmp_path / "a",
        cost_aware_method="p_star",
        reward=constant_reward,
        lr_scheduler_type="linear",
        cost_aware_warn_after_skips=2,
    )
    with pytest.warns(RuntimeWarning, match="skipped 2 pools in a row"):
        ours.train()
    stock = _trainer(
        tmp_path / "b", cls=GRPOTrainer, cfg=GRPOConfig, reward=constant_reward, lr_scheduler_type="linear"
    )
    stock.train()

    def lrs(trainer):
        return [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h]

    assert len(lrs(ours)) == 4 and lrs(ours) == lrs(stock)
    assert ours.cost_aware_state["consecutive_skipped"] == 2


def test_zvf_keeps_only_groups_whose_rewards_differ(tmp_path):
    trainer = _trainer(
        tmp_path,
        cost_aware_method="p_star",
        cost_aware_zvf=True,
        reward=has_digit_reward,
        cost_aware_zvf_max_rounds=6,
    )
    batch, rewards = _generation(trainer)
    n = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    assert batch["advantages"].shape[0] == rewards.numel() <= n
    assert bool(nonzero_variance_groups(rewards, 4).all())
    assert float(batch["num_items_in_batch"]) == float(batch["completion_mask"].sum())
    # advantages are those TRL computed within each kept group
    assert bool((batch["advantages"].reshape(-1, 4).abs().sum(1) > 0).all())
    rounds = trainer._metrics["train"]["cost_aware/zvf_rounds"][-1]
    assert rounds >= 1 and trainer.cost_aware_state["zvf_refills"] == rounds - 1  # fresh prompts per refill


def test_diagnostics_are_logged(tmp_path):
    trainer = _trainer(
        tmp_path, cost_aware_method="p_star", cost_aware_diagnostics_interval=1, cost_aware_diagnostics_rows=8
    )
    trainer.train()
    rows = [h for h in trainer.state.log_history if "cost_aware/pearson" in h]
    assert rows, "no diagnostics logged"
    for h in rows:
        assert -1.0 <= h["cost_aware/pearson"] <= 1.0
        assert h["cost_aware/chi2"] >= 0.0
    # the single-row losses of the diagnostics do not enter TRL's own metrics
    assert all("entropy" not in h or math.isfinite(h["entropy"]) for h in trainer.state.log_history)


def test_checkpoint_keeps_the_counters(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_method="p_star", save_strategy="steps", save_steps=2)
    trainer.train()
    saved = dict(trainer.cost_aware_state)
    with open(tmp_path / "checkpoint-4" / STATE_FILE) as f:
        assert json.load(f) == saved
    resumed = _trainer(tmp_path, cost_aware_method="p_star", save_strategy="steps", save_steps=2, max_steps=6)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    state = resumed.cost_aware_state
    assert state["generations"] == saved["generations"] + 1
    assert state["tokens"] > saved["tokens"] and state["tokens_plain"] > saved["tokens_plain"]
    assert state["po_seconds"] > saved["po_seconds"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("cost_aware_method", "bogus"),
        ("cost_aware_alpha", 1.5),
        ("cost_aware_weights", "mean"),
        ("cost_aware_proxy_noise", -0.1),
        ("cost_aware_budget", "flops"),
        ("cost_aware_pods_keep", 0),
        ("cost_aware_normaliser", "rows"),
        ("cost_aware_zvf_max_rounds", 0),
        ("cost_aware_diagnostics_interval", -1),
        ("cost_aware_diagnostics_rows", 1),
        ("entropy_coef", 0.01),
        ("top_entropy_quantile", 0.2),
        (
            "beta",
            0.1,
        ),  # with auto (p_star/nonzero): zero-advantage rows are never drawn, their KL gradient would be lost
        ("cost_aware_zero_tol", 1.5),
        ("cost_aware_max_draws_factor", 0.5),
        ("cost_aware_warn_after_skips", -1),
        ("cost_aware_token_budget", -5),
        ("cost_aware_token_budget", 2.5),
    ],
)
def test_bad_config_is_refused_naming_the_value(tmp_path, field, value):
    with pytest.raises(ValueError, match=str(value)):
        CostAwareGRPOConfig(**_kwargs(tmp_path, **{field: value}))


def test_unsupported_loss_type_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("costaware.integrations.trl.config.SUPPORTED_LOSS_TYPES", ("grpo",))
    with pytest.raises(ValueError, match="dapo"):
        CostAwareGRPOConfig(**_kwargs(tmp_path))


def test_stock_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="GRPOConfig"):
        _trainer(tmp_path, cfg=GRPOConfig)


def test_bad_pools_are_refused(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_method="p_star")
    batch, rewards = _generation(trainer)
    nan = dict(batch, advantages=batch["advantages"].clone())
    nan["advantages"][3] = float("nan")
    with pytest.raises(ValueError, match="advantages must be finite.*nan"):
        trainer._split(nan, rewards)
    wide = dict(batch, advantages=batch["advantages"].unsqueeze(1).expand(-1, 3))
    with pytest.raises(ValueError, match=r"advantages must be \(N,\).*3"):
        trainer._split(wide, rewards)
    trainer.sampling = dataclasses.replace(trainer.sampling, method="pods", proxy="advantage", proxy_beta=None)
    with pytest.raises(ValueError, match="rewards has 7 rows"):
        trainer._split(batch, rewards[:7])


# ------------------------------------------------------------------------------------ proxy --


def test_calibrated_proxy_logs_beta_and_round_trips_through_a_checkpoint(tmp_path):
    """dapo (token sum), unequal lengths, a fit every generation: β logged and finite, the first pool
    planned with the prior, the calibrator saved beside the counters and restored on resume."""
    from costaware.grpo.proxy import BetaCalibrator
    from costaware.integrations.trl.trainer import CALIBRATOR_FILE

    # pools of 4 groups: 6 rows at most 2 per group (at least 3 groups) fit on every pool
    kw = dict(
        cost_aware_method="p_star",
        cost_aware_proxy="calibrated",
        cost_aware_calibration_interval=1,
        cost_aware_calibration_rows=6,
        save_strategy="steps",
        save_steps=2,
        per_device_train_batch_size=8,
    )
    trainer = _trainer(tmp_path, **kw)
    assert (
        trainer.sampling.proxy == "calibrated" and trainer.cost_aware_calibration.calibrator.beta == 1.0
    )  # dapo prior
    trainer.train()
    cal = trainer.cost_aware_calibration.calibrator
    assert cal.updates == trainer.cost_aware_state["generations"] == 2
    logs = [h for h in trainer.state.log_history if "cost_aware/proxy_beta_hat" in h]
    assert logs, "no calibration logged"
    first = next(h for h in trainer.state.log_history if "cost_aware/proxy_beta" in h)
    assert first["cost_aware/proxy_beta"] == 1.0  # the pool that is measured uses the earlier β
    for h in logs:
        for key in (
            "proxy_beta_next",
            "proxy_beta_hat",
            "proxy_beta_stderr",
            "proxy_beta_low",
            "proxy_beta_high",
            "proxy_beta_rows",
            "predicted_j_vs_optimal",
            "predicted_j_vs_uniform",
            "calibration_seconds",
        ):
            assert math.isfinite(h[f"cost_aware/{key}"]), key
        assert -0.5 <= h["cost_aware/proxy_beta_next"] <= 2.0
        assert h["cost_aware/proxy_beta_low"] <= h["cost_aware/proxy_beta_hat"] <= h["cost_aware/proxy_beta_high"]
        assert h["cost_aware/predicted_j_vs_optimal"] >= 1.0 - 1e-9
    assert any(math.isfinite(h.get("cost_aware/calibration_share_of_po", math.nan)) for h in trainer.state.log_history)
    with open(tmp_path / "checkpoint-4" / CALIBRATOR_FILE) as f:
        state = json.load(f)
    assert BetaCalibrator.from_dict(state["calibrator"]) == cal
    assert state["seconds"] == trainer.cost_aware_calibration.seconds > 0
    resumed = _trainer(tmp_path, **dict(kw, max_steps=6))
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert resumed.cost_aware_calibration.calibrator.updates == cal.updates + 1  # restored, then one more fit
    first_resumed = [h for h in resumed.state.log_history if "cost_aware/proxy_beta" in h][-1]
    assert first_resumed["cost_aware/proxy_beta"] == pytest.approx(cal.beta)  # planned with the restored β


def test_proxy_auto_resolves_per_loss_type_and_advises_the_papers_under_token_sum(tmp_path):
    def cfg(**over):
        return CostAwareGRPOConfig(**_kwargs(tmp_path, **{"cost_aware_method": "p_star", **over}))

    with pytest.warns(UserWarning, match="set cost_aware_proxy='advantage'"):
        assert cfg().sampling_config().proxy == "calibrated"  # dapo
    grpo = cfg(loss_type="grpo").sampling_config()
    assert (grpo.proxy, grpo.beta) == ("advantage", 0.0)
    fixed = cfg(cost_aware_proxy="length_aware").sampling_config()
    assert (fixed.proxy, fixed.proxy_beta) == ("length_aware", 1.0)  # the token-sum prior
    import warnings as w

    with w.catch_warnings():
        w.simplefilter("error")
        cfg(cost_aware_proxy="advantage")  # the measured advice: no warning
        cfg(cost_aware_proxy="advantage", loss_type="grpo")
        cfg(loss_type="grpo")
        cfg(cost_aware_method="auto")  # auto: nonzero under dapo, no proxy


@pytest.mark.parametrize(
    "field,value",
    [
        ("cost_aware_proxy", "bogus"),
        ("cost_aware_proxy_beta", 7.0),
        ("cost_aware_adaptive_alpha_max_weight", 0.5),
        ("cost_aware_calibration_interval", 0),
        ("cost_aware_calibration_rows", 2),
    ],
)
def test_bad_proxy_options_are_refused_naming_the_value(tmp_path, field, value):
    extra = {"cost_aware_proxy": "length_aware"} if field == "cost_aware_proxy_beta" else {}
    if field == "cost_aware_adaptive_alpha_max_weight":
        extra = {"cost_aware_method": "p_smooth"}
    with pytest.raises(ValueError, match=str(value)):
        CostAwareGRPOConfig(**_kwargs(tmp_path, **{field: value}, **extra))
    with pytest.raises(ValueError, match="fitted"):
        CostAwareGRPOConfig(**_kwargs(tmp_path, cost_aware_proxy="calibrated", cost_aware_proxy_beta=0.5))
