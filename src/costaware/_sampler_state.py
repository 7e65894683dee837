"""The resumable part of :class:`costaware.sampler.CostAwareSampler`: one epoch's pass, saved and restored.

A state holds G, epoch, seed, the counters, the pass in progress (its PCG64 state, the draws it still
owes and the rest of the chunk being yielded, drawn under the saved G) and the yielded draws that
``weights_for`` has not claimed, so a restored sampler continues the exact stream.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from costaware._checks import (
    index_vector,
    integer,
    nonnegative_vector,
    real_scalar,
    same_length,
)

__all__ = ["load_stream", "save_stream", "EpochPass"]


class EpochPass:
    """One epoch's iteration: its generator, the draws it still owes, and the chunk being yielded."""

    __slots__ = ("rng", "epoch", "left", "idx", "w", "pos", "version", "seg")

    def __init__(self, rng: np.random.Generator, epoch: int, left: int) -> None:
        self.rng, self.epoch, self.left = rng, epoch, left  # left: draws not yet taken from rng
        self.idx, self.w, self.pos = np.empty(0, dtype=np.int64), np.empty(0), 0
        self.version = -1  # the G version the chunk was drawn under
        self.seg: list[Any] | None = None  # the chunk's entry in the sampler's unclaimed record


def _segments(segs: list[list[Any]]) -> dict[str, np.ndarray]:
    parts = [(s[0][s[2] : s[3]], s[1][s[2] : s[3]]) for s in segs]
    return {
        "idx": np.concatenate([a for a, _ in parts]) if parts else np.empty(0, dtype=np.int64),
        "w": np.concatenate([b for _, b in parts]) if parts else np.empty(0),
    }


def save_stream(
    state: dict[str, Any], run: EpochPass | None, version: int, unclaimed: list[list[Any]]
) -> dict[str, Any]:
    """``state`` plus the pass ``run`` (None: at an epoch start) and the ``unclaimed`` draws."""
    state["pass"] = None
    if run is not None:
        fresh = run.version == version  # a stale remainder would be redrawn: save it as not drawn
        rest = slice(run.pos, None) if fresh else slice(0, 0)
        state["pass"] = {
            "epoch": run.epoch,
            "rng": copy.deepcopy(run.rng.bit_generator.state),
            "left": run.left + (0 if fresh else run.idx.size - run.pos),
            "idx": run.idx[rest].copy(),
            "w": run.w[rest].copy(),
        }
    state["unclaimed"] = _segments(unclaimed)
    return state


def _key(d: Any, key: str, where: str) -> Any:
    if not isinstance(d, dict):
        raise TypeError(f"{where} must be a dict from state_dict(), got {type(d).__name__}")
    if key not in d:
        raise ValueError(f"{where} is missing the key {key!r} (it has {sorted(map(str, d))})")
    return d[key]


def load_stream(state: Any, n: int) -> tuple[np.ndarray, int, int, int, float, EpochPass | None, list[list[Any]]]:
    """Checked ``(G, epoch, seed, drawn, drawn_cost, pass, unclaimed)`` of a state for n examples.

    Earlier states (``proxies``, ``epoch``, ``seed`` only) load as "at an epoch start"."""
    G = nonnegative_vector(_key(state, "proxies", "state"), "proxies", not_all_zero=True)
    same_length(costs=np.empty(n), proxies=G)
    epoch = integer(_key(state, "epoch", "state"), "epoch", minimum=0)
    seed = integer(_key(state, "seed", "state"), "seed", minimum=0)
    drawn = integer(state.get("drawn", 0), "drawn", minimum=0)
    drawn_cost = real_scalar(state.get("drawn_cost", 0.0), "drawn_cost")
    run = None
    if state.get("pass") is not None:
        saved, where = state["pass"], "state['pass']"
        rng = np.random.Generator(np.random.PCG64())
        try:
            rng.bit_generator.state = copy.deepcopy(_key(saved, "rng", where))
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"{where}['rng'] is not a PCG64 state: {exc}") from None
        run = EpochPass(rng, integer(_key(saved, "epoch", where), f"{where}['epoch']", minimum=0),
                    integer(_key(saved, "left", where), f"{where}['left']", minimum=0))  # fmt: skip
        run.idx = index_vector(_key(saved, "idx", where), n, f"{where}['idx']").copy()
        run.w = nonnegative_vector(_key(saved, "w", where), f"{where}['w']", allow_empty=True)
        same_length(**{f"{where}['idx']": run.idx, f"{where}['w']": run.w})
    u = state.get("unclaimed") or {"idx": [], "w": []}
    u_idx = index_vector(_key(u, "idx", "state['unclaimed']"), n, "state['unclaimed']['idx']").copy()
    u_w = nonnegative_vector(_key(u, "w", "state['unclaimed']"), "state['unclaimed']['w']", allow_empty=True)
    same_length(**{"state['unclaimed']['idx']": u_idx, "state['unclaimed']['w']": u_w})
    return (
        G.copy(),
        epoch,
        seed,
        drawn,
        drawn_cost,
        run,
        ([[u_idx, u_w, 0, u_idx.size]] if u_idx.size else []),
    )
