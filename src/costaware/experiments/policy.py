"""The tiny policy of `costaware reproduce`: build it, warm it up by SFT, evaluate it by sampling.

Everything is plain torch + transformers on the CPU:

- :func:`build_policy` makes a character tokenizer over a task family's alphabet and a small Qwen2
  (``costaware.tiny``).
- :func:`sft` trains on demonstrations (prompt + chain + EOS, loss on the response only) with AdamW,
  linear warm-up and linear decay; the same function continues SFT for the control curve.
- :func:`evaluate` is mean@k: k sampled responses (temperature 1, as in training) for each held-out
  prompt, scored by the verifier, with a fixed generator seed so that every model is judged on the same
  prompts with the same random numbers; ``generation="kv"`` samples with the KV sampler
  (``costaware.generation``), ``"transformers"`` with ``model.generate``.

Every task-specific step (making tasks, demonstrations, the verifier, the response budget) goes through a
task-family object (``experiments.tasks.get_task``), so a new family needs no change here.

>>> task = get_task("arith")                                                   # doctest: +SKIP
>>> tok, model = build_policy(task.alphabet, hidden_size=64, num_layers=2, seed=0)  # doctest: +SKIP
>>> tasks = task.make_tasks(8, min_size=2, max_size=4)                        # doctest: +SKIP
>>> evaluate(model, tok, task, tasks, max_size=4, k=2).accuracy               # doctest: +SKIP
0.0
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class EvalResult:
    accuracy: float  # mean over prompts and samples
    per_prompt: np.ndarray  # (n,) mean over the k samples of each prompt
    mean_length: float  # mean tokens of prompt + response
    seconds: float


def build_policy(
    alphabet: str | None = None,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    seed: int = 0,
):
    """A char tokenizer over ``alphabet`` (a task family's; None: arith's) and a random tiny Qwen2 matching it."""
    from costaware.tiny import char_tokenizer, tiny_qwen2

    if alphabet is None:
        from costaware.experiments.arith import ALPHABET

        alphabet = ALPHABET
    tokenizer = char_tokenizer(alphabet, model_max_length=256)
    model = tiny_qwen2(
        tokenizer,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        max_position_embeddings=256,
        seed=seed,
    )
    return tokenizer, model


def encode_demonstrations(tokenizer: Any, prompts: list[str], responses: list[str]) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 on prompt and padding)."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(
            f"prompts and responses must be non-empty and equal in length: {len(prompts)}, {len(responses)}"
        )
    vocab = tokenizer.get_vocab()
    eos = tokenizer.eos_token_id
    p_ids = [[vocab[c] for c in p] for p in prompts]
    r_ids = [[vocab[c] for c in r] + [eos] for r in responses]
    lengths = np.array([len(a) + len(b) for a, b in zip(p_ids, r_ids, strict=True)])
    width = int(lengths.max())
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(prompts), width), -100, dtype=torch.long)
    for i, (a, b) in enumerate(zip(p_ids, r_ids, strict=True)):
        row = torch.tensor(a + b)
        ids[i, : len(row)] = row
        labels[i, len(a) : len(row)] = row[len(a) :]
    mask = (torch.arange(width)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def sft(
    model: Any,
    tokenizer: Any,
    task: Any,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    min_size: int,
    max_size: int,
    mistake_prob: float,
    seed: int,
    warmup_frac: float = 0.05,
    decay: bool = True,
    on_step: Callable[[int, int], None] | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Supervised fine-tuning on fresh demonstrations every step; returns tokens and time spent.

    ``on_step(step, cumulative_tokens)`` is called after every optimiser step (used by the control run to
    evaluate on the RL runs' schedule). Tokens counted are prompt + response + EOS of every row.
    With ``max_tokens``, training stops after the step at which the tokens reach it.
    """
    if steps < 1 or batch_size < 1 or not lr > 0:
        raise ValueError(f"steps, batch_size and lr must be positive, got {steps}, {batch_size}, {lr}")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    warmup = max(1, int(warmup_frac * steps)) if decay else 1

    def schedule(step: int) -> float:
        if not decay:
            return 1.0
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(1, steps - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    tokens, losses, start = 0, [], time.perf_counter()
    for step in range(steps):
        tasks = task.make_tasks(batch_size, min_size=min_size, max_size=max_size, rng=rng)
        demos = task.demonstrations(tasks, mistake_prob=mistake_prob, rng=rng)
        batch = encode_demonstrations(tokenizer, tasks.prompts, demos)
        out = model(**batch)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        tokens += int(batch["attention_mask"].sum())
        losses.append(float(out.loss.detach()))
        last = max_tokens is not None and tokens >= max_tokens
        if on_step is not None:
            on_step(step + 1, tokens)
        if last:
            break
    model.eval()
    return {"tokens": tokens, "seconds": time.perf_counter() - start, "final_loss": float(np.mean(losses[-20:]))}


@dataclass(frozen=True)
class EncodedPrompts:
    """Prompts repeated ``k`` times (prompt-major) and tokenised in generation batches, once: an evaluation set
    is sampled at every evaluation of every run, and neither its prompts nor their token ids change."""

    prompts: tuple[str, ...]
    k: int
    batches: tuple[dict[str, torch.Tensor], ...]  # left-padded input_ids and attention_mask


def encode_prompts(tokenizer: Any, prompts: list[str], *, k: int, batch_size: int = 512) -> EncodedPrompts:
    """What :func:`sample` feeds ``generate``: each prompt ``k`` times, in batches of ``batch_size`` rows."""
    if k < 1 or batch_size < 1 or not prompts:
        raise ValueError(f"prompts must be non-empty and k, batch_size >= 1, got {len(prompts)}, {k}, {batch_size}")
    expanded = [p for p in prompts for _ in range(k)]
    batches = tuple(dict(tokenizer(expanded[lo : lo + batch_size], return_tensors="pt", padding=True,
                                   add_special_tokens=False))
                    for lo in range(0, len(expanded), batch_size))  # fmt: skip
    return EncodedPrompts(tuple(prompts), k, batches)


@torch.no_grad()
def sample(
    model: Any,
    tokenizer: Any,
    prompts: list[str] | EncodedPrompts,
    *,
    k: int,
    max_new_tokens: int,
    seed: int,
    temperature: float = 1.0,
    batch_size: int = 512,
    generation: str = "transformers",
) -> list[str]:
    """``k`` responses per prompt (prompt-major order), sampled at ``temperature`` (0 = greedy).

    ``prompts`` may come tokenised by :func:`encode_prompts` (with this ``k``; its batches then replace
    ``batch_size``): the same ids, so the same responses. ``generation``: ``"transformers"``
    ``model.generate``, ``"kv"`` the KV sampler (:func:`costaware.generation.kv_generate`: the same law,
    other random numbers).
    """
    if generation not in ("transformers", "kv"):
        raise ValueError(f"generation must be 'transformers' or 'kv', got {generation!r}")
    if not isinstance(prompts, EncodedPrompts):
        prompts = encode_prompts(tokenizer, prompts, k=k, batch_size=batch_size)
    elif prompts.k != k:
        raise ValueError(f"prompts were encoded with k={prompts.k}, sample was asked for k={k}")
    was_training = model.training
    model.eval()
    texts: list[str] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        for enc in prompts.batches:
            if generation == "kv":
                texts += tokenizer.batch_decode(_kv_sample(model, tokenizer, enc, max_new_tokens, temperature,
                                                           generator), skip_special_tokens=True)  # fmt: skip
                continue
            kwargs = (
                dict(do_sample=False)
                if temperature == 0
                else dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            )
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **kwargs,
            )
            texts += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train(was_training)
    return texts


def _kv_sample(model: Any, tokenizer: Any, enc: dict[str, torch.Tensor], max_new_tokens: int, temperature: float,
               generator: torch.Generator) -> list[list[int]]:  # fmt: skip
    from costaware.generation import SamplingParams, kv_generate

    # the batch's rows without their left padding: the ids the tokenizer gives each prompt alone
    ids = [row[mask.bool()].tolist() for row, mask in zip(enc["input_ids"], enc["attention_mask"], strict=True)]
    return kv_generate(model, ids, max_new_tokens=max_new_tokens, eos_token_ids=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, params=SamplingParams(temperature=temperature),
                       generator=generator).completions  # fmt: skip


def max_response_tokens(max_terms: int) -> int:
    """A response budget that fits the longest correct chain with slack for slips (3 digits + comma per sum)."""
    return 4 * (max_terms - 1) + 4


def evaluate(
    model: Any,
    tokenizer: Any,
    task: Any,
    tasks: Any,
    *,
    max_size: int,
    k: int,
    seed: int = 12345,
    temperature: float = 1.0,
    encoded: EncodedPrompts | None = None,
    generation: str = "transformers",
) -> EvalResult:
    """mean@k accuracy on ``tasks`` (made by the family ``task``, sizes up to ``max_size``) with its verifier.

    ``encoded``: ``tasks.prompts`` already tokenised by :func:`encode_prompts` with this ``k``.
    """
    start = time.perf_counter()
    if encoded is not None and list(encoded.prompts) != list(tasks.prompts):
        raise ValueError("encoded must hold the prompts of tasks, in their order")
    responses = sample(
        model, tokenizer, tasks.prompts if encoded is None else encoded, k=k,
        max_new_tokens=task.max_response_tokens(max_size), seed=seed, temperature=temperature, generation=generation,
    )  # fmt: skip
    correct = np.asarray(task.is_correct(responses, np.repeat(tasks.answers, k, axis=0))).reshape(len(tasks), k)
    lengths = np.array([len(p) + len(r) + 1 for p, r in zip(np.repeat(tasks.prompts, k), responses, strict=True)])
    return EvalResult(
        accuracy=float(correct.mean()),
        per_prompt=correct.mean(axis=1),
        mean_length=float(lengths.mean()),
        seconds=time.perf_counter() - start,
    )


def count_parameters(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))
