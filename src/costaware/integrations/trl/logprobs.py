"""Log-probs of the rows the plan feeds only (``cost_aware_logprob_rows="fed"``): a mixin of the TRL adapter.

While it scores a generation batch, stock TRL 1.16 runs up to two no-grad forward passes over *every*
row: the policy's, for the old log-probs of the clipped ratio (when a round takes more than one
optimiser step: ``gradient_accumulation_steps`` not a multiple of ``steps_per_generation ×
num_iterations``), and the reference model's, for the KL term (``beta != 0``). A row the plan never
feeds (p = 0: zero advantage under p*, ``nonzero``, PODS) enters no loss, so both passes over it are
wasted. This mixin skips them while the batch is scored and, once the plan exists, runs them on the
rows some optimiser step feeds.

How TRL's passes are recognised: while a batch is scored, the first no-grad call of
``_get_per_token_logps_and_entropies`` on ``self.model`` is the old-logp pass (TRL makes it before the
reference pass), and a call on ``self.ref_model`` is the reference pass. Each is armed only when TRL
would make it, and answers ``None``, so TRL stores nothing. A PEFT reference (``ref_model is None``:
TRL runs ``self.model`` with the adapter switched) and vLLM's importance-sampling correction (which
needs every row's old log-probs) are left to TRL; so is GRPO itself (method ``none`` feeds every row).

Collective-safe: every process runs as many forward chunks as the busiest one (the row counts come
from the global plan, which every process holds), the others repeating their padding row, so sharded
models (FSDP, ZeRO-3), whose forward gathers parameters, stay in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from trl.models.utils import disable_gradient_checkpointing

from costaware.grpo.shard import ShardStep
from costaware.integrations.trl.batch import index_rows, trim_padding

if TYPE_CHECKING:  # type-checked as the trainer it is mixed into; at run time a plain mixin
    from costaware.integrations.trl._typing import TrainerState as _Trainer
else:
    _Trainer = object

__all__ = ["FedLogprobsMixin", "OLD", "REF"]

OLD, REF = "old_per_token_logps", "ref_per_token_logps"


class FedLogprobsMixin(_Trainer):
    """Mixed into :class:`~costaware.integrations.trl.trainer.CostAwareGRPOTrainer` (needs its state)."""

    _ca_skip: frozenset[str] = frozenset()  # the passes armed to be skipped while a batch is scored

    def _needed_logprobs(self) -> frozenset[str]:
        """The batch keys (OLD, REF) TRL's loss reads: old log-probs when a round takes several optimiser
        steps, reference log-probs when β ≠ 0 with a separate reference model (PEFT's is left to TRL)."""
        needed = set()
        if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations):
            needed.add(OLD)
        if self.beta != 0.0 and self.ref_model is not None:
            needed.add(REF)
        return frozenset(needed)

    def _deferred_logprobs(self) -> frozenset[str]:
        """The passes run on the fed rows instead of TRL's whole batch (vLLM's IS correction needs every
        row's old log-probs; GRPO feeds every row)."""
        if self.args.cost_aware_logprob_rows != "fed" or self.sampling.rule.plain:
            return frozenset()
        vllm_is = self.use_vllm and self.vllm_importance_sampling_correction
        return self._needed_logprobs() - ({OLD} if vllm_is else set())

    def _missing_logprobs(self, batch: dict[str, Any]) -> frozenset[str]:
        """The keys TRL's loss will read that ``batch`` lacks: the passes deferred while it was scored."""
        return frozenset(k for k in self._needed_logprobs() if k not in batch)

    def _generate_and_score_completions(self, inputs):
        self._ca_skip = self._deferred_logprobs()
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._ca_skip = frozenset()

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        model = args[0] if args else kwargs.get("model")
        if self._ca_skip and not torch.is_grad_enabled():
            key = OLD if model is self.model else REF if model is self.ref_model else None
            if key in self._ca_skip:
                self._ca_skip = self._ca_skip - {key}
                return None, None, None
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    def _logprobs_of(self, model: Any, rows: dict[str, Any]) -> torch.Tensor:
        """No-grad per-token log-probs of ``model`` on ``rows`` (trimmed; completion columns first-aligned)."""
        sub = trim_padding(rows)
        ids = torch.cat([sub["prompt_ids"], sub["completion_ids"]], 1)
        mask = torch.cat([sub["prompt_mask"], sub["completion_mask"]], 1)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, ids, mask, sub["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size
            )
        return logps

    def _fed_logprobs(
        self, batch: dict[str, Any], steps: list[tuple[ShardStep, ...]], pad_rows: list[int], keys: frozenset[str]
    ) -> dict[str, torch.Tensor]:
        """``keys``' tensors ``(n, T)`` for the local rows some step feeds (zeros elsewhere: this plan's steps
        read no other row); empty when no process feeds a row. The policy has not stepped since the
        batch was scored, so the values equal stock TRL's on those rows."""
        procs, rank = self.accelerator.num_processes, self.accelerator.process_index
        fed = [
            torch.unique(torch.cat([s.rows for s in per_rank if procs > 1 or not bool(s.padding.all())]
                                   or [torch.zeros(0, dtype=torch.long)]))
            for per_rank in steps
        ]  # fmt: skip
        busiest = max(int(f.numel()) for f in fed)
        if busiest == 0:  # a skipped pool: no process feeds a row
            return {}
        mine = fed[rank]
        idx = torch.cat([mine, torch.full((busiest - mine.numel(),), pad_rows[rank], dtype=mine.dtype)])
        part = self._all_row_logprobs(index_rows(batch, idx, batch["advantages"].shape[0]), keys)
        out = {}
        for key, logps in part.items():  # the local rows' values, scattered back to their places
            out[key] = logps.new_zeros(batch["completion_mask"].shape)
            out[key][mine.to(logps.device)] = logps[: mine.numel()]
        self._metrics["train"]["cost_aware/logprob_rows"].append(float(busiest * procs))
        return out

    def _all_row_logprobs(self, rows: dict[str, Any], keys: frozenset[str]) -> dict[str, torch.Tensor]:
        """``keys``' tensors for every row of ``rows``. Every process calls it with as many rows as the others
        (a whole stock batch; the busiest process's count of measured rows), so the forward chunks stay in step."""
        out = {}
        for key in sorted(keys):  # the same order on every process
            logps = self._logprobs_of(self.model if key == OLD else self.ref_model, rows)
            full = logps.new_zeros(rows["completion_mask"].shape)  # logps covers the trimmed columns only
            full[:, : logps.shape[1]] = logps
            out[key] = full
        return out

    def _with_ref_logprobs(self, rows: dict[str, Any]) -> dict[str, Any]:
        """``rows`` with their reference log-probs when the KL term needs them and the batch has none (the
        diagnostics and the calibration measure rows the plan may not feed)."""
        missing = self._missing_logprobs(rows) & {REF}
        return {**rows, **self._all_row_logprobs(rows, missing)} if missing else rows
