"""Fast rollouts for the small Qwen2 policies: a batched, KV-cached sampler exact to the model's forward.

>>> from costaware.generation import SamplingParams, kv_generate  # doctest: +SKIP
"""

from costaware.generation.kv_sampler import Rollout, SamplingParams, kv_generate, process_logits

__all__ = ["Rollout", "SamplingParams", "kv_generate", "process_logits"]
