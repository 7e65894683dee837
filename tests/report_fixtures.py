"""Synthetic run records for the report tests: saturating curves with known effects per round and per token."""

from __future__ import annotations

import zlib

import numpy as np

from costaware.records import EvalPoint, ProxyFidelityPoint, RunId, RunResult

LR = 1e-4


def make_runs(method: str, *, seeds=range(5), weights: str = "centred", po_per_round: float = 5000.0,
              gen_per_round: float = 4000.0, scale: float = 10.0, start: float = 0.3, peak: float = 0.6,
              budget: float = 300_000.0, n_evals: int = 13, noise: float = 0.004, lr: float = LR,
              val_shift: float = 0.0, task: str = "arith", setting: str = "grpo", group: str = "headline",
              linear: bool = False, controlled: bool = False, alpha: float = 0.01, proxy_noise: float = 0.0,
              fidelity: bool = False, salt: int = 0, proxy: str = "auto") -> list[RunResult]:
    """One arm's runs. Accuracy is a function of generation rounds: start + (peak − start)(1 − e^{−r/scale})
    (``linear``: a straight rise that never flattens); evaluations at equal PO-token spacing, as `reproduce`."""
    out = []
    for s in seeds:
        rng = np.random.default_rng(1000 * s + salt + zlib.crc32(f'{method}{weights}{proxy if proxy != "auto" else ""}'.encode()) % 997)
        tokens = np.linspace(0, budget, n_evals)
        rounds = np.floor(tokens / po_per_round).astype(int)
        progress = rounds / scale
        curve = start + (peak - start) * (np.minimum(progress / 6, 1.0) if linear else 1 - np.exp(-progress))
        acc = np.clip(curve + rng.normal(0, noise, n_evals), 0, 1)
        val = np.clip(curve + val_shift + rng.normal(0, noise, n_evals), 0, 1)
        evals = tuple(EvalPoint(rounds=int(r), po_tokens=int(t), generated_tokens=int(r * gen_per_round),
                                heldout_accuracy=float(a), validation_accuracy=float(v), step=int(2 * r),
                                po_seconds=float(t / 1e4), po_tokens_plain=int(t * 5000 / po_per_round),
                                po_tokens_nonzero=int(t * 0.6 * 5000 / po_per_round))
                      for r, t, a, v in zip(rounds, tokens, acc, val, strict=True))
        fid = (ProxyFidelityPoint(step=4, po_tokens=20_000, pearson=0.6, chi2=0.3, j_vs_uniform=0.7),) if fidelity else ()
        rid = RunId(task=task, method=method, seed=s, learning_rate=lr, loss_type="grpo", weights=weights,
                    setting=setting, group=group, alpha=alpha, proxy_noise=proxy_noise, proxy=proxy)
        out.append(RunResult(rid, evals, po_seconds_controlled=controlled, wall_seconds=10.0, fidelity=fid,
                             spec={"method": method, "seed": s}))
    return out


def headline(*, pstar_scale: float = 10.0, base_scale: float = 10.0, base_linear: bool = False, **kw) -> list[RunResult]:
    """GRPO, nonzero, p* (centred and raw), PODS: the cost-aware arms feed 0.6 of GRPO's tokens per round.

    nonzero gets the same per-round effect as GRPO at 0.75 of its tokens; p*'s per-round effect is set
    by ``pstar_scale`` (10: same as GRPO, so it saves 40% of the PO tokens and nothing per round).
    """
    runs = make_runs("none", scale=base_scale, linear=base_linear, **kw)
    runs += make_runs("nonzero", po_per_round=3750, scale=base_scale, linear=base_linear, **kw)
    runs += make_runs("p_star", po_per_round=3000, scale=pstar_scale, linear=base_linear, **kw)
    runs += make_runs("p_star", weights="raw", po_per_round=3000, scale=pstar_scale, linear=base_linear, **kw)
    runs += make_runs("pods", po_per_round=3100, scale=1.5 * base_scale, linear=base_linear, **kw)
    return runs
