"""Rollout tokens/s: the KV sampler (``costaware.generation``) against ``model.generate``, same prompts and weights.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/bench_rollout.py [--sft-steps 300] [--repeats 9]

The main job's training round: its default policy (Profile: hidden_size 64, 2 layers), its task
(``sort``, 2..7 digits), 32 prompts x 8 completions, ``max_new_tokens`` as the runner gives TRL
(the task's response budget + 1), temperature 1, top-k off, top-p 1 (TRL's defaults). The policy is
warmed up by a short SFT (``--sft-steps``), so that completions end at EOS as in training; 0 keeps the
random initialisation (every row runs to the length cap). One process, ``torch.set_num_threads``
fixed; the two paths alternate A B A B ..., each on a fresh seed, and the medians of seconds and of
generated tokens/s (completion tokens, EOS included, as TRL counts them) are printed with their ratio,
by wall clock and by the thread's CPU time (``time.thread_time``: on a shared machine it leaves out the
time the process waited for a core).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from costaware.experiments import policy
from costaware.experiments.profile import Profile
from costaware.experiments.tasks import get_task
from costaware.generation import SamplingParams, kv_generate


def _generate(model, tok, prompt_ids, max_new_tokens, seed):
    """TRL's regular generation path: left-padded ids, ``generate`` with TRL's sampling options."""
    width = max(map(len, prompt_ids))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompt_ids])
    mask = (ids != tok.pad_token_id).long()
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True,
                         temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, disable_compile=True)[:, width:]  # fmt: skip
    is_eos = out == tok.eos_token_id
    ended = is_eos.any(1)
    lengths = torch.where(ended, is_eos.int().argmax(1) + 1, torch.full_like(ended, out.shape[1], dtype=torch.long))
    return int(lengths.sum())


def _kv(model, tok, prompt_ids, max_new_tokens, seed):
    out = kv_generate(model, prompt_ids, max_new_tokens=max_new_tokens, eos_token_ids=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, params=SamplingParams(),
                      generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return sum(map(len, out.completions))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9, help="A B pairs timed (after one warm-up pair)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT steps of the warm-up (0: random weights)")
    ap.add_argument("--prompts", type=int, default=Profile().prompts_per_round)
    ap.add_argument("--generations", type=int, default=Profile().generations)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    prof, task = Profile(), get_task("sort")
    tok, model = policy.build_policy(task.alphabet, hidden_size=prof.hidden_size, num_layers=prof.num_layers, seed=0)
    if args.sft_steps:
        policy.sft(model, tok, task, steps=args.sft_steps, batch_size=prof.sft_batch, lr=prof.sft_lr,
                   min_size=prof.min_size, max_size=prof.max_size, mistake_prob=prof.mistake_prob, seed=0)  # fmt: skip
    model.eval()
    tasks = task.make_tasks(args.prompts, min_size=prof.min_size, max_size=prof.max_size, rng=np.random.default_rng(0))
    vocab = tok.get_vocab()
    prompt_ids = [[vocab[c] for c in p] for p in tasks.prompts for _ in range(args.generations)]
    max_new = task.max_response_tokens(prof.max_size) + 1  # the runner's max_completion_length

    paths = {"generate": _generate, "kv": _kv}
    clocks = {"wall": time.perf_counter, "cpu": time.thread_time}
    seconds = {(c, k): [] for c in clocks for k in paths}
    rates = {(c, k): [] for c in clocks for k in paths}
    with torch.no_grad():
        for rep in range(args.repeats + 1):  # the first pair warms up
            for name, fn in paths.items():
                start = {c: clock() for c, clock in clocks.items()}
                tokens = fn(model, tok, prompt_ids, max_new, 1000 + rep)
                for c, clock in clocks.items():
                    dt = clock() - start[c]
                    if rep:
                        seconds[c, name].append(dt)
                        rates[c, name].append(tokens / dt)
    print(f"{len(prompt_ids)} rows ({args.prompts} prompts x {args.generations}), max_new_tokens={max_new}, "
          f"sft_steps={args.sft_steps}, torch threads={torch.get_num_threads()}, "
          f"median of {args.repeats} A B pairs")  # fmt: skip
    print(f"{'clock':<6}{'path':<10}{'seconds':>10}{'tokens/s':>12}")
    for c in clocks:
        for name in paths:
            print(
                f"{c:<6}{name:<10}{statistics.median(seconds[c, name]):>10.4f}"
                f"{statistics.median(rates[c, name]):>12.0f}"
            )
    for c in clocks:
        kv, gen = rates[c, "kv"], rates[c, "generate"]
        pairs = statistics.median(a / b for a, b in zip(kv, gen, strict=True))
        print(f"kv / generate tokens/s ({c}): {statistics.median(kv) / statistics.median(gen):.2f}x "
              "(ratio of medians), "
              f"{pairs:.2f}x (median of the pairs' ratios)")  # fmt: skip


if __name__ == "__main__":
    main()
