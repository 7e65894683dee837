"""The prompt stage in verl (costaware.integrations.verl.prompts): verl's curriculum-sampler hook.

verl is faked where it is not needed: a batch is a namespace with ``batch`` (tensors) and
``non_tensor_batch`` (object arrays), laid out as ``RayPPOTrainer.fit`` lays it out (each prompt repeated
``rollout.n`` times in a row, then reordered as ``balance_batch`` does). The dataloader is torchdata's real
``StatefulDataLoader``, the one verl uses, so its checkpoint path is the real one.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from costaware.integrations.verl.prompts import CostAwarePromptSampler, dataset_keys, fold_batch
from costaware.rollouts.prompts import cost_aware_skip, greso
from costaware.rollouts.stage import PromptStage

N, G, B, T = 20, 4, 3, 6
METHODS = {"greso": greso(), "cost_aware_skip": cost_aware_skip()}


class Rows:
    """A map-style dataset whose rows' ``index`` is not their position (as after filtering)."""

    def __init__(self, n: int = N) -> None:
        self.key = 1000 + 7 * np.arange(n)[::-1]

    def __len__(self) -> int:
        return self.key.size

    def __getitem__(self, i: int) -> dict:
        return {"index": int(self.key[i]), "position": i}


def _config(method: str | None = "greso", root: bool = True, **options) -> object:
    cfg = OmegaConf.create(
        {
            "data": {
                "train_batch_size": B,
                "gen_batch_size": None,
                "dataloader_num_workers": 0,
                "seed": None,
                "sampler": {
                    "class_path": "pkg://costaware.integrations.verl.prompts",
                    "class_name": "CostAwarePromptSampler",
                    "costaware": {"method": method, "seed": 5, **options},
                },
            },
            "actor_rollout_ref": {"rollout": {"n": G}},
        }
    )
    return cfg.data if root else OmegaConf.create(OmegaConf.to_container(cfg.data))


def _scores(ids: np.ndarray, round_: int) -> tuple[np.ndarray, np.ndarray]:
    """Rewards and lengths fixed by (prompt, round): prompt j passes with probability j/N."""
    rng = np.random.default_rng([round_, 11])
    r = (rng.random((ids.size, G)) < (ids[:, None] + 0.5) / N).astype(float)
    return r, rng.integers(1, T + 1, (ids.size, G)).astype(float)


def _batch(ids: np.ndarray, keys: np.ndarray, rewards: np.ndarray, lengths: np.ndarray, perm=None):
    """A scored verl batch of the drawn prompts ``ids``: rows interleaved by prompt, then reordered."""
    rows = ids.size * G
    mask = (torch.arange(T)[None, :] < torch.as_tensor(lengths.reshape(-1))[:, None]).long()
    last = mask.sum(-1).clamp(min=1) - 1
    scores = torch.zeros(rows, T, dtype=torch.float32)
    scores[torch.arange(rows), last] = torch.as_tensor(rewards.reshape(-1), dtype=torch.float32)
    prompts = torch.ones(rows, 5, dtype=torch.long)
    pmask = (torch.arange(5)[None, :] >= torch.as_tensor(ids % 3).repeat_interleave(G)[:, None]).long()
    tensors = {
        "token_level_scores": scores,
        "response_mask": mask,
        "prompts": prompts,
        "attention_mask": torch.cat([pmask, mask], dim=1),
    }
    non = {
        "uid": np.repeat(np.array([f"u{i}" for i in range(ids.size)], dtype=object), G),
        "index": np.repeat(keys[ids].astype(object), G),
    }
    perm = np.arange(rows) if perm is None else perm
    return SimpleNamespace(
        batch={k: v[torch.as_tensor(perm)] for k, v in tensors.items()},
        non_tensor_batch={k: v[perm] for k, v in non.items()},
    )


def _rounds(sampler: CostAwarePromptSampler, rounds: int, shuffle_seed: int | None = None) -> list[list[int]]:
    """Drive the sampler as verl does: B indices per step, then update() with the scored batch."""
    keys = Rows().key
    out, it = [], (i for _ in range(rounds) for i in sampler)  # a new pass (epoch) when one ends
    for t in range(rounds):
        ids = np.array([next(it) for _ in range(B)])
        r, ln = _scores(ids, t)
        perm = None if shuffle_seed is None else np.random.default_rng([shuffle_seed, t]).permutation(B * G)
        sampler.update(_batch(ids, keys, r, ln, perm))
        out.append(ids.tolist())
    return out


@pytest.mark.parametrize("method", METHODS)
def test_sampler_yields_what_a_prompt_stage_with_the_same_seed_draws(method) -> None:
    sampler = CostAwarePromptSampler(Rows(), _config(method))
    stage = PromptStage(METHODS[method], num_prompts=N, group_size=G, prompts_per_round=B, seed=5)
    got = _rounds(sampler, 12, shuffle_seed=0)
    want = []
    for t in range(12):
        d = stage.draw()
        r, ln = _scores(d.prompt_ids, t)
        stage.update(d.prompt_ids, r, ln)
        want.append(d.prompt_ids.tolist())
    assert got == want
    assert sampler.stage.state.status.tolist() == stage.state.status.tolist()
    assert np.array_equal(sampler.stage.state.successes, stage.state.successes)


def test_update_folds_shuffled_rows_back_in_draw_order() -> None:
    keys = Rows().key
    ids = np.array([7, 2, 7, 15])  # prompt 7 drawn twice (a round across an epoch boundary)
    rewards = np.array([[1, 1, 1, 1], [0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=float)
    lengths = np.arange(16, dtype=float).reshape(4, 4) % T + 1
    perm = np.random.default_rng(3).permutation(16)
    r, ln, tokens = fold_batch(_batch(ids, keys, rewards, lengths, perm), keys[ids], G)
    unshuffled = fold_batch(_batch(ids, keys, rewards, lengths), keys[ids], G)
    # each group lands on its own slot; the two groups of prompt 7 keep their batch order between them
    want_rows = {tuple(sorted(x)) for x in np.c_[rewards, lengths]}
    assert {tuple(sorted(x)) for x in np.c_[r, ln]} == want_rows
    for slot in (1, 3):
        assert sorted(r[slot]) == sorted(rewards[slot]) and sorted(ln[slot]) == sorted(lengths[slot])
    assert sorted(map(sorted, r[[0, 2]].tolist())) == sorted(map(sorted, rewards[[0, 2]].tolist()))
    np.testing.assert_array_equal(tokens, 5 - ids % 3)
    np.testing.assert_array_equal(np.sort(unshuffled[0], axis=1), np.sort(rewards, axis=1))


def test_a_batch_of_other_prompts_or_a_wrong_group_size_is_refused() -> None:
    keys = Rows().key
    ids = np.array([1, 2, 3])
    r, ln = _scores(ids, 0)
    with pytest.raises(ValueError, match="not the drawn round's"):
        fold_batch(_batch(ids, keys, r, ln), keys[np.array([1, 2, 4])], G)
    with pytest.raises(ValueError, match="rollout.n=3"):
        fold_batch(_batch(ids, keys, r, ln), keys[ids], 3)


def test_a_batch_without_index_is_folded_by_its_extra_info_index() -> None:
    """verl 0.9's ``_get_gen_batch`` pops ``index`` off the batch; ``extra_info`` (a reward key) stays."""
    keys = Rows().key
    ids = np.array([4, 9, 13])
    r, ln = _scores(ids, 0)
    batch = _batch(ids, keys, r, ln, np.random.default_rng(5).permutation(ids.size * G))
    batch.non_tensor_batch["extra_info"] = np.array(
        [{"index": k, "split": "train"} for k in batch.non_tensor_batch.pop("index")], dtype=object
    )
    got = fold_batch(batch, keys[ids], G)
    want = fold_batch(_batch(ids, keys, r, ln), keys[ids], G)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.sort(a, axis=-1), np.sort(b, axis=-1))


def test_a_round_asked_for_before_the_last_was_folded_in_is_refused_not_repeated() -> None:
    sampler = CostAwarePromptSampler(Rows(), _config("greso"))
    it = iter(sampler)
    first = [next(it) for _ in range(B)]
    with pytest.raises(RuntimeError, match="round 1 was asked for before round 0's scored batch reached update"):
        next(it)
    assert sampler.stage.pending.prompt_ids.tolist() == first  # still waiting for its rewards


def test_two_samplers_fed_the_same_batches_draw_the_same_prompts() -> None:
    a = CostAwarePromptSampler(Rows(), _config("cost_aware_skip"))
    b = CostAwarePromptSampler(Rows(), _config("cost_aware_skip"))
    assert _rounds(a, 15, shuffle_seed=1) == _rounds(b, 15, shuffle_seed=2)


def _loader(sampler):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(
        Rows(),
        batch_size=B,
        sampler=sampler,
        num_workers=0,
        drop_last=True,
        collate_fn=lambda rows: np.array([r["position"] for r in rows]),
    )


def _train(loader, sampler, steps: int, t0: int = 0, save_at: int | None = None, after_update: bool = False):
    """verl's loop over epochs; returns the batches, the loader state saved at step ``save_at`` and the
    number of steps of each epoch."""
    keys, out, saved, t, epochs = Rows().key, [], None, t0, []
    while len(out) < steps:
        epochs.append(0)
        for ids in loader:
            epochs[-1] += 1
            if save_at == t and not after_update:  # verl <= 0.8 saves before sampler.update
                saved = loader.state_dict()
            r, ln = _scores(ids, sampler.stage.round)
            sampler.update(_batch(ids, keys, r, ln, np.random.default_rng(t).permutation(B * G)))
            if save_at == t and after_update:
                saved = loader.state_dict()
            out.append(ids.tolist())
            t += 1
            if len(out) == steps:
                break
    return out, saved, epochs


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("after_update", [False, True], ids=["verl_order", "after_update"])
def test_a_resumed_dataloader_draws_what_the_uninterrupted_run_draws(method, after_update) -> None:
    steps, cut = 16, 7  # N // B = 6 rounds per pass: the run crosses two epoch boundaries
    sampler = CostAwarePromptSampler(Rows(), _config(method))
    full, saved, _ = _train(_loader(sampler), sampler, steps, save_at=cut, after_update=after_update)
    fresh = CostAwarePromptSampler(Rows(), _config(method))
    loader = _loader(fresh)
    loader.load_state_dict(saved)
    rest, _, epochs = _train(loader, fresh, steps - cut - 1, t0=cut + 1)
    # saved before update: round `cut` was never folded in, so the resumed run generates it again
    assert rest == full[cut + 1 - (not after_update) : steps - (not after_update)]
    # the resumed epoch ends where the uninterrupted one does (verl counts epochs by global step)
    assert epochs[0] == N // B - (cut + 1) % (N // B)
    assert len(loader) == N // B == len(fresh) // B


def test_state_dict_survives_torch_save_round_trip(tmp_path) -> None:
    sampler = CostAwarePromptSampler(Rows(), _config("greso"))
    _rounds(sampler, 4)
    torch.save(sampler.state_dict(), tmp_path / "data.pt")
    other = CostAwarePromptSampler(Rows(), _config("greso"))
    other.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    assert other.stage.state_dict() == sampler.stage.state_dict()


@pytest.mark.parametrize(
    "options, key",
    [
        ({"method": None}, "data.sampler.costaware.method must be one of"),
        ({"method": "cost_aware"}, "method='cost_aware' is not offered in verl: its prompt factor"),
        (
            {"method": "pods"},
            r"data.sampler.costaware.method must be one of \('greso', 'cost_aware_skip'\), got 'pods'",
        ),
        ({"floor": 0.1}, r"unknown key\(s\) \['floor'\]"),
        ({"p_easy": 0.0}, "data.sampler.costaware.p_easy must lie in"),
        ({"decay": 2.0}, "data.sampler.costaware.decay must lie in"),
        ({"seed": -1}, "data.sampler.costaware.seed must be"),
    ],
)
def test_bad_config_names_the_key(options, key) -> None:
    with pytest.raises(ValueError, match=key):
        CostAwarePromptSampler(Rows(), _config(**{"method": "greso", **options}))


def test_bad_config_outside_the_options_names_the_key() -> None:
    with pytest.raises(ValueError, match="data.sampler.costaware.min_keep must lie in"):
        CostAwarePromptSampler(Rows(), _config("cost_aware_skip", min_keep=1.5))
    with pytest.raises(ValueError, match="data.sampler.costaware.group_size must be set"):
        CostAwarePromptSampler(Rows(), _config("greso", root=False))
    cfg = _config("greso")
    cfg.dataloader_num_workers = 8
    with pytest.raises(ValueError, match="data.dataloader_num_workers must be 0"):
        CostAwarePromptSampler(Rows(), cfg)
    cfg = _config("greso")
    cfg.train_batch_size = N + 1
    with pytest.raises(ValueError, match="data.train_batch_size must be"):
        CostAwarePromptSampler(Rows(), cfg)


def test_keys_come_from_extra_info_index_and_must_be_unique() -> None:
    class Frame:
        column_names = ["prompt", "extra_info"]

        def __init__(self, extra):
            self.extra = extra

        def __getitem__(self, name):
            assert name == "extra_info"  # one column read, no row fetched
            return self.extra

    data = SimpleNamespace(dataframe=Frame([{"index": 9}, {"index": 4}, {"split": "train", "index": 6}]))
    np.testing.assert_array_equal(dataset_keys(data), [9, 4, 6])
    with pytest.raises(ValueError, match=r"extra_info.index must be unique per row.*\[0\]"):
        dataset_keys(SimpleNamespace(dataframe=Frame([{"index": 3}, None, {}])))


def test_verl_le_08_loads_it_by_class_path_as_an_abstract_curriculum_sampler(monkeypatch) -> None:
    """verl 0.8's interface (verl/experimental/dataset/sampler.py), rebuilt: the class must subclass it,
    implement every abstract method, and load through ``pkg://`` as ``create_rl_sampler`` loads it."""
    from abc import abstractmethod

    from torch.utils.data import Sampler

    class AbstractSampler(Sampler[int]):
        @abstractmethod
        def __init__(self, data_source, data_config):
            pass

    class AbstractCurriculumSampler(AbstractSampler):
        @abstractmethod
        def update(self, batch) -> None:
            pass

    fake = types.ModuleType("verl.experimental.dataset.sampler")
    fake.AbstractSampler, fake.AbstractCurriculumSampler = AbstractSampler, AbstractCurriculumSampler
    monkeypatch.setitem(sys.modules, "verl.experimental.dataset.sampler", fake)
    monkeypatch.setitem(sys.modules, "verl.experimental.dataset", types.ModuleType("verl.experimental.dataset"))
    spec = importlib.util.find_spec("costaware.integrations.verl.prompts")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a fresh copy under verl 0.8's interface; the real module is untouched
    sampler = module.CostAwarePromptSampler(data_source=Rows(), data_config=_config("greso"))
    assert isinstance(sampler, AbstractSampler) and isinstance(sampler, AbstractCurriculumSampler)
    import_utils = pytest.importorskip("verl.utils.import_utils")
    cls = import_utils.load_extern_object("pkg://costaware.integrations.verl.prompts", "CostAwarePromptSampler")
    assert cls is CostAwarePromptSampler


def test_a_real_dataproto_repeated_and_reordered_as_fit_does_is_folded() -> None:
    verl = pytest.importorskip("verl")
    sampler = CostAwarePromptSampler(Rows(), _config("greso"))
    it = iter(sampler)
    ids = np.array([next(it) for _ in range(B)])
    keys = Rows().key
    r, ln = _scores(ids, 0)
    fake = _batch(ids, keys, r, ln)
    prompts = verl.DataProto.from_dict(
        tensors={"dummy_tensor": torch.zeros(B, 1)},
        non_tensors={"index": keys[ids].astype(object), "uid": np.array(["a", "b", "c"], dtype=object)},
    )
    batch = prompts.repeat(repeat_times=G, interleave=True)
    batch = batch.union(verl.DataProto.from_dict(tensors=dict(fake.batch)))
    batch.reorder(torch.as_tensor(np.random.default_rng(0).permutation(B * G)))
    sampler.update(batch)
    stage = PromptStage(greso(), num_prompts=N, group_size=G, prompts_per_round=B, seed=5)
    d = stage.draw()
    stage.update(d.prompt_ids, r, ln)
    assert sampler.stage.state_dict()["state"]["successes"] == stage.state_dict()["state"]["successes"]
