"""Batched, KV-cached sampling from a small Qwen2: the fast path beside ``model.generate``.

For the tiny policies of `costaware reproduce`, ``generate`` pays per-step overheads (a cache that
grows by concatenation, masks rebuilt, its processor and stopping machinery) and keeps every row in the
batch until the longest one ends. :func:`kv_generate` (about 3x its tokens/s on the main job's policy,
``benchmarks/bench_rollout.py``) runs one forward per step over the rows still running
(:mod:`costaware.generation.qwen2`, into a preallocated cache) and draws the next token as
``generate`` does with TRL's sampling options:

- :func:`process_logits` is transformers' ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and
  ``TopPLogitsWarper`` (``min_tokens_to_keep=1``), applied in that order and only when not neutral,
  to float32 logits; the token is drawn from their softmax (:func:`next_tokens`) with the caller's
  ``torch.Generator`` (same seed, same tokens). ``temperature=0`` is greedy (``do_sample=False``).
- A row stops after any of ``eos_token_ids`` or at ``max_new_tokens``. Finished rows leave the batch
  once they are a quarter of it (one copy of the cache each time, so O(log B) copies in all).

>>> from costaware.tiny import char_tokenizer, tiny_qwen2
>>> tok = char_tokenizer("abc")
>>> model = tiny_qwen2(tok, hidden_size=16, num_layers=1)
>>> out = kv_generate(model, [[4, 5], [6]], max_new_tokens=3, eos_token_ids=tok.eos_token_id,
...                   pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
>>> out.sequences.shape[0], out.prompt_width, len(out.completions)
(2, 2, 2)
>>> all(len(c) <= 3 for c in out.completions)
True
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from costaware._checks import (
    as_array,
    check_container,
    integer,
    is_array_like,
    positive_scalar,
    real_scalar,
    show,
    unwrap,
)
from costaware.generation.qwen2 import KVCache, forward, key_bias, qwen2_weights

__all__ = ["Rollout", "SamplingParams", "kv_generate", "next_tokens", "process_logits"]

# Upper bounds on the counts that size the cache (rows × (prompt + new tokens)): a huge count is a
# ValueError, not an OverflowError or a terabyte allocation
MAX_NEW_TOKENS = 2**20
MAX_ROWS = 2**20
# finished rows leave the batch once they are this fraction of it (each removal copies the cache)
_COMPACT_FRACTION = 0.25

LogitsHook = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is drawn, with TRL's defaults; ``min_p`` and ``repetition_penalty`` are
    accepted only at their neutral values (None, 1.0), so a TRL config that sets them is refused.

    >>> SamplingParams(top_p=0.9).top_p
    0.9
    >>> SamplingParams(min_p=0.1)
    Traceback (most recent call last):
    ...
    ValueError: min_p=0.1 is not supported by the KV sampler (only None); use generation='transformers'
    """

    temperature: float = 1.0  # 0: greedy
    top_k: int = 0  # 0 (or None): off
    top_p: float = 1.0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        # numpy scalars and integral floats are normalised to Python numbers (the README's rule)
        object.__setattr__(self, "temperature", positive_scalar(self.temperature, "temperature", allow_zero=True))
        if self.top_k is not None:
            object.__setattr__(self, "top_k", integer(self.top_k, "top_k", minimum=0))
        if self.top_p is not None:
            p = real_scalar(self.top_p, "top_p")
            if not 0 < p <= 1:
                raise ValueError(f"top_p must lie in (0, 1] or be None, got {p!r}")
            object.__setattr__(self, "top_p", p)
        if self.min_p is not None:
            raise ValueError(f"min_p={self.min_p!r} is not supported by the KV sampler (only None); "
                             "use generation='transformers'")  # fmt: skip
        if self.repetition_penalty != 1.0:
            raise ValueError(f"repetition_penalty={self.repetition_penalty!r} is not supported by the KV sampler "
                             "(only 1.0); use generation='transformers'")  # fmt: skip


@dataclass(frozen=True)
class Rollout:
    """What :func:`kv_generate` returns.

    ``sequences`` is what ``generate`` returns: (B, prompt_width + steps), the left-padded prompts and
    then the tokens, ``pad_token_id`` after a row's EOS, ``steps`` the decoding steps taken (the longest
    completion). ``completions`` is TRL's form: each row's tokens, its EOS included, nothing after it.
    """

    sequences: torch.Tensor
    prompt_width: int
    completions: list[list[int]]


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Scores (B, V) after ``generate``'s temperature, top-k and top-p warpers (filtered tokens: -inf).

    >>> s = process_logits(torch.tensor([[0.0, 1.0, 2.0]]), SamplingParams(temperature=0.5, top_k=2))
    >>> s.tolist()
    [[-inf, 2.0, 4.0]]
    """
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    if not isinstance(logits, torch.Tensor):
        logits = torch.from_numpy(as_array(logits, "logits"))
    if logits.ndim != 2 or 0 in logits.shape:
        raise ValueError(f"logits must be a non-empty (rows, vocabulary) tensor, got shape {tuple(logits.shape)}")
    if logits.is_complex() or logits.dtype == torch.bool:
        raise ValueError(f"logits must be real numbers, got dtype {logits.dtype}")
    if not torch.isfinite(logits).all():  # -inf is an output (a filtered token), not an input
        raise ValueError(f"logits must be finite, got {show(logits)}")
    scores = _process_logits(logits, params)
    if torch.isnan(scores).any() or (scores == float("inf")).any():  # float32 scores after the temperature
        raise ValueError(
            f"logits / temperature overflow float32 for temperature={params.temperature!r}, logits {show(logits)}"
        )
    return scores


def _process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """:func:`process_logits` on checked inputs (the sampler's per-step kernel)."""
    scores = logits.float()
    if params.temperature not in (0, 1):
        scores = scores / params.temperature
    if params.top_k:
        k = min(params.top_k, scores.shape[-1])
        scores = scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - params.top_p)  # the tail holding at most 1 - top_p goes
        remove[..., -1:] = False  # min_tokens_to_keep = 1
        scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scores


def next_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row (R,) drawn from softmax(:func:`process_logits`), or the argmax when greedy.

    The draw inverts the cumulative distribution at one uniform per row (in float64): the same law as
    ``torch.multinomial``, which ``generate`` calls, at a tenth of its cost for small vocabularies. A
    token whose probability is 0 (filtered) is never drawn.
    """
    if params.temperature == 0:
        return torch.argmax(logits.float(), dim=-1)
    cdf = torch.softmax(_process_logits(logits, params), dim=-1).double().cumsum_(dim=-1)
    u = torch.rand(cdf.shape[0], 1, dtype=torch.float64, generator=generator, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


def _token_ids(value: Any, name: str, vocab: int | None = None) -> list[int]:
    """Token ids as ints: a list, array or tensor of integral numbers in [0, vocab); ValueError otherwise
    (a float id is not truncated, a NaN is not cast)."""
    a = as_array(value, name).reshape(-1)
    bad = ~(np.isfinite(a) & (a == np.round(a)) & (a >= 0) & (a < (vocab if vocab is not None else 2**63)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = f"in 0..{vocab - 1} (the model's vocabulary)" if vocab is not None else ">= 0"
        raise ValueError(f"{name} must hold integer token ids {where}, got {float(a[i])!r} at index {i}")
    return a.astype(np.int64).tolist()


def _as_id_list(name: str, value: Any) -> list[int]:
    """One token id or a non-empty list of them (numpy integers and integral floats accepted)."""
    if isinstance(unwrap(value), (numbers.Real, np.generic)) or np.ndim(unwrap(value)) == 0:
        return [integer(value, name, minimum=0)]
    ids = _token_ids(value, name)
    if not ids:
        raise ValueError(f"{name} must be a token id or a non-empty list of them, got {value!r}")
    return ids


def _prompt_rows(prompts: Any) -> list[list[int]]:
    """The prompts as lists of ids: a list of id lists (ragged allowed), or a (B, L) array or tensor."""
    check_container(prompts, "prompts", "a list of token-id lists")
    rows = unwrap(prompts)
    if isinstance(rows, np.ndarray) and rows.ndim != 2:
        raise ValueError(f"prompts must be a list of token-id lists or a 2-D array, got shape {rows.shape}")
    out = []
    for j, row in enumerate(rows):
        row = unwrap(row)
        if not is_array_like(row) or np.ndim(row) != 1:  # a row is a value of prompts: ValueError
            raise ValueError(f"prompts[{j}] must be a list of token ids, got {show(row)}")
        out.append(_token_ids(row, f"prompts[{j}]"))
    return out


@torch.no_grad()
def kv_generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_token_ids: int | Sequence[int],
    pad_token_id: int,
    params: SamplingParams | None = None,
    generator: torch.Generator | None = None,
    logits_hook: LogitsHook | None = None,
) -> Rollout:
    """Sample up to ``max_new_tokens`` tokens after each prompt (a list of token ids) from ``model``'s current weights.

    ``logits_hook(step, rows, logits)``, if given, sees each step's raw logits (R, V) and the indices
    of their rows in ``prompts`` (R,) before the draw (the exactness tests read them).
    """
    if params is None:
        params = SamplingParams()
    elif not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams or None, got {type(params).__name__}")
    max_new_tokens = integer(max_new_tokens, "max_new_tokens", minimum=1, maximum=MAX_NEW_TOKENS)
    eos = _as_id_list("eos_token_ids", eos_token_ids)
    pad_token_id = integer(pad_token_id, "pad_token_id", minimum=0)
    prompts = _prompt_rows(prompts)
    lengths_list = [len(p) for p in prompts]
    if not prompts or min(lengths_list) < 1:
        raise ValueError(
            f"prompts must be a non-empty list of non-empty token-id lists, got lengths {lengths_list[:8]}"
        )
    if len(prompts) > MAX_ROWS or max(lengths_list) > MAX_NEW_TOKENS:
        raise ValueError(
            f"prompts must hold at most {MAX_ROWS} rows of at most {MAX_NEW_TOKENS} tokens, "
            f"got {len(prompts)} rows, the longest {max(lengths_list)}"
        )
    width, rows = max(lengths_list), len(prompts)
    w = qwen2_weights(model, max_positions=width + max_new_tokens)
    device = w.embed.device
    vocab = w.embed.shape[0]
    for name, tokens in (
        ("pad_token_id", [pad_token_id]),
        ("eos_token_ids", eos),
        ("prompts", [t for p in prompts for t in p]),
    ):
        if max(tokens) >= vocab:
            raise ValueError(f"{name} holds token id {max(tokens)}, outside the model's vocabulary 0..{vocab - 1}")
    lengths = torch.tensor(lengths_list, device=device)
    ids = torch.full((rows, width), pad_token_id, dtype=torch.long, device=device)
    flat = torch.tensor([t for p in prompts for t in p], dtype=torch.long, device=device)
    slot = torch.arange(width, device=device)
    real = slot >= (width - lengths)[:, None]  # left padding: a row's tokens end at the last column
    ids[real] = flat
    slots = width + max_new_tokens
    key_valid = torch.cat([real, torch.ones(rows, max_new_tokens, dtype=torch.bool, device=device)], dim=1)
    positions = (slot - (width - lengths)[:, None]).clamp_(min=0)  # a row's positions count its tokens only
    # the prompt pass runs once per distinct prompt (TRL repeats each one num_generations times); the
    # cache rows are then copied out to every row that holds it
    unique, inverse = torch.unique(ids, dim=0, return_inverse=True)  # sorted: rows map back through inverse
    if len(unique) < rows:  # the first row holding each distinct prompt gives its positions and padding
        first = torch.full((len(unique),), rows, dtype=torch.long, device=device).scatter_reduce_(
            0, inverse, torch.arange(rows, device=device), "amin"
        )
    else:
        unique, inverse, first = ids, None, torch.arange(rows, device=device)
    cache = KVCache.empty(w, rows=len(unique), slots=slots)
    logits = forward(w, unique, positions[first], cache, start=0, bias=key_bias(key_valid[first], w.embed.dtype))
    if inverse is not None:
        cache.keep(inverse)
        logits = logits[inverse]
    bias = key_bias(key_valid, w.embed.dtype)

    eos_t = torch.tensor(eos, device=device)
    out = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    batch = torch.arange(rows, device=device)  # the prompt index of each batch row
    running = torch.ones(rows, dtype=torch.bool, device=device)  # batch rows not yet finished
    steps = 0
    for step in range(max_new_tokens):
        if logits_hook is not None:
            logits_hook(step, batch[running], logits[running])
        nxt = next_tokens(logits, params, generator).masked_fill_(~running, pad_token_id)  # finished: padding
        out[batch, step] = nxt
        steps = step + 1
        running &= ~(nxt == eos[0] if len(eos) == 1 else torch.isin(nxt, eos_t))
        n_running = int(running.sum())
        if n_running == 0 or steps == max_new_tokens:
            break
        if n_running <= (1 - _COMPACT_FRACTION) * len(running):
            keep = running.nonzero().squeeze(1)
            cache.keep(keep)
            batch, nxt, bias, lengths, running = batch[keep], nxt[keep], bias[keep], lengths[keep], running[keep]
        logits = forward(w, nxt[:, None], (lengths + step)[:, None], cache, start=width + step, bias=bias)

    out = out[:, :steps]
    is_eos = torch.isin(out, eos_t)  # a row ends at its first EOS (padding follows) or runs to the cap
    kept = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, steps)
    completions = [row[:n] for row, n in zip(out.tolist(), kept.tolist(), strict=True)]
    return Rollout(sequences=torch.cat([ids, out], dim=1), prompt_width=width, completions=completions)
