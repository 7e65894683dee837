"""The prompt stage with TRL: cost-aware prompts choose which prompts each round generates (CPU, offline).

    python examples/trl_prompt_stage.py [--rollout cost_aware|greso|cost_aware_skip] [--epochs 1]

A finite train set of 32 ``a+b=`` prompts is reused over epochs, so each prompt builds a history of
rewards and lengths. With ``cost_aware_rollout="cost_aware"`` each round draws its prompts from
q ∝ Ĝ/√ĉ (predicted signal over the square root of predicted cost) mixed with uniform, and scales each
prompt's advantages by 1/(N q): unbiased. Training is epoch-based (``max_steps=-1``): the run trains as
many steps as TRL would without the stage. Each round's counts are logged under ``cost_aware/prompts/*``.
The last line gives the policy-optimisation tokens fed (padding rows included). It exits with an error
when every reward was equal within every group (no signal).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.rollouts.stage import PROMPT_METHODS  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402


def digit_reward(completions: list[str], **_: object) -> list[float]:
    """1 when the completion starts with a digit, else 0."""
    return [float(bool(c) and c[0].isdigit()) for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollout", default="cost_aware", choices=PROMPT_METHODS)
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over the 32 prompts")
    opts = parser.parse_args()

    tok = char_tokenizer()
    model = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    prompts = [f"{a}+{b}=" * (1 + (a * b) % 4) for a in range(8) for b in range(4)]  # 32, lengths vary
    with tempfile.TemporaryDirectory() as out:
        args = CostAwareGRPOConfig(
            output_dir=out,
            loss_type="grpo",
            cost_aware_rollout=opts.rollout,
            num_train_epochs=opts.epochs,
            num_generations=8,
            per_device_train_batch_size=16,
            steps_per_generation=4,
            max_completion_length=8,
            learning_rate=3e-3,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = CostAwareGRPOTrainer(
            model=model,
            args=args,
            reward_funcs=digit_reward,
            train_dataset=datasets.Dataset.from_dict({"prompt": prompts}),
            processing_class=tok,
        )
        trainer.train()
    st = trainer.cost_aware_state
    if st["tokens_nonzero"] == 0:  # every advantage was 0: no update happened
        sys.exit(f"no learning signal: every reward was equal within every group in {int(st['generations'])} batches")
    rounds = [h for h in trainer.state.log_history if "cost_aware/prompts/generated" in h]
    print(
        f"{opts.rollout}: {trainer.state.global_step} optimiser steps, {len(rounds)} rounds "
        f"of {trainer.prompt_stage.batch} prompts from {len(prompts)}"
    )
    for h in rounds:
        print(
            f"  step {h['step']:>3}: examined {h['cost_aware/prompts/examined']:.0f}, "
            f"unique {h['cost_aware/prompts/unique']:.0f}, weights mean {h['cost_aware/prompts/weight_mean']:.2f} "
            f"max {h['cost_aware/prompts/weight_max']:.2f}, zero-variance groups "
            f"{h['cost_aware/prompts/zero_variance_share']:.0%}, reward {h['reward']:.3f}"
        )
    print(
        f"fed {int(st['tokens'] + st['tokens_padding'])} policy-optimisation tokens (padding rows "
        f"{int(st['tokens_padding'])} included) against {int(st['tokens_plain'])} for plain GRPO on the same rollouts"
    )


if __name__ == "__main__":
    main()
