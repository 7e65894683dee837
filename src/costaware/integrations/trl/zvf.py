"""Generation-side overrides of the TRL adapter: reward capture and DAPO zero-variance filtering.

ZVF keeps the groups whose rewards differ (:func:`costaware.grpo.zvf.nonzero_variance_groups`) and
regenerates from a separate seeded prompt stream until every process is full or
``cost_aware_zvf_max_rounds`` is reached. Every process generates in every round (the stopping test
is gathered), so the generation collectives stay in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from trl.trainer.utils import RepeatSampler

from costaware.grpo.zvf import nonzero_variance_groups
from costaware.integrations.trl.batch import concat_batches, index_rows, loss_mask

if TYPE_CHECKING:  # type-checked as the trainer it is mixed into; at run time a plain mixin
    from costaware.integrations.trl._typing import TrainerState as _Trainer
else:
    _Trainer = object

__all__ = ["GenerationMixin"]


class GenerationMixin(_Trainer):
    """Mixed into :class:`~costaware.integrations.trl.trainer.CostAwareGRPOTrainer` (needs its state)."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self._ca_rewards = (rewards_per_func * weights).nansum(dim=1)  # gathered over processes, as TRL's
        return rewards_per_func

    def _local_rewards(self, n_local: int) -> torch.Tensor:
        if self._ca_rewards is None:
            raise RuntimeError("no rewards were captured: _generate_and_score_completions has not run")
        start = self.accelerator.process_index * n_local
        return self._ca_rewards[start : start + n_local].detach().float().cpu()

    def _zvf_refill_batch(self) -> list[dict[str, Any]]:
        """The next generation batch of fresh prompts for ZVF (its own seeded sampler, like DAPO)."""
        if self._zvf_iter is None:
            if isinstance(self.train_dataset, torch.utils.data.IterableDataset):
                raise ValueError("cost_aware_zvf needs a map-style train_dataset (it draws refill prompts)")
            loader = self._get_dataloader(
                dataset=self.train_dataset,
                description="Training",
                batch_size=self._train_batch_size * self.args.steps_per_generation,
                sampler_fn=lambda ds: RepeatSampler(
                    data_source=ds,  # type: ignore[arg-type]  # map-style: sized, which torch's Dataset type omits
                    mini_repeat_count=self.num_generations,
                    batch_size=self.args.generation_batch_size // self.num_generations,
                    repeat_count=1,
                    shuffle=True,
                    seed=self.args.seed + 104_729,  # a stream of prompts apart from the main loader's
                ),
                is_training=True,
            )
            self._zvf_loader = loader
            self._zvf_iter = iter(loader)
            for _ in range(int(self.cost_aware_counters.zvf_refills) % max(1, len(loader))):  # resume
                next(self._zvf_iter)
        try:
            batch = next(self._zvf_iter)
        except StopIteration:
            self._zvf_iter = iter(self._zvf_loader)
            batch = next(self._zvf_iter)
        self.cost_aware_counters.zvf_refills += 1
        return batch

    def _generate_filtered(self, generation_batch: Any) -> tuple[dict[str, Any], torch.Tensor]:
        """Generate and score; with ZVF keep only groups whose rewards differ, refilling with fresh prompts."""
        batch = self._generate_and_score_completions(generation_batch)
        n = batch["advantages"].shape[0]
        rewards = self._local_rewards(n)
        if not self.args.cost_aware_zvf:
            return batch, rewards
        g = self.num_generations
        if n % g:
            raise ValueError(f"cost_aware_zvf needs whole groups on each process: {n} local rows, num_generations={g}")
        kept, kept_rewards, have, rounds = [], [], 0, 0
        while True:
            rounds += 1
            ok = nonzero_variance_groups(rewards, g)
            idx = torch.nonzero(ok).reshape(-1)
            if idx.numel():
                kept.append(index_rows(batch, idx, n))
                kept_rewards.append(rewards[idx])
                have += idx.numel()
            full = torch.tensor([float(have >= n)], device=self.accelerator.device)
            if bool(self.accelerator.gather(full).min() > 0) or rounds >= self.args.cost_aware_zvf_max_rounds:
                break
            batch = self._generate_and_score_completions(self._zvf_refill_batch())  # every process, in step
            rewards = self._local_rewards(n)
        metrics = self._metrics["train"]
        metrics["cost_aware/zvf_rounds"].append(rounds)
        metrics["cost_aware/zvf_fill"].append(min(have, n) / n)
        if not kept:  # every group constant in every round: an all-zero pool, which the plan skips
            out, out_rewards = batch, rewards
        else:
            out = concat_batches(kept, self.processing_class.pad_token_id)
            out_rewards = torch.cat(kept_rewards)
            if have > n:  # whole groups in generation order; the last round's surplus is dropped
                out, out_rewards = index_rows(out, torch.arange(n), have), out_rewards[:n]
        local = loss_mask(out).sum().to(self.accelerator.device)
        out["num_items_in_batch"] = self.accelerator.gather(local.reshape(1)).sum()
        return out, out_rewards
