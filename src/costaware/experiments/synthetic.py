"""`costaware synthetic`: the paper's Figure 2 (§4.4), uniform vs variance vs optimal sampling.

Least squares, N = 3000 points in d = 50. Rows a_i = L·u_i·dir_i with dir_i uniform on the sphere and
u_i ~ U(0.1, 1), so ‖a_i‖ ∈ [1, 10] = [L/10, L] varies across points; b = A x_true + N(0, 1) noise.
Costs c_i ~ U[1, 1000]. Projection ball ‖x‖ ≤ R = 2‖x*‖, G_i = ‖a_i‖(‖a_i‖R + |b_i|) bounds the
gradients on it, and every strategy runs with its own convex-theory step η_p = R/√(S(p)·T).
Strategies: uniform, variance (p ∝ G), optimal (p ∝ G/√c). 1000 trials, ±1 std bands.
Expected outcome: optimal reaches a given error at the lowest cost; variance is fastest per iteration.

Outputs in --out: figure.png (error vs cumulative cost, error vs iterations), curves.json (every curve
and the config), table.md (mean cost to reach ε per strategy, measured ratios beside the J ratios).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from costaware import distributions as dist
from costaware import theory
from costaware.sgd import LeastSquares, run_trials

PAPER = dict(n=3000, d=50, L=10.0, cost_low=1.0, cost_high=1000.0, trials=1000, steps=100_000)
QUICK = dict(n=500, d=10, L=10.0, cost_low=1.0, cost_high=1000.0, trials=64, steps=20_000)
STRATEGIES = ("uniform", "variance", "optimal")


def make_problem(n: int, d: int, L: float, cost_low: float, cost_high: float, seed: int):
    """The §4.4 instance (see the module docstring); returns (problem, costs)."""
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(n, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    A = L * rng.uniform(0.1, 1.0, n)[:, None] * directions
    x_true = rng.normal(size=d) / np.sqrt(d)
    b = A @ x_true + rng.normal(size=n)
    costs = rng.uniform(cost_low, cost_high, n)
    return LeastSquares(A, b), costs


def run(
    n: int, d: int, L: float, cost_low: float, cost_high: float, trials: int, steps: int, seed: int = 0
) -> dict[str, Any]:
    problem, c = make_problem(n, d, L, cost_low, cost_high, seed)
    G = problem.G
    probs = {"uniform": dist.uniform(n), "variance": dist.variance(G), "optimal": dist.optimal(G, c)}
    curves: dict[str, Any] = {}
    for k, name in enumerate(STRATEGIES):
        start = time.perf_counter()
        res = run_trials(problem, probs[name], steps, trials, "theory", seed=seed * 1000 + k, costs=c)
        curves[name] = {
            "step_size": res.step_size,
            "S": theory.S(probs[name], G),
            "C": theory.C(probs[name], c),
            "J": theory.J(probs[name], G, c),
            "seconds": time.perf_counter() - start,
            "steps": res.checkpoints.tolist(),
            "cost_mean": res.cost.mean(0).tolist(),
            "cost_std": res.cost.std(0).tolist(),
            "error_avg_mean": res.err_avg.mean(0).tolist(),
            "error_avg_std": res.err_avg.std(0).tolist(),
            "error_last_mean": res.err_last.mean(0).tolist(),
            "error_last_std": res.err_last.std(0).tolist(),
        }
    ratios = {
        "optimal/uniform": theory.ratio_optimal_to_uniform(G, c),
        "optimal/variance": theory.ratio_optimal_to_variance(G, c),
        "variance/uniform": theory.ratio_variance_to_uniform(G, c),
    }
    config = dict(
        n=n,
        d=d,
        L=L,
        cost_low=cost_low,
        cost_high=cost_high,
        trials=trials,
        steps=steps,
        seed=seed,
        radius=problem.radius,
        step_rule="theory: R/sqrt(S(p) T)",
    )
    return {"config": config, "closed_form_J_ratios": ratios, "curves": curves}


def cost_to_reach(cost: Any, error: Any, eps: float) -> float:
    """Mean cost where the mean error curve first drops to ε (log-log interpolation); inf if never.

    >>> cost_to_reach([10, 100], [1.0, 0.01], 0.1)
    31.62...
    """
    x, y = np.log(np.asarray(cost, float)), np.log(np.asarray(error, float))
    hit = np.flatnonzero(y <= np.log(eps))
    if hit.size == 0:
        return float("inf")
    j = int(hit[0])
    if j == 0:
        return float(np.exp(x[0]))
    frac = (np.log(eps) - y[j - 1]) / (y[j] - y[j - 1])
    return float(np.exp(x[j - 1] + frac * (x[j] - x[j - 1])))


def cost_table(result: dict[str, Any], num_targets: int = 4) -> list[dict[str, Any]]:
    """For ε log-spaced over errors every strategy reaches: mean cost to reach ε and measured ratios."""
    curves = result["curves"]
    high = 0.5 * min(cv["error_avg_mean"][0] for cv in curves.values())
    low = 1.05 * max(cv["error_avg_mean"][-1] for cv in curves.values())
    rows = []
    for eps in np.geomspace(high, low, num_targets):
        cost = {k: cost_to_reach(cv["cost_mean"], cv["error_avg_mean"], eps) for k, cv in curves.items()}
        rows.append(
            {
                "eps": float(eps),
                **{f"cost_{k}": v for k, v in cost.items()},
                "measured_optimal/uniform": cost["optimal"] / cost["uniform"],
                "measured_optimal/variance": cost["optimal"] / cost["variance"],
            }
        )
    return rows


def markdown_table(result: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    r = result["closed_form_J_ratios"]
    lines = [
        "| ε | cost uniform | cost variance | cost optimal | optimal/uniform measured | J ratio | "
        "optimal/variance measured | J ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['eps']:.3g} | {row['cost_uniform']:.3g} | {row['cost_variance']:.3g} | "
            f"{row['cost_optimal']:.3g} | {row['measured_optimal/uniform']:.3f} | "
            f"{r['optimal/uniform']:.3f} | {row['measured_optimal/variance']:.3f} | "
            f"{r['optimal/variance']:.3f} |"
        )
    cfg = result["config"]
    lines += [
        "",
        f"Mean over {cfg['trials']} trials of f(x̄_t) − f* (averaged iterate); cost = mean cumulative "
        "cost where the mean error curve crosses ε (log-log interpolation between checkpoints). "
        "J ratios: closed forms (Σ G√c)²/(ΣG²·Σc) and (Σ G√c)²/(ΣG·ΣGc) with the bound G.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_c, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, cv in result["curves"].items():
        mean, std = np.asarray(cv["error_avg_mean"]), np.asarray(cv["error_avg_std"])
        lo = np.maximum(mean - std, mean * 1e-2)  # a log axis cannot show ≤ 0
        for ax, x in ((ax_c, np.asarray(cv["cost_mean"])), (ax_t, np.asarray(cv["steps"], float))):
            (line,) = ax.plot(x, mean, label=f"{name} (x̄)")
            ax.fill_between(x, lo, mean + std, color=line.get_color(), alpha=0.2)
            ax.plot(x, cv["error_last_mean"], color=line.get_color(), ls=":", lw=1, label=f"{name} (last)")
    for ax, label in ((ax_c, "cumulative cost"), (ax_t, "iterations")):
        ax.set(xscale="log", yscale="log", xlabel=label, ylabel="f(x) − f*")
        ax.grid(alpha=0.3, which="both")
    ax_t.legend(fontsize=8)
    cfg = result["config"]
    fig.suptitle(
        f"Least squares N={cfg['n']}, d={cfg['d']}, c ~ U[{cfg['cost_low']:g}, {cfg['cost_high']:g}], "
        f"{cfg['trials']} trials (mean ± 1 std)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    cfg = dict(QUICK if args.quick else PAPER)
    for key in ("trials", "steps"):
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                raise ValueError(f"--{key} must be a positive integer, got {value}")
            cfg[key] = value
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"[costaware] synthetic: {cfg}", flush=True)
    start = time.perf_counter()
    result = run(**cfg, seed=args.seed)
    rows = cost_table(result)
    result["cost_table"] = rows
    (out / "curves.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(markdown_table(result, rows))
    plot(result, out / "figure.png")
    print((out / "table.md").read_text())
    print(f"[costaware] {time.perf_counter() - start:.1f} s; wrote {out}/figure.png, curves.json, table.md")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "synthetic",
        help="Reproduce the paper's Figure 2 on least squares.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="runs/synthetic", help="output folder (default: %(default)s)")
    p.add_argument("--trials", type=int, default=None, help=f"independent trials (default {PAPER['trials']})")
    p.add_argument("--steps", type=int, default=None, help=f"SGD steps per trial (default {PAPER['steps']})")
    p.add_argument("--seed", type=int, default=0, help="instance and trial seed (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="a small instance for tests and smoke runs (seconds)")
    p.set_defaults(func=main)
