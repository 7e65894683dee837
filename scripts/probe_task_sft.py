"""Can the demo's tiny char-level Qwen2 learn a task family from SFT with injected mistakes?

    PYTHONPATH=src python scripts/probe_task_sft.py --task sort [--steps 800] [--hidden 64] [--layers 4]

Trains a fresh policy (``policy.build_policy``) by SFT on the family's demonstrations, with the same
SFT loop as ``reproduce`` (``policy.sft``: AdamW, 5% warm-up, linear decay, clip 1.0), then prints
greedy and sampled (temperature 1) accuracy per size on held-out prompts. RL has room when the sampled
accuracy is well below 1 and above 0, and falls with the size.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from costaware.experiments import policy
from costaware.experiments.tasks import get_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="sort")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--min-size", type=int, default=2)
    ap.add_argument("--max-size", type=int, default=12)
    ap.add_argument("--mistake-prob", type=float, default=0.15)
    ap.add_argument("--eval-prompts", type=int, default=40, help="held-out prompts per size")
    ap.add_argument("--k", type=int, default=4, help="samples per prompt")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    tok, model = policy.build_policy(hidden_size=args.hidden, num_layers=args.layers, seed=0)
    missing = set(task.alphabet) - set(tok.get_vocab())
    if missing:
        raise SystemExit(f"policy.build_policy's tokenizer lacks {sorted(missing)} for task {task.name!r}")
    start = time.perf_counter()
    out = policy.sft(model, tok, task, steps=args.steps, batch_size=args.batch, lr=args.lr, min_size=args.min_size,
                     max_size=args.max_size, mistake_prob=args.mistake_prob, seed=0)  # fmt: skip
    print(f"task {task.name}: SFT {args.steps} steps x {args.batch} in {time.perf_counter() - start:.0f} s, "
          f"final loss {out['final_loss']:.3f} (hidden {args.hidden}, layers {args.layers}, "
          f"mistake_prob {args.mistake_prob})")  # fmt: skip
    rng = np.random.default_rng(10_000)
    print("size  tokens  greedy  sampled")
    for size in range(args.min_size, args.max_size + 1):
        tasks = task.make_tasks(args.eval_prompts, min_size=size, max_size=size, rng=rng)
        budget = task.max_response_tokens(size)
        greedy = policy.sample(model, tok, tasks.prompts, k=1, max_new_tokens=budget, seed=1, temperature=0)
        sampled = policy.sample(model, tok, tasks.prompts, k=args.k, max_new_tokens=budget, seed=1)
        demo = task.demonstrations(tasks)
        tokens = np.mean([len(p) + len(r) + 1 for p, r in zip(tasks.prompts, demo, strict=True)])
        acc_g = task.is_correct(greedy, tasks.answers).mean()
        acc_s = task.is_correct(sampled, np.repeat(tasks.answers, args.k)).mean()
        print(f"{size:4d}  {tokens:6.1f}  {acc_g:6.2f}  {acc_s:7.2f}")


if __name__ == "__main__":
    main()
