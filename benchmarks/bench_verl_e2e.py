"""PO tokens and seconds per step on verl's own trainer loop (main_ppo under Ray on the CPU), per method.

Runs stock verl and each ``--methods`` entry (default ``nonzero p_star``) for ``--steps`` steps with the
same seed, the tiny ``sort`` policy and the CPU support of ``costaware.integrations.verl.cpu``, in the verl
environment (``.venv-verl``; ``bash scripts/setup.sh --engine verl``). Everything printed comes from the metrics verl's
own ``file`` logger wrote:

- PO seconds per step: ``timing_s/old_log_prob`` + ``timing_s/ref`` (when a ref model runs) +
  ``timing_s/update_actor``; ``timing_s/gen`` beside it;
- PO tokens per step: ``cost_aware/step/tokens`` for a plugin run, and ``fed`` with the zero-factor
  padding rows (``cost_aware/step/tokens_padding``) that keep every mini-batch a multiple of
  dp × ``ppo_micro_batch_size_per_gpu``: the tokens the workers compute on. For stock, verl's
  ``perf/total_num_tokens``;
- saved: 1 − method/stock for time and for fed tokens (stock run in the same invocation), and the
  plugin's own ``1 − tokens/tokens_plain`` (every row once, on the same pools);
- means over the steps after ``--warmup`` (default 1: the first step compiles numba kernels and starts
  Ray actors); with ``--repeats R`` the arms run R times in turn (stock, then each method, R rounds), and
  the table gives medians over the rounds, the ratio taken per round against that round's stock. The time
  saving can only follow the token saving where the actor's compute, not verl's
  fixed per-call overhead, is most of ``update_actor``: a micro-batch as large as the mini-batch leaves
  nothing to save (the padding restores every row).

A method the plugin's config refuses is reported with its error line, and the others still run.

    .venv-verl/bin/python benchmarks/bench_verl_e2e.py             # 16 prompts x 8, 2 mini-batches, micro 8
    .venv-verl/bin/python benchmarks/bench_verl_e2e.py --hidden 256 --layers 4 --repeats 3   # a 16x larger policy
    python benchmarks/bench_verl_e2e.py --gpu --steps 4     # CUDA GPUs, vLLM rollouts (verl[vllm] installed)
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from costaware.integrations.verl.cpu.fixture import build_model, write_data
from costaware.integrations.verl.cpu.run import combine, launch, overrides, plugin_overrides

PO_KEYS = ("timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor")


def summarise(metrics: list[dict], warmup: int) -> dict[str, Any]:
    """Means per step over the steps after the first ``warmup`` (their numba kernels and Ray actors are
    compiled and started there). Tokens are prompt + response tokens; ``fed`` adds the zero-factor padding
    rows a plugin run feeds so that every mini-batch meets verl's fixed micro-batch size."""
    metrics = metrics[warmup:]
    if not metrics:
        raise SystemExit(f"no step after the {warmup} warm-up step(s): raise --steps")
    mean = lambda key: float(np.mean([m.get(key, 0.0) for m in metrics]))  # noqa: E731
    po_s = float(np.mean([sum(m.get(k, 0.0) for k in PO_KEYS) for m in metrics]))
    plugin = "cost_aware/step/tokens" in metrics[0]
    tokens = mean("cost_aware/step/tokens") if plugin else mean("perf/total_num_tokens")
    return {
        "steps": len(metrics),
        "gen_s": mean("timing_s/gen"),
        "po_s": po_s,
        "update_s": mean("timing_s/update_actor"),
        "tokens": tokens,
        "fed": tokens + (mean("cost_aware/step/tokens_padding") if plugin else 0.0),
        "own_saving": 1 - mean("cost_aware/step/tokens") / mean("cost_aware/step/tokens_plain") if plugin else 0.0,
        "timing": {key: mean(key) for key in PO_KEYS},
        "phases": {
            key.removeprefix("cost_aware/timing/").removesuffix("_s"): mean(key)
            for key in metrics[0]
            if key.startswith("cost_aware/timing/")
        },
    }


def refusal(log: str) -> str:
    found = re.findall(r"(ValueError: .*)", log)
    return found[-1] if found else log.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="first steps left out of the means (JIT, Ray start)")
    parser.add_argument("--batch", type=int, default=16, help="prompts a step (data.train_batch_size)")
    parser.add_argument("--mini", type=int, default=8, help="prompts a PPO mini-batch (ppo_mini_batch_size)")
    parser.add_argument(
        "--micro", type=int, default=8, help="rows a micro-batch and worker (ppo_micro_batch_size_per_gpu)"
    )
    parser.add_argument("-n", type=int, default=8, help="responses a prompt (rollout.n)")
    parser.add_argument("--trainer", choices=["v1", "v0"], default="v1", help="verl's trainer (v1 is its default)")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="more main_ppo overrides, for every arm alike"
    )
    parser.add_argument("--methods", nargs="+", default=["nonzero", "p_star"])
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64, help="the policy's hidden size (a multiple of 4 heads)")
    parser.add_argument("--layers", type=int, default=2, help="the policy's decoder layers")
    parser.add_argument("--sft-steps", type=int, default=300, help="SFT warm-up steps of the policy on sort")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every arm in turn; medians over them")
    parser.add_argument("--gpu", action="store_true", help="CUDA GPUs with vLLM rollouts instead of the CPU support")
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args()
    for name in ("steps", "batch", "mini", "micro", "n", "hidden", "layers", "repeats", "sft_steps"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0 or args.warmup >= args.steps:
        raise SystemExit(f"--warmup must be in [0, --steps), got {args.warmup}")
    root = args.out or Path(tempfile.mkdtemp(prefix="bench_verl_e2e_"))
    root.mkdir(parents=True, exist_ok=True)
    if args.hidden % 4:
        raise SystemExit(f"--hidden must be a multiple of 4 (the policy's attention heads), got {args.hidden}")
    build_model(root, hidden_size=args.hidden, num_layers=args.layers, sft_steps=args.sft_steps)
    write_data(root)
    rounds: list[dict[str, dict | str]] = []
    for rep in range(args.repeats):
        results: dict[str, dict | str] = {}
        for method in ["stock", *args.methods]:
            name = method if args.repeats == 1 else f"{method}.r{rep}"
            shape = {"workers": args.workers, "steps": args.steps, "batch": args.batch, "n": args.n, "mini": args.mini}
            defaults = overrides(
                root, **shape, micro=args.micro, trainer_v1=args.trainer == "v1", name=name, gpu=args.gpu
            ) + plugin_overrides(method, args.alpha)
            try:  # --set comes last and wins, the plugin's own keys included
                metrics, _ = launch(root, combine(defaults, list(args.set)), name=name, gpu=args.gpu)
                results[method] = summarise(metrics, args.warmup)
            except RuntimeError as err:
                results[method] = f"refused or failed: {refusal(str(err))}"
            print(f"{name}: done", file=sys.stderr, flush=True)
        if not isinstance(results["stock"], dict):
            raise SystemExit(f"stock verl did not run: {results['stock']}")
        rounds.append(results)
    print(
        f"verl main_ppo (trainer {args.trainer}{', ' + ' '.join(args.set) if args.set else ''}) on "
        f"{'CUDA (vLLM)' if args.gpu else 'the CPU (HF server)'}, {args.workers} worker(s), policy hidden "
        f"{args.hidden} x {args.layers} layers ({args.sft_steps} SFT steps), {args.steps} steps ({args.warmup} "
        f"warm-up left out), {args.batch} prompts x {args.n} a step, mini-batches of {args.mini} prompts, "
        f"micro-batches of {args.micro} rows; "
        "PO s = old_log_prob + ref + update_actor; tokens = prompt + response, fed = with the zero-factor padding rows"
        + (f"; medians over {args.repeats} alternating rounds" if args.repeats > 1 else "")
    )
    print(
        "| method | PO tokens/step | fed tokens/step | PO s/step | update_actor s | gen s | time saved vs stock | "
        "fed tokens saved vs stock | time saved / fed tokens saved | tokens saved (own pools) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    table_rows(rounds)
    if len(rounds) > 1:
        per_round(rounds)
    phases(rounds)


def saved(r: dict, stock: dict) -> tuple[float, float, float]:
    """(time saved, fed tokens saved, their ratio) of arm ``r`` against ``stock`` of the same round."""
    time_saved, tokens_saved = 1 - r["po_s"] / stock["po_s"], 1 - r["fed"] / stock["fed"]
    return time_saved, tokens_saved, time_saved / tokens_saved if abs(tokens_saved) > 1e-9 else float("nan")


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def table_rows(rounds: list[dict[str, dict | str]]) -> None:
    """One row per arm: medians over the rounds it ran in (a round's ratios against that round's stock)."""
    for method in rounds[0]:
        ran = [(r[method], r["stock"]) for r in rounds if isinstance(r[method], dict)]
        if not ran:
            print(f"| {method} | {rounds[0][method]} |")
            continue
        med = functools.partial(_median, [r for r, _ in ran])
        time_saved, tokens_saved, ratio = (
            float(np.nanmedian(column)) if not np.isnan(column).all() else float("nan")
            for column in zip(*(saved(r, s) for r, s in ran), strict=True)
        )
        note = "" if len(ran) == len(rounds) else f" ({len(ran)} of {len(rounds)} rounds ran)"
        print(
            f"| {method}{note} | {med('tokens'):.0f} | {med('fed'):.0f} | {med('po_s'):.3f} | {med('update_s'):.3f} | "
            f"{med('gen_s'):.2f} | {time_saved:+.2f} | {tokens_saved:+.2f} | "
            f"{'-' if np.isnan(ratio) else f'{ratio:.2f}'} | {med('own_saving'):+.2f} |"
        )


def per_round(rounds: list[dict[str, dict | str]]) -> None:
    """Per arm, each round's (time saved, fed tokens saved) against that round's stock: the spread the
    medians hide."""
    for method in list(rounds[0])[1:]:
        pairs = [saved(r[method], r["stock"])[:2] for r in rounds if isinstance(r[method], dict)]
        print(
            f"{method} per round (time saved / fed tokens saved): " + ", ".join(f"{t:+.2f}/{k:+.2f}" for t, k in pairs)
        )


def phases(rounds: list[dict[str, dict | str]]) -> None:
    """Per arm, medians over the rounds of verl's PO timings and the plugin's ``cost_aware/timing/*_s`` (where a
    plugin run's ``update_actor`` time went)."""
    for method in rounds[0]:
        ran = [r[method] for r in rounds if isinstance(r[method], dict)]
        if not ran:
            continue
        names = list(dict.fromkeys(k for r in ran for k in r["phases"]))
        cells = {key.removeprefix("timing_s/"): [r["timing"][key] for r in ran] for key in PO_KEYS}
        cells |= {name: [r["phases"].get(name, 0.0) for r in ran] for name in names}
        print(f"{method} s/step: " + ", ".join(f"{name} {np.median(v):.3f}" for name, v in cells.items()))


if __name__ == "__main__":
    main()
