"""GRPO / CISPO token losses and weighted aggregation: known values, row-by-row sums, verl parity."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.grpo.losses import AGG_MODES, aggregate, cispo_token_loss, grpo_token_loss


def _one(log_ratio: float, adv: float, fn=grpo_token_loss, **kw):
    old = torch.full((1, 1), math.log(0.3), dtype=torch.float64)
    logp = (old + log_ratio).clone().requires_grad_(True)
    loss = fn(logp, old, torch.tensor([adv], dtype=torch.float64), **kw)
    (g,) = torch.autograd.grad(loss.sum(), logp)
    return loss.item(), g.item()


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "grad"),
    [
        (1.5, 1.0, -1.2, 0.0),  # A>0, ρ above 1+ε: clipped, no gradient
        (1.1, 1.0, -1.1, -1.1),  # inside the trust region: −ρA, d/dlogp = −ρA
        (0.5, 1.0, -0.5, -0.5),  # A>0, ρ below 1−ε: min picks the unclipped ρA
        (1.5, -1.0, 1.5, 1.5),  # A<0, ρ above: unclipped (pessimistic) term
        (0.5, -1.0, 0.8, 0.0),  # A<0, ρ below 1−ε: clipped, no gradient
    ],
)
def test_grpo_clipping_known_values(ratio, adv, loss, grad):
    got_loss, got_grad = _one(math.log(ratio), adv)
    assert got_loss == pytest.approx(loss, abs=1e-12)
    assert got_grad == pytest.approx(grad, abs=1e-12)


def test_grpo_clips_the_ratio_asymmetrically():
    assert _one(math.log(1.5), 1.0, clip_high=0.28)[0] == pytest.approx(-1.28, abs=1e-12)
    assert _one(math.log(0.5), -1.0, clip_low=0.1)[0] == pytest.approx(0.9, abs=1e-12)


@pytest.mark.parametrize(("ratio", "clipped"), [(1.5, 1.2), (1.1, 1.1), (0.5, 0.8)])
@pytest.mark.parametrize("adv", [2.0, -2.0])
def test_cispo_known_values_gradient_always_flows(ratio, clipped, adv):
    lr = math.log(ratio)
    loss, grad = _one(lr, adv, fn=cispo_token_loss)
    logp = math.log(0.3) + lr
    assert loss == pytest.approx(-clipped * adv * logp, abs=1e-12)
    assert grad == pytest.approx(-clipped * adv, abs=1e-12)  # sg(clip(ρ)): gradient even when clipped


def test_kl_k3_term_matches_its_formula():
    gen = torch.Generator().manual_seed(1)
    logp = torch.randn(3, 4, generator=gen, dtype=torch.float64) - 2
    ref = logp + 0.3 * torch.randn(3, 4, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.0], dtype=torch.float64)
    base = grpo_token_loss(logp, logp, adv)
    with_kl = grpo_token_loss(logp, logp, adv, ref_logp=ref, beta=0.04)
    d = (ref - logp).numpy()
    np.testing.assert_allclose((with_kl - base).numpy(), 0.04 * (np.exp(d) - d - 1), rtol=1e-12)
    assert (grpo_token_loss(logp, logp, adv, ref_logp=logp, beta=0.1) == base).all()
    with pytest.raises(ValueError, match="ref_logp is required"):
        grpo_token_loss(logp, logp, adv, beta=0.1)


def _batch(seed: int, rows: int = 5, tokens: int = 7):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, tokens, generator=gen, dtype=torch.float64) * 3
    logp = (old + 0.4 * torch.randn(rows, tokens, generator=gen, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(rows, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, tokens + 1, (rows,), generator=gen)
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).long()
    w = torch.rand(rows, generator=gen, dtype=torch.float64) * 3
    return logp, old, adv, mask, w


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(AGG_MODES), cispo=st.booleans())
def test_weighted_loss_and_grad_equal_row_by_row_sum(seed, mode, cispo):
    logp, old, adv, mask, w = _batch(seed)
    fn = cispo_token_loss if cispo else grpo_token_loss
    loss = aggregate(fn(logp, old, adv, 0.2, 0.28), mask, mode, seq_weights=w)
    (grad,) = torch.autograd.grad(loss, logp)

    total_tokens = mask.sum().item()
    expect = torch.zeros((), dtype=torch.float64)
    expect_grad = torch.zeros_like(logp)
    for i in range(logp.shape[0]):  # brute force: one row at a time
        lp = logp[i : i + 1].detach().clone().requires_grad_(True)
        tok = fn(lp, old[i : i + 1], adv[i : i + 1], 0.2, 0.28)[0, : int(mask[i].sum())]
        row = {
            "token-mean": tok.sum() / total_tokens,
            "seq-mean-token-mean": tok.mean() / logp.shape[0],
            "seq-mean-token-sum": tok.sum() / logp.shape[0],
        }[mode]
        (g,) = torch.autograd.grad(row, lp)
        expect = expect + w[i] * row.detach()
        expect_grad[i] = w[i] * g[0]
    assert loss.item() == pytest.approx(expect.item(), rel=1e-12, abs=1e-14)
    torch.testing.assert_close(grad, expect_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregate_matches_verl_agg_loss(mode):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    logp, old, adv, mask, w = _batch(3)
    mask[2] = 0  # a fully masked row is excluded from the sequence count, as in verl
    tok = grpo_token_loss(logp, old, adv).detach()
    ref = core_algos.agg_loss(tok, mask.double(), mode)
    assert aggregate(tok, mask, mode).item() == pytest.approx(ref.item(), rel=1e-7)
    # seq_weights act like verl's rollout_is_weights broadcast over the tokens
    ref_w = core_algos.agg_loss(tok * w[:, None], mask.double(), mode)
    assert aggregate(tok, mask, mode, seq_weights=w).item() == pytest.approx(ref_w.item(), rel=1e-7)


def test_weights_are_not_self_normalised_and_normalisers_override():
    tok = torch.ones(2, 3)
    mask = torch.ones(2, 3)
    assert aggregate(tok, mask, "seq-mean-token-sum", seq_weights=torch.tensor([2.0, 2.0])).item() == 6.0
    assert aggregate(tok, mask, "token-mean", num_tokens=12).item() == 0.5
    assert aggregate(tok, mask, "seq-mean-token-mean", num_sequences=4).item() == 0.5


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: aggregate(torch.ones(2, 2), torch.ones(2, 2), "sum"), "mode"),
        (lambda: aggregate(torch.ones(2, 2), torch.ones(2, 3)), "mask shape"),
        (lambda: aggregate(torch.ones(2, 2), torch.zeros(2, 2)), "empty mask"),
        (lambda: aggregate(torch.ones(2, 2), torch.zeros(2, 2), "seq-mean-token-sum"), "empty mask"),
        (lambda: aggregate(torch.ones(2, 2), torch.ones(2, 2), seq_weights=torch.ones(3)), "seq_weights"),
        (
            lambda: aggregate(torch.ones(2, 2), torch.ones(2, 2), seq_weights=torch.tensor([1.0, -1.0])),
            ">= 0",
        ),
        (lambda: aggregate(torch.tensor([[1.0, float("nan")]]), torch.ones(1, 2)), "finite"),
        (lambda: grpo_token_loss(torch.zeros(2, 2), torch.zeros(2, 3), torch.ones(2)), "shape"),
        (lambda: grpo_token_loss(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(3)), "rows"),
        (
            lambda: grpo_token_loss(torch.zeros(2, 2), torch.zeros(2, 2), torch.tensor([1.0, float("nan")])),
            "finite",
        ),
        (
            lambda: grpo_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), clip_low=1.0),
            "clip_low",
        ),
        (
            lambda: cispo_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), clip_high=-0.1),
            "clip_high",
        ),
        (lambda: grpo_token_loss(torch.zeros(2), torch.zeros(2), torch.ones(2)), "2-D"),
    ],
)
def test_bad_inputs_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
