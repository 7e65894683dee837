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
  Ray actors). The time saving can only follow the token saving where the actor's compute, not verl's
  fixed per-call overhead, is most of ``update_actor``: a micro-batch as large as the mini-batch leaves
  nothing to save (the padding restores every row).

A method the plugin's config refuses is reported with its error line, and the others still run.

    .venv-verl/bin/python benchmarks/bench_verl_e2e.py             # 16 prompts x 8, 2 mini-batches, micro 8
    python benchmarks/bench_verl_e2e.py --gpu --steps 4     # CUDA GPUs, vLLM rollouts (verl[vllm] installed)
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--gpu", action="store_true", help="CUDA GPUs with vLLM rollouts instead of the CPU support")
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args()
    for name in ("steps", "batch", "mini", "micro", "n"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0 or args.warmup >= args.steps:
        raise SystemExit(f"--warmup must be in [0, --steps), got {args.warmup}")
    root = args.out or Path(tempfile.mkdtemp(prefix="bench_verl_e2e_"))
    root.mkdir(parents=True, exist_ok=True)
    build_model(root)
    write_data(root)
    results: dict[str, dict | str] = {}
    for method in ["stock", *args.methods]:
        shape = {"workers": args.workers, "steps": args.steps, "batch": args.batch, "n": args.n, "mini": args.mini}
        defaults = overrides(
            root, **shape, micro=args.micro, trainer_v1=args.trainer == "v1", name=method, gpu=args.gpu
        ) + plugin_overrides(method, args.alpha)
        try:  # --set comes last and wins, the plugin's own keys included
            metrics, _ = launch(root, combine(defaults, list(args.set)), name=method, gpu=args.gpu)
            results[method] = summarise(metrics, args.warmup)
        except RuntimeError as err:
            results[method] = f"refused or failed: {refusal(str(err))}"
        print(f"{method}: done", file=sys.stderr, flush=True)
    stock = results["stock"]
    if not isinstance(stock, dict):
        raise SystemExit(f"stock verl did not run: {stock}")
    print(
        f"verl main_ppo (trainer {args.trainer}{', ' + ' '.join(args.set) if args.set else ''}) on "
        f"{'CUDA (vLLM)' if args.gpu else 'the CPU (HF server)'}, {args.workers} worker(s), "
        f"{args.steps} steps ({args.warmup} warm-up left out), {args.batch} prompts x {args.n} a step, mini-batches of "
        f"{args.mini} prompts, micro-batches of {args.micro} rows; PO s = old_log_prob + ref + update_actor; "
        "tokens = prompt + response, fed = with the zero-factor padding rows"
    )
    print(
        "| method | PO tokens/step | fed tokens/step | PO s/step | update_actor s | gen s | time saved vs stock | "
        "fed tokens saved vs stock | time saved / fed tokens saved | tokens saved (own pools) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    table_rows(results, stock)
    phases(results)


def table_rows(results: dict[str, dict | str], stock: dict) -> None:
    for method, r in results.items():
        if isinstance(r, str):
            print(f"| {method} | {r} |")
            continue
        time_saved, tokens_saved = 1 - r["po_s"] / stock["po_s"], 1 - r["fed"] / stock["fed"]
        ratio = f"{time_saved / tokens_saved:.2f}" if abs(tokens_saved) > 1e-9 else "-"
        print(
            f"| {method} | {r['tokens']:.0f} | {r['fed']:.0f} | {r['po_s']:.3f} | {r['update_s']:.3f} | "
            f"{r['gen_s']:.2f} | "
            f"{time_saved:+.2f} | {tokens_saved:+.2f} | {ratio} | {r['own_saving']:+.2f} |"
        )


def phases(results: dict[str, dict | str]) -> None:
    """Trainer v1's ``cost_aware/timing/*_s`` means: where a plugin run's ``update_actor`` time went."""
    for method, r in results.items():
        if isinstance(r, dict) and r.get("phases"):
            print(
                f"{method} update_actor phases (s/step): "
                + ", ".join(f"{name} {sec:.3f}" for name, sec in r["phases"].items())
            )


if __name__ == "__main__":
    main()
