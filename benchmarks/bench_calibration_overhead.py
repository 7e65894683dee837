"""What the 'calibrated' proxy costs in a TRL run, as a share of policy-optimisation (PO) time, at a small
and a large pool.

    .venv/bin/python benchmarks/bench_calibration_overhead.py [--small-rounds 64] [--large-rounds 16] [--interval 8]

``CostAwareGRPOTrainer`` with p_star, loss ``dapo`` and ``cost_aware_proxy="calibrated"`` on its defaults
(a fit every 8 pools, 16 rows, at most 4 per group) trains the main job's policy shape (Qwen2, 64 wide,
2 layers, built in code) on pools from a fixed ``rollout_func`` (completions of 1-40 tokens, a 0/1
reward, so some groups have no signal):

- small: 8 rows a pool (1 prompt × 8, one optimiser step), so a fit takes 4 pools' rows;
- large: 256 rows a pool (32 prompts × 8, two optimiser steps of 128, the main job's shape).

It prints, for each, the seconds spent measuring gradients and fitting, the PO seconds
(``cost_aware/total/po_seconds``: forward, backward and optimiser steps), their ratio after the first
fit and at the end, and the fits made. Both are measured in the same process, one thread; on a shared
machine the ratio is steadier than either time.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402


def rollout(prompts, trainer):
    tok = trainer.processing_class
    calls = getattr(trainer, "_bench_rollouts", 0)
    trainer._bench_rollouts = calls + 1
    gen = torch.Generator().manual_seed(1000 + calls)
    lengths = torch.randint(1, trainer.args.max_completion_length + 1, (len(prompts),), generator=gen).tolist()
    texts = ["".join("0123456789abcdef"[int(i)] for i in torch.randint(0, 16, (k,), generator=gen)) for k in lengths]
    return {"prompt_ids": [tok(p, add_special_tokens=False)["input_ids"] for p in prompts],
            "completion_ids": [tok(t, add_special_tokens=False)["input_ids"] for t in texts],
            "logprobs": None}  # fmt: skip


def ends_in_digit(completions, **_):
    return [float(c[-1:].isdigit()) for c in completions]


def run(prompts_per_round: int, steps: int, rounds: int, interval: int = 8) -> dict[str, float]:
    import datasets
    from transformers.trainer_callback import PrinterCallback

    from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer
    from costaware.tiny import char_tokenizer, tiny_qwen2

    tok = char_tokenizer()
    data = datasets.Dataset.from_dict(
        {"prompt": [f"{i}+{i % 7}=" * (1 + i % 4) for i in range(prompts_per_round * rounds)]}
    )
    with tempfile.TemporaryDirectory() as out:
        args = CostAwareGRPOConfig(
            output_dir=out, loss_type="dapo", cost_aware_method="p_star", cost_aware_proxy="calibrated",
            num_generations=8, per_device_train_batch_size=prompts_per_round * 8 // steps, steps_per_generation=steps,
            max_steps=rounds * steps, max_completion_length=40, learning_rate=1e-5, beta=0.0, report_to="none",
            save_strategy="no", disable_tqdm=True, logging_steps=steps, seed=0, gradient_checkpointing=False,
            cost_aware_calibration_interval=interval,
        )  # fmt: skip
        torch.manual_seed(0)
        trainer = CostAwareGRPOTrainer(model=tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0), args=args,
                                       reward_funcs=ends_in_digit, train_dataset=data, processing_class=tok,
                                       rollout_func=rollout)  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    hist = trainer.state.log_history
    first_fit = next(h for h in hist if "cost_aware/proxy_beta_hat" in h)
    return {
        "rows": prompts_per_round * 8,
        "rounds": rounds,
        "fits": trainer.cost_aware_calibration.calibrator.updates,
        "calibration_s": trainer.cost_aware_calibration.seconds,
        "po_s": trainer.cost_aware_counters.po_seconds,
        "share_end": trainer.cost_aware_calibration.seconds / trainer.cost_aware_counters.po_seconds,
        "first_fit_round": first_fit["step"] // steps,
        "share_first_fit": first_fit["cost_aware/calibration_share_of_po"],
        "beta": trainer.cost_aware_calibration.calibrator.beta,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small-rounds", type=int, default=64)
    ap.add_argument("--large-rounds", type=int, default=16)
    ap.add_argument("--interval", type=int, default=8, help="cost_aware_calibration_interval")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, (prompts, steps, rounds) in {"small": (1, 1, a.small_rounds), "large": (32, 2, a.large_rounds)}.items():
        r = run(prompts, steps, rounds, a.interval)
        print(
            f"{name}: {r['rows']} rows/pool, a fit every {a.interval} pools, {r['rounds']} pools, "
            f"{r['fits']} fits (first after pool "
            f"{r['first_fit_round']}, beta {r['beta']:.2f}): calibration {r['calibration_s']:.2f} s, PO "
            f"{r['po_s']:.2f} s; calibration / PO = {r['share_first_fit']:.2f} at the first fit, "
            f"{r['share_end']:.3f} at the end",
            flush=True,
        )


if __name__ == "__main__":
    main()
