"""Cost-Aware GRPO with TRL on two CPU processes (gloo), offline, in under a minute.

    torchrun --nproc_per_node 2 examples/trl_two_processes.py
    accelerate launch --multi_gpu --num_processes 2 examples/trl_two_processes.py

On a CPU the config needs ``use_cpu=True``: without it transformers sets up one process per rank and the
two would train independently (the config refuses that launch and says so). Every process gathers the
advantages and costs of the whole batch and draws the same global plan, then feeds the drawn rows it
holds; the counters are totals over both processes. The tokens printed are those fed, the zero-factor
padding rows included (a process with fewer drawn rows than the other feeds padding rows so that both run
the same shapes). It exits with an error when every reward was equal within every group (no signal).
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402


def digit_reward(completions: list[str], **_: object) -> list[float]:
    """1 when the completion starts with a digit, else 0."""
    return [float(bool(c) and c[0].isdigit()) for c in completions]


def main() -> None:
    tok = char_tokenizer()
    model = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    prompts = [f"{a}+{b}=" * (1 + (a * b) % 4) for a in range(10) for b in range(10)]
    with tempfile.TemporaryDirectory() as out:
        args = CostAwareGRPOConfig(
            output_dir=out,
            use_cpu=True,  # a CPU process group (gloo); leave it out on GPUs
            loss_type="grpo",  # the paper's loss: cost_aware_method="auto" is then p_star
            num_generations=8,
            per_device_train_batch_size=8,  # 16 rows per optimiser step over both processes
            steps_per_generation=4,
            max_completion_length=12,
            max_steps=8,
            learning_rate=3e-3,
            logging_steps=4,
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
    main_process = trainer.accelerator.is_main_process
    if st["tokens_nonzero"] == 0:  # every advantage was 0 (the counters are global): no update happened
        message = f"no learning signal: every reward was equal within every group in {int(st['generations'])} batches"
        sys.exit(message if main_process else 1)  # one line, from the main process
    if main_process:
        print(
            f"{trainer.accelerator.num_processes} processes ({args.parallel_mode.value}), method "
            f"{args.resolved_method}: fed {int(st['tokens'] + st['tokens_padding'])} policy-optimisation tokens "
            f"over both processes (padding rows {int(st['tokens_padding'])} included) against "
            f"{int(st['tokens_plain'])} for plain GRPO; {int(st['generations'])} generation batches"
        )


if __name__ == "__main__":
    main()
