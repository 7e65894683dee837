"""``costaware rollouts``: measure prompt samplers on per-prompt logs before building them.

    costaware rollouts analyse LOGS... [--generation-cost 0.333] [--row-method nonzero] [--per-round]
    costaware rollouts simulate OUT.jsonl [--prompts 512] [--rounds 60] [--seed 0]

``analyse`` reads JSON Lines of :class:`costaware.rollouts.logs.PromptRound` records and prints, for
every candidate prompt sampler, the predicted J(q)/J(uniform) overall and per round, against the
oracle q ∝ G/√c, with the row-level J(p*)/J(uniform on the non-zero rows). ``simulate`` writes a
synthetic log (drifting pass rates) to try it on.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from costaware.sampling_options import DEFAULT_GENERATION_COST

__all__ = ["register", "READING"]

READING = (
    "How to read it: J = cost x variance of the gradient estimate, predicted from earlier rounds only; "
    "a ratio below 1 predicts a cheaper run than uniform prompts to the same accuracy (0.8: about 20% "
    "less total cost), above 1 a dearer one. "
    "'oracle' is the best any q could do with the true G and c; the biased skips have no J, only the "
    "share of tokens they skip and of signal they lose."
)


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _analyse(args: argparse.Namespace) -> int:
    from costaware._checks import writable_file
    from costaware.rollouts.analysis import AnalysisConfig, analyse, format_table
    from costaware.rollouts.logs import read_prompt_rounds

    if args.json:  # a destination that cannot be written fails now, not after the analysis
        writable_file(args.json, "--json")
    cfg = AnalysisConfig(
        generation_cost=args.generation_cost,
        row_method=args.row_method,
        alphas=args.alphas,
        decay=args.decay,
        first=args.first,
        two_stage_floor=args.floor,
    )
    per_file = [read_prompt_rounds([path]) for path in args.logs]
    records = [r for recs in per_file for r in recs]
    counts = ", ".join(f"{path}: {len(recs)}" for path, recs in zip(args.logs, per_file, strict=True))
    print(
        f"[costaware] read {len(records)} group records from {len(args.logs)} log(s) ({counts}), pooled "
        f"into {len({r.round for r in records})} rounds"
    )
    result = analyse(records, cfg)
    print(format_table(result, per_round=args.per_round))
    print(READING)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(asdict(result), fh, indent=1, default=float)
        print(f"[costaware] wrote {args.json}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from costaware.rollouts.logs import write_prompt_rounds
    from costaware.rollouts.synthetic import simulate_prompt_rounds

    recs = simulate_prompt_rounds(
        num_prompts=args.prompts,
        group_size=args.group_size,
        batch_size=args.batch,
        rounds=args.rounds,
        mean_logit=args.mean_logit,
        drift=args.drift,
        seed=args.seed,
    )
    write_prompt_rounds(args.out, recs, append=False)
    print(f"[costaware] wrote {len(recs)} groups over {args.rounds} rounds to {args.out}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "rollouts",
        help="Prompt-stage analysis: which prompts are worth generating.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    sub.required = True
    a = sub.add_parser("analyse", help="predicted J(q)/J(uniform) of prompt samplers on per-prompt logs")
    a.add_argument("logs", nargs="+", help="JSON Lines of PromptRound records")
    a.add_argument(
        "--generation-cost",
        type=float,
        default=DEFAULT_GENERATION_COST,
        help="cost of a generated token in PO tokens (default: %(default).4g)",
    )
    a.add_argument(
        "--row-method",
        choices=("none", "nonzero", "p_star"),
        default="nonzero",
        help="which rows PO feeds: every row (none) or non-zero-advantage rows (default: %(default)s)",
    )
    a.add_argument("--alphas", type=_floats, default=(0.1, 0.5), help="mixture weights with uniform (default: 0.1,0.5)")
    a.add_argument("--decay", type=float, default=0.9, help="posterior decay per round of age (default: %(default)s)")
    a.add_argument("--first", type=_ints, default=(1, 2), help="two-stage first-stage sizes (default: 1,2)")
    a.add_argument("--floor", type=float, default=0.1, help="two-stage floor on ρ (default: %(default)s)")
    a.add_argument("--per-round", action="store_true", help="also print the ratios round by round (default: off)")
    a.add_argument("--json", default=None, help="write the RolloutAnalysis record here (default: none)")
    a.set_defaults(func=_analyse)
    s = sub.add_parser("simulate", help="write a synthetic per-prompt log (drifting pass rates)")
    s.add_argument("out", help="output .jsonl file (overwritten)")
    s.add_argument("--prompts", type=int, default=512, help="train prompts (default: %(default)s)")
    s.add_argument("--group-size", type=int, default=8, help="responses per prompt (default: %(default)s)")
    s.add_argument("--batch", type=int, default=64, help="prompts per round (default: %(default)s)")
    s.add_argument("--rounds", type=int, default=60, help="rounds (default: %(default)s)")
    s.add_argument(
        "--mean-logit",
        type=float,
        default=-0.5,
        help="mean initial logit of the pass rates; higher is easier (default: %(default)s)",
    )
    s.add_argument("--drift", type=float, default=0.05, help="logit drift per round (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    s.set_defaults(func=_simulate)
