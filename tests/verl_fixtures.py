"""Fixtures of the verl harness (:mod:`verl_harness`): the padded batch, the bigram policy, verl's actor
config with the plugin's options, and the per-row layout trainer v1 keeps in TransferQueue.

Importing this module skips the importing test module when verl or its trainer v0 is missing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")

import costaware.integrations.verl  # noqa: E402,F401  (installs the hook; patches what is imported)

ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402

PROMPT_LEN, RESPONSE_LEN, GROUP, VOCAB = 5, 9, 4, 23
NUM_PROMPTS, MINI_PROMPTS, DP = 4, 2, 2  # 16 rows, mini-batches of 8 rows, 2 ranks
MAX_TOKENS = 2 * (PROMPT_LEN + RESPONSE_LEN)  # dynamic batch size: several micro-batches per rank
ALPHA, SEED, STEP = 0.3, 5, 2
AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def padded_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded prompts, right-padded responses of unequal lengths, GRPO advantages, KL reference."""
    g = torch.Generator().manual_seed(seed)
    n = NUM_PROMPTS * GROUP
    prompt_lens = torch.randint(1, PROMPT_LEN + 1, (n,), generator=g)
    response_lens = torch.randint(1, RESPONSE_LEN + 1, (n,), generator=g)
    response_lens[0], response_lens[1] = 1, RESPONSE_LEN  # the extremes, always present
    prompt_mask = (torch.arange(PROMPT_LEN)[None] >= PROMPT_LEN - prompt_lens[:, None]).long()
    response_mask = (torch.arange(RESPONSE_LEN)[None] < response_lens[:, None]).long()
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    prompts = torch.randint(1, VOCAB, (n, PROMPT_LEN), generator=g) * prompt_mask
    responses = torch.randint(1, VOCAB, (n, RESPONSE_LEN), generator=g) * response_mask
    rewards = torch.randint(0, 2, (n,), generator=g).float()
    rewards[:GROUP] = 1.0  # a zero-advantage group: its rows still carry KL and entropy gradients
    rewards[GROUP : 2 * GROUP] = torch.tensor([1.0, 0.0, 0.0, 1.0])
    scores = torch.zeros(n, RESPONSE_LEN)
    scores[torch.arange(n), response_lens - 1] = rewards
    uid = np.repeat(np.array([f"p{i}" for i in range(NUM_PROMPTS)], dtype=object), GROUP)
    advantages, _ = compute_grpo_outcome_advantage(scores, response_mask.float(), uid)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "advantages": advantages,
        "old_log_probs": -0.5 - torch.rand(n, RESPONSE_LEN, generator=g),
        "ref_log_prob": -0.5 - torch.rand(n, RESPONSE_LEN, generator=g),
        "rollout_is_weights": 0.5 + torch.rand(n, RESPONSE_LEN, generator=g),
        "row_id": torch.arange(n),
    }


class Bigram(torch.nn.Module):
    """log pi(x_{t+1} | x_t) = log_softmax(E[x_t])[x_{t+1}]: a policy with exact, cheap gradients."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(0.5 * torch.randn(VOCAB, VOCAB, generator=g, dtype=torch.float64))

    def token_stats(self, tokens: torch.Tensor, nxt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(self.table[tokens], -1)
        return logp.gather(-1, nxt[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)

    def forward(self, micro: object) -> dict[str, torch.Tensor]:
        """verl's model output on the no-padding layout: position t holds the log-prob of token t+1."""
        ids = micro["input_ids"]
        values, offsets = ids.values(), ids.offsets()
        logp, ent = self.token_stats(values, torch.roll(values, -1))
        nested = lambda v: torch.nested.nested_tensor_from_jagged(v, offsets=offsets)  # noqa: E731
        return {"log_probs": nested(logp), "entropy": nested(ent)}


def reference_row_terms(model: Bigram, data: dict, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(response log-probs, entropies) of one padded row, computed on the padded layout (T,)."""
    tokens = data["input_ids"][row]
    logp, ent = model.token_stats(tokens[:-1], tokens[1:])  # position t predicts t+1
    resp = slice(PROMPT_LEN - 1, PROMPT_LEN - 1 + RESPONSE_LEN)
    return logp[resp], ent[resp]


def actor_config(agg: str, *extra: str):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    config_dir = f"{verl.__path__[0]}/trainer/config"
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        full = compose(config_name="ppo_trainer", overrides=trainer_overrides(agg, *extra))
    actor = OmegaConf.to_container(full.actor_rollout_ref.actor, resolve=False)
    return full, omega_conf_to_dataclass(OmegaConf.create(actor))


def trainer_overrides(agg: str, *extra: str) -> list[str]:
    return [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.shuffle=false",
        f"actor_rollout_ref.rollout.n={GROUP}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={MINI_PROMPTS}",
        f"actor_rollout_ref.actor.loss_agg_mode={agg}",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=1.0",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        # a fixed horizon: seq-mean-token-sum-norm otherwise divides by each micro-batch's padded width
        f"+actor_rollout_ref.actor.loss_scale_factor={RESPONSE_LEN}",
        "+algorithm.cost_aware.method=p_smooth",
        f"+algorithm.cost_aware.alpha={ALPHA}",
        f"+algorithm.cost_aware.seed={SEED}",
        # one draw per fed row: the tests below check w = 1/(n p_i) per draw; merged plans have their own
        "+algorithm.cost_aware.merge_duplicates=false",
        *extra,
    ]


def to_rows(data: dict) -> dict[str, list[torch.Tensor]]:
    """The no-padding per-row layout trainer v1 keeps in TransferQueue."""
    n = data["input_ids"].shape[0]
    att, resp = data["attention_mask"].bool(), data["response_mask"].bool()
    prompt_att = att[:, :PROMPT_LEN]
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("input_ids", "prompts", "responses", "position_ids")}
    for name in ("response_mask", "advantages", "old_log_probs", "ref_log_prob", "rollout_is_weights"):
        if name in data:
            rows[name] = [data[name][i][resp[i]] for i in range(n)]
    for i in range(n):  # fixture construction only
        rows["input_ids"].append(data["input_ids"][i][att[i]])
        rows["prompts"].append(data["prompts"][i][prompt_att[i]])
        rows["responses"].append(data["responses"][i][resp[i]])
        rows["position_ids"].append(data["position_ids"][i][att[i]])
    rows["loss_mask"] = rows["response_mask"]
    return rows
