import sys; sys.path.insert(0, "benchmarks")
import torch, numpy as np
from bench_po_time import make_pool
from costaware.experiments import policy
from costaware.experiments.reproduce import PROFILES
from costaware.experiments.tasks import get_task
from costaware.integrations.verl import CostAwareConfig, plan_resampling
prof = PROFILES["default"]
tok, _ = policy.build_policy(get_task(prof.task).alphabet, hidden_size=prof.hidden_size, num_layers=prof.num_layers, seed=0)
mbs = prof.prompts_per_round // prof.steps_per_generation * prof.generations
rows = {}
for seed in range(20):
    pool = make_pool(tok, prof, seed, 0.3, prof.task)
    adv = pool.advantages; cost = pool.costs.long(); lengths = pool.completion_mask.sum(1)
    for name, kw in {"p*, no merge, beta=1 (old verl default)": dict(merge_duplicates=False, proxy="length_aware", proxy_beta=1.0),
                     "p*, no merge, beta=0": dict(merge_duplicates=False, proxy="advantage"),
                     "p*, merged, beta=1 (new default)": dict(merge_duplicates=True, proxy="length_aware", proxy_beta=1.0),
                     "nonzero": dict(method="nonzero")}.items():
        cfg = CostAwareConfig(**{"method": "p_star", **kw})
        r = plan_resampling(adv, cost, cfg, minibatch_size=mbs, dp_size=1, seed=0, step=seed, lengths=lengths, loss_agg_mode="token-mean")
        c = r.counts
        rows.setdefault(name, []).append(((c.tokens + c.tokens_padding) / c.tokens_plain, c.rows_unique / len(adv),
                                          float(cost[adv != 0].double().mean() / cost.double().mean())))
print(f"{len(adv)} rows/pool, {mbs} per mini-batch, 20 pools (bench_po_time pools, profile default, 30% constant groups)")
for k, v in rows.items():
    a = np.array(v); print(f"{k:42s} fed tokens / stock {a[:,0].mean():.3f} (min {a[:,0].min():.3f}, max {a[:,0].max():.3f}); unique rows {a[:,1].mean():.2f}; mean cost of A!=0 rows / all {a[:,2].mean():.3f}")
