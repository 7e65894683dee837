"""Exact per-row gradient norms on TRL: the proxy-fidelity diagnostics and the ``'calibrated'`` proxy.

Both measure rows of the global pool through :func:`measure_global`, so every process joins the same
collectives and logs the same numbers. Functions of the trainer (a
:class:`~costaware.integrations.trl.trainer.CostAwareGRPOTrainer`), which holds their state in one
:class:`Calibration`, ``trainer.cost_aware_calibration``: the calibrator (None unless the proxy is
``'calibrated'``), the seconds spent on it and the rows a waiting fit has measured.

The ``'calibrated'`` proxy: β fitted on exact per-row gradient norms, identically on every process.

A fit starts every ``cost_aware_calibration_interval`` generation batches and uses
``cost_aware_calibration_rows`` = k rows with A ≠ 0, at most ⌈k/4⌉ (:data:`MIN_GROUPS`) from any one
group, so at least min(4, k) groups. A batch that cannot give them all (a pool of one group of 8
rows gives at most ⌈k/4⌉) gives what it may, and the next batches add theirs until the fit has k
measured rows: β is never fitted on one prompt's rows, nor on fewer rows than asked (with pools of 8 rows
the first fit used to see one group and returned β̂ = 3.97, clipped to 2). β stays at the loss
family's prior until the first fit. Why these minimums:

- k = 16 rows: when each batch gives one group's ⌈16/4⌉ = 4 rows, the fit has 16 − 4 intercepts − 1
  slope = 11 residual degrees of freedom, so its Student-t interval is within 15% of the normal one
  and the shrinkage toward the prior does not trust a small stderr that is small by chance (the
  relative error of an estimated stderr is about 1/√(2·dof));
- ≥ 4 groups: β is a property of the loss over prompts, not of one prompt; a group's rows share its
  prompt (and its reward pattern), so a slope fitted within one group measures that prompt.

Each batch keeps its own intercept (its rows are centred apart), as :class:`BetaCalibrator` does
between fits, so a scale of G that drifts between batches does not bias the slope.

Rows are drawn from the global pool with a seed every process shares and measured through the
trainer's :func:`measure_global` (every process joins the same collectives), so every process fits the
same rows and holds the same β. The pending rows are saved with the calibrator in each checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer

from costaware._io import write_json_atomic
from costaware.grpo.beta import BetaCalibrator, BetaFit, fit_from_stats
from costaware.grpo.diagnostics import per_sequence_grads, proxy_fidelity
from costaware.grpo.proxy import predicted_j_ratios
from costaware.grpo.shard import rank_offsets
from costaware.grpo.step_error import step_errors, step_law
from costaware.integrations.trl.batch import index_rows, trim_padding

__all__ = [
    "CALIBRATOR_FILE",
    "MIN_GROUPS",
    "choose_rows",
    "diagnostics",
    "Calibration",
    "maybe_calibrate",
    "measure_global",
    "oracle_norms",
    "pooled_fit",
    "step_mse",
]

CALIBRATOR_FILE = "cost_aware_calibrator.json"  # beside accounting's STATE_FILE in each checkpoint
MIN_GROUPS = 4
# BetaCalibrator.metrics() key -> logged name: none may read as TRL's own `beta` (the KL coefficient)
_LOGGED = {"beta": "proxy_beta_next", "beta_hat": "proxy_beta_hat", "beta_stderr": "proxy_beta_stderr",
           "beta_low": "proxy_beta_low", "beta_high": "proxy_beta_high", "beta_rows": "proxy_beta_rows"}  # fmt: skip


def choose_rows(
    advantages: torch.Tensor, *, need: int, group_size: int, per_group: int, zero_tol: float, generator: torch.Generator
) -> torch.Tensor:
    """Up to ``need`` global row indices with A ≠ 0, in a random order, at most ``per_group`` per group
    (rows ``g·group_size … (g+1)·group_size − 1``); sorted. The same on every process for the same seed."""
    abs_pool = advantages.abs().double()
    if need <= 0 or not bool((abs_pool > 0).any()):
        return torch.zeros(0, dtype=torch.long)
    signal = torch.nonzero(abs_pool > zero_tol * abs_pool.max()).reshape(-1)
    order = signal[torch.randperm(signal.numel(), generator=generator)]
    taken: dict[int, int] = {}
    keep: list[int] = []
    for i in order.tolist():
        g = i // group_size
        if taken.get(g, 0) < per_group:
            taken[g] = taken.get(g, 0) + 1
            keep.append(i)
            if len(keep) == need:
                break
    return torch.sort(torch.tensor(keep, dtype=torch.long)).values


def pooled_fit(rows: Any, *, level: float = 0.95) -> BetaFit:
    """OLS slope of log(G/|A|) on log c over ``rows`` (batch id, |A|, G, c), one intercept per batch.

    Rows with A = 0, a non-finite or zero G, or c <= 0 are left out (a failed norm is NaN).
    """
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
    use = (arr[:, 1] > 0) & np.isfinite(arr[:, 2]) & (arr[:, 2] > 0) & (arr[:, 3] > 0)
    arr = arr[use]
    sxx = sxy = syy = 0.0
    centred = 0
    for batch_id in np.unique(arr[:, 0]):
        part = arr[arr[:, 0] == batch_id]
        x = np.log(part[:, 3])
        y = np.log(part[:, 2]) - np.log(part[:, 1])
        dx, dy = x - x.mean(), y - y.mean()
        sxx, sxy, syy = sxx + float(dx @ dx), sxy + float(dx @ dy), syy + float(dy @ dy)
        centred += part.shape[0] - 1
    return fit_from_stats(sxx, sxy, syy, float(centred - 1), int(arr.shape[0]), level)


def _single_rows(
    trainer: Any, batch: dict[str, Any], advantages: torch.Tensor, idx: torch.Tensor
) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """Local rows ``idx`` with ``advantages[idx]``: (the rows, their per-row tensors, ``row_loss(model, one
    row)`` the trainer's own loss of one row)."""
    n = batch["advantages"].shape[0]
    rows = trainer._with_ref_logprobs(index_rows(batch, idx, n))  # a deferred reference pass: these rows' own
    rows["advantages"] = advantages[idx].to(rows["advantages"])
    per_row = {key: v for key, v in rows.items() if isinstance(v, torch.Tensor) and v.ndim >= 1}
    scalars = {key: v for key, v in rows.items() if key not in per_row}

    def row_loss(model, one):
        return GRPOTrainer._compute_loss(trainer, model, trim_padding({**one, **scalars}))

    return rows, per_row, row_loss


@contextmanager
def _metrics_kept(trainer: Any) -> Iterator[None]:
    """TRL's metrics as they were before the block: single-row losses must not enter them."""
    saved = {key: list(v) for key, v in trainer._metrics["train"].items()}
    try:
        yield
    finally:
        trainer._metrics["train"].clear()
        trainer._metrics["train"].update(saved)


def measure_rows(
    trainer: Any, batch: dict[str, Any], advantages: torch.Tensor, idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(|A|, exact ‖∇ℓ_i‖, c) of local rows ``idx`` under the trainer's own loss, as float64 CPU.

    TRL's metrics are left as they were (the single-row losses must not enter them).
    """
    rows, per_row, row_loss = _single_rows(trainer, batch, advantages, idx)
    abs_a = rows["advantages"].abs().double().cpu()
    with _metrics_kept(trainer):
        norms = trainer.per_row_grad_norms(trainer.model, row_loss, per_row)
    costs = (rows["prompt_mask"].sum(1) + rows["completion_mask"].sum(1)).clamp(min=1).double().cpu()
    return abs_a, torch.as_tensor(norms).double().cpu(), costs


def measure_global(
    trainer: Any, batch: dict[str, Any], plan: Any, pool: Any, offset: int, chosen: torch.Tensor
) -> torch.Tensor:
    """Rows (1, |A|, G, c, p) of the global pool's rows ``chosen``, gathered from the processes holding them.

    ``chosen`` (global indices) must be the same on every process. Collective-safe: TRL's loss gathers
    its clip metrics on every call, so every process runs as many single-row losses as the busiest one
    (the others repeat a row of their own, whose norm is discarded), then every process joins one
    gather of a fixed-shape table; every process returns the same rows in the same order. p is the
    plan's probability of the row (0 when the plan drew nothing, or with no plan: ``plan`` None, the
    pool's own advantages); G is NaN where a norm failed.
    """
    n = batch["advantages"].shape[0]
    idx = chosen[(chosen >= offset) & (chosen < offset + n)] - offset
    local = (pool.advantages if plan is None else plan.advantages)[offset : offset + n]
    bounds = rank_offsets(pool.rank_sizes)
    busiest = max(int(((chosen >= lo) & (chosen < hi)).sum()) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))
    table = torch.zeros(chosen.numel(), 5, dtype=torch.float64)
    if busiest:
        fill = torch.zeros(busiest - idx.numel(), dtype=idx.dtype)
        abs_a, norms, costs = measure_rows(trainer, batch, local, torch.cat([idx, fill]))
        abs_a, norms, costs = abs_a[: idx.numel()], norms[: idx.numel()], costs[: idx.numel()]
        p = (
            plan.probs[offset + idx].double()
            if plan is not None and plan.probs is not None
            else torch.zeros_like(abs_a)
        )
        if idx.numel():
            table[: idx.numel()] = torch.stack([torch.ones_like(abs_a), abs_a, norms.double(), costs, p], 1)
    rows = trainer.accelerator.gather(table.to(trainer.accelerator.device)).cpu()
    return rows[rows[:, 0] > 0]


def diagnostics(trainer: Any, batch: dict[str, Any], plan: Any, pool: Any, offset: int) -> None:
    """Pearson(|A|, ‖∇ℓ_i‖) and the cost-biased χ² on a random subset of the global pool (paper Fig. 3, G.8).

    The rows are drawn from the global pool with a seed every process shares, and measured through
    :func:`measure_global`, so every process joins the same collectives (a process whose rows all
    have A = 0 included) and logs the same numbers.
    """
    total = plan.advantages.numel()
    k = min(trainer.args.cost_aware_diagnostics_rows, total)
    gen = torch.Generator().manual_seed(int(trainer.args.seed) * 7919 + int(trainer.cost_aware_counters.generations))
    chosen = torch.sort(torch.randperm(total, generator=gen)[:k]).values
    if not bool((plan.advantages[chosen] != 0).any()):  # global knowledge: every process returns here
        return
    rows = measure_global(trainer, batch, plan, pool, offset, chosen)
    abs_a, norms, costs = rows[:, 1], rows[:, 2], rows[:, 3]
    if not bool((norms > 0).any()):
        return
    out = proxy_fidelity(abs_a, norms, costs)
    for key in ("pearson", "chi2", "j_vs_uniform"):
        if math.isfinite(out[key]):
            trainer._metrics["train"][f"cost_aware/{key}"].append(out[key])


def oracle_norms(trainer: Any, batch: dict[str, Any], pool: Any, offset: int) -> torch.Tensor:
    """(N,) float64 exact ‖∇ℓ_i‖ of every row of the global pool with A ≠ 0 (0 elsewhere), for
    ``proxy="oracle"``: one backward per such row, on whichever process holds it, the same on every process.

    The rows with A ≠ 0 are the plan's (|A| above ``zero_tol`` × the pool's largest); the others get no
    probability whatever their norm.
    """
    start = time.perf_counter()
    a = pool.advantages.double().abs()
    out = torch.zeros(a.numel(), dtype=torch.float64)
    if not bool((a > 0).any()):  # every process knows it: none joins the collectives
        return out
    chosen = torch.nonzero(a > trainer.sampling.zero_tol * a.max()).reshape(-1)
    rows = measure_global(trainer, batch, None, pool, offset, chosen)
    norms = rows[:, 2]
    if rows.shape[0] != chosen.numel() or not bool(torch.isfinite(norms).all()):
        raise ValueError(f"proxy='oracle': {int(torch.isfinite(norms).sum())} of {chosen.numel()} rows with A != 0 "
                         "got a finite gradient norm; every one needs it")  # fmt: skip
    out[chosen] = norms
    trainer._metrics["train"]["cost_aware/oracle_seconds"].append(time.perf_counter() - start)
    return out


def step_mse(trainer: Any, batch: dict[str, Any], rnd: Any, offset: int) -> None:
    """Log the round's measured step error against the pool's expected step and J's closed form of it
    (:mod:`costaware.grpo.step_error`), from the exact gradient of every row the round's steps hold.

    One backward per such row with A ≠ 0 (a row with A = 0 has ∇ℓ = 0: the config refuses a KL term here),
    under the trainer's own single-row loss with the plan's advantages, at the round's θ. One process
    (the trainer refuses several). GRPO's split is stock TRL's shuffle: its law, the plan's permutation, is
    measured. Logs ``cost_aware/mse_measured``, ``cost_aware/mse_predicted`` (where a closed form exists),
    ``cost_aware/mse_grad_sq`` (‖ḡ‖²) and ``cost_aware/mse_seconds``.
    """
    start = time.perf_counter()
    plan = rnd.plan
    law = step_law(plan, trainer.sampling, normaliser=trainer.args.cost_aware_normaliser)
    if law is None:
        return
    n = batch["advantages"].shape[0]
    want = law.rows
    want = want[(want >= offset) & (want < offset + n)]
    want = want[plan.advantages[torch.from_numpy(want)].numpy() != 0]
    metrics = trainer._metrics["train"]
    if want.size:
        idx = torch.from_numpy(want - offset)
        _, per_row, row_loss = _single_rows(trainer, batch, plan.advantages[offset : offset + n], idx)
        with _metrics_kept(trainer):
            grads = per_sequence_grads(trainer.model, row_loss, per_row)
            out = step_errors(law, zip(want.tolist(), grads, strict=True))
    else:
        out = step_errors(law, ())
    metrics["cost_aware/mse_measured"].append(out.measured)
    if out.predicted is not None:
        metrics["cost_aware/mse_predicted"].append(out.predicted)
    metrics["cost_aware/mse_grad_sq"].append(out.grad_sq)
    metrics["cost_aware/mse_seconds"].append(time.perf_counter() - start)


@dataclass
class Calibration:
    """The ``'calibrated'`` proxy's state on the trainer, and its checkpoint file (``CALIBRATOR_FILE``).

    calibrator: holds β (None unless the proxy is ``'calibrated'``: then nothing here changes).
    seconds: wall time of the measurements and fits.
    pending: rows (generation, |A|, G, c) measured for the fit under way.
    collecting: a fit has started and waits for rows.
    """

    calibrator: BetaCalibrator | None = None
    seconds: float = 0.0
    pending: list[list[float]] = field(default_factory=list)
    collecting: bool = False

    @classmethod
    def for_run(cls, proxy: str, loss_type: str, interval: int) -> Calibration:
        """The state a run starts with: a calibrator at the loss family's prior for ``proxy='calibrated'``."""
        return cls(BetaCalibrator.for_loss(loss_type, every=interval) if proxy == "calibrated" else None)

    def save(self, folder: str) -> None:
        """``folder/CALIBRATOR_FILE``: the calibrator, its seconds and the fit under way (atomic)."""
        if self.calibrator is None:
            return
        state = {
            "calibrator": self.calibrator.to_dict(),
            "seconds": self.seconds,
            "pending": self.pending,
            "collecting": self.collecting,
        }
        write_json_atomic(os.path.join(folder, CALIBRATOR_FILE), state)

    def load(self, checkpoint: str) -> None:
        """Restore what :meth:`save` wrote (nothing when the checkpoint has no such file)."""
        path = os.path.join(checkpoint, CALIBRATOR_FILE)
        if self.calibrator is None or not os.path.isfile(path):
            return
        with open(path) as handle:
            state = json.load(handle)
        self.calibrator = BetaCalibrator.from_dict(state["calibrator"])
        self.seconds = float(state["seconds"])
        self.pending = [list(map(float, r)) for r in state.get("pending", [])]  # older files: none
        self.collecting = bool(state.get("collecting", False))


def maybe_calibrate(trainer: Any, batch: dict[str, Any], plan: Any, pool: Any, offset: int) -> None:
    """Measure rows of this pool for the fit under way (one starts when due); fit once it has k rows.

    The pool that is measured was planned with the β of earlier fits; the new β serves the next pools.
    """
    state: Calibration = trainer.cost_aware_calibration
    cal = state.calibrator
    generation = int(trainer.cost_aware_counters.generations)
    if cal is None or not (state.collecting or cal.due(generation)):
        return
    state.collecting = True
    start = time.perf_counter()
    k = trainer.args.cost_aware_calibration_rows
    gen = torch.Generator().manual_seed(int(trainer.args.seed) * 7919 + generation + 104_729)
    chosen = choose_rows(plan.advantages, need=k - len(state.pending), group_size=trainer.num_generations,
                         per_group=math.ceil(k / MIN_GROUPS), zero_tol=trainer.sampling.zero_tol,
                         generator=gen)  # fmt: skip
    metrics = trainer._metrics["train"]
    if chosen.numel():  # known to every process alike: all join the collectives or none does
        rows = measure_global(trainer, batch, plan, pool, offset, chosen)  # (1, |A|, G, c, p)
        abs_a, g, c, p = (rows[:, i].numpy() for i in range(1, 5))
        state.pending += [[generation, *r] for r in zip(abs_a.tolist(), g.tolist(), c.tolist(), strict=True)]
        if bool((np.isfinite(g) & (g > 0) & (p > 0)).any()):
            for key, value in predicted_j_ratios(p, g, c).items():
                metrics[f"cost_aware/predicted_{key}"].append(value)
    if len(state.pending) >= k:
        cal.update(pooled_fit(state.pending, level=cal.level))
        state.pending, state.collecting = [], False
        for key, value in cal.metrics().items():
            if math.isfinite(value):
                metrics[f"cost_aware/{_LOGGED[key]}"].append(value)
    seconds = time.perf_counter() - start
    state.seconds += seconds
    metrics["cost_aware/calibration_seconds"].append(seconds)
