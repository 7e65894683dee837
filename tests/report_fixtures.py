"""Synthetic run records for the report tests: saturating curves with known effects per round and per token."""

from __future__ import annotations

import zlib

import numpy as np

from costaware.experiments.records import EvalPoint, ProxyFidelityPoint, RunId, RunResult

LR = 1e-4


def make_runs(
    method: str,
    *,
    seeds=range(5),
    weights: str = "centred",
    po_per_round: float = 5000.0,
    gen_per_round: float = 4000.0,
    scale: float = 10.0,
    start: float = 0.3,
    peak: float = 0.6,
    budget: float = 300_000.0,
    n_evals: int = 13,
    noise: float = 0.004,
    lr: float = LR,
    val_shift: float = 0.0,
    task: str = "arith",
    setting: str = "grpo",
    group: str = "headline",
    linear: bool = False,
    controlled: bool = False,
    alpha: float = 0.01,
    proxy_noise: float = 0.0,
    fidelity: bool = False,
    salt: int = 0,
    proxy: str = "auto",
    rollout: str = "all",
    counters: dict[str, float] | None = None,
) -> list[RunResult]:
    """One arm's runs. Accuracy is a function of generation rounds: start + (peak − start)(1 − e^{−r/scale})
    (``linear``: a straight rise that never flattens); evaluations at equal PO-token spacing, as `reproduce`."""
    out = []
    for s in seeds:
        tag = f"{method}{weights}{proxy if proxy != 'auto' else ''}{rollout if rollout != 'all' else ''}"
        rng = np.random.default_rng(1000 * s + salt + zlib.crc32(tag.encode()) % 997)
        tokens = np.linspace(0, budget, n_evals)
        rounds = np.floor(tokens / po_per_round).astype(int)
        progress = rounds / scale
        curve = start + (peak - start) * (np.minimum(progress / 6, 1.0) if linear else 1 - np.exp(-progress))
        acc = np.clip(curve + rng.normal(0, noise, n_evals), 0, 1)
        val = np.clip(curve + val_shift + rng.normal(0, noise, n_evals), 0, 1)
        evals = tuple(
            EvalPoint(
                rounds=int(r),
                po_tokens=int(t),
                generated_tokens=int(r * gen_per_round),
                heldout_accuracy=float(a),
                validation_accuracy=float(v),
                step=int(2 * r),
                po_seconds=float(t / 1e4),
                po_tokens_plain=int(t * 5000 / po_per_round),
                po_tokens_nonzero=int(t * 0.6 * 5000 / po_per_round),
            )
            for r, t, a, v in zip(rounds, tokens, acc, val, strict=True)
        )
        fid = (
            (ProxyFidelityPoint(step=4, po_tokens=20_000, pearson=0.6, chi2=0.3, j_vs_uniform=0.7),) if fidelity else ()
        )
        rid = RunId(
            task=task,
            method=method,
            seed=s,
            learning_rate=lr,
            loss_type="grpo",
            weights=weights,
            setting=setting,
            group=group,
            alpha=alpha,
            proxy_noise=proxy_noise,
            proxy=proxy,
            rollout=rollout,
        )
        out.append(
            RunResult(
                rid,
                evals,
                po_seconds_controlled=controlled,
                wall_seconds=10.0,
                fidelity=fid,
                spec={"method": method, "seed": s},
                counters=dict(counters or {}),
            )
        )
    return out


def headline(
    *, pstar_scale: float = 10.0, base_scale: float = 10.0, base_linear: bool = False, **kw
) -> list[RunResult]:
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


ROLLOUT_SETTING = "grpo-512-prompts"
# (method, rollout) -> (PO tokens, generated tokens) per round. Every arm has the same accuracy per round, so
# each saving to the target, on every axis, is 1 − (its cost per round)/(the other's): with generation_cost 1/3,
# GRPO's total cost a round is 5000 + 4000/3 = 6333; nonzero 4333 (−32%), GRESO 6000 (−5%), DAPO 5000 (−21%).
ROLLOUT_COSTS = {
    ("none", "all"): (5000, 4000),
    ("nonzero", "all"): (3000, 4000),
    ("none", "greso"): (5000, 3000),
    ("none", "dapo"): (3000, 6000),
    ("p_star", "cost_aware_skip"): (1500, 2500),
}  # the skip: 2333, −63%


def rollout_runs(
    costs: dict[tuple[str, str], tuple[float, float]] | None = None, *, seeds=range(5), **kw
) -> list[RunResult]:
    """A prompt-stage section: one arm per ``costs`` entry (over :data:`ROLLOUT_COSTS`; ``None`` drops an arm).

    The skips record prompts examined and drawn (a third skipped); every curve is smooth (61 evaluations,
    little noise), so the savings are the cost ratios above to about a percent.
    """
    costs = {**ROLLOUT_COSTS, **(costs or {})}
    out = []
    for (method, rollout), c in costs.items():
        if c is None:
            continue
        counters = (
            {"prompts_examined": 600.0, "prompts_drawn": 400.0}
            if rollout in ("greso", "cost_aware_skip", "cost_aware")
            else {}
        )
        out += make_runs(
            method,
            rollout=rollout,
            po_per_round=c[0],
            gen_per_round=c[1],
            setting=ROLLOUT_SETTING,
            group="rollout",
            seeds=seeds,
            counters=counters,
            **{"n_evals": 61, "noise": 0.002, **kw},
        )
    return out


def hand_logs(runs: list[RunResult], folder) -> dict:
    """Tiny per-prompt logs, one per run: 4 rounds of 4 prompts, G = 4, k = (round + prompt + seed) mod 4
    correct answers in a group (k = 0: all wrong, zero variance), completion lengths 3-5, prompts of 5-8 tokens."""
    from pathlib import Path

    from costaware.rollouts.logs import PromptRound, write_prompt_rounds

    out = {}
    for r in runs:
        recs = [
            PromptRound(
                t,
                j,
                tuple(1.0 if i < (t + j + r.id.seed) % 4 else 0.0 for i in range(4)),
                tuple(3 + (i + j) % 3 for i in range(4)),
                prompt_tokens=5 + j,
            )
            for t in range(4)
            for j in range(4)
        ]
        path = Path(folder) / f"{r.id.setting}-{r.id.arm.key.replace(':', '_')}-s{r.id.seed}.prompts.jsonl"
        write_prompt_rounds(path, recs, append=False)
        out[r.id] = path
    return out
