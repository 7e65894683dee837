"""A torch ``Sampler`` that draws examples with p_i ∝ G_i/√c_i, for any ``DataLoader``.

Indices are drawn i.i.d. with replacement from p = (1−α)·p* + α·uniform, p*_i ∝ G_i/√c_i, through an
alias table (O(n) build, O(1) per draw). Every drawn example i must have its loss multiplied by its
importance weight w_i (centred: 1/(n_supp p_i), raw: 1/(n p_i)) under the p *it was drawn from*.

Online proxies and costs. :meth:`CostAwareSampler.update_proxies` and :meth:`CostAwareSampler.update_costs`
take effect at the next index the sampler yields, not after the next ``chunk_size`` draws: the rest of
the chunk drawn from the old p is discarded and redrawn from the new one. A
``DataLoader`` asks the sampler for a batch's indices when it needs them (``num_workers=0``: one batch
at a time, so an update made after batch b reaches batch b+1); with workers it has fetched up to
``prefetch_factor × num_workers`` batches ahead, and those keep the p, and the weights, of their draw.

Weights. Either let the sampler yield ``(index, weight)`` pairs and wrap the dataset in
:class:`WeightedIndexDataset`, which returns ``(sample, index, weight)``, or call
:meth:`CostAwareSampler.weights_for` on each batch's indices, in order: it returns the weights
recorded when those indices were drawn, and refuses indices that are not the next draws.

>>> import torch
>>> from torch.utils.data import DataLoader, TensorDataset
>>> x = torch.arange(6.0)
>>> costs = torch.tensor([1.0, 1.0, 4.0, 4.0, 9.0, 9.0])          # e.g. sequence lengths
>>> sampler = CostAwareSampler(costs, num_samples=8, seed=0, yield_weights=True)
>>> loader = DataLoader(WeightedIndexDataset(TensorDataset(x)), batch_size=4, sampler=sampler)
>>> for (xb,), idx, w in loader:
...     per_example_loss = xb**2                               # any per-example loss
...     loss = (w * per_example_loss).mean()                   # unbiased for the uniform mean
...     sampler.update_proxies(idx, per_example_loss.detach().sqrt())   # the next batch is drawn from it
>>> len(sampler), sampler.drawn
(8, 8)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from costaware import distributions as dist
from costaware._checks import (
    boolean,
    in_interval,
    in_unit_interval,
    index_vector,
    integer,
    nonnegative_vector,
    positive_vector,
    same_length,
    show,
)
from costaware._sampler_state import EpochPass, load_stream, save_stream
from costaware.alias import build_alias, draw

__all__ = ["CostAwareSampler", "WeightedIndexDataset"]


def _to_numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


class CostAwareSampler(Sampler[int]):
    r"""Samples indices of ``[0, n)`` i.i.d. with p ∝ G/√c (smoothed by α), with replacement.

    Args:
        costs (sequence): per-example cost c_i > 0 (e.g. tokens of prompt + response).
        proxies (sequence, optional): gradient-norm proxies G_i ≥ 0 (e.g. |advantage|, a loss, a
            gradient norm). Default ``None``: G ≡ 1, i.e. p ∝ 1/√c.
        alpha (float): smoothing, p = (1−α)·p* + α/n. Any α > 0 keeps every example reachable,
            which online proxies need (an example with G_i = 0 is otherwise never drawn again).
        num_samples (int, optional): draws per epoch *on each rank*; default ⌈n/world_size⌉.
        replacement (bool): must be ``True``; the importance weights assume i.i.d. draws.
        weights (str): ``"centred"`` (1/(n_supp p_i), E_p[w] = 1) or ``"raw"`` (1/(n p_i)).
        seed (int): base seed. The stream of an epoch is fixed by (seed, epoch, rank).
        generator (torch.Generator, optional): if given, each ``iter()`` draws a fresh base seed
            from it (as ``RandomSampler`` does) instead of using ``seed``.
        rank (int, optional): as in ``DistributedSampler``; default from ``torch.distributed`` when
            it is initialised, else 0. Every rank draws its own independent stream from the same p.
        world_size (int, optional): as in ``DistributedSampler``; default from ``torch.distributed``
            when it is initialised, else 1.
        momentum (float): EMA factor m ∈ [0, 1) for :meth:`update_proxies`:
            G_i ← m·G_i + (1−m)·value. ``0`` replaces.
        yield_weights (bool): yield ``(index, weight)`` pairs instead of plain indices; use with
            :class:`WeightedIndexDataset`.
        chunk_size (int): indices drawn per alias-table call (vectorised). It does not delay
            updates: an update discards the rest of the chunk; it bounds the draws an update wastes.

    Call :meth:`set_epoch` at the start of each epoch (as with ``DistributedSampler``); without it
    every epoch repeats the same stream. :attr:`drawn` and :attr:`drawn_cost` count the indices
    yielded so far (all epochs) and the sum of their costs; with a DataLoader that prefetches they
    include the fetched batches not yet trained on. :meth:`state_dict` taken mid-epoch resumes the
    rest of that epoch's stream exactly (same indices, same weights).

    Example::

        >>> s = CostAwareSampler([1.0, 4.0, 16.0], num_samples=5, seed=0)
        >>> s.probabilities.round(3).tolist()        # ∝ 1/√c
        [0.571, 0.286, 0.143]
        >>> idx = list(s); len(idx)
        5
        >>> s.weights_for(idx).shape                 # the weights of the draws just yielded
        torch.Size([5])
        >>> s.weights_for(idx)                        # already claimed: refused, not re-weighted
        Traceback (most recent call last):
        ...
        ValueError: indices [2 1 0 0 0] are not the next draws of this sampler: none is unclaimed ...
    """

    def __init__(
        self,
        costs: Any,
        proxies: Any | None = None,
        *,
        alpha: float = 0.0,
        num_samples: int | None = None,
        replacement: bool = True,
        weights: dist.WeightMode = "centred",
        seed: int = 0,
        generator: torch.Generator | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        momentum: float = 0.0,
        yield_weights: bool = False,
        chunk_size: int = 4096,
    ) -> None:
        self._costs = positive_vector(_to_numpy(costs), "costs")
        n = self._costs.size
        if proxies is None:
            G = np.ones(n)
        else:
            G = nonnegative_vector(_to_numpy(proxies), "proxies", not_all_zero=True)
            same_length(costs=self._costs, proxies=G)
        self._G = G.copy()
        self.alpha = in_unit_interval(alpha, "alpha")
        if replacement is not True:
            raise ValueError(
                f"replacement should be True (importance weights assume i.i.d. draws), got {replacement!r}"
            )
        self.replacement = True
        if not (isinstance(weights, str) and weights in ("centred", "raw")):
            raise ValueError(f"weights should be 'centred' or 'raw', got {weights!r}")
        self.weight_mode: dist.WeightMode = weights
        self.seed = integer(seed, "seed", minimum=0)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator should be a torch.Generator, got {type(generator).__name__}")
        self.generator = generator
        if world_size is None or rank is None:
            initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
            if world_size is None:
                world_size = torch.distributed.get_world_size() if initialised else 1
            if rank is None:
                rank = torch.distributed.get_rank() if initialised else 0
        self.world_size = integer(world_size, "world_size", minimum=1)
        self.rank = integer(rank, "rank", minimum=0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank should lie in [0, {self.world_size - 1}], got {self.rank}")
        self.num_samples = (
            math.ceil(n / self.world_size) if num_samples is None else integer(num_samples, "num_samples", minimum=1)
        )
        self.momentum = in_interval(momentum, "momentum", 0.0, 1.0, open_high=True)
        self.yield_weights = boolean(yield_weights, "yield_weights")
        self.chunk_size = integer(chunk_size, "chunk_size", minimum=1)
        self.epoch = 0
        self._version = 0  # bumped by every change of G: a chunk drawn under an older one is stale
        self._pass: EpochPass | None = None  # the iteration in progress (or restored by load_state_dict)
        self._started = False  # whether self._pass has yielded since it was set up
        self._unclaimed: list[list[Any]] = []  # [idx, w, start, stop] segments weights_for has not claimed
        self.drawn = 0
        self.drawn_cost = 0.0
        self._refresh()

    # -- distribution ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        p = dist.optimal(self._G, self._costs)
        self._p = dist.smoothed(p, self.alpha) if self.alpha else p
        self._w = dist.importance_weights(self._p, mode=self.weight_mode)
        self._prob, self._alias = build_alias(self._p)
        self._dirty = False

    def _current(self) -> None:
        if self._dirty:
            self._refresh()

    @property
    def probabilities(self) -> np.ndarray:
        """The current sampling distribution p (a copy)."""
        self._current()
        return self._p.copy()

    @property
    def proxies(self) -> np.ndarray:
        """The current gradient-norm proxies G (a copy)."""
        return self._G.copy()

    @property
    def costs(self) -> np.ndarray:
        return self._costs.copy()

    def weights_for(self, indices: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Importance weights of ``indices``, the next draws this sampler yielded, under the p they came from.

        The sampler records the weight of every index it yields. Each call claims the oldest
        unclaimed draws: ``indices`` must equal them, in order (a DataLoader's batches, in the order
        it returns them; its default ``in_order=True`` keeps that order with workers). Anything else
        (indices drawn elsewhere, a batch passed twice or skipped) is a ValueError, never a weight
        from another p. A new ``iter()`` starts a new record.
        """
        idx = index_vector(indices, len(self._costs), "indices")
        k = idx.size
        got_i, got_w, avail = [], [], 0
        for seg_idx, seg_w, start, stop in self._unclaimed:
            take = min(stop - start, k - avail)
            got_i.append(seg_idx[start : start + take])
            got_w.append(seg_w[start : start + take])
            avail += take
            if avail == k:
                break
        expected = np.concatenate(got_i) if got_i else np.empty(0, dtype=np.int64)
        if avail < k or not np.array_equal(expected, idx):
            have = f"expected {show(expected)}" if avail else "none is unclaimed"
            raise ValueError(
                f"indices {show(idx)} are not the next draws of this sampler: {have} (weights_for "
                "claims each yielded draw once, in order; pass every batch's indices in the order the "
                "loader returns them, or use yield_weights=True)"
            )
        while k:  # claim them
            seg = self._unclaimed[0]
            take = min(seg[3] - seg[2], k)
            seg[2] += take
            k -= take
            if seg[2] == seg[3] and (self._pass is None or seg is not self._pass.seg):
                self._unclaimed.pop(0)  # the live chunk's segment stays: it still grows
        return torch.as_tensor(np.concatenate(got_w) if got_w else np.empty(0), dtype=dtype)

    def update_proxies(self, indices: Any, values: Any) -> None:
        """Set G at ``indices`` to ``values`` (or EMA them with ``momentum``); the next index drawn uses it.

        Values are what stands for the gradient norm: per-example losses, |advantages| or gradient
        norms, all ≥ 0. With repeated indices the last occurrence wins. If the update would leave
        every G_i = 0 it is refused with ValueError and nothing changes.
        """
        idx = index_vector(indices, self._G.size, "indices")
        vals = _to_numpy(values)
        vals = nonnegative_vector(np.reshape(vals, -1) if np.ndim(vals) > 1 else vals, "values", allow_empty=True)
        same_length(indices=idx, values=vals)
        if idx.size == 0:
            return
        G = self._G.copy()
        G[idx] = self.momentum * G[idx] + (1.0 - self.momentum) * vals if self.momentum else vals
        if not (G > 0).any():
            raise ValueError("update_proxies would set every proxy to 0: p* would be undefined")
        self._G = G
        self._dirty = True
        self._version += 1

    def update_costs(self, indices: Any, values: Any) -> None:
        """Set c at ``indices`` to ``values`` (> 0, no EMA); the next index drawn uses the new p.

        Costs that change online (a prompt's expected generation + PO tokens, re-estimated each round)
        move p as proxies do. With repeated indices the last occurrence wins.
        """
        idx = index_vector(indices, self._costs.size, "indices")
        vals = _to_numpy(values)
        if idx.size == 0 and np.size(vals) == 0:
            return
        vals = positive_vector(np.reshape(vals, -1), "values")
        same_length(indices=idx, values=vals)
        c = self._costs.copy()
        c[idx] = vals
        self._costs = c
        self._dirty = True
        self._version += 1

    # -- iteration ------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration use the stream of ``epoch`` (same on every rank for a given seed).

        A pass restored by :meth:`load_state_dict` is kept when ``epoch`` is its own epoch."""
        self.epoch = integer(epoch, "epoch", minimum=0)
        if self._pass is not None and not self._started and self._pass.epoch != self.epoch:
            self._pass = None

    def _rng(self) -> np.random.Generator:
        base = self.seed
        if self.generator is not None:
            base = int(torch.randint(0, 2**62, (), generator=self.generator).item())
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([base, self.epoch, self.rank])))

    def _refill(self, run: EpochPass) -> bool:
        """Give ``run`` a fresh chunk drawn from the current p; False when its epoch is done."""
        run.left += run.idx.size - run.pos  # a stale remainder is redrawn, not yielded
        if run.left == 0:
            return False
        self._current()
        m = min(run.left, self.chunk_size)
        run.idx = draw(self._prob, self._alias, m, run.rng, validate=False)  # built here: trusted
        run.w = self._w[run.idx]
        run.pos, run.left, run.version = 0, run.left - m, self._version
        run.seg = [run.idx, run.w, 0, 0]
        self._unclaimed.append(run.seg)
        return True

    def __iter__(self) -> Iterator[Any]:
        # Set up on the first next(), not at iter(): DataLoader creates iterators it never advances.
        if self._pass is None or self._started:
            self._pass = EpochPass(self._rng(), self.epoch, self.num_samples)
            self._unclaimed = []
        run = self._pass
        self._started = True
        if run.pos < run.idx.size:  # the rest of a chunk restored by load_state_dict
            run.seg = [run.idx, run.w, run.pos, run.pos]
            self._unclaimed.append(run.seg)
        chunk = None
        while True:
            if self._pass is not run:
                raise RuntimeError("a newer iteration of this CostAwareSampler has started; this one is stale")
            if run.pos == run.idx.size or run.version != self._version:
                if not self._refill(run):
                    self._pass = None
                    return
            if chunk is not run.idx:  # plain lists: indexing numpy scalars per draw is slower
                chunk = run.idx
                ids, ws, cs = chunk.tolist(), run.w.tolist(), self._costs[chunk].tolist()
            j = run.pos
            assert run.seg is not None  # set with every chunk: by _refill, or above for a restored one
            run.pos = run.seg[3] = j + 1
            self.drawn += 1
            self.drawn_cost += cs[j]  # one addition per draw, in order: a resumed run sums the same
            yield (ids[j], ws[j]) if self.yield_weights else ids[j]

    def __len__(self) -> int:
        return self.num_samples

    # -- resumability ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything the stream depends on: G, c, epoch, seed, counters, and the pass in progress.

        Loading it into a sampler built with the same arguments continues the same stream: the rest
        of the epoch (if saved mid-epoch), then the later epochs. Draws yielded but not yet claimed
        by :meth:`weights_for` are kept too. (A ``generator``'s own state is not saved.)
        """
        state = {"proxies": self._G.copy(), "costs": self._costs.copy(), "epoch": self.epoch, "seed": self.seed}
        state.update(drawn=self.drawn, drawn_cost=self.drawn_cost)
        return save_stream(state, self._pass, self._version, self._unclaimed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; ValueError naming the key if one is missing or bad.

        States of earlier versions (``proxies``, ``epoch``, ``seed`` only) load as "at an epoch start".
        """
        G, epoch, seed, drawn, drawn_cost, run, unclaimed = load_stream(state, self._costs.size)
        costs = self._costs
        if isinstance(state, dict) and "costs" in state:  # states before update_costs keep the built costs
            costs = positive_vector(_to_numpy(state["costs"]), "state['costs']")
            same_length(costs=self._costs, state_costs=costs)
        # every check passed: now change the sampler
        self._costs = costs
        self._G, self.epoch, self.seed, self.drawn, self.drawn_cost = G, epoch, seed, drawn, drawn_cost
        self._dirty = True
        self._version += 1
        if run is not None:
            run.version = self._version  # its remainder was drawn under the G just restored
        self._pass, self._started, self._unclaimed = run, False, unclaimed


class WeightedIndexDataset(Dataset):
    """Wraps a map-style dataset so that a key ``(index, weight)`` returns ``(sample, index, weight)``.

    Pair it with ``CostAwareSampler(..., yield_weights=True)``; the default collate then gives
    ``(batch, indices, weights)`` with ``weights`` a float32 tensor. A plain integer key (any other
    sampler) gets weight 1.
    """

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__getitem__"):
            raise ValueError(f"dataset should be map-style (define __getitem__), got {type(dataset).__name__}")
        self.dataset = dataset

    def __getitem__(self, key: Any) -> tuple[Any, int, torch.Tensor]:
        if isinstance(key, tuple):
            index, weight = key
        else:
            index, weight = key, 1.0
        return self.dataset[index], int(index), torch.tensor(weight, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.dataset)
