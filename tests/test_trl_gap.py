"""TRL's oracle proxy and step errors on a tiny Qwen2, against brute force: each row's gradient of its own
sequence-mean loss computed here, one backward per row, at the round's θ. The oracle plans p ∝ ‖∇ℓ_i‖/√c_i
exactly; the logged step error is ‖ĝ_s − ḡ‖² of the plan's steps, beside J's closed form; measuring it changes
no training number."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from test_integration_trl import _trainer  # noqa: E402

import costaware.integrations.trl.trainer as trainer_module  # noqa: E402
from costaware import distributions as dist  # noqa: E402
from costaware.grpo.advantages import sequence_costs_from_masks  # noqa: E402
from costaware.grpo.config import SamplingConfig  # noqa: E402
from costaware.grpo.plan import plan_minibatches  # noqa: E402
from costaware.integrations.trl import CostAwareGRPOConfig  # noqa: E402


def row_grads(model, batch):
    """(N, D) each row's gradient of −A_i · (mean over its completion tokens of log π), TRL's `grpo` loss of one
    row at ρ = 1, from the row alone (its padding stripped), one backward each."""
    params = [p for p in model.parameters() if p.requires_grad]
    out = []
    for i in range(batch["advantages"].shape[0]):
        prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()]
        comp = batch["completion_ids"][i][batch["completion_mask"][i].bool()]
        ids = torch.cat([prompt, comp])[None]
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, :-1][-comp.numel() :]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, comp[:, None]).squeeze(-1)
        loss = -batch["advantages"][i].float() * logp.mean()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        out.append(torch.cat([(torch.zeros_like(p) if g is None else g).double().flatten()
                              for p, g in zip(params, grads, strict=True)]))  # fmt: skip
    return torch.stack(out)


def spy(trainer, monkeypatch):
    """Every round's (brute-force row gradients at the round's θ, costs, plan), in order."""
    seen, plans = [], []
    split = trainer._split

    def wrapped(batch, rewards):
        costs = sequence_costs_from_masks(batch["prompt_mask"].cpu(), batch["completion_mask"].cpu())
        seen.append((row_grads(trainer.model, batch), costs.double().numpy(), batch["advantages"].double()))
        return split(batch, rewards)

    real = trainer_module.plan_round

    def round_of(*a, **k):  # the trainer's Round, its plan recorded
        rnd = real(*a, **k)
        plans.append(rnd.plan)
        return rnd

    trainer._split = wrapped
    monkeypatch.setattr(trainer_module, "plan_round", round_of)
    return seen, plans


def test_oracle_proxy_plans_p_proportional_to_the_exact_row_norm_over_root_cost(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, cost_aware_method="p_star", cost_aware_proxy="oracle", loss_type="grpo")
    assert trainer.sampling.proxy == "oracle" and trainer.sampling.beta == 0.0
    seen, plans = spy(trainer, monkeypatch)
    trainer.train()
    assert len(seen) == len(plans) == 2
    for (grads, costs, adv), plan in zip(seen, plans, strict=True):
        signal = adv.abs().numpy() > 1e-6 * adv.abs().max().item()
        norms = np.where(signal, grads.norm(dim=1).numpy(), 0.0)
        assert signal.any() and (norms[signal] > 0).all()
        np.testing.assert_allclose(plan.probs.double().numpy(), dist.optimal(norms, costs), rtol=2e-4, atol=1e-7)
        assert plan.meta["proxy"] == "oracle" and (plan.probs.numpy()[~signal] == 0).all()
    # |A| would have planned another p: the oracle is not the paper's proxy under another name
    abs_a = dist.optimal(np.abs(seen[0][2].numpy()), seen[0][1])
    assert not np.allclose(plans[0].probs.double().numpy(), abs_a, rtol=1e-2)
    logged = [h for h in trainer.state.log_history if "cost_aware/oracle_seconds" in h]
    assert logged and all(h["cost_aware/oracle_seconds"] > 0 for h in logged)


def test_step_errors_are_the_plans_steps_against_the_pools_expected_step(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, cost_aware_method="p_star", cost_aware_mse_interval=1, loss_type="grpo")
    seen, plans = spy(trainer, monkeypatch)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "cost_aware/mse_measured" in h]
    assert len(logged) == len(seen) == 2
    for h, (grads, _, _), plan in zip(logged, seen, plans, strict=True):
        signal = plan.probs.numpy() > 0
        mean = grads[torch.from_numpy(signal)].mean(0)  # centred p*: the mean over the rows with A != 0
        steps = [(mb.weights.double() @ grads[mb.indices]) / mb.num_draws for mb in plan.minibatches]
        measured = float(np.mean([float(((s - mean) ** 2).sum()) for s in steps]))
        assert h["cost_aware/mse_measured"] == pytest.approx(measured, rel=1e-4)
        p, sq, n = (
            plan.probs.double().numpy()[signal],
            (grads[torch.from_numpy(signal)] ** 2).sum(1).numpy(),
            signal.sum(),
        )
        p = p / p.sum()
        m = plan.minibatches[0].num_draws
        closed = (float(np.sum(sq / (n**2 * p))) - float(mean @ mean)) / m  # row_variance's V_sub
        assert h["cost_aware/mse_predicted"] == pytest.approx(closed, rel=1e-4)
        assert h["cost_aware/mse_grad_sq"] == pytest.approx(float(mean @ mean), rel=1e-4)
        assert math.isfinite(h["cost_aware/mse_seconds"])


def test_measuring_step_errors_changes_no_training_number(tmp_path):
    a = _trainer(tmp_path / "a", cost_aware_method="nonzero", loss_type="grpo")
    b = _trainer(tmp_path / "b", cost_aware_method="nonzero", loss_type="grpo", cost_aware_mse_interval=1)
    a.train()
    b.train()
    assert any("cost_aware/mse_measured" in h for h in b.state.log_history)
    for (name, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.equal(x, y), name


@pytest.mark.parametrize(
    "over, match",
    [
        (dict(cost_aware_mse_interval=1, loss_type="dapo"), "cost_aware_mse_interval=1 with loss_type='dapo'"),
        (dict(cost_aware_mse_interval=-1), "cost_aware_mse_interval must be"),
        (dict(cost_aware_method="nonzero", cost_aware_proxy="oracle"), "cost_aware_proxy='oracle' with"),
        (dict(cost_aware_proxy="oracle", cost_aware_proxy_beta=0.5), "cost_aware_proxy_beta=0.5 with"),
    ],
)
def test_bad_options_are_refused_naming_them(tmp_path, over, match):
    from trl_fixtures import tiny_run

    with pytest.raises(ValueError, match=match):
        CostAwareGRPOConfig(**tiny_run(tmp_path, **{"cost_aware_method": "p_star", **over}))


def test_the_plan_takes_the_norms_for_the_oracle_alone():
    adv, costs, g = [1.0, -1.0, 0.0, 0.5], [4, 9, 1, 16], [3.0, 1.0, 7.0, 2.0]
    plan = plan_minibatches(adv, costs, num_minibatches=2, config=SamplingConfig("p_star", proxy="oracle"),
                            grad_norms=g)  # fmt: skip
    want = dist.optimal([3.0, 1.0, 0.0, 2.0], costs)  # the row with A = 0 keeps p = 0 whatever its norm
    np.testing.assert_allclose(plan.probs.double().numpy(), want, rtol=1e-6)
    with pytest.raises(ValueError, match="proxy='oracle' needs grad_norms"):
        plan_minibatches(adv, costs, num_minibatches=2, config=SamplingConfig("p_star", proxy="oracle"))
    with pytest.raises(ValueError, match="grad_norms is read by proxy='oracle' alone"):
        plan_minibatches(adv, costs, num_minibatches=2, config=SamplingConfig("p_star"), grad_norms=g)
    with pytest.raises(ValueError, match="grad_norms has 3 rows"):
        plan_minibatches(adv, costs, num_minibatches=2, config=SamplingConfig("p_star", proxy="oracle"),
                         grad_norms=g[:3])  # fmt: skip
    with pytest.raises(ValueError, match="grad_norms must be >= 0"):
        plan_minibatches(adv, costs, num_minibatches=2, config=SamplingConfig("p_star", proxy="oracle"),
                         grad_norms=[1.0, -1.0, 0.0, 1.0])  # fmt: skip
    zero = plan_minibatches(adv, costs, num_minibatches=2, config=SamplingConfig("p_star", proxy="oracle"),
                            grad_norms=[0.0, 0.0, 5.0, 0.0])  # fmt: skip
    assert zero.skipped == "every row's gradient norm is zero" and not zero.minibatches
