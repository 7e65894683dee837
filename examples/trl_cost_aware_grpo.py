"""Cost-Aware GRPO with TRL on a tiny model, CPU and offline (under a minute).

    .venv/bin/python examples/trl_cost_aware_grpo.py [--method p_star] [--steps 16] [--zvf]

A character-level Qwen2 learns to answer ``a+b=`` prompts with digits. The policy-optimisation
mini-batches are drawn with p ∝ |A_i|/√c_i (``--method``), each drawn row's loss is multiplied by its
importance weight, and the tokens fed to forward/backward are counted against what plain GRPO
(``none``) would have fed on the same rollouts.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

from costaware.grpo import METHODS  # noqa: E402
from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402


def digit_reward(completions: list[str], **_: object) -> list[float]:
    """1 when the completion starts with a digit (a verifiable 0/1 reward), else 0."""
    return [float(bool(c) and c[0].isdigit()) for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="p_star", choices=METHODS)
    parser.add_argument("--steps", type=int, default=16, help="optimiser steps")
    parser.add_argument("--zvf", action="store_true", help="DAPO zero-variance filtering")
    parser.add_argument("--loss-type", default="dapo")
    opts = parser.parse_args()

    tok = char_tokenizer()
    model = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    prompts = [f"{a}+{b}=" * (1 + (a * b) % 4) for a in range(10) for b in range(10)]  # varied lengths
    data = datasets.Dataset.from_dict({"prompt": prompts})
    with tempfile.TemporaryDirectory() as out:
        args = CostAwareGRPOConfig(
            output_dir=out,
            cost_aware_method=opts.method,
            cost_aware_zvf=opts.zvf,
            loss_type=opts.loss_type,
            beta=0.0,
            num_generations=8,
            per_device_train_batch_size=16,
            steps_per_generation=4,
            max_completion_length=12,
            max_steps=opts.steps,
            learning_rate=3e-3,
            logging_steps=4,
            report_to="none",
            use_cpu=True,
            bf16=False,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = CostAwareGRPOTrainer(
            model=model, args=args, reward_funcs=digit_reward, train_dataset=data, processing_class=tok
        )
        trainer.train()
    st = trainer.cost_aware_state
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(f"method={opts.method}: reward {rewards[0]:.3f} -> {rewards[-1]:.3f}")
    print(
        f"policy-optimisation tokens {int(st['tokens'])} vs {int(st['tokens_plain'])} for plain GRPO "
        f"({st['tokens'] / st['tokens_plain']:.0%}); {int(st['skipped'])} of {int(st['generations'])} "
        f"generation batches skipped; {st['po_seconds']:.2f} s in policy optimisation"
    )


if __name__ == "__main__":
    main()
