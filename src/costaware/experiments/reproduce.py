"""`costaware reproduce`: Cost-Aware GRPO against GRPO on a small local policy, on the CPU.

The paper's evidence is held-out accuracy against the cumulative tokens spent in policy
optimisation, method by method (its Figures 1, 4, 5 and Table 1). This file reproduces that
comparison end to end, in one readable pass:

1. build a char tokenizer and a tiny Qwen2 (no hub is needed);
2. generate arithmetic tasks whose prompt + response lengths vary ~5-8x (``experiments.arith``);
3. warm the policy up by SFT on demonstrations with injected mistakes, so that imitation leaves
   room for RL (the checkpoint is cached and shared by every run);
4. run GRPO from it through :class:`costaware.integrations.trl.CostAwareGRPOTrainer` for each
   method / setting / seed, each until it has spent the same policy-optimisation token budget,
   evaluating mean@k on held-out tasks at equally spaced token counts;
5. write the report (``report.grpo``): curves, a Table-1 style table, tokens to reach the
   baseline's peak, AUC with bootstrap CIs, wall-clock.

Every finished run writes ``runs/<name>.json``; a second invocation skips them, so an interrupted
job resumes without losing finished work. Same seed, same numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Profile:
    """Sizes of one reproduction. ``rounds`` are generation rounds; each feeds ``steps_per_generation`` steps.

    With ``token_budget > 0`` every run trains until its policy-optimisation tokens reach the budget
    (``rounds`` is then only a cap) and is evaluated ``eval_points`` times at equal token spacing, so
    that a method that spends fewer tokens per round gets more rounds: the comparison is at equal
    cost, the paper's x-axis. With ``token_budget == 0`` runs stop after ``rounds`` and evaluate every
    ``eval_every`` rounds.
    """

    hidden_size: int
    num_layers: int
    min_terms: int
    max_terms: int
    mistake_prob: float
    sft_steps: int
    sft_batch: int
    sft_lr: float
    rounds: int
    prompts_per_round: int
    generations: int
    steps_per_generation: int
    learning_rate: float
    eval_every: int
    eval_prompts: int
    eval_k: int
    seeds: tuple[int, ...]
    ablation_seeds: tuple[int, ...]
    control_lr: float = 3e-4
    loss_type: str = "grpo"  # the paper's GRPO objective: clipped ratio averaged over each sequence's tokens
    diagnostics_rows: int = 32  # rows whose exact gradient norm is measured at every evaluation
    pods_keep: int = 5  # PODS rows kept per group of 8: ~0.6 of plain's tokens, near p*'s measured share
    token_budget: int = 0
    eval_points: int = 12


PROFILES: dict[str, Profile] = {
    # CI: the whole pipeline in a couple of minutes; its numbers mean nothing.
    "quick": Profile(32, 1, 2, 6, 0.15, 120, 32, 3e-3, 12, 4, 4, 2, 1e-4, 2, 24, 1, (0,), (0,), pods_keep=2,
                     token_budget=500, eval_points=3),
    # 32 prompts x 8 per round in 2 mini-batches of 128 rows: at 16 x 8 in 4 mini-batches of 32 the
    # with-replacement draws were too noisy per step and p* lost to GRPO (see the report's notes).
    # The budget is what plain GRPO spends in ~55 rounds here (measured: 327k tokens in 60 rounds).
    "default": Profile(96, 3, 2, 8, 0.15, 1200, 64, 3e-3, 150, 32, 8, 2, 1e-4, 5, 300, 4, (0, 1, 2), (0,),
                       token_budget=300_000),
    "full": Profile(128, 4, 2, 12, 0.15, 1500, 64, 3e-3, 400, 32, 8, 2, 1e-4, 5, 500, 4, (0, 1, 2, 3, 4), (0, 1, 2),
                    token_budget=1_200_000, eval_points=16),
}


@dataclass(frozen=True)
class RunSpec:
    group: str  # "headline", "zvf", "cispo", "ablation", "control"
    method: str
    seed: int
    loss_type: str = "profile"  # "profile": the profile's loss_type; "cispo" for the CISPO setting
    zvf: bool = False
    alpha: float = 0.01
    proxy_noise: float = 0.0
    step_budget: str = "rows"  # "tokens": each step draws until it holds the baseline's tokens

    @property
    def label(self) -> str:
        name = {"none": "GRPO", "p_smooth": f"p*_smooth({self.alpha:g})", "p_star": "p*"}.get(self.method, self.method)
        if self.proxy_noise:
            name += f" σ²={self.proxy_noise:g}"
        if self.step_budget == "tokens":
            name += " (tokens/step matched)"
        if self.method == "sft":
            name = "SFT continuation"
        return name

    @property
    def setting(self) -> str:
        return "GRPO+ZVF" if self.zvf else ("CISPO" if self.loss_type == "cispo" else "GRPO")


GROUPS = ("headline", "zvf", "cispo", "ablation", "control")


def run_specs(profile: Profile, methods: list[str] | None = None, groups: tuple[str, ...] = GROUPS) -> list[RunSpec]:
    """The runs of a reproduction: the headline with every seed, the other settings with fewer."""
    headline = methods or ["none", "nonzero", "p_star", "p_smooth", "pods"]
    specs = [RunSpec("headline", m, s) for s in profile.seeds for m in headline]
    for s in profile.ablation_seeds:
        specs += [RunSpec("zvf", m, s, zvf=True) for m in ("none", "p_star")]
        specs += [RunSpec("cispo", m, s, loss_type="cispo") for m in ("none", "p_star")]
        specs += [
            RunSpec("ablation", "p_star", s, proxy_noise=0.1),
            RunSpec("ablation", "p_star", s, proxy_noise=1.0),
            RunSpec("ablation", "inv_sqrt_cost", s),
            RunSpec("ablation", "p_smooth", s, alpha=0.05),
            RunSpec("ablation", "p_smooth", s, alpha=0.1),
            RunSpec("ablation", "p_star", s, step_budget="tokens"),
        ]
        specs.append(RunSpec("control", "sft", s))
    return [spec for spec in specs if spec.group in groups]


def _run_name(spec: RunSpec) -> str:
    budget = "" if spec.step_budget == "rows" else f"-{spec.step_budget}"
    return f"{spec.group}-{spec.method}-{spec.setting}-a{spec.alpha:g}-n{spec.proxy_noise:g}{budget}-s{spec.seed}"


def _non_default(obj: Any) -> dict[str, Any]:
    """A dataclass's fields that differ from their defaults: adding a defaulted field keeps old keys."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)
            if f.default is dataclasses.MISSING or getattr(obj, f.name) != f.default}


def _key(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _held_out(profile: Profile):
    import numpy as np

    from costaware.experiments import arith

    return arith.make_tasks(
        profile.eval_prompts, min_terms=profile.min_terms, max_terms=profile.max_terms, rng=np.random.default_rng(10_001)
    )


def _score_sft(tok: Any, model: Any, profile: Profile) -> dict[str, Any]:
    """Greedy and sampled (T=1, mean@k) accuracy of the SFT policy on the profile's held-out set."""
    from costaware.experiments import policy

    held = _held_out(profile)
    return {"greedy_accuracy": policy.evaluate(model, tok, held, k=1, temperature=0).accuracy,
            "sampled_accuracy": policy.evaluate(model, tok, held, k=profile.eval_k).accuracy,
            "held_out": {"eval_prompts": profile.eval_prompts, "eval_k": profile.eval_k}}


def warm_up(profile: Profile, out: Path) -> Path:
    """SFT checkpoint shared by every run, cached under a key of its configuration."""
    import torch

    from costaware.experiments import policy

    cfg = {k: getattr(profile, k) for k in ("hidden_size", "num_layers", "min_terms", "max_terms", "mistake_prob",
                                            "sft_steps", "sft_batch", "sft_lr")}
    path = out / f"sft-{_key(cfg)}"
    held_cfg = {"eval_prompts": profile.eval_prompts, "eval_k": profile.eval_k}
    if (path / "sft.json").exists():
        info = json.loads((path / "sft.json").read_text())
        if info.get("held_out") != held_cfg:  # cached by a profile with another held-out set: re-score it
            info.update(_score_sft(*_load(path), profile))
            (path / "sft.json").write_text(json.dumps(info, indent=2))
        return path
    torch.manual_seed(0)
    tok, model = policy.build_policy(hidden_size=profile.hidden_size, num_layers=profile.num_layers, seed=0)
    info = policy.sft(model, tok, steps=profile.sft_steps, batch_size=profile.sft_batch, lr=profile.sft_lr,
                      min_terms=profile.min_terms, max_terms=profile.max_terms, mistake_prob=profile.mistake_prob, seed=0)
    info.update(_score_sft(tok, model, profile), parameters=policy.count_parameters(model), config=cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "sft.json").write_text(json.dumps(info, indent=2))
    return path


def _load(sft_dir: Path):
    from transformers import AutoModelForCausalLM

    from costaware.tiny import load_char_tokenizer

    return load_char_tokenizer(str(sft_dir)), AutoModelForCausalLM.from_pretrained(str(sft_dir))


class _EvalSchedule:
    """When to evaluate: every ``eval_every`` rounds, or at each ``token_budget / eval_points`` crossed."""

    def __init__(self, profile: Profile) -> None:
        self.profile, self.next_tokens = profile, profile.token_budget / max(1, profile.eval_points)

    def done(self, tokens: int) -> bool:
        return self.profile.token_budget > 0 and tokens >= self.profile.token_budget

    def __call__(self, rounds_done: int, tokens: int, *, last: bool = False) -> bool:
        if self.profile.token_budget <= 0:
            return rounds_done % self.profile.eval_every == 0 or last
        if tokens >= self.next_tokens or self.done(tokens) or last:
            while self.next_tokens <= tokens:
                self.next_tokens += self.profile.token_budget / max(1, self.profile.eval_points)
            return True
        return False


def _run_control(spec: RunSpec, profile: Profile, sft_dir: Path) -> dict[str, Any]:
    """SFT continued from the same checkpoint, evaluated on the RL runs' schedule (x = SFT tokens)."""
    from costaware.experiments import policy

    tok, model = _load(sft_dir)
    held = _held_out(profile)
    evals = [{"step": 0, "tokens": 0, "accuracy": policy.evaluate(model, tok, held, k=profile.eval_k).accuracy}]
    steps = profile.rounds * profile.steps_per_generation
    rows = profile.prompts_per_round * profile.generations // profile.steps_per_generation
    due = _EvalSchedule(profile)

    def on_step(step: int, tokens: int) -> None:
        last = step == steps or due.done(tokens)
        if (step % profile.steps_per_generation == 0 or last) and due(step // profile.steps_per_generation, tokens, last=last):
            evals.append({"step": step, "tokens": tokens, "accuracy": policy.evaluate(model, tok, held, k=profile.eval_k).accuracy})
            model.train()

    start = time.perf_counter()
    policy.sft(model, tok, steps=steps, batch_size=rows, lr=profile.control_lr, min_terms=profile.min_terms,
               max_terms=profile.max_terms, mistake_prob=profile.mistake_prob, seed=1000 + spec.seed, decay=False,
               on_step=on_step, max_tokens=profile.token_budget or None)
    return {"evals": evals, "po_seconds": time.perf_counter() - start}


def _run_grpo(spec: RunSpec, profile: Profile, sft_dir: Path, workdir: Path) -> dict[str, Any]:
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from costaware.experiments import arith, policy
    from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer

    tok, model = _load(sft_dir)
    held = _held_out(profile)
    n_prompts = profile.rounds * profile.prompts_per_round
    tasks = arith.make_tasks(n_prompts, min_terms=profile.min_terms, max_terms=profile.max_terms,
                             rng=np.random.default_rng(20_000 + spec.seed))
    data = Dataset.from_dict({"prompt": tasks.prompts, "answer": tasks.answers.tolist()})
    spg = profile.steps_per_generation
    args = CostAwareGRPOConfig(
        output_dir=str(workdir),
        cost_aware_method=spec.method,
        cost_aware_alpha=spec.alpha,
        cost_aware_proxy_noise=spec.proxy_noise,
        cost_aware_zvf=spec.zvf,
        cost_aware_budget=spec.step_budget,
        cost_aware_pods_keep=min(profile.pods_keep, profile.generations),
        loss_type=profile.loss_type if spec.loss_type == "profile" else spec.loss_type,
        beta=0.0,
        learning_rate=profile.learning_rate,
        lr_scheduler_type="constant",
        num_generations=profile.generations,
        per_device_train_batch_size=profile.prompts_per_round * profile.generations // spg,
        steps_per_generation=spg,
        max_steps=profile.rounds * spg,
        max_completion_length=policy.max_response_tokens(profile.max_terms) + 1,
        temperature=1.0,
        seed=spec.seed,
        data_seed=spec.seed,
        report_to="none",
        use_cpu=True,
        bf16=False,
        logging_steps=spg,
        save_strategy="no",
        disable_tqdm=True,
        cost_aware_diagnostics_interval=profile.eval_every if profile.diagnostics_rows else 0,
        cost_aware_diagnostics_rows=max(2, profile.diagnostics_rows),
    )
    evals: list[dict[str, Any]] = []

    due = _EvalSchedule(profile)

    class Evaluate(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if state.global_step % spg:
                return  # mid-round: the round's pool is not spent yet
            tokens = int(trainer.cost_aware_state["tokens"])
            if due(state.global_step // spg, tokens, last=state.global_step == args.max_steps):
                record(state.global_step)
            if due.done(tokens):
                control.should_training_stop = True

    trainer = CostAwareGRPOTrainer(model=model, args=args, reward_funcs=arith.arith_reward, train_dataset=data,
                                   processing_class=tok, callbacks=[Evaluate()])
    trainer.remove_callback(PrinterCallback)  # the parent's progress bar is enough

    def record(step: int) -> None:
        st = trainer.cost_aware_state
        acc = policy.evaluate(trainer.model, tok, held, k=profile.eval_k, seed=12345)
        evals.append({"step": step, "tokens": int(st["tokens"]), "tokens_plain": int(st["tokens_plain"]),
                      "tokens_nonzero": int(st["tokens_nonzero"]), "po_seconds": float(st["po_seconds"]),
                      "accuracy": acc.accuracy})
        trainer.model.train()

    torch.manual_seed(spec.seed)
    record(0)
    trainer.train()
    return {"evals": evals, "po_seconds": trainer.cost_aware_state["po_seconds"], "loss_type": args.loss_type,
            "state": dict(trainer.cost_aware_state),
            "diagnostics": [
                {"step": h["step"], "tokens": h["cost_aware/tokens"],
                 **{k: h[f"cost_aware/{k}"] for k in ("pearson", "chi2", "j_vs_uniform") if f"cost_aware/{k}" in h}}
                for h in trainer.state.log_history if "cost_aware/chi2" in h
            ],
            "log_history": [h for h in trainer.state.log_history if "cost_aware/tokens_step" in h]}


def run_one(spec_d: dict[str, Any], profile_d: dict[str, Any], sft_dir: str, out_file: str) -> str:
    """Worker entry: one run, its result written atomically to ``out_file``."""
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    profile_d = {**profile_d, "seeds": tuple(profile_d["seeds"]), "ablation_seeds": tuple(profile_d["ablation_seeds"])}
    spec, profile = RunSpec(**spec_d), Profile(**profile_d)
    start = time.perf_counter()
    workdir = Path(out_file).with_suffix("")
    if spec.method == "sft":
        result = _run_control(spec, profile, Path(sft_dir))
    else:
        result = _run_grpo(spec, profile, Path(sft_dir), workdir)
    result.update(spec=asdict(spec), label=spec.label, setting=spec.setting, wall_seconds=time.perf_counter() - start)
    tmp = Path(out_file + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_file)  # atomic: a killed run leaves no half-written result
    return out_file


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from costaware.report import grpo as report

    profile = PROFILES[args.profile]
    if args.seeds:
        profile = dataclasses.replace(profile, seeds=tuple(args.seeds))
    if args.rounds:
        profile = dataclasses.replace(profile, rounds=args.rounds)
    if args.token_budget is not None:
        profile = dataclasses.replace(profile, token_budget=args.token_budget)
    if args.learning_rate:
        profile = dataclasses.replace(profile, learning_rate=args.learning_rate)
    if args.loss_type:
        profile = dataclasses.replace(profile, loss_type=args.loss_type)
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    command = "costaware reproduce " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["reproduce"] else "costaware reproduce"
    print(f"[costaware] profile {args.profile}: SFT warm-up ...", flush=True)
    sft_dir = warm_up(profile, out)
    specs = run_specs(profile, args.methods, tuple(args.only or GROUPS))
    files = {spec: out / "runs" / f"{_run_name(spec)}-{_key([_non_default(spec), _non_default(profile)])}.json" for spec in specs}
    todo = [(spec, f) for spec, f in files.items() if not f.exists()]
    print(f"[costaware] {len(specs)} runs, {len(specs) - len(todo)} already finished, {args.jobs} at a time", flush=True)
    if todo:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(run_one, asdict(s), asdict(profile), str(sft_dir), str(f)) for s, f in todo]
            for fut in tqdm(as_completed(futures), total=len(futures), desc="runs"):
                fut.result()
    # exactly this profile's runs: a folder may also hold runs of other profiles or methods
    results = [json.loads(f.read_text()) for f in files.values()]
    sft_info = json.loads((sft_dir / "sft.json").read_text())
    paths = report.write_report(results, out, profile=asdict(profile), sft=sft_info, command=command)
    print(f"[costaware] report: {paths['markdown']}  {paths['html']}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "reproduce",
        help="The main job: Cost-Aware GRPO against GRPO on a small local policy, on the CPU, with a report.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profile", choices=sorted(PROFILES), default="default", help="sizes (default: %(default)s)")
    p.add_argument("--quick", dest="profile", action="store_const", const="quick", help="same as --profile quick")
    p.add_argument("--out", default="runs/reproduce", help="output folder (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=2, help="training processes at a time (default: %(default)s)")
    p.add_argument("--methods", nargs="+", help="headline methods (default: none nonzero p_star p_smooth pods)")
    p.add_argument("--seeds", nargs="+", type=int, help="headline seeds (default: the profile's)")
    p.add_argument("--rounds", type=int, help="generation rounds per run, a cap when there is a token budget")
    p.add_argument("--token-budget", type=int,
                   help="policy-optimisation tokens every run spends (0: stop after --rounds; default: the profile's)")
    p.add_argument("--learning-rate", type=float, help="GRPO learning rate (default: the profile's)")
    p.add_argument("--loss-type", help="TRL loss_type of the GRPO setting (default: the profile's, grpo)")
    p.add_argument("--only", nargs="+", choices=GROUPS, help="run and report only these groups of runs")
    p.set_defaults(func=main)
