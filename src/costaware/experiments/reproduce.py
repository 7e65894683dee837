"""`costaware reproduce`: Cost-Aware GRPO against GRPO and its controls on a small local policy, on the CPU.

The paper's evidence is held-out accuracy against the cumulative tokens spent in policy optimisation
(PO), method by method. This job reproduces that comparison and separates cost-aware sampling from its
confounders (see docs/design.md, "Evidence: controls and confounders"):

1. build a char tokenizer and a tiny Qwen2 (no hub is needed);
2. make procedural tasks of a task family (``Profile.task``; prompt + response lengths vary many-fold);
3. warm the policy up by SFT on demonstrations with injected mistakes, so that RL has room to improve
   (the checkpoint is cached and shared by every run of that task);
4. run GRPO from it through :class:`costaware.integrations.trl.CostAwareGRPOTrainer` for each method,
   seed and setting (``experiments.profile.run_specs``): GRPO, GRPO at x0.5 and x2 its learning rate
   (chosen on a validation split disjoint from the held-out set), nonzero, p* (centred and raw weights),
   p*_smooth(0.01), PODS; each until it has spent the profile's PO-token budget (rounds are a cap),
   evaluated at equal token spacing on the held-out set and on the validation split;
5. write the report (``report.grpo``) from the typed records (``experiments.records.RunResult``).

Every evaluation records PO tokens, generation rounds and generated tokens, so the report can draw
accuracy against PO tokens, against rounds (equal rollouts) and against total cost
(generated tokens x ``Profile.generation_cost`` + PO tokens).

Every finished run writes ``runs/<name>.json`` atomically; a second invocation skips them, so an
interrupted job resumes without losing finished work. Same seed, same numbers. Ctrl-C stops every
worker at once and removes the work folders of the runs that did not finish; a lock on ``--out``
refuses a second job writing into the same folder. The workers' warnings are printed once per
condition for the whole job, with the runs that raised them (``experiments.quiet``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from costaware.experiments.profile import GROUPS, PROFILES, Profile, RunSpec
from costaware.experiments.quiet import Caught, quiet_libraries, run_recording
from costaware.experiments.tasks import get_task, split_task_id
from costaware.experiments.worker import Evaluator, load_checkpoint

HELD_OUT_SEED, VALIDATION_SEED, TRAIN_SEED = 10_001, 10_002, 20_000


@dataclass(frozen=True)
class TaskSet:
    """Prompts and answers of an evaluation set (a subset of a family's tasks)."""

    prompts: list[str]
    answers: Any

    def __len__(self) -> int:
        return len(self.prompts)


def eval_sets(profile: Profile, task_name: str) -> tuple[TaskSet, TaskSet]:
    """The reported held-out set and a validation split with no prompt in common with it."""
    import numpy as np

    task = get_task(task_name)
    lo, hi = profile.sizes(task_name)
    sizes = dict(min_size=lo, max_size=hi)
    held = task.make_tasks(profile.eval_prompts, **sizes, rng=np.random.default_rng(HELD_OUT_SEED))
    seen = set(held.prompts)
    rng, prompts, answers = np.random.default_rng(VALIDATION_SEED), [], []
    for _ in range(20):  # small size ranges repeat prompts: draw until enough unseen ones
        if len(prompts) >= profile.validation_prompts:
            break
        cand = task.make_tasks(max(64, 2 * profile.validation_prompts), **sizes, rng=rng)
        for p, a in zip(cand.prompts, list(cand.answers), strict=True):
            if p not in seen and len(prompts) < profile.validation_prompts:
                seen.add(p)
                prompts.append(p)
                answers.append(a)
    if len(prompts) < profile.validation_prompts:
        raise ValueError(f"validation_prompts={profile.validation_prompts} exceeds the distinct prompts of sizes "
                         f"{lo}..{hi} left after the held-out set")  # fmt: skip
    return TaskSet(list(held.prompts), np.asarray(held.answers)), TaskSet(prompts, np.asarray(answers))


def _score_sft(tok: Any, model: Any, profile: Profile, task_name: str) -> dict[str, Any]:
    """Greedy and sampled (mean@k) held-out accuracy of the SFT policy."""
    from costaware.experiments import policy

    task, (held, _) = get_task(task_name), eval_sets(profile, task_name)
    kw = dict(max_size=profile.sizes(task_name)[1], generation=profile.generation)
    return {"greedy_accuracy": policy.evaluate(model, tok, task, held, k=1, temperature=0, **kw).accuracy,
            "sampled_accuracy": policy.evaluate(model, tok, task, held, k=profile.eval_k, **kw).accuracy,
            "held_out": _held_out(profile)}  # fmt: skip


def _held_out(profile: Profile) -> dict[str, Any]:
    """What the SFT scores depend on besides the checkpoint (the engine only when not the recorded one)."""
    held = {"eval_prompts": profile.eval_prompts, "eval_k": profile.eval_k}
    return held if profile.generation == "transformers" else {**held, "generation": profile.generation}


def sft_key(profile: Profile, task_name: str) -> tuple[str, dict[str, Any]]:
    from costaware.experiments.runner import key

    cfg = {k: getattr(profile, k) for k in ("hidden_size", "num_layers", "min_size", "mistake_prob",
                                            "sft_steps", "sft_batch", "sft_lr")}  # fmt: skip
    cfg["max_size"] = profile.sizes(task_name)[1]
    cfg["task"] = split_task_id(task_name)[0]  # the family: "sort:9" is sort with max_size 9
    return f"sft-{task_name.replace(':', '-')}-{key(cfg)}", cfg


def warm_up(profile: Profile, task_name: str, out: Path) -> Path:
    """SFT checkpoint shared by every run of ``task_name``, cached under a key of its configuration.

    Written into a temporary folder and renamed into place, so an interrupted warm-up leaves nothing.
    """
    import torch

    from costaware.experiments import policy

    quiet_libraries()  # no "Loading weights" / "Writing model shards" bars
    name, cfg = sft_key(profile, task_name)
    path = out / name
    held_cfg = _held_out(profile)
    if (path / "sft.json").exists():
        info = json.loads((path / "sft.json").read_text())
        if info.get("held_out") != held_cfg:  # cached by a profile with another held-out set: re-score it
            info.update(_score_sft(*load_checkpoint(path), profile, task_name))
            _write_json(path / "sft.json", info)
        return path
    task = get_task(task_name)
    torch.manual_seed(0)
    tok, model = policy.build_policy(task.alphabet, hidden_size=profile.hidden_size, num_layers=profile.num_layers,
                                     seed=0)  # fmt: skip
    info = policy.sft(model, tok, task, steps=profile.sft_steps, batch_size=profile.sft_batch, lr=profile.sft_lr,
                      min_size=profile.min_size, max_size=profile.sizes(task_name)[1], mistake_prob=profile.mistake_prob,
                      seed=0)
    info.update(_score_sft(tok, model, profile, task_name), parameters=policy.count_parameters(model), config=cfg)
    tmp = out / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "sft.json").write_text(json.dumps(info, indent=2))
    os.replace(tmp, path)
    return path


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    tmp.replace(path)


class EvalSchedule:
    """When to evaluate: every ``eval_every`` rounds, or at each ``token_budget / eval_points`` crossed."""

    def __init__(self, profile: Profile) -> None:
        self.profile, self.next_tokens = profile, profile.token_budget / profile.eval_points

    def done(self, tokens: int) -> bool:
        return self.profile.token_budget > 0 and tokens >= self.profile.token_budget

    def __call__(self, rounds_done: int, tokens: int, *, last: bool = False) -> bool:
        if self.profile.token_budget <= 0:
            return rounds_done % self.profile.eval_every == 0 or last
        if tokens >= self.next_tokens or self.done(tokens) or last:
            while self.next_tokens <= tokens:
                self.next_tokens += self.profile.token_budget / self.profile.eval_points
            return True
        return False


class SkipWatch:
    """Counts consecutive rounds that fed no PO token; warns once when they reach ``limit``."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit, self.name, self.run, self.longest, self.last_tokens, self.warned = limit, name, 0, 0, 0, False

    def __call__(self, tokens: int) -> None:
        self.run = self.run + 1 if tokens == self.last_tokens else 0
        self.longest, self.last_tokens = max(self.longest, self.run), tokens
        if self.run >= self.limit and not self.warned:
            self.warned = True
            warnings.warn(f"{self.name}: {self.run} consecutive rounds fed no token (every pool skipped: all "
                          "rewards equal); the run ends at the profile's round cap", RuntimeWarning, stacklevel=2)


def trainer_args(spec: RunSpec, profile: Profile, workdir: Path) -> Any:
    """The TRL config of a GRPO run; built up front for every run, so that a bad option fails before work."""
    from costaware.integrations.trl import CostAwareGRPOConfig

    spg = profile.steps_per_generation
    with warnings.catch_warnings():
        if spec.proxy == "advantage":  # the paper's proxy under a token-sum loss is the deliberate comparison arm
            warnings.filterwarnings("ignore", message="proxy='advantage'", category=UserWarning)
        return CostAwareGRPOConfig(
            output_dir=str(workdir), cost_aware_method=spec.method, cost_aware_alpha=spec.alpha,
            cost_aware_weights=spec.weights, cost_aware_proxy_noise=spec.proxy_noise, cost_aware_zvf=spec.zvf,
            cost_aware_budget=spec.step_budget, cost_aware_proxy=spec.proxy, cost_aware_pods_keep=min(profile.pods_keep, profile.generations),
            loss_type=spec.resolved_loss_type(profile), beta=0.0, learning_rate=profile.learning_rate * spec.lr_scale,
            lr_scheduler_type="constant_with_warmup" if profile.warmup_rounds else "constant",
            warmup_steps=profile.warmup_rounds * spg, num_generations=profile.generations,
            per_device_train_batch_size=profile.prompts_per_round * profile.generations // spg,
            steps_per_generation=spg, max_steps=profile.rounds * spg,
            max_completion_length=get_task(spec.task).max_response_tokens(profile.sizes(spec.task)[1]) + 1, temperature=1.0,
            seed=spec.seed, data_seed=spec.seed, report_to="none", use_cpu=True, bf16=False, logging_steps=spg,
            save_strategy="no", disable_tqdm=True,
            gradient_checkpointing=False,  # TRL turns it on; a tiny CPU model only pays the recomputation
            cost_aware_diagnostics_interval=profile.diagnostics_every if profile.diagnostics_rows else 0,
            cost_aware_diagnostics_rows=max(2, profile.diagnostics_rows),
            cost_aware_logprob_rows=profile.logprob_rows, cost_aware_generation=profile.generation,
            cost_aware_token_budget=profile.token_budget,  # stops at the end of the round that reaches it
        )  # fmt: skip


def _run_control(spec: RunSpec, profile: Profile, sft_dir: Path) -> dict[str, Any]:
    """SFT continued from the same checkpoint, evaluated on the RL runs' schedule (x = SFT tokens)."""
    from costaware.experiments import policy
    from costaware.experiments.records import EvalPoint

    tok, model = load_checkpoint(sft_dir)
    evaluate = Evaluator(profile, spec.task, tok, sft_dir)
    spg = profile.steps_per_generation
    evals = [EvalPoint(0, 0, 0, *evaluate.start(model, "control"))]
    steps = profile.rounds * spg
    due = EvalSchedule(profile)

    def on_step(step: int, tokens: int) -> None:
        last = step == steps or due.done(tokens)
        if (step % spg == 0 or last) and due(step // spg, tokens, last=last):
            evals.append(EvalPoint(step // spg, tokens, 0, *evaluate(model), step=step))

    start = time.perf_counter()
    policy.sft(model, tok, get_task(spec.task), steps=steps, batch_size=profile.prompts_per_round * profile.generations
               // spg, lr=profile.control_lr, min_size=profile.min_size, max_size=profile.sizes(spec.task)[1],
               mistake_prob=profile.mistake_prob, seed=1000 + spec.seed, decay=False, on_step=on_step,
               max_tokens=profile.token_budget or None)  # fmt: skip
    return {"evals": evals, "counters": {"po_seconds": time.perf_counter() - start}, "fidelity": (),
            "generation_seconds": 0.0, "eval_seconds": evaluate.seconds}


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _run_grpo(spec: RunSpec, profile: Profile, sft_dir: Path, workdir: Path) -> dict[str, Any]:
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from costaware.experiments.records import EvalPoint, ProxyFidelityPoint
    from costaware.integrations.trl import CostAwareGRPOTrainer

    task = get_task(spec.task)
    tok, model = load_checkpoint(sft_dir)
    evaluate = Evaluator(profile, spec.task, tok, sft_dir)
    tasks = task.make_tasks(profile.rounds * profile.prompts_per_round, min_size=profile.min_size,
                            max_size=profile.sizes(spec.task)[1], rng=np.random.default_rng(TRAIN_SEED + spec.seed))
    data = Dataset.from_dict({"prompt": list(tasks.prompts), "answer": np.asarray(tasks.answers).tolist()})
    args = trainer_args(spec, profile, workdir)
    spg = profile.steps_per_generation
    rollouts = {"generated_tokens": 0}  # every generated completion passes through the reward once

    def reward(completions: list[Any], answer: list[Any], completion_ids: list[list[int]] | None = None, **kw: Any):
        rollouts["generated_tokens"] += sum(map(len, completion_ids)) if completion_ids is not None else sum(
            len(c if isinstance(c, str) else c[0]["content"]) + 1 for c in completions)  # char tokenizer + EOS
        return task.reward(completions, answer, **kw)

    reward.__name__ = f"{task.name}_reward"
    evals: list[EvalPoint] = []
    due, watch = EvalSchedule(profile), SkipWatch(profile.skipped_warn_rounds, spec.arm)

    class Evaluate(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if state.global_step % spg:
                return  # mid-round: the round's pool is not spent yet
            tokens = int(trainer.cost_aware_state["tokens"])
            watch(tokens)
            if due(state.global_step // spg, tokens, last=state.global_step == args.max_steps):
                record(state.global_step)  # the trainer's cost_aware_token_budget ends the run at the same step

    trainer = CostAwareGRPOTrainer(model=model, args=args, reward_funcs=reward, train_dataset=data,
                                   processing_class=tok, callbacks=[Evaluate()])  # fmt: skip
    trainer.remove_callback(PrinterCallback)  # the parent's progress line is enough
    generation = {"seconds": 0.0}  # wall time of the generation rounds (ZVF refills included)
    untimed_generate = trainer._generate

    def timed_generate(*a: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return untimed_generate(*a, **kw)
        finally:
            generation["seconds"] += time.perf_counter() - start

    trainer._generate = timed_generate

    def record(step: int) -> None:
        st = trainer.cost_aware_state
        evals.append(EvalPoint(
            # generation rounds: one per pool, plus every ZVF refill batch (each as large as a pool)
            rounds=int(st["generations"]) + int(st.get("zvf_refills", 0)), po_tokens=int(st["tokens"]), generated_tokens=int(rollouts["generated_tokens"]),
            **dict(zip(("heldout_accuracy", "validation_accuracy"),
                       evaluate.start(trainer.model, "grpo") if step == 0 else evaluate(trainer.model), strict=True)),
            step=step, po_seconds=float(st["po_seconds"]), po_tokens_plain=int(st["tokens_plain"]),
            po_tokens_nonzero=int(st["tokens_nonzero"]),
        ))  # fmt: skip

    torch.manual_seed(spec.seed)
    record(0)
    trainer.train()
    tokens = int(trainer.cost_aware_state["tokens"])
    capped = profile.token_budget > 0 and tokens < profile.token_budget
    if capped:
        warnings.warn(f"{spec.arm} seed {spec.seed}: stopped at the round cap ({profile.rounds} rounds) with "
                      f"{tokens} of {profile.token_budget} PO tokens", RuntimeWarning, stacklevel=1)  # fmt: skip
    counters = {k: float(v) for k, v in trainer.cost_aware_state.items() if isinstance(v, int | float)}
    counters.update(round_cap_hit=float(capped), longest_skipped_run=float(watch.longest))
    fidelity = tuple(
        ProxyFidelityPoint(step=int(h["step"]), po_tokens=int(h["cost_aware/total/tokens"]),
                           **{k: _finite(h.get(f"cost_aware/{k}")) for k in ("pearson", "chi2", "j_vs_uniform")})
        for h in trainer.state.log_history if "cost_aware/chi2" in h
    )  # fmt: skip
    return {"evals": evals, "counters": counters, "fidelity": fidelity, "generation_seconds": generation["seconds"],
            "eval_seconds": evaluate.seconds, "trainer": trainer}


def run_one(spec_d: dict[str, Any], profile_d: dict[str, Any], sft_dir: str, out_file: str) -> str:
    """Worker entry: one run, its :class:`RunResult` written atomically to ``out_file``."""
    import torch

    from costaware.experiments.records import RunId, RunResult

    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    profile = Profile(**{k: tuple(v) if isinstance(v, list) else v for k, v in profile_d.items()})
    spec = RunSpec(**spec_d)
    profile = spec.scaled(profile)
    start = time.perf_counter()
    run = _run_control if spec.method == "sft" else _run_grpo
    args = (spec, profile, Path(sft_dir)) + (() if spec.method == "sft" else (Path(out_file).with_suffix(""),))
    with warnings.catch_warnings():
        warnings.simplefilter("always", RuntimeWarning)
        out = run(*args)
    lr = profile.control_lr if spec.method == "sft" else profile.learning_rate * spec.lr_scale
    rid = RunId(task=spec.task, method=spec.method, seed=spec.seed, learning_rate=lr,
                loss_type=spec.resolved_loss_type(profile), weights=spec.weights, setting=spec.setting,
                group=spec.group, alpha=spec.alpha, proxy_noise=spec.proxy_noise, step_budget=spec.step_budget,
                proxy=spec.proxy)
    RunResult(id=rid, evals=tuple(out["evals"]), wall_seconds=time.perf_counter() - start, fidelity=out["fidelity"],
              counters=out["counters"], spec=asdict(spec), generation_seconds=out["generation_seconds"],
              eval_seconds=out["eval_seconds"]).save(out_file)  # fmt: skip
    shutil.rmtree(Path(out_file).with_suffix(""), ignore_errors=True)  # the trainer's empty output_dir
    return out_file


def run_one_recorded(*job: Any) -> tuple[str, tuple[Caught, ...]]:
    """Worker entry of the job's pool: :func:`run_one` with its warnings recorded for the parent, which
    prints each condition once for the whole job (``quiet.WarningLog``), and no progress bar."""
    quiet_libraries()
    return run_recording(run_one, *job)


def main(args: argparse.Namespace) -> int:
    from costaware.experiments import runner

    return runner.reproduce(args, command="costaware reproduce " + " ".join(sys.argv[2:])
                            if sys.argv[1:2] == ["reproduce"] else "costaware reproduce")  # fmt: skip


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's share), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("reproduce", help="The main job: Cost-Aware GRPO against GRPO and its controls.",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), default="default", help="sizes (default: %(default)s)")
    p.add_argument("--quick", dest="profile", action="store_const", const="quick", help="same as --profile quick")
    p.add_argument("--out", default="runs/reproduce", help="output folder (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=None,
                   help=f"training processes at a time, one thread each (default: the CPUs this process may use, "
                        f"{available_cpus()} here)")
    p.add_argument("--methods", nargs="+", help="headline method ids (default: none nonzero p_star p_smooth pods; "
                   "p_star runs with centred and raw weights; the baseline none always runs)")
    p.add_argument("--seeds", nargs="+", type=int, help="headline seeds (default: the profile's)")
    p.add_argument("--rounds", type=int, help="generation rounds per run, a cap when there is a token budget")
    p.add_argument("--token-budget", type=int,
                   help="PO tokens every run spends (0: stop after --rounds; default: the profile's)")
    p.add_argument("--learning-rate", type=float, help="GRPO learning rate (default: the profile's)")
    p.add_argument("--loss-type", help="TRL loss_type of the GRPO setting (default: the profile's, grpo)")
    p.add_argument("--task", help="task family of the headline (default: the profile's, sort)")
    p.add_argument("--only", nargs="+", choices=GROUPS, help="run and report only these groups of runs")
    p.add_argument("--set", nargs="+", metavar="FIELD=VALUE",
                   help="change any profile field, e.g. --set hidden_size=96 lr_sweep=0.5,2 (see --show-profile); "
                        "the options above win over --set")
    p.add_argument("--show-profile", action="store_true", help="print the profile's fields by group and exit")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: write the report from this profile's runs finished so far (an interrupted "
                        "job), and list the missing ones")  # fmt: skip
    p.set_defaults(func=main)
