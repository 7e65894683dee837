"""Stub worker groups of the verl harness (:mod:`verl_harness`): they replay verl's actor worker on CPU
with verl's own functions (the contiguous data-parallel split, ``tu.make_iterator``, the global token
count, ``prepare_micro_batches`` with dynamic batch size), and an in-memory TransferQueue for v1.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")  # skips the test module when verl is missing

# verl_fixtures first: it installs the plugin's hook before verl's worker modules load
from verl_fixtures import DP, MAX_TOKENS, Bigram  # noqa: E402

# isort: split
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.engine.utils import prepare_micro_batches  # noqa: E402


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.values() if t.is_nested else t


def _first_token(t: torch.Tensor) -> torch.Tensor:
    """(rows,) each row's value on its first response token (jagged or dense)."""
    return t.values()[t.offsets()[:-1]] if t.is_nested else t[:, 0]


class StubWorkerGroup:
    """Replays verl's actor worker (``train_mini_batch`` + FSDP ``forward_backward_batch``) on CPU."""

    def __init__(self, model: Bigram, config, loss_fn, dp: int = DP) -> None:
        self.model, self.config, self.loss_fn, self.dp = model, config, loss_fn, dp
        self.logprob_rows: list[list[torch.Tensor]] = []  # per log-prob pass: the row ids of each rank
        self.grads: list[torch.Tensor] = []  # one per mini-batch (optimizer step)
        self.row_ids: list[torch.Tensor] = []  # rows of each mini-batch, rank-major
        self.factors: list[torch.Tensor] = []  # the plugin's factor of each row of each mini-batch (0: padding)
        self.lr_steps = 0
        self._dispatch_info: dict = {}

    def _query_dispatch_info(self, role: str) -> list[int]:
        return list(range(self.dp))  # one worker per data-parallel rank

    @staticmethod
    def _settings(td) -> tuple:
        """``train_mini_batch``'s settings, popped from a rank's batch."""
        mbs = tu.pop(td, key="mini_batch_size")
        epochs, seed = tu.pop(td, key="epochs", default=1), tu.pop(td, key="seed", default=42)
        return mbs, epochs, seed, tu.pop(td, key="dataloader_kwargs", default={})

    def update_actor(self, td):
        settings = self._settings(td)
        return self._train(tu.chunk_tensordict(td, self.dp), *settings)  # the dispatch: contiguous chunk per rank

    def _train(self, chunks, mbs, epochs, seed, kwargs):
        """verl's ``train_mini_batch`` on every rank: ``chunks[r]`` is rank r's batch."""
        seen: set[str] = set()  # the loss's own metrics (the plugin's weighted loss adds cost_aware/loss/*)
        iters = [
            list(
                tu.make_iterator(
                    c, mini_batch_size=mbs // self.dp, epochs=epochs, seed=seed + r, dataloader_kwargs=kwargs
                )
            )
            for r, c in enumerate(chunks)
        ]
        for j in range(len(iters[0])):
            self.model.zero_grad()
            ranks = [it[j] for it in iters]
            num_tokens = sum(int(_flat(mb["loss_mask"]).sum()) for mb in ranks)  # all_reduce(SUM)
            for mb in ranks:
                tu.assign_non_tensor(
                    mb,
                    batch_num_tokens=num_tokens,
                    dp_size=self.dp,
                    use_dynamic_bsz=True,
                    max_token_len_per_gpu=MAX_TOKENS,
                )
                micro_batches, _ = prepare_micro_batches(mb, dp_group=None, same_micro_num_in_dp=True)
                assert sum(len(m) for m in micro_batches) == len(mb)
                for micro in micro_batches:
                    loss, loss_metrics = self.loss_fn(self.config, self.model(micro), micro)
                    seen.update(k for k in loss_metrics if k.startswith("cost_aware/"))
                    loss.backward()
            self.grads.append(self.model.table.grad.clone() / self.dp)  # FSDP averages over ranks
            self.row_ids.append(torch.cat([mb["row_id"] for mb in ranks]))
            if "cost_aware_weights" in ranks[0].keys():
                self.factors.append(torch.cat([_first_token(mb["cost_aware_weights"]) for mb in ranks]))
            self.lr_steps += int(j == len(iters[0]) - 1)  # update_lr_scheduler on the last mini-batch
        metrics = {"mfu": [0.0], "pg_loss": [0.0]} | {key: [0.0] for key in sorted(seen)}
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})

    def compute_log_prob(self, td):
        """verl's ``compute_log_prob`` / ``compute_ref_log_prob``: the contiguous split per rank (which
        needs equal row counts), dynamic-batch-size micro-batches, no-grad forward; rows in input order."""
        chunks = tu.chunk_tensordict(td, self.dp)
        self.logprob_rows.append([c["row_id"].clone() for c in chunks])
        for chunk in chunks:
            tu.assign_non_tensor(chunk, use_dynamic_bsz=True, max_token_len_per_gpu=MAX_TOKENS)
            micro_batches, _ = prepare_micro_batches(chunk, dp_group=None, same_micro_num_in_dp=True)
            assert sum(len(m) for m in micro_batches) == len(chunk)
        with torch.no_grad():
            out = self.model(td)  # per token, so the values do not depend on the micro-batching
        metrics = {"mfu": 0.0}
        return tu.get_tensordict(tensor_dict=out, non_tensor_dict={"metrics": metrics})

    compute_ref_log_prob = compute_log_prob


class StubWorkerGroupV1(StubWorkerGroup):
    """v1: verl's dispatch splits the keys contiguously over the ranks; each rank reads its rows from
    TransferQueue by key with the batch's ``extra_info`` attached (``_async_meta_to_realdata``), and the
    actor's ``TrainingWorker.train_mini_batch`` (wrapped by the plugin) runs on them."""

    def __init__(self, model, config, loss_fn, store) -> None:
        super().__init__(model, config, loss_fn)
        self.store = store
        self.keys_read: list[list[str]] = []  # per update: the keys every rank read, rank-major

    def update_actor(self, meta):
        from costaware.integrations.verl.patch import train_mini_batch_wrapper

        assert len(meta.keys) % self.dp == 0, "the dispatch splits the keys evenly over the ranks"
        share = len(meta.keys) // self.dp
        self.keys_read.append(list(meta.keys))
        chunks = []
        for rank in range(self.dp):
            keys = meta.keys[rank * share : (rank + 1) * share]
            td = self.store.kv_batch_get(keys=keys, partition_id=meta.partition_id, select_fields=meta.fields)
            td["row_id"] = torch.tensor([int(k.split("#")[0][1:]) for k in keys])
            for key, value in meta.extra_info.items():
                tu.assign_non_tensor_data(td, key, value)
            # the worker's train_mini_batch as the plugin wraps it: the rank's rows, then verl's loop
            worker = _RankWorker(rank)
            train_mini_batch_wrapper(_keep_rank_batch)(worker, data=td)
            chunks.append(worker.data)
            settings = worker.settings
        out = self._train(chunks, *settings)
        return {"metrics": tu.get(out, "metrics")}

    def compute_log_prob(self, meta):
        """v1's pass: rows read by key, split contiguously per rank, log-probs written back by key."""
        from tensordict import TensorDict

        assert len(meta.keys) % self.dp == 0, "the contiguous split needs equal row counts per rank"
        ids = torch.tensor([int(k.split("#")[0][1:]) for k in meta.keys])
        self.logprob_rows.append(list(ids.chunk(self.dp)))
        td = self.store.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["input_ids"])
        with torch.no_grad():
            out = self.model(td)
        self.store.kv_batch_put(meta.keys, meta.partition_id, TensorDict(out, batch_size=len(meta.keys)))
        return meta

    compute_ref_log_prob = compute_log_prob


class _RankWorker:
    """Stands in for one rank's ``TrainingWorker`` under the plugin's ``train_mini_batch`` wrapper: it keeps
    the batch verl's loop would get (the group's ``_train`` then runs every rank's mini-batches in step)."""

    def __init__(self, rank: int) -> None:
        self.engine = type("Engine", (), {"get_data_parallel_rank": staticmethod(lambda: rank)})()
        self.settings, self.data = None, None


def _keep_rank_batch(worker: _RankWorker, data):
    worker.settings = StubWorkerGroup._settings(data)
    worker.data = data


class MemoryKV:
    """In-memory stand-in for TransferQueue's kv API (a store of per-row jagged tensors)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, torch.Tensor]] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta

        for name in fields.keys() if fields is not None else []:
            for key, value in zip(keys, fields[name].unbind(), strict=True):
                self.rows.setdefault((partition_id, key), {})[name] = value.clone()
        self.tags = getattr(self, "tags", {})
        for key, tag in zip(keys, tags or [None] * len(keys), strict=True):
            if tag is not None:
                self.tags[(partition_id, key)] = tag
        names = sorted(set().union(*(self.rows[(partition_id, k)] for k in keys)))
        return KVBatchMeta(keys=list(keys), tags=[self.tags.get((partition_id, k), {}) for k in keys],
                           partition_id=partition_id, fields=names)  # fmt: skip

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from tensordict import TensorDict

        rows = [self.rows[(partition_id, k)] for k in keys]
        names = select_fields if select_fields is not None else sorted(rows[0])
        names = [n for n in names if any(n in r for r in rows)]  # TransferQueue drops a field no row holds
        if any(n not in r for n in names for r in rows):
            raise ValueError("Some fields are not ready in all the requested keys!")
        nested = {n: torch.nested.as_nested_tensor([r[n] for r in rows], layout=torch.jagged) for n in names}
        return TensorDict(nested, batch_size=len(keys))

    def kv_clear(self, keys, partition_id):
        for k in keys:
            del self.rows[(partition_id, k)]
