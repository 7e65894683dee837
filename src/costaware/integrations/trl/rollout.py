"""The KV sampler as the TRL adapter's rollout engine (``cost_aware_generation="kv"``): a mixin.

TRL 1.16 picks its generation backend inside ``GRPOTrainer._generate_single_turn`` (vLLM, transformers'
continuous batching, or ``generate``). :class:`KVRolloutMixin` overrides that method the way TRL
switches to vLLM: it takes the prompts' token ids (each prompt already repeated ``num_generations``
times) and returns ``(completion_ids, None)``: per row, the sampled tokens up to and including the
first EOS (any of TRL's ``eos_token_ids``), or ``max_completion_length`` tokens; no log-probs, as
TRL's own ``generate`` path.

- Weights: the unwrapped model's parameters are read on every call, so every round samples from the
  policy as it is after the last optimiser step (no copy to keep in sync).
- Sampling: ``temperature``, ``top_k`` and ``top_p`` from the config, applied as ``generate`` applies
  them (:mod:`costaware.generation.kv_sampler`). The generator is seeded from ``args.seed``, the
  process index, ``global_step`` and the call's index within that step (ZVF refills generate several
  times per step), so a run is reproducible and a resumed run samples as an uninterrupted one.
- Refused, with one ValueError naming the setting: vLLM, transformers' continuous batching,
  ``min_p``, ``repetition_penalty != 1``, ``generation_kwargs`` (in the config); a vision-language
  processor, tools or environments, a ``rollout_func``, DeepSpeed or FSDP, and any model the sampler
  does not reproduce exactly (not a plain ``Qwen2ForCausalLM``) (when the trainer is built).

``cost_aware_generation="transformers"`` (the default) leaves TRL's own path untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from trl.extras.profiling import profiling_context

from costaware.generation import SamplingParams, kv_generate
from costaware.generation.qwen2 import check_model

if TYPE_CHECKING:  # type-checked as the trainer it is mixed into; at run time a plain mixin
    from costaware.integrations.trl._typing import TrainerState as _Trainer
else:
    _Trainer = object

__all__ = ["KVRolloutMixin", "rollout_seed"]


def rollout_seed(seed: int, process: int, step: int, call: int, *, training: bool = True) -> int:
    """The sampler's seed for the ``call``-th generation at optimiser step ``step`` on process ``process``.

    >>> rollout_seed(0, 0, 3, 0) == rollout_seed(0, 0, 3, 0) != rollout_seed(0, 0, 3, 1)
    True
    """
    words = np.random.SeedSequence([seed, process, step, call, int(training)]).generate_state(2, np.uint32)
    return int(words[0]) << 31 | int(words[1]) >> 1  # 62 bits: a valid torch seed


class KVRolloutMixin(_Trainer):
    """Mixed into :class:`~costaware.integrations.trl.trainer.CostAwareGRPOTrainer` before ``GRPOTrainer``."""

    _ca_rollout_at: tuple[int, bool] | None = None  # (global_step, training) of the last generation
    _ca_rollout_calls = 0  # generations made at that step

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if getattr(self.args, "cost_aware_generation", "transformers") == "kv":
            self._check_kv_rollout()

    def _check_kv_rollout(self) -> None:
        refused = {
            "a vision-language processor (multimodal inputs)": self._is_vlm,
            "tools or environment_factory": bool(self.tools) or self.environment_factories is not None,
            "rollout_func (it replaces generation: the option would do nothing)": self.rollout_func is not None,
            "DeepSpeed": self.is_deepspeed_enabled,
            "FSDP": self.is_fsdp_enabled,
        }
        for what, on in refused.items():
            if on:
                raise ValueError(f"cost_aware_generation='kv' does not support {what}; "
                                 "use cost_aware_generation='transformers'")  # fmt: skip
        try:
            check_model(self.accelerator.unwrap_model(self.model))
        except ValueError as e:
            raise ValueError(f"cost_aware_generation='kv': {e}; use cost_aware_generation='transformers'") from None

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if getattr(self.args, "cost_aware_generation", "transformers") != "kv":
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)  # fmt: skip
        if images is not None or multimodal_fields or has_tool_images:
            raise ValueError("cost_aware_generation='kv' does not support multimodal inputs (images or processor "
                             "fields); use cost_aware_generation='transformers'")  # fmt: skip
        training = bool(self.model.training)
        at = (int(self.state.global_step), training)
        self._ca_rollout_calls = self._ca_rollout_calls + 1 if at == self._ca_rollout_at else 0
        self._ca_rollout_at = at
        seed = rollout_seed(self.args.seed, self.accelerator.process_index, at[0], self._ca_rollout_calls,
                            training=training)  # fmt: skip
        model = self.accelerator.unwrap_model(self.model)
        params = SamplingParams(temperature=self.temperature, top_k=self.top_k or 0,
                                top_p=1.0 if self.top_p is None else self.top_p)  # fmt: skip
        generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        with profiling_context(self, "costaware.kv_generate"), torch.no_grad():
            out = kv_generate(model, prompt_ids, max_new_tokens=self.max_completion_length,
                              eos_token_ids=list(self.eos_token_ids), pad_token_id=self._tokenizer.pad_token_id,
                              params=params, generator=generator)  # fmt: skip
        return out.completions, None
