"""Cost-Aware GRPO on TRL's ``GRPOTrainer``: only the overrides (one machine, or several via accelerate).

Only the split of each generation batch into optimiser steps changes; generation is TRL's own unless
``cost_aware_generation="kv"`` (:mod:`costaware.integrations.trl.rollout`).
Where stock TRL shuffles the batch and cuts it into ``steps_per_generation`` chunks,
:class:`CostAwareGRPOTrainer`

1. gathers every process's advantages, costs (:func:`~costaware.grpo.advantages.sequence_costs_from_masks`),
   completion lengths and rewards, so that every process holds the global pool;
2. calls the core's one entry point for a round, :func:`~costaware.grpo.step.plan_round`: one global plan
   from a seed every process shares (n_supp and the budgets are global), sharded so that each drawn row
   is fed by the process that holds it and every process feeds the same number of rows in every
   micro-step (zero-factor padding rows, so TRL's ``accelerator.gather`` meets equal shapes), with each
   fed row's loss factor for the loss type's family (:mod:`~costaware.integrations.trl.losses`) and the
   round's counts;
3. folds each fed row's loss factor into ``advantages``.

Why folding into ``advantages`` is exact (read from TRL 1.16 ``_compute_loss``): for a factor f >= 0,
every policy term is positively homogeneous in A — ``-min(ρA, clip(ρ)A)`` (grpo, bnpo, dr_grpo,
dapo, luspo; with the optional ``delta`` clamp on ρ), CISPO's ``-sg(min(ρ, ε_h))·A·log π``, SAPO's
``-σ(τ(ρ-1))·4/τ·A`` with τ chosen by the sign of A, VESPO's ``-φ(w)·A·log π`` with φ's shape chosen
by the sign of A — and the off-policy mask, entropy mask and vLLM IS ratio depend on A only through
its sign. So f·A scales the row's policy loss by f. What A does not reach, and how it is handled:

- the KL term (``beta > 0``): :meth:`CostAwareGRPOTrainer.compute_loss` adds β·(f−1)·KL per row with
  the loss type's own aggregation, so the row's whole loss is multiplied by f. The config refuses
  beta > 0 with a method that gives zero-advantage rows p = 0 (their KL gradient would be lost):
  with full support (p_smooth, α > 0) the KL estimate is unbiased like the policy term;
- the entropy bonus is a token mean over the micro-batch, not a per-sequence term: refused;
- ``top_entropy_quantile < 1`` takes a quantile over the micro-batch's tokens, which merging duplicates
  changes: refused with ``cost_aware_merge_duplicates=True``;
- the MoE router aux loss is a property of the forward pass, not of a sequence: left unweighted.

Normalisation (``cost_aware_normaliser``), see :mod:`costaware.grpo.factors`: ``"draws"`` (default)
makes each step's loss stock TRL's loss on the drawn rows, duplicates included; ``"pool"`` keeps the
baseline's normaliser, so that with ``cost_aware_weights="raw"`` the gradient is an unbiased estimate
of stock TRL's. With ``cost_aware_budget="tokens"`` the draws per step are random and ``"draws"``
divides by the realised count: a ratio estimator (its bias is measured in the tests); ``"pool"``
does not.

Skipped steps (an all-zero pool, or a step the plan leaves empty): the plan is global, so every process
knows when a step holds only padding on every process, and then no process runs a forward or backward,
on any number of processes. With no forward there is no collective to keep in step (DDP's all-reduce
runs in the backward, TRL's metric gathers in the loss), and every ``.grad`` stays ``None``, so every
optimiser TRL offers leaves each parameter, its step count, its moments and its weight decay alone
(torch's optimisers and Adafactor skip parameters without a gradient); the gradient clipping sees no
gradient. One exception keeps DDP in step under gradient accumulation: when such a micro-step closes
an optimiser step (DDP syncs in its backward) after earlier micro-steps of that step ran, every
process feeds one zero-factor padding row, which adds exact zeros. A process whose own rows all have
A = 0 while others' do not feeds padding rows in the steps the others feed. The learning-rate
schedule follows HF's ``Trainer`` and stock TRL: the scheduler steps with every optimiser step,
skipped or not (stock TRL steps on an all-zero pool with zero policy gradient), so a run with skips
keeps stock's schedule step for step, on one process and on several alike.

Counters (:class:`~costaware.grpo.accounting.Counters`) come from the global plan, so they are
totals over processes, and count every forward/backward: ×``num_iterations`` (TRL re-runs each plan
that many times). They are logged once per log as single values (TRL averages lists per log).
``po_seconds`` is this process's wall time (processes run in step).

Proxy (``cost_aware_proxy``, see :mod:`costaware.grpo.proxy`): p_star/p_smooth sample with
p ∝ |A|·c^(β−½). Under ``"calibrated"`` (the default for token-sum losses) a
:class:`~costaware.grpo.proxy.BetaCalibrator` holds β: every ``cost_aware_calibration_interval``
generation batches, each process measures exact per-row gradient norms (the diagnostics' hook,
``per_row_grad_norms``) on rows with A ≠ 0, every process gathers every process's (|A|, G, c) and runs
the same fit, so β is the same on every rank; a fit waits for ``cost_aware_calibration_rows`` rows from
at least 4 groups (:mod:`~costaware.integrations.trl.calibration`). The pool that is measured is planned
with the β of earlier fits; the new β serves the next pools. That state is ``cost_aware_calibration`` (a
:class:`~costaware.integrations.trl.measure.Calibration`), saved beside the counters in every checkpoint
(``CALIBRATOR_FILE``).

Token budget (``cost_aware_token_budget``): training stops once the counted tokens reach it, when a
generation batch is spent (:class:`~costaware.integrations.trl.callbacks.TokenBudget`). The counters are
logged with every log and with TRL's end-of-training summary, whatever ``logging_steps`` is.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

import costaware.integrations.trl.measure as measure
from costaware.grpo.accounting import METRIC_PREFIX, Counters, StepCounts, load_counters, save_counters
from costaware.grpo.advantages import sequence_costs_from_masks
from costaware.grpo.diagnostics import per_sequence_grad_norms
from costaware.grpo.shard import rank_offsets
from costaware.grpo.step import GlobalPool, Round, plan_round
from costaware.integrations.trl import prompts
from costaware.integrations.trl.batch import MULTIMODAL, index_rows, loss_mask, trim_padding
from costaware.integrations.trl.callbacks import TokenBudget
from costaware.integrations.trl.config import CostAwareGRPOConfig
from costaware.integrations.trl.logprobs import FedLogprobsMixin
from costaware.integrations.trl.losses import TRL_LOSS_FAMILY, reduce_like_trl
from costaware.integrations.trl.rollout import KVRolloutMixin
from costaware.integrations.trl.zvf import GenerationMixin

__all__ = ["CALIBRATOR_FILE", "CostAwareGRPOTrainer", "GlobalPool"]  # GlobalPool: the core's, re-exported

CALIBRATOR_FILE = measure.CALIBRATOR_FILE  # beside accounting's STATE_FILE in each checkpoint

_WEIGHT_KEY = "cost_aware_weight"  # (k,) per-row loss factor folded into advantages
_SKIP_KEY = "cost_aware_skip"
_PADDING_KEY = "cost_aware_padding"  # a skipped step's padding rows: fed only when DDP must sync


class _OptimizerTimer(TrainerCallback):
    """Adds the wall time of every ``optimizer.step()`` to the trainer's ``po_seconds`` counter."""

    def __init__(self, trainer: CostAwareGRPOTrainer) -> None:
        self.trainer = trainer
        self.start: float | None = None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._ca_grads_pending = False  # the gradients were used; zero_grad sets them to None
        if self.start is not None:
            self.trainer.cost_aware_counters.po_seconds += time.perf_counter() - self.start
            self.start = None


class CostAwareGRPOTrainer(GenerationMixin, FedLogprobsMixin, KVRolloutMixin, GRPOTrainer):
    """``GRPOTrainer`` whose policy-optimisation mini-batches are drawn by a global cost-aware plan.

    Takes the same arguments as ``GRPOTrainer``; ``args`` must be a :class:`CostAwareGRPOConfig`.
    Cumulative counters live in ``self.cost_aware_counters`` (``cost_aware_state`` is a dict copy),
    are logged under ``cost_aware/total/*`` and saved with (and restored from) every checkpoint.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, CostAwareGRPOConfig):
            raise ValueError(f"args must be a CostAwareGRPOConfig, got {type(self.args).__name__}")
        self.sampling = self.args.sampling_config()
        self.cost_aware_counters = Counters()
        self._ca_rewards: torch.Tensor | None = None
        self._ca_capture: list[torch.Tensor] | None = None
        self._ca_prepare_seconds = 0.0
        self._zvf_iter: Any = None
        # (model, loss_fn, rows) -> (k,) exact per-row gradient norms, for the diagnostics; a probe that
        # wants the gradients themselves replaces this attribute (examples/proxy_fidelity_probe.py)
        self.per_row_grad_norms = per_sequence_grad_norms
        self.prompt_stage = prompts.build_stage(self)  # None: TRL's sampler, every prompt generated
        self.cost_aware_calibration = measure.Calibration.for_run(
            self.sampling.proxy, self.loss_type, self.args.cost_aware_calibration_interval
        )
        self._ca_grads_pending = False  # a micro-step since the last optimiser step ran a backward
        if self.args.cost_aware_mse_interval and self.accelerator.num_processes > 1:
            raise ValueError(
                f"cost_aware_mse_interval={self.args.cost_aware_mse_interval!r} with "
                f"{self.accelerator.num_processes} processes: the step-error measurement runs on one process"
            )
        self.add_callback(_OptimizerTimer(self))
        self.add_callback(TokenBudget(self))

    @property
    def cost_aware_state(self) -> dict[str, float]:
        """The counters as a plain dict (a copy)."""
        return self.cost_aware_counters.to_dict()

    # -- the split ----------------------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            start = time.perf_counter()
            batch, rewards = self._generate_filtered(generation_batch)
            self._buffered_inputs = self._split(batch, rewards)
            self._ca_prepare_seconds += time.perf_counter() - start
        return self._skip_or_feed(self._buffered_inputs[self._step % spg])

    def _skip_or_feed(self, micro: dict[str, Any]) -> dict[str, Any]:
        """A step of padding on every process runs no forward, unless DDP must sync earlier gradients in it.

        The decision reads only what every process shares (the global plan, the trainer's accumulation
        position and the forwards run so far), so every process takes the same branch."""
        if not micro.get(_SKIP_KEY):
            self._ca_grads_pending = True
            return micro
        padding = micro.get(_PADDING_KEY)
        if padding is None or not (self._ca_grads_pending and self.accelerator.sync_gradients):
            return {_SKIP_KEY: True}
        rows, counts = padding
        self.cost_aware_counters.rows_padding += counts.rows_padding
        self.cost_aware_counters.tokens_padding += counts.tokens_padding
        return rows

    def _gather_pool(self, batch: dict[str, Any], rewards: torch.Tensor) -> GlobalPool:
        """Two gathers, run on every process whatever its rows hold (collective-safe)."""
        adv = batch["advantages"]
        n = adv.shape[0]
        if rewards.numel() != n:
            raise ValueError(f"rewards has {rewards.numel()} rows but advantages has {n}")
        device = self.accelerator.device
        costs = sequence_costs_from_masks(batch["prompt_mask"].cpu(), batch["completion_mask"].cpu())
        lengths = loss_mask(batch).sum(1).double().cpu()
        local = torch.stack([adv.detach().double().cpu(), costs.double(), lengths, rewards.double().cpu()], 1)
        sizes = [int(s) for s in self.accelerator.gather(torch.tensor([n], device=device)).cpu()]
        width = max(sizes)  # ZVF can leave processes with different row counts: pad, gather, cut
        padded = torch.cat([local, torch.zeros(width - n, local.shape[1], dtype=local.dtype)]).to(device)
        table = self.accelerator.gather(padded).cpu().reshape(len(sizes), width, -1)
        rows = torch.cat([table[r, :s] for r, s in enumerate(sizes)])
        return GlobalPool(rows[:, 0].float(), rows[:, 1].round().long(), rows[:, 2], rows[:, 3], tuple(sizes))

    def _split(self, batch: dict[str, Any], rewards: torch.Tensor) -> list[dict[str, Any]]:
        """The ``steps_per_generation`` micro-batches of this process, with the accounting around them."""
        if any(k in batch for k in MULTIMODAL):
            raise ValueError(f"CostAwareGRPOTrainer does not support multimodal batches (keys {MULTIMODAL})")
        adv = batch["advantages"]
        if adv.ndim != 1:
            raise ValueError(f"advantages must be (N,) one per row, got shape {tuple(adv.shape)}")
        spg, procs, rank = (
            self.args.steps_per_generation,
            self.accelerator.num_processes,
            self.accelerator.process_index,
        )
        pool = self._gather_pool(batch, rewards)
        if self.prompt_stage is not None:  # fold the round into the prompt state; weighted: scale A by 1/(N q)
            assert pool.rewards is not None  # _gather_pool gathers every row's reward
            drawn = self.prompt_stage.draw()
            factors = torch.from_numpy(prompts.fold_round(self.prompt_stage, pool.rewards, pool.lengths, pool.costs))
            for key, value in prompts.round_metrics(drawn, pool.rewards, self.num_generations).items():
                self._metrics["train"][key].append(value)
            if self.prompt_stage.method.weighted:
                offset, n = int(rank_offsets(pool.rank_sizes)[rank]), adv.shape[0]
                pool = replace(pool, advantages=(pool.advantages.double() * factors).float())
                batch = {**batch, "advantages": adv * factors[offset : offset + n].to(adv.device, adv.dtype)}
                adv = batch["advantages"]
        sampling, cal = self.sampling, self.cost_aware_calibration.calibrator
        if cal is not None:  # β from the rounds so far (the same on every process)
            sampling = replace(sampling, proxy_beta=cal.beta)
        if sampling.proxy == "oracle":  # every row's exact gradient norm in place of |A|
            pool = replace(
                pool, grad_norms=measure.oracle_norms(self, batch, pool, int(rank_offsets(pool.rank_sizes)[rank]))
            )
        rnd = plan_round(
            pool, sampling, seed=int(self.args.seed), step=int(self.cost_aware_counters.generations),
            family=TRL_LOSS_FAMILY[self.loss_type], num_steps=spg,
            minibatch_size=self.args.per_device_train_batch_size * procs,  # the baseline's rows per step
            normaliser=self.args.cost_aware_normaliser, epochs=self.num_iterations, group_size=self.num_generations,
        )  # fmt: skip
        plan, offset = rnd.plan, int(rank_offsets(pool.rank_sizes)[rank])
        metrics = self._metrics["train"]
        for key in ("beta", "alpha"):
            if plan.meta.get(key) is not None:
                metrics[f"cost_aware/{'proxy_beta' if key == 'beta' else key}"].append(float(plan.meta[key]))
        measure.maybe_calibrate(self, batch, plan, pool, offset)
        interval = self.args.cost_aware_diagnostics_interval
        if interval and self.cost_aware_counters.generations % interval == 0:
            measure.diagnostics(self, batch, plan, pool, offset)
        every = self.args.cost_aware_mse_interval
        if every and self.cost_aware_counters.generations % every == 0:
            measure.step_mse(self, batch, rnd, offset)
        if sampling.rule.plain and adv.shape[0] == self.args.per_device_train_batch_size * spg:
            # exactly stock TRL's split (same global RNG draw, same chunks): no padding rows are fed
            self._account(replace(rnd.counts, rows_padding=0.0, tokens_padding=0.0))
            missing = self._missing_logprobs(batch)  # scored under a method that deferred them: every row
            if missing:
                batch = {**batch, **self._all_row_logprobs(batch, missing)}
            return split_tensor_dict(shuffle_sequence_dict(batch), spg)  # type: ignore[arg-type]  # TRL's own pairing; its stubs disagree
        deferred = self._missing_logprobs(batch)
        if deferred:  # TRL's passes were skipped while scoring: run them on the fed rows (a new dict: the
            batch = {**batch, **self._fed_logprobs(batch, rnd.shards, list(rnd.pad_rows), deferred)}  # caller's
        padding = _padding_counts(rnd, pool)
        micro = self._weighted_minibatches(batch, rnd, rank, padding)  # is left as it was)
        fed = [c for j, c in enumerate(padding) if not _empty_step(rnd, j)]  # a skipped step's: when fed
        epochs = self.num_iterations
        self._account(replace(rnd.counts, rows_padding=epochs * sum(c.rows_padding for c in fed),
                              tokens_padding=epochs * sum(c.tokens_padding for c in fed)))  # fmt: skip
        return micro

    def _weighted_minibatches(
        self, batch: dict[str, Any], rnd: Round, rank: int, padding: list[StepCounts]
    ) -> list[dict[str, Any]]:
        """This process's rows of every step, with the round's loss factor folded into ``advantages``.

        A step whose rows are padding on every process is marked skipped (no forward on any process);
        on several processes it keeps its padding rows, fed only when DDP must sync (``_skip_or_feed``)."""
        n, procs = batch["advantages"].shape[0], self.accelerator.num_processes
        global_tokens = TRL_LOSS_FAMILY[self.loss_type] == "global_tokens"
        num_items = torch.tensor(rnd.global_tokens, device=self.accelerator.device)
        micro: list[dict[str, Any]] = []
        for j, step in enumerate(rnd.steps[rank]):
            empty = _empty_step(rnd, j)
            if empty and procs == 1:
                micro.append({_SKIP_KEY: True})  # no collective to join: the padding rows are never fed
                continue
            sub = index_rows(batch, step.shard.rows, n)
            if global_tokens:
                sub["num_items_in_batch"] = num_items
            device, dtype = sub["advantages"].device, sub["advantages"].dtype
            sub[_WEIGHT_KEY] = step.factors.to(device, dtype)
            sub["advantages"] = step.advantages.to(device, dtype) * sub[_WEIGHT_KEY]
            if self.pad_to_multiple_of is None:
                sub = trim_padding(sub)
            micro.append({_SKIP_KEY: True, _PADDING_KEY: (sub, padding[j])} if empty else sub)
        return micro

    def _account(self, step: StepCounts) -> None:
        counters, metrics = self.cost_aware_counters, self._metrics["train"]
        counters.add(step)
        for name in ("tokens", "rows_unique", "skipped"):  # per pool (TRL averages them over a log's pools)
            metrics[f"{METRIC_PREFIX}/step/{name}"].append(getattr(step, name))
        k = self.args.cost_aware_warn_after_skips
        if k and counters.consecutive_skipped and counters.consecutive_skipped % k == 0:
            warnings.warn(
                f"Cost-Aware GRPO skipped {int(counters.consecutive_skipped)} pools in a row: every advantage "
                "was zero (all rewards equal in every group), so no policy update happened. The policy may "
                "be stuck at 0% or 100% accuracy; check the reward function or the data.",
                RuntimeWarning,
                stacklevel=2,
            )

    # -- loss ---------------------------------------------------------------------------------------
    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)  # FedLogprobsMixin may answer None
        if self._ca_capture is not None:
            self._ca_capture.append(out[0])
        return out

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if inputs.get(_SKIP_KEY):
            # no forward: a leaf loss whose backward leaves every parameter's .grad untouched (None)
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        if self.beta == 0.0 or _WEIGHT_KEY not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self._ca_capture = []
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            per_token_logps = self._ca_capture[0]
        finally:
            self._ca_capture = None
        return loss + self._kl_correction(inputs, per_token_logps)

    def _kl_correction(self, inputs: dict[str, Any], per_token_logps: torch.Tensor) -> torch.Tensor:
        """β·(f−1)·KL per row, aggregated like the loss type: the KL term then carries the factor f too."""
        mask = loss_mask(inputs).to(per_token_logps.dtype)
        ref = inputs["ref_per_token_logps"]
        d = ref - per_token_logps
        kl = torch.exp(d) - d - 1  # TRL's k3 estimator
        if self.args.use_bias_correction_kl:
            old = inputs.get("old_per_token_logps")
            log_ratio = per_token_logps - (per_token_logps.detach() if old is None else old)
            if self.importance_sampling_level == "sequence":
                log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
            kl = kl * torch.exp(log_ratio)
        extra = self.beta * (inputs[_WEIGHT_KEY].to(kl.dtype) - 1.0).unsqueeze(1) * kl
        return reduce_like_trl(
            self.loss_type, extra, mask, max_completion_length=self.max_completion_length,
            grad_accum=self.current_gradient_accumulation_steps, num_items=inputs.get("num_items_in_batch"),
            num_processes=self.accelerator.num_processes, steps_per_generation=self.args.steps_per_generation,
            training=self.model.training,
        )  # fmt: skip

    # -- accounting, logging, checkpoints -----------------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):
        start, prep = time.perf_counter(), self._ca_prepare_seconds
        out = super().training_step(model, inputs, num_items_in_batch)
        generation = self._ca_prepare_seconds - prep  # generation + plan, not policy optimisation
        self.cost_aware_counters.po_seconds += time.perf_counter() - start - generation
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # with every training log and with the end-of-training summary (TRL's "train_runtime" log), so a
        # run logs its totals whatever logging_steps is; one value per log, never averaged by TRL
        if (self.model.training and "loss" in logs) or "train_runtime" in logs:
            logs = {**logs, **self.cost_aware_counters.metrics()}
            cal = self.cost_aware_calibration
            if cal.calibrator is not None and self.cost_aware_counters.po_seconds > 0:
                share = cal.seconds / self.cost_aware_counters.po_seconds
                logs[f"{METRIC_PREFIX}/calibration_share_of_po"] = share
        super().log(logs, start_time)

    def _get_train_sampler(self, dataset=None):
        if self.prompt_stage is None:
            return super()._get_train_sampler(dataset)
        return prompts.train_sampler(self)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = f"{self._get_output_dir(trial=trial)}/checkpoint-{self.state.global_step}"
            save_counters(self.cost_aware_counters, folder)
            self.cost_aware_calibration.save(folder)
            prompts.save_stage(self.prompt_stage, folder)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            saved = load_counters(checkpoint)
            if saved is not None:
                self.cost_aware_counters = saved
            self.cost_aware_calibration.load(checkpoint)
            prompts.load_stage(self.prompt_stage, checkpoint, self.args.cost_aware_rollout)


def _empty_step(rnd: Round, j: int) -> bool:
    """Step j holds only padding rows on every process (the plan is global: every process knows it)."""
    return all(bool(per_rank[j].shard.padding.all()) for per_rank in rnd.steps)


def _padding_counts(rnd: Round, pool: GlobalPool) -> list[StepCounts]:
    """Per step, the padding rows and tokens all processes together feed in it, once (one PPO epoch)."""
    offsets = rank_offsets(pool.rank_sizes)
    cost = [int(pool.costs[int(offsets[r]) + pad]) for r, pad in enumerate(rnd.pad_rows)]
    out = []
    for j in range(len(rnd.steps[0])):
        rows = [int(per_rank[j].shard.padding.sum()) for per_rank in rnd.steps]
        tokens = sum(k * c for k, c in zip(rows, cost, strict=True))
        out.append(StepCounts(rows_padding=float(sum(rows)), tokens_padding=float(tokens)))
    return out
