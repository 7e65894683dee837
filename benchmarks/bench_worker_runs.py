"""One `costaware reproduce` worker's life in this process: its start-up, then GRPO runs of the default profile.

    python benchmarks/bench_worker_runs.py --sft DIR [--token-budget 30000] [--runs 3] [--out DIR]

``DIR`` is an SFT checkpoint of the default profile (``runs/reproduce/sft-sort-*`` after a job, or any
``--out`` of `costaware reproduce`). The worker starts as the job's pool starts it (``runner.worker_init``'s
imports, when this commit has them), then trains ``--runs`` runs of GRPO (seed 0 at LR x1, x0.5, x2, ...) at
``--token-budget`` PO tokens through ``runs.run_one``, one thread. Prints the start-up's and each run's
wall and CPU seconds, the split each record holds (generation rounds, evaluations, PO) and the first run's
held-out curve: run it at two commits, alternated, to compare their per-run cost and check their numbers
agree. CPU seconds are the steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sft", required=True, help="SFT checkpoint folder of the default profile")
    p.add_argument("--token-budget", type=int, default=30_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", help="where the records go (default: a temporary folder)")
    args = p.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    wall, cpu = time.perf_counter(), time.process_time()
    try:  # the worker's initializer at commits that have one; older ones import in their first run
        from costaware.experiments.runner import _preload
    except ImportError:
        pass
    else:
        _preload()
    from costaware.experiments.profile import PROFILES
    from costaware.experiments.runs import run_one
    from costaware.experiments.specs import RunSpec

    print(f"start-up: wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s")
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-worker-"))
    out.mkdir(parents=True, exist_ok=True)
    profile = dataclasses.replace(PROFILES["default"], token_budget=args.token_budget)
    scales = [1.0, 0.5, 2.0, *range(3, args.runs + 1)][: args.runs]
    for i, scale in enumerate(scales):
        spec = RunSpec("headline" if scale == 1.0 else "lr_sweep", "none", 0, task="sort", lr_scale=float(scale))
        path = out / f"run{i}.json"
        wall, cpu = time.perf_counter(), time.process_time()
        run_one(dataclasses.asdict(spec), dataclasses.asdict(profile), args.sft, str(path))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        rec = json.loads(path.read_text())
        split = ", ".join(
            f"{k} {rec[k]:.1f} s" for k in ("generation_seconds", "eval_seconds") if rec.get(k) is not None
        )
        print(
            f"run {i} (lr x{scale:g}): wall {wall:.2f} s, cpu {cpu:.2f} s; po {rec['counters']['po_seconds']:.1f} s"
            + (f", {split}" if split else "")
        )
        if i == 0:
            print("  held-out curve:", [(e["po_tokens"], e["heldout_accuracy"]) for e in rec["evals"]])
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
