"""Monte-Carlo: the plugin's expected mini-batch update equals verl's own full-batch update.

Through the REAL patched ``_update_actor`` of trainer v0 (``verl_harness``: stub workers that call verl's
own split, micro-batching and ``ppo_loss``; a float64 bigram policy, so every gradient is exact). The
stub takes no optimiser step, so every mini-batch gradient is measured at the same parameters and the
mean over plan draws estimates E[g]. The reference is stock verl (no ``algorithm.cost_aware``) with one
mini-batch holding the whole batch, whose gradient is the full-batch update.

Two statistics per case, from S mini-batch gradients g_s against the full-batch G:
* the projection E[<g, G>] / |G|^2 must be 1 within 4 standard errors;
* the relative error |mean(g) - G| / |G| must stay within 2.5 noise floors, the floor being
  sqrt(mean |g_s - mean(g)|^2 / S) / |G| (an unbiased mean sits near one floor).

Under verl's default ``token-mean`` the per-draw normaliser (each step divided by its drawn tokens) is a
ratio estimator: its expected update is about 15% short here, and the test of it below shows that the
same statistics catch it. An all-zero-advantage batch with KL and entropy on must get its update.
"""

from __future__ import annotations

import pytest
import torch

verl = pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl_harness import (  # noqa: E402
    NUM_PROMPTS,
    Bigram,
    StubWorkerGroup,
    padded_batch,
    ray_trainer,
    trainer_overrides,
    verl_losses,
)

import costaware.integrations.verl.resample as resample  # noqa: E402

DRAWS = 120  # _update_actor calls per case; each runs NUM_PROMPTS mini-batches of one group (4 rows)


def build_trainer(agg: str, mini_prompts: int, *extra: str, cost_aware: bool = True):
    """A RayPPOTrainer shell (config, stub worker group) whose patched ``_update_actor`` can be called."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    overrides = [o for o in trainer_overrides(agg, *extra) if cost_aware or "cost_aware" not in o]
    overrides.append(f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_prompts}")
    with initialize_config_dir(config_dir=f"{verl.__path__[0]}/trainer/config", version_base=None):
        full = compose(config_name="ppo_trainer", overrides=overrides)
    actor = omega_conf_to_dataclass(
        OmegaConf.create(OmegaConf.to_container(full.actor_rollout_ref.actor, resolve=False))
    )
    wg = StubWorkerGroup(Bigram(), actor, verl_losses.ppo_loss)
    trainer = object.__new__(ray_trainer.RayPPOTrainer)
    trainer.config, trainer.global_steps, trainer.actor_rollout_wg = full, 0, wg
    return trainer, wg


def minibatch_grads(data: dict, agg: str, draws: int, *extra: str) -> torch.Tensor:
    """(draws * NUM_PROMPTS, V, V) gradients of the plugin's mini-batches of one group each."""
    from verl import DataProto

    trainer, wg = build_trainer(agg, 1, *extra)
    for step in range(draws):  # the plan's generator is seeded from (seed, global_steps)
        trainer.global_steps = step
        trainer._update_actor(DataProto.from_dict(tensors=dict(data), meta_info={"global_token_num": [0]}))
    return torch.stack(wg.grads)


def full_batch_grad(data: dict, agg: str, *extra: str) -> torch.Tensor:
    """Stock verl, one mini-batch holding every row."""
    from verl import DataProto

    trainer, wg = build_trainer(agg, NUM_PROMPTS, *extra, cost_aware=False)
    trainer._update_actor(DataProto.from_dict(tensors=dict(data), meta_info={"global_token_num": [0]}))
    assert len(wg.grads) == 1
    return wg.grads[0]


def statistics(grads: torch.Tensor, full: torch.Tensor) -> tuple[float, float, float, float]:
    """(projection, its standard error, relative error of the mean, noise floor)."""
    scale = float(full.norm())
    proj = (grads * full).sum((1, 2)) / scale**2
    mean = grads.mean(0)
    floor = float((grads - mean).pow(2).sum((1, 2)).mean().sqrt()) / len(grads) ** 0.5 / scale
    return float(proj.mean()), float(proj.std() / len(proj) ** 0.5), float((mean - full).norm()) / scale, floor


def unbiased(grads: torch.Tensor, full: torch.Tensor, label: str) -> bool:
    proj, se, rel, floor = statistics(grads, full)
    print(f"\n{label}: E<g,G>/|G|^2 = {proj:.4f} ± {se:.4f}; |mean - G|/|G| = {rel:.4f} (noise floor {floor:.4f})")
    return abs(proj - 1.0) < 4 * se and rel < 2.5 * floor


@pytest.fixture(scope="module")
def token_mean_case():
    data = padded_batch()
    return data, full_batch_grad(data, "token-mean")


def test_token_mean_expected_update_is_the_full_batch_update(token_mean_case):
    """verl's default loss_agg_mode, p_smooth with KL and entropy: the pool normaliser is unbiased."""
    data, full = token_mean_case
    assert unbiased(minibatch_grads(data, "token-mean", DRAWS), full, "token-mean, pool normaliser")


def test_per_draw_normaliser_is_caught(token_mean_case, monkeypatch):
    """The same test fails with the per-draw normaliser (the ratio estimator the pool normaliser replaces)."""
    data, full = token_mean_case
    # the known-wrong factor: the importance weight alone, so verl divides each step by its drawn tokens
    monkeypatch.setattr(resample, "NORMALISER", "draws")
    grads = minibatch_grads(data, "token-mean", DRAWS)
    assert not unbiased(grads, full, "token-mean, per-draw normaliser (known wrong)")
    assert statistics(grads, full)[0] < 0.95  # the ratio estimator falls short


@pytest.mark.parametrize("agg", ["seq-mean-token-sum", "seq-mean-token-mean"])
def test_row_normalised_modes_are_unbiased(agg):
    """Row-normalised modes divide by the fixed row count m: the weight alone is the factor."""
    data = padded_batch()
    assert unbiased(minibatch_grads(data, agg, DRAWS // 2), full_batch_grad(data, agg), agg)


@pytest.mark.parametrize(
    "extra",
    [(), ("actor_rollout_ref.actor.use_kl_loss=false",), ("actor_rollout_ref.actor.entropy_coeff=0.0",)],
    ids=["kl+entropy", "entropy", "kl"],
)
def test_all_zero_advantages_still_get_the_kl_and_entropy_update(extra):
    """Stock verl's full-batch gradient on an all-zero-advantage batch is not zero when KL or entropy is on:
    the plugin must not skip it. p_smooth's advantage-free part (uniform, weight 1) is drawn instead."""
    data = padded_batch()
    data["advantages"] = torch.zeros_like(data["advantages"])
    full = full_batch_grad(data, "token-mean", *extra)
    assert float(full.norm()) > 1e-4
    grads = minibatch_grads(data, "token-mean", DRAWS // 4, *extra)
    assert len(grads) == DRAWS // 4 * NUM_PROMPTS, "every call must update (no skipped step)"
    assert unbiased(grads, full, f"all-zero advantages, {extra or 'KL and entropy'}")


# ------------------------------------------------- plans that feed fewer rows: merged p*, its mutants

P_STAR = ("algorithm.cost_aware.method=p_star", "algorithm.cost_aware.merge_duplicates=true",
          "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0.0")  # fmt: skip


def _self_normalised(monkeypatch) -> None:
    """The known-wrong estimator: each step's factors divided by the mean weight of its draws."""
    from dataclasses import replace

    original = resample.plan_round

    def plan_round(*args, **kwargs):
        rnd = original(*args, **kwargs)
        steps = tuple(
            tuple(replace(s, factors=s.factors * s.shard.draws / float(s.shard.weights.sum())) for s in per_rank)
            for per_rank in rnd.steps
        )
        return replace(rnd, steps=steps)

    monkeypatch.setattr(resample, "plan_round", plan_round)


def _wrong_support(monkeypatch) -> None:
    """The known-wrong n_supp: centred weights 1/(n p_i) over every row, not 1/(n_supp p_i)."""
    import costaware.distributions as dist

    original = dist.importance_weights_kernel
    monkeypatch.setattr(dist, "importance_weights_kernel", lambda p, mode: original(p, "raw"))


@pytest.fixture(scope="module")
def p_star_case():
    """Centred p* draws only the n_supp rows with A != 0, each weighted 1/(n_supp p_i): its expected update
    is stock's full-batch update times N / n_supp (paper §G.2)."""
    data = padded_batch()
    agg = "seq-mean-token-mean"
    adv = data["advantages"].abs().sum(-1)
    scale = len(adv) / int((adv > 0).sum())
    assert scale > 1.2  # a zero-advantage group: the mutants below move the mean by this much
    return data, agg, full_batch_grad(data, agg, *P_STAR) * scale


def test_merged_p_star_through_update_actor_is_unbiased(p_star_case):
    """Merged duplicates (k draws fed once with k·w) and the zero-factor padding to one size per step."""
    data, agg, target = p_star_case
    assert unbiased(minibatch_grads(data, agg, DRAWS, *P_STAR), target, "merged p*, centred")


def test_merged_p_star_with_the_wrong_support_is_caught(p_star_case, monkeypatch):
    data, agg, target = p_star_case
    _wrong_support(monkeypatch)
    assert not unbiased(minibatch_grads(data, agg, DRAWS, *P_STAR), target, "merged p*, wrong n_supp (known wrong)")


MERGED = ("algorithm.cost_aware.merge_duplicates=true",)


def test_merged_p_smooth_with_kl_and_entropy_is_unbiased(token_mean_case):
    """p_smooth (alpha 0.3: zero-advantage rows drawn with weight 3.3 for their KL and entropy terms),
    duplicates merged, verl's default token-mean."""
    data, full = token_mean_case
    assert unbiased(minibatch_grads(data, "token-mean", DRAWS, *MERGED), full, "merged p_smooth, token-mean")


def test_merged_p_smooth_self_normalised_is_caught(token_mean_case, monkeypatch):
    """Dividing each step by the mean weight of its draws (a ratio estimator) fails the same check."""
    data, full = token_mean_case
    _self_normalised(monkeypatch)
    grads = minibatch_grads(data, "token-mean", DRAWS, *MERGED)
    assert not unbiased(grads, full, "merged p_smooth, self-normalised (known wrong)")


def test_nonzero_through_update_actor_is_stocks_update():
    """nonzero feeds each A != 0 row once: every call's summed update is stock's, exactly (no sampling)."""
    data = padded_batch()
    extra = ("algorithm.cost_aware.method=nonzero",) + P_STAR[2:]
    grads = minibatch_grads(data, "token-mean", 2, *extra)
    full = full_batch_grad(data, "token-mean", *extra)
    # the plan normalises each step by the pool's tokens · 4/16, so the mean of one call's steps is stock's
    # full-batch update (one mini-batch of 16 rows)
    per_call = grads.view(2, NUM_PROMPTS, *grads.shape[1:]).mean(1)
    torch.testing.assert_close(per_call[0], full, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(per_call[1], full, rtol=1e-5, atol=1e-9)
