"""Row-level theory against practice: the rollouts' own noise, which J(p) ignores, beside the noise of
sub-sampling a pool, at a few policy checkpoints along a GRPO run of the main job's setting.

J(p) = (Σ G_i²/p_i)(Σ p_i c_i) takes one pool of rollouts as the whole dataset. On the main job's logs
J(p*)/J(uniform on the A ≠ 0 rows) is 0.55-0.60, yet p* beats `nonzero` by only +8% of PO tokens. At a
fixed θ this tool draws K independent pools (fresh prompts, fresh completions) and measures, with ℓ_i
TRL's `grpo` sequence-mean loss of row i, g_i = ∇ℓ_i and n = n_supp the rows with A ≠ 0:

- g_pool = (1/n) Σ_{A_i≠0} g_i, the expected step of both `nonzero` and centred p* (docs/design.md,
  "Evidence: controls and confounders"), and V_pool = E‖g_pool − E g_pool‖² (unbiased over the K pools);
- V_sub, the variance one optimiser step adds around g_pool, exactly, from the per-row gradients:
  * m i.i.d. draws i_j ~ p, step (1/m) Σ_j g_{i_j}/(n p_{i_j}):  V_sub = (1/m)(Σ_i ‖g_i‖²/(n² p_i) − ‖g_pool‖²),
    for p* with the |A| proxy (p ∝ |A|/√c), p* with the oracle G_i = ‖g_i‖, and uniform on the n rows, each
    with the job's m = N/S draws per step, and p* with `nonzero`'s round(n/S) (a what-if, not a job arm);
  * `nonzero` (grpo.plan): a random permutation of the n rows cut into S chunks of sizes m_s
    (``tensor_split``), step s the mean of its chunk: V_sub,s = (σ²/m_s)(n − m_s)/(n − 1) with
    σ² = (1/n) Σ ‖g_i‖² − ‖g_pool‖² (the finite-population correction).

How V_pool enters a step. A pool feeds S = steps_per_generation steps ĝ_s = g_pool + ε_s, E[ε_s | pool] = 0.
At a small learning rate η the pool moves θ by −η(S·g_pool + Σ_s ε_s); over R pools the noise of the
displacement is η²R(S²·V_pool + Var Σ_s ε_s). SGD over the same R·S steps, each with variance V, has η²R·S·V,
so the *effective per-step variance* is

    V_eff = S·V_pool + Var(Σ_s ε_s)/S.

The S steps share one pool's noise, so it counts S times per step, not once. i.i.d. draws are independent
across steps, Var Σ_s ε_s = S·V_sub, so V_eff = S·V_pool + V_sub. `nonzero`'s chunks partition the pool: with
a_k = 1/m_s the weight of permuted row k (Σ_k a_k = S'), Var Σ_k a_k g_π(k) = σ²·n/(n−1)·Σ_k (a_k − ā)², so
Var Σ_s ε_s = σ²·n/(n−1)·(Σ_s 1/m_s − S'²/n): zero when the chunks are equal. The cost to equal variance is
V × the PO tokens fed per step (duplicate draws of a step run once: E = Σ_i c_i (1 − (1 − p_i)^m)), against
the same for `nonzero`: with V = V_sub it is J (the pool as the dataset), with V = V_eff J with the pool noise.
Adam, bias and the plateau are outside this model (it is SGD at a fixed θ).

    OMP_NUM_THREADS=1 python -m costaware.experiments.row_variance --rounds 0 20 50 100 --pools 16
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from costaware import distributions as dist
from costaware import theory
from costaware._checks import integer, value_error
from costaware._io import atomic_dir
from costaware.experiments.profile import PROFILES, Profile
from costaware.experiments.specs import RunSpec
from costaware.experiments.tasks import get_task

# uniform: i.i.d. on the A ≠ 0 rows (J's baseline); p_star_nzrows: p* drawing nonzero's rows per step,
# round(n/S), instead of the baseline's N/S (what the job's p* draws): not a job arm, a what-if
METHODS = ("nonzero", "p_star", "p_star_oracle", "uniform", "p_star_nzrows")


def iid_step_variance(sq_norms: np.ndarray, p: np.ndarray, g_sq: float, m: int) -> float:
    """E‖(1/m) Σ_j g_{i_j}/(n p_{i_j}) − g_pool‖² for m i.i.d. draws from p; ``sq_norms`` = ‖g_i‖² of the
    n rows with A ≠ 0, ``g_sq`` = ‖g_pool‖². A row with p = 0 must have g = 0 (else the step is biased).

    >>> round(iid_step_variance(np.array([1.0, 9.0]), np.array([0.5, 0.5]), 4.0, 1), 12)  # g = ±1, ±3 in 1-D
    1.0
    """
    on = p > 0
    return float(np.sum(sq_norms[on] / (p[on] * sq_norms.size**2)) - g_sq) / m


def chunk_sizes(n: int, steps: int) -> np.ndarray:
    """The non-empty chunk sizes of ``torch.tensor_split`` of n rows into ``steps`` (what `nonzero` feeds)."""
    q, r = divmod(n, steps)
    sizes = np.array([q + 1] * r + [q] * (steps - r))
    return sizes[sizes > 0]


def partition_variances(sq_norms: np.ndarray, g_sq: float, steps: int) -> tuple[float, float]:
    """`nonzero` on one pool: (mean over its steps of E‖step − g_pool‖², E‖Σ_s (step_s − g_pool)‖²).

    >>> partition_variances(np.array([1.0, 1.0]), 0.0, 2)  # g = ±1: each step is one row; the two cancel
    (1.0, 0.0)
    """
    n = sq_norms.size
    sigma2 = float(sq_norms.mean()) - g_sq
    sizes = chunk_sizes(n, steps)
    fpc = (n - sizes) / (n - 1) if n > 1 else np.zeros(1)
    per_step = float(np.mean(sigma2 / sizes * fpc))
    total = sigma2 * n / (n - 1) * (np.sum(1.0 / sizes) - sizes.size**2 / n) if n > 1 else 0.0
    return per_step, max(float(total), 0.0)


def fed_tokens(p: np.ndarray, costs: np.ndarray, m: int) -> float:
    """Expected tokens of the distinct rows among m i.i.d. draws from p (a duplicate runs once)."""
    return float(np.sum(costs * -np.expm1(m * np.log1p(-np.minimum(p, 1.0)))))


def method_probs(adv_abs: np.ndarray, norms: np.ndarray, costs: np.ndarray) -> dict[str, np.ndarray]:
    """p of each i.i.d. method over the n rows with A ≠ 0."""
    return {"p_star": dist.optimal(adv_abs, costs), "p_star_oracle": dist.optimal(norms, costs),
            "uniform": dist.uniform(adv_abs.size)}  # fmt: skip


@dataclass(frozen=True)
class Pool:
    """One pool at a fixed θ, its rows with A ≠ 0 only (the others have ∇ℓ = 0 under every method)."""

    adv: np.ndarray  # (n,) advantages
    costs: np.ndarray  # (n,) prompt + completion tokens
    sq_norms: np.ndarray  # (n,) ‖∇ℓ_i‖²
    grad: torch.Tensor  # (D,) float64 g_pool = (1/n) Σ ∇ℓ_i
    rows: int  # N, the pool's rows
    pass_rate: float


@dataclass(frozen=True)
class MethodRow:
    method: str
    v_sub: float  # per-step sub-sampling variance around g_pool, mean over pools
    v_eff: float  # effective per-step variance, pool noise included
    tokens: float  # expected PO tokens fed per step
    j_vs_uniform: float  # V_sub·tokens over uniform's (J: the pool as the dataset)
    j_vs_nonzero: float  # V_sub·tokens over nonzero's
    j_eff_vs_nonzero: float  # V_eff·tokens over nonzero's (J with the pool noise)
    j_eff_se: float  # its leave-one-pool-out jackknife standard error


_Summary = tuple[float, float, float, float, float]  # (V_sub, V_eff, tokens, J_sub, J_eff) of a method


@dataclass(frozen=True)
class CheckpointResult:
    rounds: int  # GRPO rounds after SFT
    pass_rate: float  # mean reward of the measured rollouts
    pools: int
    skipped_pools: int  # pools with every A = 0 (no method steps on them): left out
    n_supp: float  # mean rows with A ≠ 0 per pool
    v_pool: float
    grad_sq: float  # ‖E g_pool‖², unbiased
    pearson: float  # Pearson(|A|, ‖∇ℓ‖) over the A ≠ 0 rows of every pool
    proxy_j: float  # J(p*)/J(uniform on A ≠ 0) with G = |A|: the logs' number
    methods: tuple[MethodRow, ...]


@dataclass(frozen=True)
class RowVarianceResult:
    task: str
    steps: int  # steps_per_generation
    minibatch: int  # draws per step of the i.i.d. methods (the baseline's rows per step)
    checkpoints: tuple[CheckpointResult, ...]
    seconds: float


def summarise(pools: list[Pool], steps: int, m: int) -> tuple[float, float, dict[str, _Summary]]:
    """(V_pool, ‖E g‖², per method (V_sub, V_eff, tokens, J_sub, J_eff)) over ``pools``, with J = V × tokens."""
    grads = torch.stack([p.grad for p in pools])
    k, gram = len(pools), (grads @ grads.T).numpy()
    v_pool = float(np.trace(gram) - gram.sum() / k) / (k - 1)
    grad_sq = float(gram.sum() / k**2) - v_pool / k
    per: dict[str, list[tuple[float, float, float]]] = {name: [] for name in METHODS}
    for pool, g_sq in zip(pools, np.diag(gram), strict=True):
        v, total = partition_variances(pool.sq_norms, g_sq, steps)
        per["nonzero"].append((v, total / steps, pool.costs.sum() / steps))
        probs = method_probs(np.abs(pool.adv), np.sqrt(pool.sq_norms), pool.costs)
        probs["p_star_nzrows"] = probs["p_star"]
        for name, p in probs.items():
            draws = max(1, round(pool.adv.size / steps)) if name == "p_star_nzrows" else m
            v = iid_step_variance(pool.sq_norms, p, g_sq, draws)
            per[name].append((v, v, fed_tokens(p, pool.costs, draws)))
    out: dict[str, _Summary] = {}
    for name, rows in per.items():
        v_sub, v_rest, tokens = np.mean(rows, axis=0)
        out[name] = (v_sub, steps * v_pool + v_rest, tokens, v_sub * tokens, (steps * v_pool + v_rest) * tokens)
    return v_pool, grad_sq, out


def checkpoint_result(rounds: int, pools: list[Pool], skipped: int, steps: int, m: int) -> CheckpointResult:
    """The table of one checkpoint, with a leave-one-pool-out jackknife of J with the pool noise."""
    v_pool, grad_sq, s = summarise(pools, steps, m)
    k = len(pools)
    loo = [summarise(pools[:i] + pools[i + 1 :], steps, m)[2] for i in range(k)] if k > 2 else []

    def ratio(x: dict[str, _Summary], name: str) -> float:
        return x[name][4] / x["nonzero"][4]

    def jackknife_se(name: str) -> float:
        r = np.array([ratio(x, name) for x in loo])
        return float(np.sqrt((k - 1) / k * np.sum((r - r.mean()) ** 2))) if loo else float("nan")

    rows = tuple(MethodRow(name, *s[name][:3], j_vs_uniform=s[name][3] / s["uniform"][3],
                           j_vs_nonzero=s[name][3] / s["nonzero"][3], j_eff_vs_nonzero=ratio(s, name),
                           j_eff_se=jackknife_se(name)) for name in METHODS)  # fmt: skip
    a, g, c = (np.concatenate([getattr(p, f) for p in pools]) for f in ("adv", "sq_norms", "costs"))
    a, g = np.abs(a), np.sqrt(g)
    proxy_j = float(np.mean([theory.J(dist.optimal(np.abs(p.adv), p.costs), np.abs(p.adv), p.costs)
                             / theory.J(dist.uniform(p.adv.size), np.abs(p.adv), p.costs) for p in pools]))  # fmt: skip
    return CheckpointResult(rounds, float(np.mean([p.pass_rate for p in pools])), k, skipped,
                            float(np.mean([p.adv.size for p in pools])), v_pool, grad_sq, theory.pearson(a, g),
                            proxy_j, rows)  # fmt: skip


def grpo_row_losses(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """TRL's `grpo` loss per row (the token mean of −min(ρA, clip(ρ)A) over the completion) at the on-policy
    point of a pool's first step (ρ = 1, β = 0), whose gradient is −A · ∇ token-mean log π."""
    from costaware.grpo.losses import grpo_token_loss

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["completion_mask"][:, 1:]
    loss = grpo_token_loss(logp, logp.detach(), batch["adv"])
    return (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def rollout_batch(model: Any, tok: Any, task_name: str, profile: Profile, rng: np.random.Generator,
                  generator: torch.Generator) -> tuple[dict[str, torch.Tensor] | None, int, float]:  # fmt: skip
    """A fresh pool at the model's θ, generated and scored as the job does (the KV sampler at temperature 1,
    TRL's group std and eps): (its rows with A != 0 as a right-padded batch, or None; N; mean reward)."""
    from costaware.generation import SamplingParams, kv_generate
    from costaware.grpo.advantages import group_advantages
    from costaware.grpo.config import SamplingConfig

    task, (lo, hi), k = get_task(task_name), profile.sizes(task_name), profile.generations
    tasks = task.make_tasks(profile.prompts_per_round, min_size=lo, max_size=hi, rng=rng)
    prompts = [ids for p in tasks.prompts for ids in [tok(p, add_special_tokens=False)["input_ids"]] * k]
    completions = kv_generate(model, prompts, max_new_tokens=task.max_response_tokens(hi) + 1,
                              eos_token_ids=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                              params=SamplingParams(temperature=1.0), generator=generator).completions  # fmt: skip
    texts = tok.batch_decode(completions, skip_special_tokens=True)
    rewards = torch.tensor(task.reward(texts, np.repeat(np.asarray(tasks.answers), k).tolist()))
    adv = group_advantages(rewards, k, eps=1e-4).double().numpy()
    a = np.abs(adv)
    keep = np.flatnonzero(a > SamplingConfig().zero_tol * a.max()) if a.max() > 0 else np.array([], int)
    if keep.size == 0:
        return None, adv.size, float(rewards.mean())
    seqs = [prompts[i] + completions[i] for i in keep]
    ids = torch.full((keep.size, max(map(len, seqs))), tok.pad_token_id)
    attn, comp = torch.zeros_like(ids), torch.zeros_like(ids)
    for r, i in enumerate(keep):  # right padding: causal attention leaves the real tokens as they are
        ids[r, : len(seqs[r])] = torch.tensor(seqs[r])
        attn[r, : len(seqs[r])] = 1
        comp[r, len(prompts[i]) : len(seqs[r])] = 1
    batch = {"input_ids": ids, "attention_mask": attn, "completion_mask": comp.float(),
             "adv": torch.from_numpy(adv[keep]).float()}  # fmt: skip
    return batch, adv.size, float(rewards.mean())


def measure_pool(model: Any, batch: dict[str, torch.Tensor], rows: int, pass_rate: float) -> Pool:
    """g_pool (one batched backward of the mean row loss) and every row's ‖∇ℓ_i‖ (one backward per row)."""
    from costaware.grpo.diagnostics import per_sequence_grad_norms

    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(grpo_row_losses(model, batch).mean(), params)
    norms = per_sequence_grad_norms(model, lambda mdl, row: grpo_row_losses(mdl, row).sum(), batch)
    return Pool(batch["adv"].double().numpy(), batch["attention_mask"].sum(1).double().numpy(), norms.numpy() ** 2,
                torch.cat([g.double().flatten() for g in grads]), rows, pass_rate)  # fmt: skip


def checkpoint(profile: Profile, task_name: str, sft_dir: Path, rounds: int, seed: int, out: Path) -> tuple[Any, Any]:
    """(tokenizer, model) after ``rounds`` GRPO rounds from the SFT checkpoint, trained by the main job's
    own run (``grpo_run.run_grpo``, method none) and cached under ``out``; 0 is the SFT checkpoint."""
    from costaware.experiments.grpo_run import run_grpo as _run_grpo
    from costaware.experiments.keys import key
    from costaware.experiments.worker import load_checkpoint

    if rounds == 0:
        return load_checkpoint(sft_dir)
    # evaluation and diagnostics change no training number: the smallest ones, to save time
    prof = dataclasses.replace(profile, rounds=rounds, token_budget=0, eval_every=rounds, eval_prompts=8,
                               validation_prompts=0, diagnostics_rows=0)  # fmt: skip
    path = out / f"grpo-{sft_dir.name}-{rounds}r-s{seed}-{key(dataclasses.asdict(prof))}"
    if not path.exists():
        with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=out) as work, atomic_dir(path) as tmp:
            trained = _run_grpo(RunSpec("headline", "none", seed, task=task_name), prof, sft_dir, Path(work) / "work")
            trained["trainer"].model.save_pretrained(tmp)
            load_checkpoint(sft_dir)[0].save_pretrained(tmp)
    return load_checkpoint(path)


def run(profile: Profile, *, rounds: tuple[int, ...], pools: int, seed: int, out: Path,
        log: Any = None) -> RowVarianceResult:  # fmt: skip
    """The table's numbers: per checkpoint, ``pools`` independent pools at its θ."""
    from costaware.experiments.quiet import quiet_libraries
    from costaware.experiments.sft import warm_up

    pools = integer(pools, "pools", minimum=2, strict=True, why=" (a variance across pools)")
    if not rounds:
        raise value_error("rounds", rounds, "must be one or more integers >= 0")
    for r in rounds:
        integer(r, "rounds", minimum=0, strict=True)
    seed = integer(seed, "seed", minimum=0, strict=True)
    start = time.perf_counter()
    quiet_libraries()
    out.mkdir(parents=True, exist_ok=True)
    task, steps = profile.task, profile.steps_per_generation
    m = profile.prompts_per_round * profile.generations // steps
    sft_dir = warm_up(profile, task, out)
    results = []
    for r in sorted(set(rounds)):
        tok, model = checkpoint(profile, task, sft_dir, r, seed, out)
        model.eval()  # no dropout in the tiny Qwen2; eval only pins it
        rng, gen = np.random.default_rng([seed, r, 1]), torch.Generator().manual_seed(seed * 1_000_003 + r)
        drawn = [rollout_batch(model, tok, task, profile, rng, gen) for _ in range(pools)]
        kept = [measure_pool(model, batch, n, rate) for batch, n, rate in drawn if batch is not None]
        if len(kept) < 2:
            raise ValueError(f"rounds={r}: {len(kept)} of {pools} pools have a row with A != 0; need 2 (raise pools)")
        results.append(checkpoint_result(r, kept, pools - len(kept), steps, m))
        if log is not None:
            log(format_checkpoint(results[-1]))
    return RowVarianceResult(task, steps, m, tuple(results), time.perf_counter() - start)


def format_checkpoint(c: CheckpointResult) -> str:
    head = (f"checkpoint: {c.rounds} GRPO rounds after SFT | pass rate {c.pass_rate:.3f} | {c.pools} pools "
            f"({c.skipped_pools} skipped) | rows with A!=0 per pool {c.n_supp:.1f}\n"
            f"  V_pool {c.v_pool:.3e}   |E g_pool|^2 {c.grad_sq:.3e}   Pearson(|A|, |grad l|) {c.pearson:.3f}   "
            f"J(p*)/J(uniform), G=|A| (the logs' number) {c.proxy_j:.3f}\n")  # fmt: skip
    cols = f"  {'method':<15}{'V_sub/step':>12}{'V_eff/step':>12}{'tokens/step':>13}" \
           f"{'J/J_unif':>10}{'J/J_nz':>9}{'J_eff/J_eff,nz':>17}\n"  # fmt: skip
    body = "".join(f"  {r.method:<15}{r.v_sub:>12.3e}{r.v_eff:>12.3e}{r.tokens:>13.0f}{r.j_vs_uniform:>10.3f}"
                   f"{r.j_vs_nonzero:>9.3f}{r.j_eff_vs_nonzero:>10.3f} ± {r.j_eff_se:.3f}\n"
                   for r in c.methods)  # fmt: skip
    return head + cols + body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m costaware.experiments.row_variance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--profile", choices=sorted(PROFILES), default="default", help="sizes (default: %(default)s)")
    p.add_argument(
        "--rounds",
        nargs="+",
        type=int,
        default=[0, 20, 50, 100],
        help="checkpoints: GRPO rounds after SFT (default: %(default)s)",
    )
    p.add_argument("--pools", type=int, default=16, help="independent pools per checkpoint (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="GRPO run and pool seed (default: %(default)s)")
    p.add_argument("--out", default="runs/row_variance", help="SFT and checkpoint cache (default: %(default)s)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    try:
        res = run(PROFILES[args.profile], rounds=tuple(args.rounds), pools=args.pools, seed=args.seed,
                  out=Path(args.out), log=lambda s: print(s, flush=True))  # fmt: skip
    except ValueError as e:
        print(f"row_variance: error: {e}", file=sys.stderr)
        return 2
    print(f"# {res.task}, S={res.steps} steps per pool, m={res.minibatch} draws per step; {res.seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
