"""verl plugin settings: ``enable=false``, ``seq-mean-token-sum-norm``, ``logprob_rows`` and the PO-token budget."""

from __future__ import annotations

import pytest

verl = pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl_harness import STEP, padded_batch, run_v0, run_v1, trainer_overrides, verl_losses  # noqa: E402

from costaware.integrations.verl import CostAwareConfig  # noqa: E402
from costaware.integrations.verl.config import read_trainer_config  # noqa: E402


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=f"{verl.__path__[0]}/trainer/config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def test_enable_false_validates_nothing():
    """A disabled key is inert, whatever else it holds (bad values, unknown keys, unsupported settings)."""
    cfg = compose(
        "actor_rollout_ref.actor.ppo_epochs=3",
        "+algorithm.cost_aware.enable=false",
        "+algorithm.cost_aware.method=bogus",
        "+algorithm.cost_aware.alpha=7",
        "+algorithm.cost_aware.typo=1",
    )
    assert read_trainer_config(cfg) is None
    with pytest.raises(ValueError, match="enable must be true or false, got 'no'"):
        read_trainer_config(compose("+algorithm.cost_aware.enable=no"))


def test_seq_mean_token_sum_norm_needs_loss_scale_factor():
    base = [o for o in trainer_overrides("seq-mean-token-sum-norm") if "loss_scale_factor" not in o]
    with pytest.raises(ValueError, match="loss_scale_factor") as info:
        read_trainer_config(compose(*base))
    assert "loss_agg_mode='seq-mean-token-sum-norm'" in str(info.value) and "got None" in str(info.value)
    assert read_trainer_config(compose(*trainer_overrides("seq-mean-token-sum-norm"))) is not None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"token_budget": -5}, "token_budget must be a non-negative integer, got -5"),
        ({"token_budget": 1.5}, "token_budget must be a non-negative integer, got 1.5"),
        ({"logprob_rows": "some"}, "logprob_rows must be 'fed' or 'all', got 'some'"),
    ],
)
def test_new_fields_are_validated(values, message):
    with pytest.raises(ValueError, match="algorithm.cost_aware") as info:
        CostAwareConfig.from_mapping(values)
    assert message in str(info.value)


def test_token_budget_stops_trainer_v0_before_the_next_generation():
    """The update that reaches the budget runs; then no update and no generation: ``fit`` returns."""
    from costaware.integrations.verl import patch

    data = padded_batch()
    _, _, _, metrics, _ = run_v0("token-mean", data, verl_losses.ppo_loss)
    budget = int(metrics["cost_aware/step/tokens"]) + 1  # reached during the second update
    _, _, _, _, trainer = run_v0(
        "token-mean", data, verl_losses.ppo_loss, f"+algorithm.cost_aware.token_budget={budget}"
    )
    config, wg = trainer.config, trainer.actor_rollout_wg
    generated, updated = [], []

    class Loop:  # verl v0's loop shape: per batch, generation first, the actor update last
        def __init__(self):
            self.config, self.actor_rollout_wg, self.global_steps = config, wg, 0

        def _get_dp_size(self, worker_group, role):
            return 2

        def _get_gen_batch(self, batch):
            generated.append(self.global_steps)
            return batch

        def _update_actor(self, batch):
            updated.append(self.global_steps)
            from verl import DataProto

            return DataProto.from_single_dict(data={}, meta_info={"metrics": {}})

        def _save_checkpoint(self):
            pass

        def _load_checkpoint(self):
            pass

        def fit(self):
            from verl import DataProto

            for step in range(STEP, STEP + 9):  # run_v0 measured the plan of step STEP
                self.global_steps = step
                self._get_gen_batch(None)
                self._update_actor(DataProto.from_dict(tensors=dict(data)))
            return "ran out of data"

    patch.patch_v0(Loop)
    loop = Loop()
    assert loop.fit() is None  # stopped by the budget, not by the data
    assert generated == updated == [STEP, STEP + 1]
    assert loop._cost_aware_counters.tokens >= budget > metrics["cost_aware/step/tokens"]


def test_token_budget_stops_trainer_v1_after_this_step(monkeypatch):
    data = padded_batch()
    wg, _, _, metrics, (store, returned, meta, rows) = run_v1(
        "token-mean", data, verl_losses.ppo_loss, monkeypatch, "+algorithm.cost_aware.token_budget=1"
    )
    assert len(wg.grads) > 0 and metrics["cost_aware/total/tokens"] >= 1
    trainer = wg.trainer  # v1's loop runs while global_steps <= total_training_steps: this step is the last
    assert trainer.total_training_steps == trainer.global_steps
    calls = len(wg.grads)
    trainer.local_trigger_step = 1  # a further update in the same step (separate_async) makes no worker call
    assert trainer._update_actor(meta, {}) is meta and len(wg.grads) == calls
