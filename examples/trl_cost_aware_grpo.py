"""Cost-Aware GRPO with TRL on a tiny model, CPU and offline (under a minute).

    .venv/bin/python examples/trl_cost_aware_grpo.py [--method auto] [--loss-type grpo] [--steps 24] [--zvf]

A character-level Qwen2 learns to answer ``a+b=`` prompts (repeated 1 to 4 times, so prompts differ in
length) with a number of one or two digits. The policy-optimisation mini-batches are drawn with
p ∝ |A_i|/√c_i (``--method auto`` is ``p_star`` under the paper's ``grpo`` loss, ``nonzero`` under TRL's
default ``dapo``), each drawn row's loss is multiplied by its importance weight, and the tokens fed to
forward/backward (padding rows included) are counted against what plain GRPO (``none``) would have fed on
the same rollouts. It exits with an error when every reward was equal within every group (no signal).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402
from transformers import PrinterCallback  # noqa: E402

from costaware.grpo import METHODS  # noqa: E402
from costaware.integrations.trl import SUPPORTED_LOSS_TYPES, CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402


def number_reward(completions: list[str], **_: object) -> list[float]:
    """1 when the completion is a number of one or two digits (and then ends), else 0: a verifiable reward."""
    return [float(c.isdigit() and len(c) <= 2) for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="auto", choices=("auto", *METHODS))
    parser.add_argument("--loss-type", default="grpo", choices=SUPPORTED_LOSS_TYPES)
    parser.add_argument("--steps", type=int, default=24, help="optimiser steps (each generates 2 prompts x 8)")
    parser.add_argument("--zvf", action="store_true", help="DAPO zero-variance filtering")
    opts = parser.parse_args()

    tok = char_tokenizer("0123456789+=")
    model = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    prompts = [f"{a}+{b}=" * (1 + (a * b) % 4) for a in range(10) for b in range(10)]  # varied lengths
    data = datasets.Dataset.from_dict({"prompt": prompts})
    with tempfile.TemporaryDirectory() as out:
        args = CostAwareGRPOConfig(
            output_dir=out,
            cost_aware_method=opts.method,
            cost_aware_zvf=opts.zvf,
            loss_type=opts.loss_type,
            num_generations=8,
            per_device_train_batch_size=16,
            max_completion_length=12,
            max_steps=opts.steps,
            learning_rate=2e-2,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = CostAwareGRPOTrainer(
            model=model, args=args, reward_funcs=number_reward, train_dataset=data, processing_class=tok
        )
        trainer.remove_callback(PrinterCallback)  # no log line per step
        trainer.train()
    st = trainer.cost_aware_state
    if st["tokens_nonzero"] == 0:  # every advantage was 0: no update happened
        sys.exit(f"no learning signal: every reward was equal within every group in {int(st['generations'])} batches")
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    k = min(4, len(rewards))
    print(
        f"method {args.resolved_method} (loss {opts.loss_type}): reward {sum(rewards[:k]) / k:.2f} over the first "
        f"{k} steps, {sum(rewards[-k:]) / k:.2f} over the last {k}"
    )
    print(
        f"fed {int(st['tokens'] + st['tokens_padding'])} policy-optimisation tokens (padding rows "
        f"{int(st['tokens_padding'])} included) against {int(st['tokens_plain'])} for plain GRPO; "
        f"{int(st['skipped'])} of {int(st['generations'])} generation batches skipped; "
        f"{st['po_seconds']:.2f} s in policy optimisation"
    )


if __name__ == "__main__":
    main()
