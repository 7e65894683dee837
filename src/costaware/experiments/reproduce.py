"""`costaware reproduce`: Cost-Aware GRPO against GRPO and its controls on a small local policy, on the CPU.

The paper's evidence is held-out accuracy against the cumulative tokens spent in policy optimisation
(PO), method by method. This job reproduces that comparison and separates cost-aware sampling from its
confounders (see docs/design.md, "Evidence: controls and confounders"):

1. build a char tokenizer and a tiny Qwen2 (no hub is needed);
2. make procedural tasks of a task family (``Profile.task``; prompt + response lengths vary many-fold);
3. warm the policy up by SFT on demonstrations with injected mistakes, so that RL has room to improve
   (the checkpoint is cached and shared by every run of that task);
4. run GRPO from it through :class:`costaware.integrations.trl.CostAwareGRPOTrainer` for each method,
   seed and setting (``experiments.specs.run_specs``): GRPO, GRPO at x0.5 and x2 its learning rate
   (chosen on a validation split disjoint from the held-out set), nonzero, p* (centred and raw weights),
   p*_smooth(0.01), PODS; each until it has spent the profile's PO-token budget (rounds are a cap),
   evaluated at equal token spacing on the held-out set and on the validation split;
5. write the report (``report.grpo``) from the typed records (``costaware.experiments.records.RunResult``).

Every evaluation records PO tokens, generation rounds and generated tokens, so the report can draw
accuracy against PO tokens, against rounds (equal rollouts) and against total cost
(generated tokens x ``Profile.generation_cost`` + PO tokens).

Every finished run writes ``runs/<name>.json`` atomically; a second invocation skips them, so an
interrupted job resumes without losing finished work. Same seed, same numbers. Ctrl-C stops every
worker at once and removes the work folders of the runs that did not finish; a lock on ``--out``
refuses a second job writing into the same folder. The workers' warnings are printed once per
condition for the whole job, with the runs that raised them (``experiments.quiet``).
"""

# One module per job (this docstring is the command's help, so the map is here): experiments.sft (the warm-up),
# experiments.grpo_run (a GRPO run), experiments.control (the SFT-continuation control), experiments.runs (one run
# in a worker, its record written), experiments.keys (the names of their files), experiments.runner (the job:
# arguments, lock, worker pool, then the report writer it is given); this module is the command's arguments and
# help; costaware.jobs, above the experiments and the report, runs the command with report.grpo's writer.

from __future__ import annotations

import argparse
from typing import Any

from costaware.experiments import runner
from costaware.experiments.profile import GROUPS, PROFILES

__all__ = ["register"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the ``reproduce`` parser (its arguments and help) and returns it; ``costaware.jobs`` sets what runs."""
    p = subparsers.add_parser(
        "reproduce",
        help="The main job: Cost-Aware GRPO against GRPO and its controls.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profile", choices=sorted(PROFILES), default="default", help="sizes (default: %(default)s)")
    p.add_argument("--quick", dest="profile", action="store_const", const="quick", help="same as --profile quick")
    p.add_argument("--out", default="runs/reproduce", help="output folder (default: %(default)s)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"training processes at a time, one thread each (default: the CPUs this process may use, "
        f"{runner.available_cpus()} here)",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        help="headline method ids (default: none nonzero p_star p_smooth pods; "
        "p_star runs with centred and raw weights; the baseline none always runs)",
    )
    p.add_argument(
        "--archive",
        help="a folder (commit it) that keeps every finished run and SFT checkpoint, compressed; a rerun with it "
        "restores them into --out first and trains only what it lacks (a long profile moved to a new machine)",
    )
    p.add_argument("--seeds", nargs="+", type=int, help="headline seeds (default: the profile's)")
    p.add_argument("--rounds", type=int, help="generation rounds per run, a cap when there is a token budget")
    p.add_argument(
        "--token-budget", type=int, help="PO tokens every run spends (0: stop after --rounds; default: the profile's)"
    )
    p.add_argument("--learning-rate", type=float, help="GRPO learning rate (default: the profile's)")
    p.add_argument("--loss-type", help="TRL loss_type of the GRPO setting (default: the profile's, grpo)")
    p.add_argument("--task", help="task family of the headline (default: the profile's, sort)")
    p.add_argument("--only", nargs="+", choices=GROUPS, help="run and report only these groups of runs")
    p.add_argument(
        "--set",
        nargs="+",
        metavar="FIELD=VALUE",
        help="change any profile field, e.g. --set hidden_size=96 lr_sweep=0.5,2 (see --show-profile); "
        "the options above win over --set",
    )
    p.add_argument(
        "--show-profile",
        action="store_true",
        help="print the profile that would run (--profile, --set and the options above applied), "
        "field by field with the number of runs, and exit",
    )
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: write the report from this profile's runs finished so far (an interrupted "
                        "job), and list the missing ones")  # fmt: skip
    return p
