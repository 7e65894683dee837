"""A torch ``Sampler`` that draws examples with p_i ∝ G_i/√c_i, for any ``DataLoader``.

Indices are drawn i.i.d. with replacement from p = (1−α)·p* + α·uniform, p*_i ∝ G_i/√c_i, through an
alias table (O(n) build, O(1) per draw). Every drawn example i must have its loss multiplied by its
importance weight w_i (centred: 1/(n_supp p_i), raw: 1/(n p_i)) for the gradient to stay unbiased.
The clean way to carry the weight is to let the sampler yield ``(index, weight)`` pairs and wrap the
dataset in :class:`WeightedIndexDataset`, which returns ``(sample, index, weight)``: the weight then
belongs to the draw even when the proxies change between batches or the data is loaded by workers.

>>> import torch
>>> from torch.utils.data import DataLoader, TensorDataset
>>> x = torch.arange(6.0)
>>> costs = torch.tensor([1.0, 1.0, 4.0, 4.0, 9.0, 9.0])          # e.g. sequence lengths
>>> sampler = CostAwareSampler(costs, num_samples=8, seed=0, yield_weights=True)
>>> loader = DataLoader(WeightedIndexDataset(TensorDataset(x)), batch_size=4, sampler=sampler)
>>> for (xb,), idx, w in loader:
...     per_example_loss = xb**2                               # any per-example loss
...     loss = (w * per_example_loss).mean()                   # unbiased for the uniform mean
...     sampler.update_proxies(idx, per_example_loss.detach().sqrt())   # optional online G
>>> len(sampler)
8
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
    _show,
    boolean,
    in_unit_interval,
    integer,
    nonnegative_vector,
    positive_vector,
    real_scalar,
    same_length,
)
from costaware.alias import build_alias, draw

__all__ = ["CostAwareSampler", "WeightedIndexDataset"]


def _to_numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def _nonneg_int(x: Any, name: str, *, positive: bool = False) -> int:
    return integer(x, name, minimum=1 if positive else 0)


def _indices(indices: Any, n: int) -> np.ndarray:
    """``indices`` as a 1-D int64 array of entries in [0, n); [] (any dtype) is the empty array."""
    if indices is None or isinstance(indices, (str, bytes, dict, set)):
        raise TypeError(f"indices must be an array-like of integers, got {type(indices).__name__}")
    idx = np.asarray(_to_numpy(indices)).reshape(-1)
    if idx.size == 0:
        return np.empty(0, dtype=np.int64)
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"indices must be integers in [0, {n}), got dtype {idx.dtype}: {_show(idx)}")
    if idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"indices must be integers in [0, {n}), got range [{idx.min()}, {idx.max()}]")
    return idx.astype(np.int64, copy=False)


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
        rank, world_size (int, optional): as in ``DistributedSampler``; default from
            ``torch.distributed`` when it is initialised, else 0 and 1. Every rank draws its own
            independent stream from the same p.
        momentum (float): EMA factor m ∈ [0, 1) for :meth:`update_proxies`:
            G_i ← m·G_i + (1−m)·value. ``0`` replaces.
        yield_weights (bool): yield ``(index, weight)`` pairs instead of plain indices; use with
            :class:`WeightedIndexDataset`.
        chunk_size (int): indices drawn per alias-table call. Proxy updates take effect at the
            next chunk (plus whatever the DataLoader has prefetched).

    Call :meth:`set_epoch` at the start of each epoch (as with ``DistributedSampler``); without it
    every epoch repeats the same stream.

    Example::

        >>> s = CostAwareSampler([1.0, 4.0, 16.0], num_samples=5, seed=0)
        >>> s.probabilities.round(3).tolist()        # ∝ 1/√c
        [0.571, 0.286, 0.143]
        >>> idx = list(s); len(idx)
        5
        >>> s.weights_for(idx).shape
        torch.Size([5])
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
        self.seed = _nonneg_int(seed, "seed")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator should be a torch.Generator, got {type(generator).__name__}")
        self.generator = generator
        if world_size is None or rank is None:
            initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
            if world_size is None:
                world_size = torch.distributed.get_world_size() if initialised else 1
            if rank is None:
                rank = torch.distributed.get_rank() if initialised else 0
        self.world_size = _nonneg_int(world_size, "world_size", positive=True)
        self.rank = _nonneg_int(rank, "rank")
        if self.rank >= self.world_size:
            raise ValueError(f"rank should lie in [0, {self.world_size - 1}], got {self.rank}")
        self.num_samples = (
            math.ceil(n / self.world_size)
            if num_samples is None
            else _nonneg_int(num_samples, "num_samples", positive=True)
        )
        m = real_scalar(momentum, "momentum")
        if not 0.0 <= m < 1.0:
            raise ValueError(f"momentum should lie in [0, 1), got {momentum!r}")
        self.momentum = m
        self.yield_weights = boolean(yield_weights, "yield_weights")
        self.chunk_size = _nonneg_int(chunk_size, "chunk_size", positive=True)
        self.epoch = 0
        self._refresh()

    # -- distribution ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        p = (
            dist.smoothed(dist.optimal(self._G, self._costs), self.alpha)
            if self.alpha
            else (dist.optimal(self._G, self._costs))
        )
        self._p = p
        self._w = dist.importance_weights(p, mode=self.weight_mode)
        self._prob, self._alias = build_alias(p)
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
        """Importance weights of ``indices`` under the *current* p.

        Matches the draw only if the proxies did not change since those indices were drawn; when
        they may have, yield the weights with the indices (``yield_weights=True``).
        """
        self._current()
        idx = _indices(indices, len(self._p))
        w = self._w[idx]
        if (w <= 0).any():
            j = int(idx[np.flatnonzero(w <= 0)[0]])
            raise ValueError(f"indices include {j}, which has p = 0 and cannot have been drawn")
        return torch.as_tensor(w, dtype=dtype)

    def update_proxies(self, indices: Any, values: Any) -> None:
        """Set G at ``indices`` to ``values`` (or EMA them with ``momentum``); p follows at the next chunk.

        Values are what stands for the gradient norm: per-example losses, |advantages| or gradient
        norms, all ≥ 0. With repeated indices the last occurrence wins. If the update would leave
        every G_i = 0 it is refused with ValueError and nothing changes.
        """
        idx = _indices(indices, self._G.size)
        vals = _to_numpy(values)
        vals = nonnegative_vector(
            np.reshape(vals, -1) if np.ndim(vals) > 1 else vals, "values", allow_empty=True
        )
        same_length(indices=idx, values=vals)
        G = self._G.copy()
        G[idx] = self.momentum * G[idx] + (1.0 - self.momentum) * vals if self.momentum else vals
        if not (G > 0).any():
            raise ValueError("update_proxies would set every proxy to 0: p* would be undefined")
        self._G = G
        self._dirty = True

    # -- iteration ------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration use the stream of ``epoch`` (same on every rank for a given seed)."""
        self.epoch = _nonneg_int(epoch, "epoch")

    def _rng(self) -> np.random.Generator:
        base = self.seed
        if self.generator is not None:
            base = int(torch.randint(0, 2**62, (), generator=self.generator).item())
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([base, self.epoch, self.rank])))

    def __iter__(self) -> Iterator[Any]:
        rng = self._rng()
        left = self.num_samples
        while left > 0:
            m = min(left, self.chunk_size)
            self._current()
            idx = draw(self._prob, self._alias, m, rng, validate=False)  # built here: trusted
            if self.yield_weights:
                yield from zip(idx.tolist(), self._w[idx].tolist(), strict=True)
            else:
                yield from idx.tolist()
            left -= m

    def __len__(self) -> int:
        return self.num_samples

    # -- resumability ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"proxies": self._G.copy(), "epoch": self.epoch, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        G = nonnegative_vector(state["proxies"], "proxies", not_all_zero=True)
        same_length(costs=self._costs, proxies=G)
        self._G = G.copy()
        self.epoch = _nonneg_int(state["epoch"], "epoch")
        self.seed = _nonneg_int(state["seed"], "seed")
        self._dirty = True


class WeightedIndexDataset(Dataset):
    """Wraps a map-style dataset so that a key ``(index, weight)`` returns ``(sample, index, weight)``.

    Pair it with ``CostAwareSampler(..., yield_weights=True)``; the default collate then gives
    ``(batch, indices, weights)`` with ``weights`` a float32 tensor. A plain integer key (any other
    sampler) gets weight 1.
    """

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__getitem__"):
            raise ValueError(
                f"dataset should be map-style (define __getitem__), got {type(dataset).__name__}"
            )
        self.dataset = dataset

    def __getitem__(self, key: Any) -> tuple[Any, int, torch.Tensor]:
        if isinstance(key, tuple):
            index, weight = key
        else:
            index, weight = key, 1.0
        return self.dataset[index], int(index), torch.tensor(weight, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.dataset)
