"""Policy-optimisation (PO) time of identical pools: GRPO vs ``nonzero`` vs p*, in one process.

    python benchmarks/bench_po_time.py [--pools 4] [--repeats 5] [--threads 1] [--profile default]
                                       [--old-logps off|all|fed]

Does the token saving of cost-aware sampling show up as PO wall-clock? Each *PO phase* is what a
trainer does with one scored pool: build the plan (``costaware.grpo.plan.plan_minibatches``, public
API), then for each of its ``steps_per_generation`` mini-batches index the pool's rows, trim the
columns that are padding in every row (as the TRL adapter does), run forward + backward of the
GRPO loss (clipped ratio, mean over each sequence's tokens, then over rows; the plan's row factors
folded into the advantages as the TRL adapter folds them) and an AdamW step.

Setup, all from the chosen ``reproduce`` profile: the demo policy (``policy.build_policy`` at the
profile's hidden size and layers), pools of ``prompts_per_round`` prompts of the profile's task family
(``--task`` to choose another) × ``generations`` completions written by the family's demonstrations
with the profile's ``mistake_prob`` (so rewards vary
inside most groups; in a ``--constant-groups`` share of prompts every sample repeats one chain, so
their rewards are equal and their advantages zero), GRPO group advantages (TRL's eps 1e-4).
Every method sees the same pools, each on its own copy of the same model, interleaved
A B C A B C ... with ``torch.set_num_threads(threads)``; medians over pools × repeats.

With ``--old-logps all`` or ``fed`` the phase starts, as TRL's does whenever a round takes more than
one optimiser step, with a no-grad forward pass that gives the old log-probs of the clipped ratio:
over every row of the pool (``all``, stock TRL) or over the rows the plan feeds (``fed``, the TRL
adapter's default ``cost_aware_old_logps``); GRPO feeds every row, so for it the two are the same.

It prints per method the median seconds and tokens per PO phase (tokens fed, i.e. non-padding
prompt + completion tokens, and the padded tokens actually computed after trimming) and, for p* and
``nonzero`` against GRPO, ``(time saved / GRPO time) / (tokens saved / GRPO tokens)``: 1.0 means
the saving in tokens is a saving in time one for one. It then breaks each method's phase into
plan / index / trim / forward+backward / optimiser step, to show which part does not scale with tokens.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from costaware.experiments import policy
from costaware.experiments.reproduce import PROFILES
from costaware.experiments.tasks import TASKS, get_task
from costaware.grpo.advantages import group_advantages
from costaware.grpo.losses import grpo_token_loss
from costaware.grpo.plan import SamplingConfig, plan_minibatches

METHODS = ("none", "nonzero", "p_star")
LABELS = {"none": "GRPO", "nonzero": "nonzero", "p_star": "p*"}
STAGES = ("plan", "old logps", "index", "trim", "fwd+bwd", "optim")
_SUBSET = ("nonzero", "pods")


@dataclass(frozen=True)
class Pool:
    prompt_ids: torch.Tensor  # (N, Lp) left-padded
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # (N, Lc) right-padded, EOS included
    completion_mask: torch.Tensor
    advantages: torch.Tensor  # (N,)
    costs: torch.Tensor  # (N,) prompt + completion tokens


def _pad(rows: list[list[int]], value: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(r) for r in rows])
    width = int(lengths.max())
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):  # building the pool only; never timed
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl], mask[i, sl] = torch.tensor(r), 1
    return ids, mask


def _repeat(tasks, g: int):
    """Every task ``g`` times in a row (a group), as the family's own task record."""
    fields = {f.name: getattr(tasks, f.name) for f in dataclasses.fields(tasks)}
    return type(tasks)(**{k: np.repeat(v, g, 0) if isinstance(v, np.ndarray) else [x for x in v for _ in range(g)]
                          for k, v in fields.items()})  # fmt: skip


def make_pool(tokenizer, profile, seed: int, constant_groups: float, task_id: str) -> Pool:
    rng = np.random.default_rng(seed)
    g, family = profile.generations, get_task(task_id)
    lo, hi = profile.sizes(task_id)
    rep = _repeat(family.make_tasks(profile.prompts_per_round, min_size=lo, max_size=hi, rng=rng), g)
    completions = family.demonstrations(rep, mistake_prob=profile.mistake_prob, rng=rng)
    # a confident policy writes one trace for every sample of some prompts: constant reward, A = 0
    same = np.repeat(rng.random(profile.prompts_per_round) < constant_groups, g)
    first = np.repeat(np.arange(0, len(completions), g), g)
    completions = [completions[j] for j in np.where(same, first, np.arange(len(completions))).tolist()]
    rewards = torch.tensor(family.is_correct(completions, rep.answers), dtype=torch.float32)
    vocab = tokenizer.get_vocab()
    p_ids, p_mask = _pad([[vocab[c] for c in p] for p in rep.prompts], tokenizer.pad_token_id, left=True)
    c_ids, c_mask = _pad([[vocab[c] for c in r] + [tokenizer.eos_token_id] for r in completions],
                         tokenizer.pad_token_id, left=False)  # fmt: skip
    adv = group_advantages(rewards, g, eps=1e-4)
    return Pool(p_ids, p_mask, c_ids, c_mask, adv, (p_mask.sum(1) + c_mask.sum(1)).double())


def _trimmed(pool: Pool, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Rows ``idx``, with the columns that are padding in every one of them dropped (as the TRL adapter)."""
    pi, pm, ci, cm = pool.prompt_ids[idx], pool.prompt_mask[idx], pool.completion_ids[idx], pool.completion_mask[idx]
    p_cols, c_cols = torch.nonzero(pm.any(0)).reshape(-1), torch.nonzero(cm.any(0)).reshape(-1)
    p0, c1 = int(p_cols[0]), int(c_cols[-1]) + 1
    return pi[:, p0:], pm[:, p0:], ci[:, :c1], cm[:, :c1]


def _logps(model, pi, pm, ci, cm) -> torch.Tensor:
    ids, mask = torch.cat([pi, ci], 1), torch.cat([pm, cm], 1)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, pi.shape[1] - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, ci.unsqueeze(-1)).squeeze(-1)


def old_logps(model, pool: Pool, rows: torch.Tensor, chunk: int) -> torch.Tensor:
    """(N, Lc) old log-probs of ``rows`` (zeros elsewhere), by no-grad forward passes of ``chunk`` rows."""
    out = torch.zeros(pool.completion_ids.shape)
    with torch.no_grad():
        for part in rows.split(chunk):
            pi, pm, ci, cm = _trimmed(pool, part)
            out[part, : ci.shape[1]] = _logps(model, pi, pm, ci, cm)
    return out


def po_phase(model, opt, pool: Pool, method: str, spg: int, seed: int, clock: dict[str, float],
             old_mode: str = "off") -> dict[str, float]:  # fmt: skip
    """One PO phase; adds each stage's seconds into ``clock``; returns tokens fed and computed."""
    t = time.perf_counter()
    n = pool.advantages.numel()
    plan = plan_minibatches(pool.advantages, pool.costs, num_minibatches=spg, minibatch_size=n // spg,
                            config=SamplingConfig(method=method),
                            generator=torch.Generator().manual_seed(seed))  # fmt: skip
    t0 = time.perf_counter()
    clock["plan"] += t0 - t
    old = None
    if old_mode != "off" and plan.minibatches:
        rows = torch.arange(n) if old_mode == "all" or method == "none" else torch.unique(
            torch.cat([mb.indices for mb in plan.minibatches]))  # fmt: skip
        old = old_logps(model, pool, rows, n // spg)
    clock["old logps"] += time.perf_counter() - t0
    fed = computed = 0
    for mb in plan.minibatches:
        t = time.perf_counter()
        idx = mb.indices
        pi, pm, ci, cm = (
            pool.prompt_ids[idx],
            pool.prompt_mask[idx],
            pool.completion_ids[idx],
            pool.completion_mask[idx],
        )
        k = idx.numel()
        if method == "none":
            factor = torch.ones(k)
        else:  # as the TRL adapter: row-mean loss, so factor = weight × rows fed / draws it stands for
            m = n / spg if method in _SUBSET else float(mb.num_draws)
            factor = mb.weights.float() * (k / m)
        adv = plan.advantages[idx] * factor
        t1 = time.perf_counter()
        pi, pm, ci, cm = _trimmed(pool, idx)
        t2 = time.perf_counter()
        mask = torch.cat([pm, cm], 1)
        logp = _logps(model, pi, pm, ci, cm)
        tok = grpo_token_loss(logp, logp.detach() if old is None else old[idx, : ci.shape[1]], adv)
        cmf = cm.float()
        loss = ((tok * cmf).sum(1) / cmf.sum(1).clamp(min=1.0)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t4 = time.perf_counter()
        clock["index"] += t1 - t
        clock["trim"] += t2 - t1
        clock["fwd+bwd"] += t3 - t2
        clock["optim"] += t4 - t3
        fed += int(mask.sum())
        computed += int(mask.numel())
    return {"fed": fed, "computed": computed, "steps": len(plan.minibatches)}


def add_pool_arguments(ap: argparse.ArgumentParser, *, repeats: int) -> None:
    """The pool options every PO-phase benchmark takes (this one and bench_verl_po)."""
    ap.add_argument("--profile", default="default", choices=sorted(PROFILES))
    ap.add_argument("--pools", type=int, default=4, help="distinct pools (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=repeats, help="passes over the pools (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: %(default)s)")
    ap.add_argument(
        "--constant-groups",
        type=float,
        default=0.3,
        help="share of prompts whose samples all repeat one chain (zero advantage; default: %(default)s)",
    )


def check_pool_arguments(args: argparse.Namespace) -> None:
    """One-line exits for bad pool options (before any model is built)."""
    for name in ("pools", "repeats", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if not 0.0 <= args.constant_groups < 1.0:
        raise SystemExit(f"--constant-groups must lie in [0, 1), got {args.constant_groups}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pool_arguments(ap, repeats=5)
    ap.add_argument("--task", choices=sorted(TASKS), help="task family of the pools (default: the profile's)")
    ap.add_argument("--old-logps", choices=("off", "all", "fed"), default="off",
                    help="the old-logp forward pass before the steps: none, over every row, or over the fed rows "
                         "(default: %(default)s)")  # fmt: skip
    args = ap.parse_args()
    check_pool_arguments(args)
    torch.set_num_threads(args.threads)
    prof = PROFILES[args.profile]
    task_id = args.task or prof.task
    tok, base = policy.build_policy(get_task(task_id).alphabet, hidden_size=prof.hidden_size,
                                    num_layers=prof.num_layers, seed=0)  # fmt: skip
    base.train()
    models = {m: copy.deepcopy(base) for m in METHODS}
    opts = {m: torch.optim.AdamW(models[m].parameters(), lr=prof.learning_rate) for m in METHODS}
    pools = [make_pool(tok, prof, seed, args.constant_groups, task_id) for seed in range(args.pools)]
    spg = prof.steps_per_generation
    n = pools[0].advantages.numel()
    zero = np.mean([float((p.advantages == 0).float().mean()) for p in pools])
    print(f"profile {args.profile}: hidden {prof.hidden_size}, layers {prof.num_layers}, pool N = {n} "
          f"({prof.prompts_per_round} prompts x {prof.generations}), {spg} mini-batches, {task_id} sizes "
          f"{prof.sizes(task_id)[0]}..{prof.sizes(task_id)[1]}, mistake_prob {prof.mistake_prob}; "
          f"zero-advantage rows {zero:.2f}; "
          f"threads {args.threads}; old logps {args.old_logps}")  # fmt: skip
    for m in METHODS:  # warm-up: allocator, autograd graph caches, optimiser state
        po_phase(models[m], opts[m], pools[0], m, spg, 0, dict.fromkeys(STAGES, 0.0), args.old_logps)
    secs: dict[str, list[float]] = {m: [] for m in METHODS}
    toks: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    stages: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    for r in range(args.repeats):
        for i, pool in enumerate(pools):
            for m in METHODS:  # A B C A B C: drift in machine load hits every method alike
                clock = dict.fromkeys(STAGES, 0.0)
                start = time.perf_counter()
                out = po_phase(models[m], opts[m], pool, m, spg, 1000 * r + i, clock, args.old_logps)
                secs[m].append(time.perf_counter() - start)
                toks[m].append(out)
                stages[m].append(clock)
    med = {m: statistics.median(secs[m]) for m in METHODS}
    fed = {m: float(np.mean([t["fed"] for t in toks[m]])) for m in METHODS}
    comp = {m: float(np.mean([t["computed"] for t in toks[m]])) for m in METHODS}
    print(f"\n{'method':8s} {'median s':>9s} {'tokens fed':>11s} {'computed':>9s}   (means per PO phase, "
          f"{args.pools} pools x {args.repeats} repeats)")  # fmt: skip
    for m in METHODS:
        print(f"{LABELS[m]:8s} {med[m]:9.4f} {fed[m]:11.0f} {comp[m]:9.0f}")
    print()
    for m in METHODS[1:]:
        dt = 1 - med[m] / med["none"]
        df, dc = 1 - fed[m] / fed["none"], 1 - comp[m] / comp["none"]
        print(f"{LABELS[m]} vs GRPO: time saved {dt:.3f}, tokens fed saved {df:.3f}, computed saved {dc:.3f}; "
              f"time saved / tokens saved = {dt / df:.2f} (fed), {dt / dc:.2f} (computed)")  # fmt: skip
    print(f"\nmedian seconds per PO phase by stage ({spg} mini-batches each)")
    print(f"{'method':8s} " + " ".join(f"{s:>9s}" for s in STAGES))
    for m in METHODS:
        print(f"{LABELS[m]:8s} " + " ".join(f"{statistics.median(c[s] for c in stages[m]):9.4f}" for s in STAGES))


if __name__ == "__main__":
    main()
