"""Is |A|/√c a good sampling distribution for this loss? Exact per-row gradients on real pools.

Generates a few GRPO pools from a policy checkpoint (an SFT checkpoint of ``costaware reproduce``: its
``sft.json`` names the task and the sizes it was trained on, and the prompts are drawn from them),
computes every row's exact gradient of the loss as TRL aggregates it for ``--loss-type``, and prints:

- Pearson(|A|, G) and the cost-biased χ² of p ∝ |A|/√c against the true p* ∝ G/√c;
- the slope of log(G/|A|) against log c (0: |A| alone is the right proxy; >0: G grows with length);
- J(p_|A|)/J(uniform): below 1, cost-aware sampling is predicted to pay off;
- the relative squared error of one mini-batch's estimate of the pool gradient, for the baseline
  (rows without replacement) and for p* draws (centred weights), with the tokens each feeds.

    python examples/proxy_fidelity_probe.py --sft runs/reproduce/sft-sort-<hash> --loss-type grpo dapo

It exits with an error when no pool has a reward that differs within a group (every advantage 0): the
policy gets no signal from these prompts, so there is nothing to measure. Each row's exact gradient takes
its own backward pass: on 2 CPU cores the defaults (2 losses, 3 pools of 128 rows) take several minutes,
``--loss-type grpo --prompts 8 --rounds 1`` about 40 s.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import PrinterCallback

import costaware.grpo.diagnostics as diagnostics
from costaware import distributions as dist
from costaware import theory
from costaware.experiments.tasks import get_task
from costaware.experiments.worker import load_checkpoint
from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer


def checkpoint_task(sft: Path) -> tuple[str, int, int]:
    """(task, min_size, max_size) the checkpoint was trained on, from the ``sft.json`` beside its weights."""
    info = sft / "sft.json"
    if not info.is_file():
        raise SystemExit(
            f"--sft {str(sft)!r}: no sft.json there (the folder of a `costaware reproduce` SFT checkpoint)"
        )
    cfg = json.loads(info.read_text()).get("config", {})
    try:
        return str(cfg["task"]), int(cfg["min_size"]), int(cfg["max_size"])
    except KeyError as e:
        raise SystemExit(f"--sft {str(sft)!r}: sft.json has no config.{e.args[0]}") from None


def capture_pools(sft: Path, loss_type: str, *, prompts: int, rounds: int, max_terms: int | None, seed: int):
    """The pools of :func:`capture` on the checkpoint's task, sizes from its min_size to ``max_terms`` (the
    largest size: terms for arith, digits for sort; None: the checkpoint's). Only pools with a signal."""
    _, min_size, max_size = checkpoint_task(sft)
    sizes = (min_size, max_size if max_terms is None else max_terms)
    return capture(sft, loss_type, prompts=prompts, rounds=rounds, sizes=sizes, seed=seed)[0]


def capture(sft: Path, loss_type: str, *, prompts: int, rounds: int, sizes: tuple[int, int], seed: int):
    """Run the trainer at lr≈0 and keep (per-row gradients, advantages, costs) of every pool with a nonzero
    advantage, and the trainer's counters (``cost_aware_state``)."""
    pools = []

    def grads(model, loss_fn, rows):  # the trainer's per_row_grad_norms hook: keep the gradients too
        params = [p for p in model.parameters() if p.requires_grad]
        n = next(iter(rows.values())).shape[0]
        flat = []
        for i in range(n):
            g = torch.autograd.grad(
                loss_fn(model, {k: v[i : i + 1] for k, v in rows.items()}), params, allow_unused=True
            )
            flat.append(
                torch.cat(
                    [(x if x is not None else torch.zeros_like(p)).reshape(-1) for x, p in zip(g, params, strict=True)]
                )
            )
        G = torch.stack(flat).double()
        cost = (rows["prompt_mask"].sum(1) + rows["completion_mask"].sum(1)).double()
        pools.append((G.numpy(), rows["advantages"].double().numpy(), cost.numpy()))
        return G.norm(dim=1)

    tok, model = load_checkpoint(sft)
    task = get_task(checkpoint_task(sft)[0])
    tasks = task.make_tasks(prompts * rounds, min_size=sizes[0], max_size=sizes[1], rng=np.random.default_rng(seed))
    rows = prompts * 8
    args = CostAwareGRPOConfig(
        output_dir="/tmp/proxy-probe",
        cost_aware_method="none",
        loss_type=loss_type,
        beta=0.0,
        learning_rate=1e-12,
        num_generations=8,
        per_device_train_batch_size=rows // 2,
        steps_per_generation=2,
        max_steps=2 * rounds,
        max_completion_length=task.max_response_tokens(sizes[1]) + 1,
        temperature=1.0,
        seed=seed,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        cost_aware_diagnostics_interval=1,
        cost_aware_diagnostics_rows=rows,
    )
    data = Dataset.from_dict({"prompt": tasks.prompts, "answer": tasks.answers.tolist()})
    trainer = CostAwareGRPOTrainer(
        model=model, args=args, reward_funcs=task.reward, train_dataset=data, processing_class=tok
    )
    trainer.per_row_grad_norms = grads  # the trainer's hook for the diagnostics' per-row gradients
    trainer.remove_callback(PrinterCallback)  # no log line per step
    trainer.train()
    return pools, trainer.cost_aware_state


def minibatch_error(G, a, c, m, rng, trials=400):
    """Mean ‖ĝ − ḡ‖²/‖ḡ‖² of one m-row mini-batch, and its fed tokens: baseline vs p* (merged)."""
    n = len(a)
    gbar = G.mean(0)
    ref = gbar @ gbar
    p = dist.optimal(np.abs(a), c)
    out = {}
    for name in ("baseline", "p*"):
        errs, toks = [], []
        for _ in range(trials):
            if name == "baseline":
                idx, w = rng.permutation(n)[:m], np.ones(m)
            else:
                idx = rng.choice(n, m, p=p)
                w = 1.0 / (n * p[idx])  # raw weights: E = ḡ exactly
            est = (w[:, None] * G[idx]).sum(0) / m
            errs.append(float((est - gbar) @ (est - gbar) / ref))
            toks.append(float(c[np.unique(idx)].sum()))
        out[name] = (float(np.mean(errs)), float(np.mean(toks)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft", required=True, type=Path, help="an SFT checkpoint folder (holds sft.json)")
    ap.add_argument("--loss-type", nargs="+", default=["grpo", "dapo"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-size", type=int, default=None, help="largest task size (default: the checkpoint's)")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    task, min_size, max_size = checkpoint_task(args.sft)
    max_size = max_size if args.max_size is None else args.max_size
    if max_size < min_size:
        raise SystemExit(f"--max-size must be >= the checkpoint's min_size={min_size}, got {max_size}")
    torch.set_num_threads(2)
    for lt in args.loss_type:
        pools, fed = capture(
            args.sft, lt, prompts=args.prompts, rounds=args.rounds, sizes=(min_size, max_size), seed=args.seed
        )
        if not pools:  # the diagnostics skip a pool whose advantages are all 0: nothing to measure
            raise SystemExit(
                f"no learning signal: every reward was equal within every group in {int(fed['generations'])} "
                f"generation batches of {task} prompts (sizes {min_size}..{max_size}, loss_type={lt})"
            )
        print(
            f"== loss_type={lt}: {task} sizes {min_size}..{max_size}, {len(pools)} of {int(fed['generations'])} "
            f"pools with a signal; fed {int(fed['tokens'] + fed['tokens_padding'])} policy-optimisation tokens "
            f"(padding rows {int(fed['tokens_padding'])} included)"
        )
        for G, a, c in pools:
            g = np.linalg.norm(G, axis=1)
            nz = np.abs(a) > 0
            fid = diagnostics.proxy_fidelity(np.abs(a), g, c)
            slope = np.polyfit(np.log(c[nz]), np.log(g[nz] / np.abs(a[nz])), 1)[0] if nz.sum() > 1 else np.nan
            err = minibatch_error(G, a, c, len(a) // 2, np.random.default_rng(0))
            print(
                f"  rows {len(a)} nonzero {int(nz.sum())}  pearson {fid['pearson']:.2f}  chi2 {fid['chi2']:.2f}  "
                f"slope {slope:.2f}  J/J_unif {fid['j_vs_uniform']:.2f}  J*/J_unif "
                f"{theory.J_optimal(g, c) / theory.J(dist.uniform(len(g)), g, c):.2f}  "
                f"mini-batch rel.err² baseline {err['baseline'][0]:.2f} ({err['baseline'][1]:.0f} tok), "
                f"p* {err['p*'][0]:.2f} ({err['p*'][1]:.0f} tok)"
            )


if __name__ == "__main__":
    main()
