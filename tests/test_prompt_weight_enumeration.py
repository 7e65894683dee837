"""The weighted prompt stage's factor 1/(N q_j), checked by exact enumeration of every prompt draw.

A weighted stage draws the B prompts of a round i.i.d. from q and scales each prompt's group by
f_j = 1/(N q_j), so that E_q[(1/B) Σ_b f_{j_b} v_{j_b}] = (1/N) Σ_j v_j: the round's mean is an
unbiased estimate of the full train set's. Here every one of the N^B ordered draws of a tiny case is
forced in turn through the stage's own alias draw (its index stream; the weights stay the stage's),
and the expectation is summed exactly: once for the stage alone, and once through
``CostAwareGRPOTrainer._split``, TRL's path from the scored batch to the micro-batches' advantages.
A factor dropped, self-normalised within the round, taken with B for N, or taken with the wrong q
(the q before the uniform floor, or another prompt's) moves the sum.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

import costaware.rollouts.prompt_rule as rule_module  # its iid_draw draws every i.i.d. prompt
from costaware.rollouts.prompts import cost_aware_prompts
from costaware.rollouts.stage import PromptStage

N, G, B = 4, 4, 2  # N^B = 16 ordered draws
FLOOR = 0.2
PROMPT_TOKENS = np.array([3.0, 9.0, 5.0, 14.0])


def _warm_stage(seed: int = 1) -> PromptStage:
    """A stage whose q is far from uniform: a few rounds of unequal pass rates and lengths."""
    stage = PromptStage(cost_aware_prompts(floor=FLOOR), num_prompts=N, group_size=G, prompts_per_round=B,
                        seed=seed, prompt_tokens=PROMPT_TOKENS)  # fmt: skip
    rng = np.random.default_rng(0)
    rate, length = np.array([0.1, 0.5, 0.7, 0.95]), np.array([2.0, 30.0, 8.0, 20.0])
    for _ in range(15):
        d = stage.draw()
        r = (rng.random((B, G)) < rate[d.prompt_ids, None]).astype(float)
        stage.update(d.prompt_ids, r, np.repeat(length[d.prompt_ids, None], G, axis=1))
    return stage


class _Forced:
    """Forces the next alias draws of the weighted prompt stage to ``ids`` and records the q it draws from."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ids: list[int] | None = None  # None: the stage's own draws
        self.q: np.ndarray | None = None
        real_draw, real_build = rule_module.draw, rule_module.build_alias

        def draw(prob, alias, m, rng, validate=True):
            if self.ids is None:
                return real_draw(prob, alias, m, rng, validate=validate)
            assert m == len(self.ids), "the stage asked for a different number of draws"
            return np.asarray(self.ids, dtype=np.int64)

        def build(p):
            self.q = np.array(p, dtype=np.float64)  # the p the next draws come from
            return real_build(p)

        monkeypatch.setattr(rule_module, "draw", draw)
        monkeypatch.setattr(rule_module, "build_alias", build)


def _draws():
    return [list(d) for d in itertools.product(range(N), repeat=B)]


def test_q_is_far_from_uniform_in_this_case(monkeypatch):
    """Else the enumeration could not tell 1/(N q) from 1: the case itself is checked."""
    forced = _Forced(monkeypatch)
    forced.ids = [0, 1]
    _warm_stage().draw()
    assert forced.q is not None and forced.q.max() / forced.q.min() > 1.5 and np.isclose(forced.q.sum(), 1.0)


@pytest.mark.parametrize("values", [np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.0, 0.0, 0.0, 1.0])])
def test_every_draw_of_the_stage_averages_to_the_full_train_set_exactly(monkeypatch, values):
    forced = _Forced(monkeypatch)
    warm = _warm_stage()
    expected, total_p = 0.0, 0.0
    for ids in _draws():
        forced.ids = ids
        d = copy.deepcopy(warm).draw()
        assert d.prompt_ids.tolist() == ids
        p = float(np.prod(forced.q[ids]))
        expected += p * float(np.mean(d.factors * values[ids]))
        total_p += p
    assert total_p == pytest.approx(1.0, abs=1e-12)
    assert expected == pytest.approx(float(values.mean()), rel=1e-12, abs=1e-14)


# -- through the TRL trainer ----------------------------------------------------------------------

torch = pytest.importorskip("torch")


def _trainer(tmp_path, reward=None, max_steps=2):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    datasets = pytest.importorskip("datasets")
    from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer
    from costaware.tiny import char_tokenizer, tiny_qwen2

    tok = char_tokenizer()
    args = CostAwareGRPOConfig(
        output_dir=str(tmp_path), max_completion_length=4, num_generations=G, per_device_train_batch_size=G,
        steps_per_generation=B, max_steps=max_steps, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
        seed=0, beta=0.0, loss_type="grpo", disable_tqdm=True, cost_aware_method="none",
        cost_aware_rollout="cost_aware", cost_aware_rollout_floor=FLOOR,
    )  # fmt: skip
    data = datasets.Dataset.from_dict({"prompt": [f"{i}=" for i in range(N)]})
    trainer = CostAwareGRPOTrainer(model=tiny_qwen2(tok, hidden_size=16, num_layers=1, seed=0), args=args,
                                   reward_funcs=reward or (lambda completions, **kw: [0.0] * len(completions)),
                                   train_dataset=data, processing_class=tok)  # fmt: skip
    assert trainer.prompt_stage.batch == B and trainer.prompt_stage.method.weighted
    return trainer


# each (prompt, completion slot) row's advantage and the vector its gradient is taken against
ADVANTAGES = np.array([[1.5, -0.5, -0.5, -0.5], [0.8, 0.8, -0.8, -0.8], [0.0, 0.0, 0.0, 0.0], [-1.2, 0.4, 0.4, 0.4]])
U = np.random.default_rng(3).normal(size=(N, G))


def _scored_batch(ids: list[int]) -> tuple[dict, torch.Tensor]:
    """The batch TRL would score for the drawn prompts (prompt j's token j + 1, slot s's token s + 1)."""
    rows = [(j, s) for j in ids for s in range(G)]
    k = len(rows)
    batch = {
        "prompt_ids": torch.tensor([[j + 1, 0] for j, _ in rows]),
        "prompt_mask": torch.tensor([[1, 0]] * k),
        "completion_ids": torch.tensor([[s + 1, 0, 0] for _, s in rows]),
        "completion_mask": torch.tensor([[1, 1, 0]] * k),
        "advantages": torch.tensor([ADVANTAGES[j, s] for j, s in rows], dtype=torch.float64),
        "old_per_token_logps": torch.zeros(k, 3),
    }
    return batch, torch.tensor([float(ADVANTAGES[j, s] > 0) for j, s in rows])


def test_every_draw_through_the_trainers_split_gives_the_full_batch_gradient_exactly(tmp_path, monkeypatch):
    """E over the N^B draws of Σ_rows A'·u / (B·G), A' the micro-batches' advantages after ``_split``,
    equals (1/(N·G)) Σ_{j,s} A_{js} u_{js}: the full train set's policy-gradient direction."""
    trainer = _trainer(tmp_path)
    forced = _Forced(monkeypatch)
    warm = _warm_stage(seed=0)
    expected = 0.0
    for ids in _draws():
        forced.ids = ids
        trainer.prompt_stage = copy.deepcopy(warm)
        trainer.prompt_stage.draw()  # the sampler asks for this round's prompts
        batch, rewards = _scored_batch(ids)
        micro = trainer._split(batch, rewards)
        got = 0.0
        for mb in micro:
            for a, j, s in zip(mb["advantages"].tolist(), mb["prompt_ids"][:, 0].tolist(),
                               mb["completion_ids"][:, 0].tolist(), strict=True):  # fmt: skip
                got += a * U[j - 1, s - 1]
        expected += float(np.prod(forced.q[ids])) * got / (B * G)
    assert expected == pytest.approx(float((ADVANTAGES * U).sum()) / (N * G), rel=1e-12)


def test_split_scales_each_row_by_its_own_prompts_factor(tmp_path, monkeypatch):
    """One draw: every micro-batch row's advantage is its scored advantage times 1/(N q) of its prompt."""
    trainer = _trainer(tmp_path)
    forced = _Forced(monkeypatch)
    forced.ids = [3, 0]  # the prompts with the most different q
    trainer.prompt_stage = _warm_stage(seed=0)
    trainer.prompt_stage.draw()
    batch, rewards = _scored_batch(forced.ids)
    rows = 0
    for mb in trainer._split(batch, rewards):
        for a, j, s in zip(mb["advantages"].tolist(), mb["prompt_ids"][:, 0].tolist(),
                           mb["completion_ids"][:, 0].tolist(), strict=True):  # fmt: skip
            assert a == pytest.approx(ADVANTAGES[j - 1, s - 1] / (N * forced.q[j - 1]), rel=1e-12, abs=1e-15)
            rows += 1
    assert rows == B * G


def test_fold_round_gives_each_row_its_own_prompts_factor_in_draw_order(monkeypatch):
    """``fold_round`` (the TRL adapter's row map): row b·G + s carries 1/(N q) of the b-th drawn prompt."""
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    from costaware.integrations.trl.prompts import fold_round

    forced = _Forced(monkeypatch)
    stage = _warm_stage()
    forced.ids = [3, 0]
    q = cost_aware_prompts(floor=FLOOR).probabilities(stage.state, stage.round)  # the method's own q
    stage.draw()
    np.testing.assert_allclose(q, forced.q, rtol=1e-12)  # the sampler draws from it
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    factors = fold_round(stage, rewards, torch.full((B * G,), 5.0))
    np.testing.assert_allclose(factors, np.repeat(1.0 / (N * q[forced.ids]), G), rtol=1e-12)
    assert stage.round == 16  # the round was folded in


def test_a_training_run_scales_every_scored_advantage_by_its_prompts_factor(tmp_path):
    """End to end (TRL's generation, scoring and split): each round's micro-batch advantages are the scored
    ones times 1/(N q) of their prompt, q the stage's distribution when it drew the round."""
    trainer = _trainer(tmp_path, reward=lambda completions, **kw: [len(c) / 4.0 for c in completions], max_steps=6)
    stage, method, split = trainer.prompt_stage, trainer.prompt_stage.method, trainer._split
    checked = []

    def checking(batch, rewards):
        d = stage.draw()  # the round being folded (drawn when its prompts were asked for)
        f = 1.0 / (N * method.probabilities(stage.state, stage.round)[d.prompt_ids])
        np.testing.assert_allclose(d.factors, f, rtol=1e-12)
        want = batch["advantages"].double() * torch.from_numpy(np.repeat(f, G))
        micro = split(batch, rewards)
        got = torch.cat([mb["advantages"].double() for mb in micro])
        torch.testing.assert_close(got.sort().values, want.sort().values, rtol=1e-6, atol=1e-7)
        checked.append((float(want.abs().sum()), float(np.ptp(f))))
        return micro

    trainer._split = checking
    trainer.train()
    assert len(checked) == 3
    assert any(a > 0 and spread > 0.05 for a, spread in checked)  # a round with A ≠ 0 and q far from uniform
