"""Measure before building: the predicted variance × cost of prompt samplers on per-prompt logs.

For one round with groups j = 1..B (the round's pool treated as the whole dataset, as the paper's J
does), G_j = the group's Σ|A_i| (from its rewards) and c_j = its generated tokens × generation_cost +
the PO tokens the row method feeds it (every row under ``none``; none for a zero-variance group under
``nonzero``/``p_star``), a prompt sampler q has

    J(q) = (Σ_j G_j²/q_j) · (Σ_j q_j c_j),

and J(q)/J(uniform) < 1 is the predicted saving of drawing prompts from q with weights 1/(B q_j).
The oracle q ∝ G/√c gives the bound (Σ G√c)²/(ΣG²·Σc). Predictors see only earlier rounds:

* ``last_status``: E[G | the prompt's last status], calibrated on earlier rounds;
* ``posterior``: E[Σ|A|] under the decayed Beta posterior (:class:`~costaware.rollouts.state.PromptState`);
* ``prompt_size``: E[G | prompt-token bin], calibrated on earlier rounds;
* each mixed with uniform, q = (1 − α)q̂ + α/B;
* ``two_stage(m)``: uniform q, the rest of a group generated surely where its first m disagree, else
  with ρ_j from :class:`~costaware.rollouts.weighted_prompts.TwoStage`; its J is
  (Σ G_j²/(q_j ρ_j)) · (Σ q_j [gen·(stage-1 tokens) + ρ_j (gen·(stage-2 tokens) + PO_j)]).

Row level: J(p*)/J(uniform on the non-zero rows) = (Σ|A|√c)²/(Σ|A|²·Σc) over the round's rows with
A ≠ 0 (c = prompt + completion tokens), the predicted edge of p* over ``nonzero``. Biased skip rules
get no J; their expected share of generated tokens skipped and of Σ G lost are reported instead.
Overall ratios are Σ_t J_t(q)/Σ_t J_t(uniform) over rounds with some signal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from costaware._checks import check_container, in_open_unit_interval, integer
from costaware._checks import generation_cost as check_generation_cost
from costaware.rollouts.group import TRL_EPS, row_abs_advantages
from costaware.rollouts.logs import PromptRound
from costaware.rollouts.prompts import (
    FLOOR_WHY,
    MAX_PROMPTS,
    REGISTRY,
    CostModel,
    SkipRule,
    TwoStage,
    prompt_method_from_name,
)
from costaware.rollouts.state import PromptState, StateConfig
from costaware.sampling_options import DEFAULT_GENERATION_COST

__all__ = [
    "ROW_METHODS",
    "AnalysisConfig",
    "Ratios",
    "SkipEffect",
    "RolloutAnalysis",
    "analyse",
    "format_table",
    "j_value",
]

ROW_METHODS = {"none": "all", "nonzero": "nonzero", "p_star": "nonzero"}


@dataclass(frozen=True)
class AnalysisConfig:
    generation_cost: float = DEFAULT_GENERATION_COST
    row_method: str = "nonzero"
    alphas: tuple[float, ...] = (0.1, 0.5)
    decay: float = 0.9
    prior_pass_rate: float = 0.5
    prior_strength: float = 2.0
    first: tuple[int, ...] = (1, 2)
    two_stage_floor: float = 0.1
    size_bins: int = 4
    eps: float = TRL_EPS

    def __post_init__(self) -> None:
        check_generation_cost(self.generation_cost)
        if self.row_method not in ROW_METHODS:
            raise ValueError(f"row_method must be one of {tuple(ROW_METHODS)}, got {self.row_method!r}")
        for a in self.alphas:
            in_open_unit_interval(a, "alphas", why=FLOOR_WHY)
        in_open_unit_interval(self.two_stage_floor, "two_stage_floor", why=FLOOR_WHY)
        check_container(self.first, "first", "a tuple of integers >= 1")
        object.__setattr__(self, "first", tuple(integer(m, "first", minimum=1) for m in self.first))
        # the bins split the prompts by size: at most one prompt per bin is all a round can fill
        object.__setattr__(self, "size_bins", integer(self.size_bins, "size_bins", minimum=1, maximum=MAX_PROMPTS))


@dataclass(frozen=True)
class Ratios:
    """J(candidate)/J(uniform) per round (NaN where the round had no signal) and overall."""

    name: str
    kind: str
    per_round: tuple[float, ...]
    overall: float


@dataclass(frozen=True)
class SkipEffect:
    """A biased skip rule's expected share of generated tokens skipped and of Σ G (signal) lost."""

    name: str
    tokens_skipped: tuple[float, ...]
    signal_lost: tuple[float, ...]
    overall_tokens_skipped: float
    overall_signal_lost: float


@dataclass(frozen=True)
class RolloutAnalysis:
    rounds: tuple[int, ...]
    num_prompts: int
    group_size: int
    config: AnalysisConfig
    prompt_level: tuple[Ratios, ...]
    row_level: Ratios
    skips: tuple[SkipEffect, ...]
    zero_variance_share: tuple[float, ...] = field(default=())

    def ratio(self, name: str) -> Ratios:
        for r in (*self.prompt_level, self.row_level):
            if r.name == name:
                return r
        raise KeyError(f"no candidate {name!r}; have {[r.name for r in self.prompt_level]}")


def j_value(g: np.ndarray, c: np.ndarray, q: np.ndarray) -> float:
    """(Σ g²/q)(Σ q c) for q normalised over the entries; +inf if some g > 0 has q = 0 (q ≡ 0 included);
    0 when no entry has signal and q has no mass (nothing to estimate)."""
    total = q.sum()
    if not total > 0:
        return float("inf") if (g > 0).any() else 0.0
    q = q / total
    if ((q <= 0) & (g > 0)).any():
        return float("inf")
    pos = g > 0
    return float((g[pos] ** 2 / q[pos]).sum() * (q * c).sum())


def _mean_by(keys: np.ndarray, sums: np.ndarray, counts: np.ndarray, fallback: float) -> np.ndarray:
    return np.where(counts[keys] > 0, sums[keys] / np.maximum(counts[keys], 1), fallback)


def _rounds(records: list[PromptRound]) -> tuple[list[int], dict[int, list[PromptRound]], int, int]:
    if not records:
        raise ValueError("logs hold no records")
    sizes = Counter(len(r.rewards) for r in records)
    if len(sizes) > 1:
        raise ValueError(f"every group must have the same size; logs hold sizes {dict(sizes)}")
    by: dict[int, list[PromptRound]] = {}
    for r in records:
        by.setdefault(r.round, []).append(r)
    return sorted(by), by, next(iter(sizes)), max(r.prompt_id for r in records) + 1


def row_level_terms(abs_adv: np.ndarray, row_tokens: np.ndarray) -> tuple[float, float]:
    """One round's row-level J terms over its non-zero rows: (Σ|A_i|√c_i)², J(p*) up to a factor, and
    Σ|A_i|²·Σc_i, J(uniform on those rows) up to the same factor ((0, 0): no row has signal)."""
    a_rows, c_rows = abs_adv[abs_adv > 0], row_tokens[abs_adv > 0]
    return ((a_rows * np.sqrt(c_rows)).sum() ** 2, (a_rows**2).sum() * c_rows.sum()) if a_rows.size else (0.0, 0.0)


def _row_ratios(row_j: Sequence[tuple[float, float]]) -> Ratios:
    """J(p*)/J(uniform on the non-zero rows) per round (NaN without signal) and over all rounds (ratio of sums)."""
    rj = np.array(row_j, dtype=np.float64).reshape(-1, 2)
    rok = rj[:, 1] > 0
    return Ratios(
        "p_star_rows",
        "row",
        tuple(np.where(rok, rj[:, 0] / np.where(rok, rj[:, 1], 1.0), np.nan).tolist()),
        float(rj[rok, 0].sum() / rj[rok, 1].sum()) if rok.any() else float("nan"),
    )


def row_level(records: list[PromptRound], eps: float = TRL_EPS) -> Ratios:
    """:func:`analyse`'s ``row_level`` alone (p* against uniform on the non-zero rows, PO tokens as the cost),
    without the prompt-level candidates: the same numbers at a fraction of the time."""
    rounds, by, _, _ = _rounds(list(records))
    terms = []
    for t in rounds:
        recs = by[t]
        R = np.array([r.rewards for r in recs], dtype=np.float64)
        L = np.array([r.completion_lengths for r in recs], dtype=np.float64)
        P = np.array([r.prompt_tokens for r in recs], dtype=np.float64)
        terms.append(row_level_terms(row_abs_advantages(R, eps=eps), P[:, None] + L))
    return _row_ratios(terms)


def analyse(records: list[PromptRound], config: AnalysisConfig | None = None) -> RolloutAnalysis:
    """Predicted J ratios of every candidate, round by round, from per-prompt logs (online)."""
    if config is not None and not isinstance(config, AnalysisConfig):
        raise TypeError(f"config must be an AnalysisConfig or None, got {type(config).__name__}")
    cfg = config or AnalysisConfig()
    check_container(records, "records", "a list of PromptRound")
    records = list(records)
    bad = next((r for r in records if not isinstance(r, PromptRound)), None)
    if bad is not None:
        raise TypeError(
            f"records must hold PromptRound entries (read_prompt_rounds gives them), got {bad!r} ({type(bad).__name__})"
        )
    rounds, by, G, N = _rounds(records)
    cost = CostModel(cfg.generation_cost, ROW_METHODS[cfg.row_method])
    state = PromptState(StateConfig(G, cfg.prior_pass_rate, cfg.prior_strength, cfg.decay, eps=cfg.eps), N)
    two = {m: TwoStage(m, cfg.two_stage_floor, cost.generation_cost, cost.po_rows) for m in cfg.first if m < G}
    # every registered skip rule, fresh, with this analysis's cost model where it takes one
    rules = {
        name: prompt_method_from_name(name, generation_cost=cfg.generation_cost, po_rows=cost.po_rows)
        for name in REGISTRY
    }
    skip_rules = {name: rule for name, rule in rules.items() if isinstance(rule, SkipRule)}
    status_sum, status_n = np.zeros(4), np.zeros(4)
    size_g: list[np.ndarray] = []
    size_p: list[np.ndarray] = []
    names: list[tuple[str, str]] = []
    J: dict[str, list[float]] = {}
    Ju: list[float] = []
    row_j: list[tuple[float, float]] = []
    skip_eff: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in skip_rules}
    zero_share: list[float] = []
    groups_before = 0

    def put(name: str, kind: str, value: float) -> None:
        if name not in J:
            J[name] = []
            names.append((name, kind))
        J[name].append(value)

    for t in rounds:
        recs = by[t]
        ids = np.array([r.prompt_id for r in recs])
        R = np.array([r.rewards for r in recs], dtype=np.float64)
        L = np.array([r.completion_lengths for r in recs], dtype=np.float64)
        P = np.array([r.prompt_tokens for r in recs], dtype=np.float64)
        absA = row_abs_advantages(R, eps=cfg.eps)
        g = absA.sum(axis=1)
        informative = R.max(axis=1) > R.min(axis=1)
        rowtok = P[:, None] + L
        po = rowtok.sum(axis=1) * (1.0 if cost.po_rows == "all" else informative)
        gen = cfg.generation_cost * L.sum(axis=1)
        c = np.maximum(gen + po, 1e-12)
        B = ids.size
        u = np.full(B, 1.0 / B)
        Ju.append(j_value(g, c, u))
        zero_share.append(float(1.0 - informative.mean()))
        put("oracle", "oracle", j_value(g, c, np.sqrt(g**2 / c) + 0.0))
        # history predictors (state holds rounds < t only)
        e = cost.expected(state, t)
        c_hat = e["cost"][ids]
        past = status_sum.sum() / status_n.sum() if status_n.sum() else 1.0
        g_status = _mean_by(state.status[ids], status_sum, status_n, past)
        if size_p:
            sp, sg = np.concatenate(size_p), np.concatenate(size_g)
            edges = np.quantile(sp, np.linspace(0, 1, cfg.size_bins + 1)[1:-1])
            bins_past, bins_now = np.searchsorted(edges, sp), np.searchsorted(edges, P)
            g_size = _mean_by(
                bins_now,
                np.bincount(bins_past, sg, cfg.size_bins),
                np.bincount(bins_past, None, cfg.size_bins).astype(float),
                past,
            )
        else:
            g_size = np.ones(B)
        for name, g_hat in (("last_status", g_status), ("posterior", e["abs_adv_sum"][ids]), ("prompt_size", g_size)):
            qh = np.sqrt(np.maximum(g_hat, 0.0) ** 2 / c_hat)
            qh = qh / qh.sum() if qh.sum() > 0 else u
            put(name, "predictor", j_value(g, c, qh))
            for a in cfg.alphas:
                put(f"{name}+a{a:g}", "mixture", j_value(g, c, (1 - a) * qh + a * u))
        for m, ts in two.items():
            rho = ts.continue_probabilities(state, t, ids, (R[:, :m] >= 0.5).astype(float), L[:, :m])
            pos = g > 0
            var = float((g[pos] ** 2 / (u[pos] * rho[pos])).sum())
            s1 = cfg.generation_cost * L[:, :m].sum(axis=1)
            s2 = cfg.generation_cost * L[:, m:].sum(axis=1) + po
            put(f"two_stage(m={m})", "two_stage", var * float((u * (s1 + rho * s2)).sum()))
        row_j.append(row_level_terms(absA, rowtok))
        # biased skips: expected share of generated tokens skipped and of signal lost
        epoch = groups_before // N
        for name, rule in skip_rules.items():
            keep = rule.keep(state, t)[ids]
            skip_eff[name].append(
                (
                    float(((1 - keep) * L.sum(axis=1)).sum()),
                    float(L.sum()),
                    float(((1 - keep) * g).sum()),
                    float(g.sum()),
                )
            )
            rule.observe(R, epoch)  # the log holds every group; a rule that adapts sees the kept ones
        # now learn from round t
        np.add.at(status_sum, state.status[ids], g)
        np.add.at(status_n, state.status[ids], 1.0)
        size_p.append(P)
        size_g.append(g)
        state.update(ids, np.clip(R, 0, 1), L, t, prompt_tokens=P)
        groups_before += B

    ju = np.array(Ju)
    ok = ju > 0

    def ratios(name: str, kind: str, vals: list[float]) -> Ratios:
        v = np.array(vals)
        per = np.where(ok, v / np.where(ok, ju, 1.0), np.nan)
        return Ratios(name, kind, tuple(per.tolist()), float(v[ok].sum() / ju[ok].sum()) if ok.any() else float("nan"))

    row = _row_ratios(row_j)
    skips = []
    for name, vals in skip_eff.items():
        s = np.array(vals)
        skips.append(
            SkipEffect(
                name,
                tuple((s[:, 0] / np.maximum(s[:, 1], 1e-12)).tolist()),
                tuple(np.where(s[:, 3] > 0, s[:, 2] / np.maximum(s[:, 3], 1e-12), np.nan).tolist()),
                float(s[:, 0].sum() / max(s[:, 1].sum(), 1e-12)),
                float(s[:, 2].sum() / s[:, 3].sum()) if s[:, 3].sum() > 0 else float("nan"),
            )
        )
    return RolloutAnalysis(
        tuple(rounds), N, G, cfg, tuple(ratios(n, k, J[n]) for n, k in names), row, tuple(skips), tuple(zero_share)
    )


def _f(x: float) -> str:
    return "   -  " if np.isnan(x) else "   inf" if np.isinf(x) else f"{x:6.3f}"


def format_table(result: RolloutAnalysis, per_round: bool = False) -> str:
    """Plain-text tables: overall and per-round spread of every ratio; optionally round by round."""
    cfg = result.config
    lines = [
        f"prompt-stage J(q)/J(uniform): {len(result.rounds)} rounds, N={result.num_prompts} prompts, "
        f"G={result.group_size}, generation_cost={cfg.generation_cost:g}, row method {cfg.row_method!r}, "
        f"zero-variance groups {np.mean(result.zero_variance_share):.0%}",
        f"{'candidate':<24}{'overall':>8}{'min':>8}{'median':>8}{'max':>8}",
    ]
    for r in (*result.prompt_level, result.row_level):
        v = np.array(r.per_round)
        v = v[np.isfinite(v)]
        lo, med, hi = (np.min(v), np.median(v), np.max(v)) if v.size else (np.nan,) * 3
        label = r.name if r.kind != "row" else "row level: p* / nonzero"
        lines.append(f"{label:<24}{_f(r.overall):>8}{_f(lo):>8}{_f(med):>8}{_f(hi):>8}")
    lines.append("biased skips (no J): expected share of generated tokens skipped / of Σ|A| lost")
    for s in result.skips:
        lines.append(f"{s.name:<24}{s.overall_tokens_skipped:8.1%}{s.overall_signal_lost:8.1%}")
    if per_round:
        cols = [r for r in result.prompt_level if r.kind != "mixture"] + [result.row_level]
        lines.append("round by round: " + ", ".join(f"[{i}] {r.name}" for i, r in enumerate(cols)))
        lines.append(f"{'round':>6}" + "".join(f"{f'[{i}]':>8}" for i in range(len(cols))))
        for k, t in enumerate(result.rounds):
            lines.append(f"{t:>6}" + "".join(f"{_f(r.per_round[k]):>8}" for r in cols))
    return "\n".join(lines)
