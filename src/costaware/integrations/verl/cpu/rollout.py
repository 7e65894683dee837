"""An HF-transformers rollout server for verl 0.9.x's agent loop, on the CPU.

verl's agent loop talks to rollout *servers* (``RolloutReplica.launch_servers``) and pushes weights
through a worker-side ``BaseRollout`` adapter. Only vLLM, SGLang and TRT-LLM are registered
(``workers/rollout/replica.py:388-390``, ``workers/rollout/base.py:89-93``); ``hf_rollout.py`` exists
but is registered in neither registry, so without a GPU engine the loop has no rollout. This module
registers ``rollout.name=hf``:

- ``HFServer``: a Ray actor holding the model (loaded from ``model.path``) that samples one request at
  a time with its own ``torch.Generator``, seeded from (seed, weights version, prompt tokens, how many
  requests with these prompt tokens this version has served). The seed depends on what is asked, not on
  arrival order or request ids (trainer v1's agent loop gives every request ``det-0`` under
  ``rollout.full_determinism=true``, and a random id otherwise): a group's n samples are the same in
  every run with the same seed, in arrival order. ``full_determinism`` also makes the router sticky on
  the request id, so with several servers one server serves a whole group.
- ``HFReplica``: starts one ``HFServer`` per replica (named, so that the workers can find it).
- ``HFServerAdapter``: the worker side. ``update_weights`` gathers the full tensors on every rank
  (FSDP2's ``full_tensor`` is a collective) and the replica's first rank pushes them to its server.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

SERVER_PREFIX = "verl_cpu_hf_server_"


def _request_seed(seed: int, version: int, prompt_ids: list[int], k: int) -> int:
    digest = hashlib.sha256(f"{seed}/{version}/{prompt_ids}/{k}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        order = torch.argsort(logits, descending=True)
        probs = torch.softmax(logits[order], -1)
        drop = torch.cumsum(probs, -1) - probs > top_p  # keep the smallest prefix reaching top_p
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    return logits


@ray.remote(num_cpus=0)
class HFServer:
    def __init__(self, model_path: str, response_length: int, seed: int) -> None:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.eos = self.model.generation_config.eos_token_id
        self.response_length = response_length
        self.seed = seed
        self.version = 0
        self.served: dict[tuple[int, ...], int] = {}  # prompt tokens -> requests served under this version
        self.lock = asyncio.Lock()

    @torch.no_grad()
    def _sample(self, prompt_ids: list[int], params: dict[str, Any], request_id: str) -> TokenOutput:
        key = tuple(prompt_ids)
        k = self.served.get(key, 0)
        self.served[key] = k + 1
        gen = torch.Generator().manual_seed(_request_seed(self.seed, self.version, prompt_ids, k))
        temperature = float(params.get("temperature", 1.0))
        want_logprobs = bool(params.get("logprobs", False))
        ids = torch.tensor([prompt_ids])
        out = self.model(input_ids=ids, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
        tokens: list[int] = []
        logps: list[float] = []
        eos = {self.eos} if isinstance(self.eos, int) else set(self.eos or [])
        for _ in range(self.response_length):
            logp_all = torch.log_softmax(logits.float(), -1)
            if temperature <= 0:
                tok = int(torch.argmax(logits))
            else:
                filt = _filter_logits(logits.float() / temperature, params.get("top_k", -1), params.get("top_p", 1.0))
                tok = int(torch.multinomial(torch.softmax(filt, -1), 1, generator=gen))
            tokens.append(tok)
            logps.append(float(logp_all[tok]))
            if tok in eos:
                break
            out = self.model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
        return TokenOutput(
            token_ids=tokens,
            log_probs=logps if want_logprobs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.version},
        )

    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        async with self.lock:  # one request at a time: the weights cannot change under a request
            return self._sample(list(prompt_ids), sampling_params, request_id)

    async def update_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        async with self.lock:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
            if unexpected or set(missing) - tied:
                raise RuntimeError(f"weight push: missing {missing}, unexpected {unexpected}")
            self.version = version
            self.served = {}

    async def weights_version(self) -> int:
        return self.version

    # the replica's control calls: nothing to free or resume on the CPU
    async def wake_up(self, tags: list[str] | None = None) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **_: Any) -> None: ...
    async def stop_profile(self) -> None: ...
    async def set_global_steps(self, global_steps: int) -> None: ...


class HFReplica(RolloutReplica):
    async def launch_servers(self) -> None:
        name = f"{SERVER_PREFIX}{self.replica_rank}{self.name_suffix}"
        actor: Any = HFServer  # a Ray actor class: ray.remote adds .options
        server = actor.options(name=name, max_concurrency=self.max_concurrency).remote(
            self.model_config.path, int(self.config.response_length), int(self.config.seed or 0)
        )
        await server.weights_version.remote()  # wait until the model is loaded
        self.servers = [server]
        self._server_handle = server
        self._server_address = name


class HFServerAdapter(BaseRollout):
    """Worker side of ``rollout.name=hf``: pushes the trainer's weights to the replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ["RANK"])
        self.server_name = f"{SERVER_PREFIX}{rank // world}"
        self.sender = rank % world == 0
        self.pushes = 0

    async def resume(self, tags: list[str]) -> None: ...

    async def release(self) -> None: ...

    async def update_weights(
        self, weights: Any, wire_format: str = "named_tensors", global_steps: int | None = None, **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the HF CPU server takes wire_format='named_tensors', got {wire_format!r}")
        state = {name: t.detach().to("cpu", torch.float32).clone() for name, t in weights}  # every rank: collectives
        self.pushes += 1
        if self.sender:
            version = self.pushes if global_steps is None else int(global_steps)
            await ray.get_actor(self.server_name).update_weights.remote(state, version)
