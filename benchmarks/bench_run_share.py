"""Generation's share of one main-job GRPO run, with each rollout engine (Profile.generation).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/bench_run_share.py [--out /tmp/bench-run-share] [--pairs 1]

One run of the default profile (headline, GRPO, seed 0, the job's own `run_one`, one thread), from the
default SFT warm-up (built once into ``--out``, then reused), per engine, the engines alternating
transformers, kv, transformers, kv ... Printed per run: the seconds spent in the training rollouts
(TRL's ``_generate_single_turn``), in evaluation (``policy.evaluate``, which samples) and in the whole
run, by wall clock and by the thread's CPU time (``time.thread_time``: on a shared machine it leaves
out the time the process waited for a core), and generation's share of the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from costaware.experiments import policy
from costaware.experiments.profile import PROFILES
from costaware.experiments.runs import run_one
from costaware.experiments.sft import warm_up
from costaware.experiments.specs import RunSpec
from costaware.integrations.trl import CostAwareGRPOTrainer

SPENT = {"rollout": [0.0, 0.0], "eval": [0.0, 0.0]}  # [wall, cpu]


def _timed(fn, key):
    def timed(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[key][0] += time.perf_counter() - wall
            SPENT[key][1] += time.thread_time() - cpu

    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/bench-run-share", help="folder of the SFT warm-up and the runs")
    ap.add_argument("--pairs", type=int, default=1, help="transformers/kv pairs of runs")
    args = ap.parse_args()
    out = Path(args.out)
    sft = warm_up(PROFILES["default"], "sort", out)
    CostAwareGRPOTrainer._generate_single_turn = _timed(CostAwareGRPOTrainer._generate_single_turn, "rollout")
    policy.evaluate = _timed(policy.evaluate, "eval")
    spec = dataclasses.asdict(RunSpec("headline", "none", 0, task="sort"))
    print(f"{'engine':<14}{'clock':<6}{'rollouts s':>11}{'eval s':>8}{'run s':>8}{'generation share':>18}")
    for pair in range(args.pairs):
        for engine in ("transformers", "kv"):
            for v in SPENT.values():
                v[:] = [0.0, 0.0]
            profile = dataclasses.asdict(dataclasses.replace(PROFILES["default"], generation=engine))
            wall, cpu = time.perf_counter(), time.thread_time()
            run_one(spec, profile, str(sft), str(out / f"run-{engine}-{pair}.json"))
            total = (time.perf_counter() - wall, time.thread_time() - cpu)
            for c, clock in enumerate(("wall", "cpu")):
                roll, ev = SPENT["rollout"][c], SPENT["eval"][c]
                print(f"{engine:<14}{clock:<6}{roll:>11.1f}{ev:>8.1f}{total[c]:>8.1f}{(roll + ev) / total[c]:>18.0%}")


if __name__ == "__main__":
    main()
