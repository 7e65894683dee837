"""One GRPO run of the main job: the TRL config of a run (:func:`trainer_args`, built up front for every run so
that a bad option fails before any work) and the run itself through
:class:`costaware.integrations.trl.CostAwareGRPOTrainer` (:func:`run_grpo`): trained from the task's SFT
checkpoint until it has spent the profile's PO-token budget (rounds are a cap), evaluated at equal token
spacing on the held-out set and the validation split, with its PO tokens, generation rounds and generated
tokens at every evaluation.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any, cast

from costaware.experiments.profile import Profile
from costaware.experiments.records import EvalPoint, ProxyFidelityPoint, StepErrorPoint
from costaware.experiments.specs import RunSpec
from costaware.experiments.tasks import get_task
from costaware.experiments.worker import EvalSchedule, Evaluator, load_checkpoint
from costaware.rollouts.logs import RecordingReward

__all__ = ["OPTIMIZER_ARGS", "TRAIN_SEED", "SkipWatch", "jitter", "run_grpo", "trainer_args", "prompt_log"]

TRAIN_SEED = 20_000
# Profile.optimizer -> TRL's settings: "adamw" leaves TRL's own (AdamW, gradients clipped at norm 1); "sgd" is
# the theory's setting, a step −η·ĝ (torch's SGD without momentum or weight decay, no clipping).
OPTIMIZER_ARGS: dict[str, dict[str, Any]] = {"adamw": {}, "sgd": {"optim": "sgd", "max_grad_norm": 0.0}}


def prompt_log(workdir: Path) -> Path:
    """Where a run writes its per-prompt log while it runs (the run's work folder: removed if interrupted)."""
    return Path(workdir) / "prompts.jsonl"


class SkipWatch:
    """Counts consecutive rounds that fed no PO token; warns once when they reach ``limit``."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit, self.name, self.run, self.longest, self.last_tokens, self.warned = limit, name, 0, 0, 0, False

    def __call__(self, tokens: int) -> None:
        self.run = self.run + 1 if tokens == self.last_tokens else 0
        self.longest, self.last_tokens = max(self.longest, self.run), tokens
        if self.run >= self.limit and not self.warned:
            self.warned = True
            warnings.warn(
                f"{self.name}: {self.run} consecutive rounds fed no token (every pool skipped: all "
                "rewards equal); the run ends at the profile's round cap",
                RuntimeWarning,
                stacklevel=2,
            )


def trainer_args(spec: RunSpec, profile: Profile, workdir: Path) -> Any:
    """The TRL config of a GRPO run; built up front for every run, so that a bad option fails before work."""
    from costaware.integrations.trl import CostAwareGRPOConfig

    spg = profile.steps_per_generation
    with warnings.catch_warnings():
        # the proxy advice: each of the job's proxies under a token-sum loss is a deliberate comparison arm
        warnings.filterwarnings("ignore", message="cost_aware_proxy='auto'", category=UserWarning)
        return CostAwareGRPOConfig(
            output_dir=str(workdir), cost_aware_method=spec.method, cost_aware_alpha=spec.alpha,
            cost_aware_weights=spec.weights, cost_aware_proxy_noise=spec.proxy_noise,
            cost_aware_zvf=spec.zvf or spec.rollout == "dapo",
            cost_aware_rollout="all" if spec.rollout == "dapo" else spec.rollout,
            cost_aware_generation_cost=profile.generation_cost,
            cost_aware_budget=spec.step_budget, cost_aware_proxy=spec.proxy,
            cost_aware_pods_keep=min(profile.pods_keep, profile.generations),
            loss_type=spec.resolved_loss_type(profile), beta=0.0, learning_rate=profile.learning_rate * spec.lr_scale,
            lr_scheduler_type="constant_with_warmup" if profile.warmup_rounds else "constant",
            warmup_steps=profile.warmup_rounds * spg, num_generations=profile.generations,
            per_device_train_batch_size=profile.prompts_per_round * profile.generations // spg,
            steps_per_generation=spg, max_steps=profile.rounds * spg,
            max_completion_length=get_task(spec.task).max_response_tokens(profile.sizes(spec.task)[1]) + 1,
            temperature=1.0,
            seed=spec.seed, data_seed=spec.seed, report_to="none", use_cpu=True, bf16=False, logging_steps=spg,
            save_strategy="no", disable_tqdm=True,
            gradient_checkpointing=False,  # TRL turns it on; a tiny CPU model only pays the recomputation
            cost_aware_diagnostics_interval=profile.diagnostics_every if profile.diagnostics_rows else 0,
            cost_aware_diagnostics_rows=max(2, profile.diagnostics_rows),
            cost_aware_logprob_rows=profile.logprob_rows, cost_aware_generation=profile.generation,
            cost_aware_token_budget=profile.token_budget,  # stops at the end of the round that reaches it
            cost_aware_mse_interval=profile.mse_every,
            **OPTIMIZER_ARGS[profile.optimizer],
        )  # fmt: skip


JITTER_SEED = 30_000


def jitter(model: Any, scale: float, seed: int) -> None:
    """Multiply every weight by 1 + scale·N(0, 1), in place, from a generator seeded by ``seed``: a perturbation
    of the size another processor's rounding leaves in a trained model, at a known place."""
    import torch

    gen = torch.Generator().manual_seed(JITTER_SEED + seed)
    with torch.no_grad():
        for p in model.parameters():  # a tied embedding is one parameter: perturbed once
            p.mul_(1 + scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def run_grpo(spec: RunSpec, profile: Profile, sft_dir: Path, workdir: Path) -> dict[str, Any]:
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from costaware.integrations.trl import CostAwareGRPOTrainer

    task = get_task(spec.task)
    tok, model = load_checkpoint(sft_dir)
    if profile.numeric_jitter:
        jitter(model, profile.numeric_jitter, spec.seed)
    evaluate = Evaluator(profile, spec.task, tok, sft_dir)
    num_train = profile.train_prompts or profile.rounds * profile.prompts_per_round
    tasks = task.make_tasks(
        num_train,
        min_size=profile.min_size,
        max_size=profile.sizes(spec.task)[1],
        rng=np.random.default_rng(TRAIN_SEED + spec.seed),
    )
    # prompt_id: the per-prompt logs' key (TRL passes dataset columns to reward functions)
    data = Dataset.from_dict(
        {
            "prompt": list(tasks.prompts),
            "answer": np.asarray(tasks.answers).tolist(),
            "prompt_id": list(range(num_train)),
        }
    )
    args = trainer_args(spec, profile, workdir)
    spg = profile.steps_per_generation
    rollouts = {"generated_tokens": 0}  # every generated completion passes through the reward once

    def score(
        completions: list[Any],
        answer: list[Any],
        completion_ids: list[list[int]] | None = None,
        prompt_id: Any = None,
        **kw: Any,
    ):
        rollouts["generated_tokens"] += (
            sum(map(len, completion_ids))
            if completion_ids is not None
            else sum(len(c if isinstance(c, str) else c[0]["content"]) + 1 for c in completions)
        )  # char tokenizer + EOS
        return task.reward(completions, answer, **kw)

    score.__name__ = f"{task.name}_reward"
    # every generated group's rewards and lengths, for `costaware rollouts analyse` (kept beside the run file)
    reward = RecordingReward(
        score,
        prompt_log(workdir),
        profile.generations,
        count_prompt_tokens=lambda p: len(tok(p, add_special_tokens=False).input_ids),
    )
    evals: list[EvalPoint] = []
    due, watch = EvalSchedule(profile), SkipWatch(profile.skipped_warn_rounds, spec.slug)

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

    trainer._generate = timed_generate  # type: ignore[method-assign]  # this trainer's generation, timed

    def record(step: int) -> None:
        st = trainer.cost_aware_state
        evals.append(EvalPoint(
            # generation rounds: one per pool, plus every ZVF refill batch (each as large as a pool)
            rounds=int(st["generations"]) + int(st.get("zvf_refills", 0)), po_tokens=int(st["tokens"]),
            generated_tokens=int(rollouts["generated_tokens"]),
            **cast("dict[str, Any]", dict(zip(("heldout_accuracy", "validation_accuracy"),
                       evaluate.start(trainer.model, "grpo") if step == 0 and not profile.numeric_jitter
                       else evaluate(trainer.model), strict=True))),
            step=step, po_seconds=float(st["po_seconds"]), po_tokens_plain=int(st["tokens_plain"]),
            po_tokens_nonzero=int(st["tokens_nonzero"]),
        ))  # fmt: skip

    torch.manual_seed(spec.seed)
    record(0)
    trainer.train()
    tokens = int(trainer.cost_aware_state["tokens"])
    capped = profile.token_budget > 0 and tokens < profile.token_budget
    if capped:
        warnings.warn(f"{spec.slug} seed {spec.seed}: stopped at the round cap ({profile.rounds} rounds) with "
                      f"{tokens} of {profile.token_budget} PO tokens", RuntimeWarning, stacklevel=1)  # fmt: skip
    counters = {k: float(v) for k, v in trainer.cost_aware_state.items() if isinstance(v, int | float)}
    counters.update(round_cap_hit=float(capped), longest_skipped_run=float(watch.longest))
    if trainer.prompt_stage is not None:  # prompts the stage looked at, and drew, over the run
        counters.update(
            prompts_examined=float(trainer.prompt_stage.examined),
            prompts_drawn=float(trainer.prompt_stage.round * trainer.prompt_stage.batch),
        )
    fidelity = tuple(
        ProxyFidelityPoint(step=int(h["step"]), po_tokens=int(h["cost_aware/total/tokens"]),
                           **{k: _finite(h.get(f"cost_aware/{k}")) for k in ("pearson", "chi2", "j_vs_uniform")})
        for h in trainer.state.log_history if "cost_aware/chi2" in h
    )  # fmt: skip
    step_errors = tuple(
        StepErrorPoint(step=int(h["step"]), po_tokens=int(h["cost_aware/total/tokens"]),
                       measured=float(h["cost_aware/mse_measured"]),
                       predicted=_finite(h.get("cost_aware/mse_predicted")),
                       grad_sq=_finite(h.get("cost_aware/mse_grad_sq")))
        for h in trainer.state.log_history if "cost_aware/mse_measured" in h
    )  # fmt: skip
    return {
        "evals": evals,
        "counters": counters,
        "fidelity": fidelity,
        "step_errors": step_errors,
        "generation_seconds": generation["seconds"],
        "eval_seconds": evaluate.seconds,
        "trainer": trainer,
    }
