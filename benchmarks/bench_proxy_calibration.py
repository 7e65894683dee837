"""What calibrating the proxy costs: the β fit and p for a 256-row pool, and the exact
per-sequence gradient norms it needs, against a forward/backward of a 128-row mini-batch.

    .venv/bin/python benchmarks/bench_proxy_calibration.py [--rows 16] [--every 4]

The model is the tiny Qwen2 of the main job's default profile (hidden 96, 3 layers), rows of
16-64 tokens (left-padded), a token-sum (dapo-like) loss. One round trains the 256-row pool as two
128-row mini-batches, so its policy-optimisation time is ~2 forward/backward passes; calibration runs
every ``--every`` rounds. Prints medians (the machine is shared and noisy) and ratios measured in
this same process.

With ``--sft DIR`` it instead reports the β̂ that calibration finds on real GRPO pools of a policy
checkpoint (``costaware reproduce``'s SFT), per TRL loss type, using the exact per-row gradients that
``examples/proxy_fidelity_probe.py`` captures:

    .venv/bin/python benchmarks/bench_proxy_calibration.py --sft runs/reproduce/sft-<hash> --loss-type grpo dapo
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _timing import median_seconds  # noqa: E402

from costaware.grpo.diagnostics import per_sequence_grad_norms  # noqa: E402
from costaware.grpo.proxy import (  # noqa: E402
    BetaCalibrator,
    adaptive_alpha,
    fit_beta,
    proxy_probs,
)
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402


def make_rows(tok, n: int, gen: torch.Generator, *, min_len: int = 16, max_len: int = 64):
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=gen)
    ids = torch.randint(4, len(tok), (n, max_len), generator=gen)
    mask = (torch.arange(max_len)[None, :] >= (max_len - lengths)[:, None]).long()  # left padding
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, tok.pad_token_id))
    adv = torch.randn(n, generator=gen)
    return {"input_ids": ids, "attention_mask": mask, "adv": adv}


def token_sum_loss(model, b, num_tokens: float = 1000.0):
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1]
    logp = torch.log_softmax(logits, -1).gather(-1, b["input_ids"][:, 1:, None])[..., 0]
    m = b["attention_mask"][:, 1:].to(logp.dtype)
    return -(b["adv"][:, None] * logp * m).sum() / num_tokens


def beta_report(sft, loss_types, *, prompts: int, rounds: int, max_terms: int, seed: int) -> None:
    """β̂ per pool (all rows, and 16 random rows with A ≠ 0 fed to the calibrator) and the calibrator's β."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from proxy_fidelity_probe import capture_pools

    from costaware.grpo.proxy import predicted_j_ratios

    for lt in loss_types:
        pools = capture_pools(sft, lt, prompts=prompts, rounds=rounds, max_terms=max_terms, seed=seed)
        cal = BetaCalibrator.for_loss(lt, every=1)
        print(f"== loss_type={lt}  prior beta {cal.prior_beta} (sd {cal.prior_sd})")
        rng = np.random.default_rng(seed)
        for k, (grads, adv, cost) in enumerate(pools):
            g = np.linalg.norm(grads, axis=1)
            full = fit_beta(np.abs(adv), g, cost)
            nz = np.flatnonzero(adv != 0)  # rows with A = 0 carry no information about β
            sub = rng.choice(nz, min(16, nz.size), replace=False)
            beta = cal.update(fit_beta(np.abs(adv[sub]), g[sub], cost[sub]))
            line = (
                f"  pool {k}: rows {len(adv)} nonzero {int((adv != 0).sum())}  all-rows beta_hat "
                f"{full.beta_hat:.2f} [{full.interval[0]:.2f}, {full.interval[1]:.2f}]  calibrator beta {beta:.2f}"
            )
            if (adv != 0).any() and (g > 0).any():
                for name, b in (("paper", 0.0), ("calibrated", beta)):
                    r = predicted_j_ratios(proxy_probs(np.abs(adv), cost, beta=b), g, cost)
                    line += f"  J/J*({name}) {r['j_vs_optimal']:.2f} J/J_unif {r['j_vs_uniform']:.2f}"
            print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16, help="calibration rows per update")
    ap.add_argument("--every", type=int, default=8, help="rounds between calibrations (BetaCalibrator default)")
    ap.add_argument("--pool", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sft", default=None, help="policy checkpoint: report beta_hat on its GRPO pools instead")
    ap.add_argument("--loss-type", nargs="+", default=["grpo", "dapo"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-terms", type=int, default=8)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    if args.sft is not None:
        torch.set_num_threads(1)
        beta_report(
            args.sft,
            args.loss_type,
            prompts=args.prompts,
            rounds=args.rounds,
            max_terms=args.max_terms,
            seed=args.seed,
        )
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = char_tokenizer()
    model = tiny_qwen2(tok, hidden_size=96, num_layers=3, seed=0)
    gen = torch.Generator().manual_seed(0)
    batch = make_rows(tok, args.batch, gen)
    calib = make_rows(tok, args.rows, gen)

    def fwd_bwd() -> None:
        model.zero_grad(set_to_none=True)
        token_sum_loss(model, batch).backward()

    def norms(method: str = "loop") -> torch.Tensor:
        return per_sequence_grad_norms(model, token_sum_loss, calib, method=method)

    rng = np.random.default_rng(0)
    abs_a = np.abs(rng.normal(size=args.pool))
    abs_a[rng.random(args.pool) < 0.3] = 0.0
    costs = rng.integers(16, 65, size=args.pool).astype(float)
    g = norms().numpy()
    sub_a = calib["adv"].abs().double().numpy()
    sub_c = calib["attention_mask"].sum(1).double().numpy()
    cal = BetaCalibrator.for_loss("dapo", every=args.every)

    def fit_and_probs() -> float:
        beta = cal.update(fit_beta(sub_a, g, sub_c))
        p = proxy_probs(abs_a, costs, beta=beta)
        return adaptive_alpha(p)

    t_fb = median_seconds(fwd_bwd, args.repeats)
    t_norms = median_seconds(norms, args.repeats)
    t_fit = median_seconds(fit_and_probs, 101)
    po_round = (args.pool // args.batch) * t_fb
    print(f"forward/backward of {args.batch} rows:          {t_fb * 1e3:9.2f} ms  (baseline)")
    print(
        f"exact grad norms of {args.rows} rows (loop):      {t_norms * 1e3:9.2f} ms  = {t_norms / t_fb:.2f} x baseline"
    )
    print(f"fit + update + p + alpha, {args.pool}-row pool:   {t_fit * 1e3:9.3f} ms  = {t_fit / t_fb:.5f} x baseline")
    try:
        t_vmap = median_seconds(lambda: norms("vmap"), args.repeats)
        print(
            f"exact grad norms of {args.rows} rows (vmap):      {t_vmap * 1e3:9.2f} ms  "
            f"= {t_vmap / t_fb:.2f} x baseline"
        )
    except Exception as exc:  # vmap does not trace every HF model
        print(f"vmap grad norms unavailable: {type(exc).__name__}: {str(exc)[:120]}")
    for every in sorted({1, 4, args.every}):
        share = (t_norms + t_fit) / (every * po_round)
        print(
            f"calibration share of PO time (loop), every {every} rounds of {args.pool // args.batch} "
            f"mini-batches: {100 * share:.1f}%"
        )


if __name__ == "__main__":
    main()
