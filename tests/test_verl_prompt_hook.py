"""The prompt sampler on verl 0.9 through the plugin (``costaware.integrations.verl.curriculum``).

verl's real modules: the patched ``create_rl_sampler`` as ``ray_trainer`` and ``v1.trainer_base`` bind it,
``RayPPOTrainer._create_dataloader`` (torchdata's ``StatefulDataLoader``), ``_get_gen_batch`` (which pops
``index`` off the batch) and the patched ``_update_actor`` down to the stub worker group of the verl harness.
A step is ``fit``'s: the prompts repeated ``rollout.n`` times, the rollouts' tensors joined, the rows
reordered as ``balance_batch`` does, then ``_update_actor``; a checkpoint is taken after it, as ``fit``
takes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from verl_harness import (  # installs the plugin before verl's trainer loads
    GROUP,
    NUM_PROMPTS,
    PROMPT_LEN,
    RESPONSE_LEN,
    Bigram,
    StubWorkerGroup,
    actor_config,
    padded_batch,
    ray_trainer,
    verl_losses,
)

# isort: split
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import utils as ppo_utils  # noqa: E402

from costaware.integrations.verl import is_patched  # noqa: E402
from costaware.integrations.verl.prompts import CostAwarePromptSampler  # noqa: E402
from costaware.rollouts.prompts import cost_aware_skip, greso  # noqa: E402
from costaware.rollouts.stage import PromptStage  # noqa: E402

N, B, SEED = 14, NUM_PROMPTS, 5  # 3 rounds of B prompts per pass (the last 2 rows dropped, as verl does)
SAMPLER = [
    "+data.sampler.class_path=pkg://costaware.integrations.verl.prompts",
    "+data.sampler.class_name=CostAwarePromptSampler",
    f"+data.sampler.costaware.seed={SEED}",
]
METHODS = {"greso": greso(), "cost_aware_skip": cost_aware_skip()}


class Prompts:
    """RLHFDataset's rows as the trainer sees them: ``extra_info.index`` (not the position) and ``index``."""

    key = 500 + 3 * np.arange(N)[::-1]

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict:
        k = int(self.key[i])
        return {
            "dummy_tensor": torch.tensor([i]),
            "index": k,
            "extra_info": {"index": k, "split": "train"},
            "data_source": "toy",
        }


def _config(*overrides: str, cost_aware: bool = True, method: str | None = "greso", workers: int | None = 0):
    extra = [f"data.train_batch_size={B}", "trainer.total_epochs=4"]
    extra += (SAMPLER + [f"+data.sampler.costaware.method={method}"]) if method else []
    extra += [] if workers is None else [f"data.dataloader_num_workers={workers}"]
    extra += [] if cost_aware else ["+algorithm.cost_aware.enable=false"]
    return actor_config("token-mean", *extra, *overrides)


def _trainer(full, actor):
    trainer = object.__new__(ray_trainer.RayPPOTrainer)
    trainer.config, trainer.global_steps = full, 1
    trainer._create_dataloader(Prompts(), Prompts(), None, None)  # verl's: create_rl_sampler as it binds it
    trainer.actor_rollout_wg = StubWorkerGroup(Bigram(), actor, verl_losses.ppo_loss)
    return trainer


def _rewards(keys: np.ndarray, step: int) -> np.ndarray:
    """(B, G) 0/1 rewards fixed by (prompt key, step); each key has its own pass rate."""
    rng = np.random.default_rng([step, 17])
    return (rng.random((keys.size, GROUP)) < ((keys % 7) + 0.5)[:, None] / 7).astype(np.float32)


def _rollouts(step: int) -> dict[str, torch.Tensor]:
    """The harness's padded rollouts (B prompts x G rows, unequal lengths), one prompt per group of G rows
    as verl repeats it: each group's rows share their first row's prompt."""
    t = padded_batch(seed=step)
    first = torch.arange(B * GROUP) // GROUP * GROUP
    t["prompts"] = t["prompts"][first]
    for name in ("input_ids", "attention_mask"):
        t[name][:, :PROMPT_LEN] = t[name][first, :PROMPT_LEN]
    t["position_ids"] = (t["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    return t


def _step(trainer, batch_dict: dict, step: int) -> tuple[DataProto, np.ndarray]:
    """One ``fit`` step up to the actor update; returns the batch ``_update_actor`` got and the drawn keys."""
    batch = DataProto.from_single_dict(batch_dict)
    batch.non_tensor_batch["uid"] = np.array([f"s{step}.{i}" for i in range(B)], dtype=object)
    trainer._get_gen_batch(batch)  # verl pops `index` (everything but the reward keys) off the batch
    keys = np.array([e["index"] for e in batch.non_tensor_batch["extra_info"]])
    batch = batch.repeat(repeat_times=GROUP, interleave=True)
    tensors = _rollouts(step)
    last = tensors["response_mask"].sum(-1) - 1
    scores = torch.zeros(B * GROUP, RESPONSE_LEN)
    scores[torch.arange(B * GROUP), last] = torch.as_tensor(_rewards(keys, step).reshape(-1))
    tensors["token_level_scores"] = scores
    batch = batch.union(DataProto.from_dict(tensors=tensors))
    batch.reorder(torch.as_tensor(np.random.default_rng([step, 3]).permutation(B * GROUP)))  # balance_batch
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
    trainer._update_actor(batch)
    return batch, keys


def _fit(trainer, steps: int, first: int = 1, save_at: int | None = None):
    """``fit``'s loop over epochs and the dataloader: the keys drawn per step, the saved loader state."""
    drawn, saved = [], None
    trainer.global_steps = first
    for _ in range(first // len(trainer.train_dataloader), trainer.config.trainer.total_epochs):
        for batch_dict in trainer.train_dataloader:
            drawn.append(_step(trainer, batch_dict, trainer.global_steps)[1].tolist())
            if trainer.global_steps == save_at:  # verl saves after _update_actor
                saved = trainer.train_dataloader.state_dict()
            trainer.global_steps += 1
            if len(drawn) == steps:
                return drawn, saved
    raise AssertionError("the run ended early")


def _reference(method: str, steps: int) -> list[list[int]]:
    """The engine-neutral stage with the same seed, fed the same rewards: the draws the sampler must make."""
    stage, out = PromptStage(METHODS[method], num_prompts=N, group_size=GROUP, prompts_per_round=B, seed=SEED), []
    for step in range(1, steps + 1):
        ids = stage.draw().prompt_ids
        keys, t = Prompts.key[ids], _rollouts(step)
        lengths = t["response_mask"].sum(-1).reshape(B, GROUP).double().numpy()
        prompt_tokens = t["attention_mask"][::GROUP, :PROMPT_LEN].sum(-1).double().numpy()
        stage.update(ids, _rewards(keys, step), lengths, prompt_tokens=prompt_tokens)
        out.append(keys.tolist())
    return out


def test_every_verl_import_site_binds_the_patched_create_rl_sampler() -> None:
    assert is_patched("verl.trainer.ppo.utils")
    assert ray_trainer.create_rl_sampler is ppo_utils.create_rl_sampler
    assert getattr(ppo_utils.create_rl_sampler, "__costaware_cost_aware__", False)
    main_ppo_v0 = pytest.importorskip("verl.trainer.main_ppo_v0")
    assert main_ppo_v0.create_rl_sampler is ppo_utils.create_rl_sampler
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    assert trainer_base.create_rl_sampler.__wrapped__ is ppo_utils.create_rl_sampler.__wrapped__


def test_a_trainer_module_imported_before_the_hook_is_rebound_to_the_patched_function() -> None:
    code = textwrap.dedent("""
        import verl, verl.trainer.ppo.ray_trainer as rt, verl.trainer.ppo.utils as u
        original = u.create_rl_sampler
        assert rt.create_rl_sampler is original  # bound by name before any patch
        from costaware.integrations.verl import install_import_hook
        install_import_hook()
        assert u.create_rl_sampler is not original and rt.create_rl_sampler is u.create_rl_sampler
        assert u.create_rl_sampler.__wrapped__ is original
        print("OK")
        """)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COSTAWARE_VERL_PLUGIN": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]


@pytest.mark.parametrize(
    "overrides",
    [
        ["data.shuffle=true", "data.seed=3"],
        ["data.shuffle=false"],
        ["data.shuffle=true", "+data.sampler.class_path=null"],
    ],
)
def test_without_a_class_path_verl_builds_its_own_sampler_unchanged(overrides) -> None:
    full, actor = _config(*overrides, method=None)
    trainer = _trainer(full, actor)
    own = ppo_utils.create_rl_sampler.__wrapped__(full.data, Prompts())  # verl's function, unpatched
    assert type(trainer.train_dataloader.sampler) is type(own)
    assert list(trainer.train_dataloader.sampler) == list(own)
    batch, _ = _step(trainer, next(iter(trainer.train_dataloader)), 1)  # no sampler to feed: nothing fails
    assert len(batch) == B * GROUP


@pytest.mark.parametrize("cost_aware", [True, False], ids=["cost_aware_on", "cost_aware_off"])
@pytest.mark.parametrize("method", METHODS)
def test_the_sampler_is_built_and_fed_each_scored_batch_once_per_step(method, cost_aware, monkeypatch) -> None:
    trainer = _trainer(*_config(cost_aware=cost_aware, method=method))
    sampler = trainer.train_dataloader.sampler
    assert isinstance(sampler, CostAwarePromptSampler) and len(trainer.train_dataloader) == N // B
    fed, update = [], sampler.update
    monkeypatch.setattr(sampler, "update", lambda batch: (fed.append(batch), update(batch))[1])
    steps, got = 8, []  # crosses two epoch boundaries
    trainer.global_steps = 1
    loader = iter(trainer.train_dataloader)
    for step in range(1, steps + 1):
        try:
            batch_dict = next(loader)
        except StopIteration:
            loader = iter(trainer.train_dataloader)
            batch_dict = next(loader)
        batch, keys = _step(trainer, batch_dict, step)
        assert len(fed) == step and fed[-1] is batch  # once, with the batch _update_actor got
        assert "index" not in batch.non_tensor_batch and "token_level_scores" in batch.batch.keys()
        got.append(keys.tolist())
        trainer.global_steps += 1
    assert got == _reference(method, steps)
    assert len(trainer.actor_rollout_wg.grads) == 2 * steps  # the actor still updated every step


@pytest.mark.parametrize("method", METHODS)
def test_a_resume_through_the_dataloader_state_dict_draws_what_the_uninterrupted_run_draws(method, tmp_path):
    steps, cut = 10, 4
    full, actor = _config(method=method, cost_aware=False)
    uninterrupted, saved = _fit(_trainer(full, actor), steps, save_at=cut)
    assert uninterrupted == _reference(method, steps)
    # the dataloader's checkpoint holds the sampler's, taken after the step's round was folded in
    state = saved["_sampler_iter_state"]["sampler_state"]
    assert state["stage"]["round"] == cut and state["pending"] is False
    torch.save(saved, tmp_path / "data.pt")  # verl's _save_checkpoint / _load_checkpoint round trip
    resumed = _trainer(full, actor)
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    rest, _ = _fit(resumed, steps - cut, first=cut + 1)
    assert rest == uninterrupted[cut:]  # nothing repeated, nothing skipped, across the epoch boundary


@pytest.mark.parametrize(
    "overrides, workers, message",
    [
        ([], 2, "data.dataloader_num_workers must be 0 when data.sampler.class_path is set .*got 2"),
        ([], None, "data.dataloader_num_workers must be 0 when data.sampler.class_path is set .*got 8"),  # verl's
        (["trainer.critic_warmup=2"], 0, "trainer.critic_warmup must be 0 with data.sampler.class_path.*got 2"),
        (["data.sampler.class_name=null"], 0, "data.sampler.class_name must name the class"),
    ],
)
def test_a_bad_setting_with_a_class_path_is_one_error_naming_the_key(overrides, workers, message) -> None:
    with pytest.raises(ValueError, match=message):
        _trainer(*_config(*overrides, workers=workers))


def test_trainer_v1_refuses_the_class_path_and_keeps_verls_sampler_without_it() -> None:
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    full, _ = _config()
    with pytest.raises(ValueError, match=r"data.sampler.class_path='pkg://.*not supported by verl's trainer v1"):
        trainer_base.create_rl_sampler(full.data, Prompts())
    plain, _ = _config("data.shuffle=false", method=None)
    assert list(trainer_base.create_rl_sampler(plain.data, Prompts())) == list(range(N))


def test_a_round_asked_for_before_the_last_one_was_fed_is_refused() -> None:
    trainer = _trainer(*_config(cost_aware=False))
    loader = iter(trainer.train_dataloader)
    next(loader)  # verl 0.9 without the plugin's update: the round is never folded in
    with pytest.raises(RuntimeError, match="round 1 was asked for before round 0's scored batch reached update"):
        next(loader)
