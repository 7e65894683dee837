"""``algorithm.cost_aware``: the Hydra key that switches Cost-Aware GRPO on in verl, and its validation.

>>> cfg = CostAwareConfig.from_mapping({"method": "p_star", "seed": 3})
>>> (cfg.enable, cfg.method, cfg.weights, cfg.merge_duplicates)
(True, 'p_star', 'centred', False)
>>> CostAwareConfig.from_mapping({"alpha": 2.0})
Traceback (most recent call last):
...
ValueError: algorithm.cost_aware.alpha must be in [0, 1], got 2.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

CONFIG_KEY = "algorithm.cost_aware"

# Methods whose plan fills every mini-batch the baseline runs with exactly minibatch_size rows: verl's
# workers split the actor batch into fixed-size mini-batches (ppo_mini_batch_size * rollout.n), so only
# these fit. 'nonzero' and 'pods' give variable-size mini-batches; DAPO filtering
# (algorithm.filter_groups) is verl's own way to drop zero-advantage groups.
VERL_METHODS = ("none", "p_star", "p_smooth", "inv_sqrt_cost", "variance", "uniform")
_REJECTED = {
    "nonzero": "it keeps a variable number of rows per mini-batch; use algorithm.filter_groups (DAPO) instead",
    "pods": "it keeps a variable number of rows per mini-batch",
}


@dataclass(frozen=True)
class CostAwareConfig:
    """Settings read from ``algorithm.cost_aware``; every field is validated on construction.

    enable: switch; the key's presence alone turns the feature on (``enable=false`` turns it off again).
    method: sampling distribution over the rollouts (see ``VERL_METHODS``); ``none`` runs every row once
        in a shuffled order with weight 1 -- the GRPO baseline, with the same token accounting.
    alpha: ``p_smooth`` mixing weight, (1 - alpha) p* + alpha uniform.
    proxy_noise: variance sigma^2 of the zero-mean Gaussian noise added to |A| before p is formed.
    weights: ``centred`` 1/(n_supp p_i) (mean 1 under p, the paper's choice) or ``raw`` 1/(n p_i).
    merge_duplicates: must stay false in verl (see README: fixed mini-batch sizes leave nothing to save).
    seed: draws at step t use a generator seeded from (seed, t), so a resumed run repeats them.
    balance_dp: reorder each mini-batch so that data-parallel ranks get near-equal token counts.
    """

    enable: bool = True
    method: str = "p_star"
    alpha: float = 0.01
    proxy_noise: float = 0.0
    weights: str = "centred"
    merge_duplicates: bool = False
    seed: int = 0
    balance_dp: bool = True

    def __post_init__(self) -> None:
        for name in ("enable", "merge_duplicates", "balance_dp"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"{CONFIG_KEY}.{name} must be true or false, got {value!r}")
        if not isinstance(self.method, str) or self.method not in VERL_METHODS:
            why = _REJECTED.get(self.method) if isinstance(self.method, str) else None
            extra = f" (not offered in verl: {why})" if why else ""
            raise ValueError(f"{CONFIG_KEY}.method must be one of {VERL_METHODS}, got {self.method!r}{extra}")
        for name, low, high in (("alpha", 0.0, 1.0), ("proxy_noise", 0.0, math.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{CONFIG_KEY}.{name} must be a finite number, got {value!r}")
            if not low <= value <= high:
                bounds = f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
                raise ValueError(
                    f"{CONFIG_KEY}.{name} must be {'in ' if math.isfinite(high) else ''}{bounds}, got {value!r}"
                )
        if self.weights not in ("centred", "raw"):
            raise ValueError(f"{CONFIG_KEY}.weights must be 'centred' or 'raw', got {self.weights!r}")
        if self.merge_duplicates:
            raise ValueError(
                f"{CONFIG_KEY}.merge_duplicates=true is not supported in verl, got {self.merge_duplicates!r}: "
                "verl's actor workers cut the batch into mini-batches of exactly "
                "ppo_mini_batch_size * rollout.n rows, so a merged mini-batch would have to be padded back "
                "with rows that cost as many tokens as the duplicates they replace"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{CONFIG_KEY}.seed must be a non-negative integer, got {self.seed!r}")

    @property
    def full_support(self) -> bool:
        """True when every row with a positive cost can be drawn (p_i > 0 for all i).

        Needed whenever the loss has terms with a gradient on zero-advantage rows (KL to the reference,
        entropy): those rows must be drawable for the weighted terms to be unbiased.
        """
        return self.method in ("none", "uniform", "inv_sqrt_cost") or (
            self.method == "p_smooth" and self.alpha > 0
        )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> CostAwareConfig:
        """Build from a dict or an OmegaConf node; unknown keys are errors (they are usually typos)."""
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            try:  # OmegaConf DictConfig is not a collections.abc.Mapping subclass everywhere
                mapping = dict(mapping.items())
            except AttributeError:
                raise ValueError(f"{CONFIG_KEY} must be a mapping, got {mapping!r}") from None
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"{CONFIG_KEY} has unknown key(s) {unknown}; known keys are {sorted(known)}")
        values = dict(mapping)
        if isinstance(values.get("alpha"), int) and not isinstance(values.get("alpha"), bool):
            values["alpha"] = float(values["alpha"])
        if isinstance(values.get("proxy_noise"), int) and not isinstance(values.get("proxy_noise"), bool):
            values["proxy_noise"] = float(values["proxy_noise"])
        return cls(**values)

    def sampling_config(self) -> Any:
        """The engine-neutral ``costaware.grpo.plan.SamplingConfig`` this maps to (budget='rows')."""
        from costaware.grpo.plan import SamplingConfig

        return SamplingConfig(
            method=self.method,
            alpha=self.alpha,
            proxy_noise=self.proxy_noise,
            weights=self.weights,
            merge_duplicates=False,
            budget="rows",
        )


def _get(node: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        if node is None:
            return default
        getter = getattr(node, "get", None)
        node = getter(part, None) if getter is not None else getattr(node, part, None)
    return default if node is None else node


def read_trainer_config(config: Any) -> CostAwareConfig | None:
    """The validated ``algorithm.cost_aware`` of a full verl config, or None when absent or disabled.

    Also checks the rest of the config for settings that would break the resampled mini-batches; each
    error names the setting, its value and what to set instead.
    """
    node = _get(config, CONFIG_KEY)
    if node is None:
        return None
    cfg = CostAwareConfig.from_mapping(node)
    if not cfg.enable:
        return None
    actor = "actor_rollout_ref.actor"
    epochs = _get(config, f"{actor}.ppo_epochs", 1)
    if epochs != 1:
        raise ValueError(
            f"{CONFIG_KEY} needs {actor}.ppo_epochs=1 (each draw is one gradient contribution), got {epochs!r}"
        )
    shuffle = _get(config, f"{actor}.shuffle", False)
    if shuffle is not False:
        raise ValueError(
            f"{CONFIG_KEY} needs {actor}.shuffle=false (the plan fixes the order of mini-batches and of the "
            f"rows across data-parallel ranks), got {shuffle!r}"
        )
    loss_mode = _get(config, f"{actor}.policy_loss.loss_mode", "vanilla")
    if loss_mode == "bypass_mode":
        raise ValueError(
            f"{CONFIG_KEY} needs a policy loss that multiplies rollout_is_weights into the per-token loss, "
            f"got {actor}.policy_loss.loss_mode={loss_mode!r}"
        )
    use_kl = bool(_get(config, f"{actor}.use_kl_loss", False))
    entropy_coeff = float(_get(config, f"{actor}.entropy_coeff", 0.0))
    if (use_kl or entropy_coeff != 0.0) and not cfg.full_support:
        raise ValueError(
            f"{CONFIG_KEY}.method={cfg.method!r} (alpha={cfg.alpha!r}) gives zero probability to rows with "
            f"zero advantage, but {actor}.use_kl_loss={use_kl} / {actor}.entropy_coeff={entropy_coeff} "
            "add a KL / entropy gradient on every row, which those rows would never contribute; "
            "use method=p_smooth with alpha > 0 (or uniform, inv_sqrt_cost, none), which keeps every row "
            "drawable so the weighted KL and entropy terms stay unbiased"
        )
    if _get(config, "algorithm.rollout_correction.bypass_mode", False):
        raise ValueError(
            f"{CONFIG_KEY} does not support algorithm.rollout_correction.bypass_mode=true, got True"
        )
    return cfg
