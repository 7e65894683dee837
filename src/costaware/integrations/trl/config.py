"""``CostAwareGRPOConfig``: TRL's ``GRPOConfig`` plus the Cost-Aware GRPO options, with grouped help.

Every option's help starts with its group: ``[sampling]`` (how the plan draws rows), ``[loss]`` (how
the drawn rows' losses are normalised), ``[proxy]`` (the gradient-norm proxy behind p and its online
calibration), ``[generation]`` (the rollout engine), ``[zvf]`` (DAPO zero-variance filtering),
``[diagnostics]`` and ``[monitoring]``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from trl import GRPOConfig

from costaware.generation.kv_sampler import SamplingParams
from costaware.grpo.config import METHODS, PROXIES, SamplingConfig, paper_proxy_warning, resolve_proxy
from costaware.grpo.factors import NORMALISERS, TRL_LOSS_FAMILY

__all__ = ["CostAwareGRPOConfig", "SUPPORTED_LOSS_TYPES"]

SUPPORTED_LOSS_TYPES = tuple(TRL_LOSS_FAMILY)
LOGPROB_ROWS = ("fed", "all")
GENERATION_ENGINES = ("transformers", "kv")


def _int_at_least(name: str, v: object, low: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")


@dataclass
class CostAwareGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the Cost-Aware GRPO options (see :class:`costaware.grpo.config.SamplingConfig`).

    >>> CostAwareGRPOConfig(output_dir="o", cost_aware_method="p_smooth", cost_aware_alpha=0.05)  # doctest: +SKIP
    """

    # -- [sampling] ---------------------------------------------------------------------------------
    cost_aware_method: str = field(
        default="p_star", metadata={"help": f"[sampling] Mini-batch sampling method, one of {METHODS}."}
    )
    cost_aware_alpha: float = field(default=0.01, metadata={"help": "[sampling] p_smooth: (1-α)p* + α·uniform."})
    cost_aware_proxy_noise: float = field(
        default=0.0, metadata={"help": "[sampling] σ² of zero-mean noise added to |A| before p is formed (ablation)."}
    )
    cost_aware_weights: str = field(
        default="centred", metadata={"help": "[sampling] 'centred' 1/(n_supp p_i) or 'raw' 1/(n p_i)."}
    )
    cost_aware_merge_duplicates: bool = field(
        default=True, metadata={"help": "[sampling] Run a row drawn k times into one mini-batch once, weight k·w."}
    )
    cost_aware_budget: str = field(
        default="rows", metadata={"help": "[sampling] 'rows': the baseline's draws per step; 'tokens': its tokens."}
    )
    cost_aware_pods_keep: int | None = field(
        default=None, metadata={"help": "[sampling] PODS: rows kept per group (default num_generations // 2)."}
    )
    cost_aware_zero_tol: float = field(
        default=1e-6, metadata={"help": "[sampling] |A| <= zero_tol · max|A| counts as zero (float rounding)."}
    )
    cost_aware_max_draws_factor: float = field(
        default=64.0,
        metadata={"help": "[sampling] budget='tokens': at most this × (baseline rows per step) draws per step."},
    )
    # -- [proxy] ------------------------------------------------------------------------------------
    cost_aware_proxy: str = field(
        default="auto",
        metadata={
            "help": f"[proxy] Gradient-norm proxy G ≈ |A|·c^β behind p_star/p_smooth, p ∝ |A|·c^(β-½): 'auto' or "
            f"one of {PROXIES}. 'auto': 'advantage' (the paper's, β=0) for sequence-mean losses (grpo, sapo), "
            "'calibrated' (β fitted online) for token-sum losses (dapo, cispo, bnpo, dr_grpo, luspo, vespo)."
        },
    )
    cost_aware_proxy_beta: float | None = field(
        default=None,
        metadata={"help": "[proxy] 'length_aware': the fixed β (default: the loss family's prior β)."},
    )
    cost_aware_adaptive_alpha_max_weight: float | None = field(
        default=None,
        metadata={
            "help": "[proxy] p_smooth: choose α per pool, the smallest in [cost_aware_alpha, 0.5] keeping every "
            "weight 1/(n p_i) <= this (None = fixed α)."
        },
    )
    cost_aware_calibration_interval: int = field(
        default=8, metadata={"help": "[proxy] 'calibrated': fit β every k generation batches."}
    )
    cost_aware_calibration_rows: int = field(
        default=16,
        metadata={"help": "[proxy] 'calibrated': rows (A ≠ 0) of the global pool whose exact gradient norm each fit uses."},
    )
    # -- [loss] -------------------------------------------------------------------------------------
    cost_aware_normaliser: str = field(
        default="draws",
        metadata={
            "help": "[loss] 'draws': stock TRL's loss on the drawn rows (verl's convention); 'pool': the "
            "baseline's normaliser (unbiased with raw weights)."
        },
    )
    cost_aware_logprob_rows: str = field(
        default="fed",
        metadata={
            "help": "[loss] Rows whose old log-probs (when a round takes several optimiser steps) and reference "
            "log-probs (beta != 0) are computed: 'fed' only the rows the plan feeds (the others enter no loss, "
            "so their forward passes are saved), 'all' every row of the batch, as stock TRL."
        },
    )
    # -- [generation] -------------------------------------------------------------------------------
    cost_aware_generation: str = field(
        default="transformers",
        metadata={
            "help": "[generation] Rollout engine: 'transformers' TRL's own path (generate, or vLLM), 'kv' the "
            "batched KV-cached sampler of costaware.generation for small Qwen2 policies (the same law; about 3x "
            "generate's tokens/s for the main job's CPU policy; temperature, top_k and top_p only)."
        },
    )
    # -- [zvf] --------------------------------------------------------------------------------------
    cost_aware_zvf: bool = field(
        default=False,
        metadata={"help": "[zvf] DAPO zero-variance filtering: drop groups with equal rewards, regenerate to fill."},
    )
    cost_aware_zvf_max_rounds: int = field(
        default=4, metadata={"help": "[zvf] Generation rounds at most per batch (the first included)."}
    )
    # -- [diagnostics] ------------------------------------------------------------------------------
    cost_aware_diagnostics_interval: int = field(
        default=0,
        metadata={"help": "[diagnostics] Every k generation batches log Pearson(|A|, ‖∇ℓ‖) and χ² (0 = off)."},
    )
    cost_aware_diagnostics_rows: int = field(
        default=16, metadata={"help": "[diagnostics] Rows whose exact gradient norm the diagnostics compute."}
    )
    # -- [monitoring] -------------------------------------------------------------------------------
    cost_aware_warn_after_skips: int = field(
        default=8,
        metadata={"help": "[monitoring] Warn after this many consecutive skipped pools (every advantage 0); 0 = off."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {SUPPORTED_LOSS_TYPES} here, got {self.loss_type!r}")
        sampling = self.sampling_config()  # validates every field SamplingConfig holds
        if self.cost_aware_normaliser not in NORMALISERS:
            raise ValueError(f"cost_aware_normaliser must be one of {NORMALISERS}, got {self.cost_aware_normaliser!r}")
        if self.cost_aware_logprob_rows not in LOGPROB_ROWS:
            raise ValueError(
                f"cost_aware_logprob_rows must be one of {LOGPROB_ROWS}, got {self.cost_aware_logprob_rows!r}"
            )
        self._check_generation()
        _int_at_least("cost_aware_zvf_max_rounds", self.cost_aware_zvf_max_rounds, 1)
        _int_at_least("cost_aware_diagnostics_interval", self.cost_aware_diagnostics_interval, 0)
        _int_at_least("cost_aware_diagnostics_rows", self.cost_aware_diagnostics_rows, 2)
        _int_at_least("cost_aware_warn_after_skips", self.cost_aware_warn_after_skips, 0)
        _int_at_least("cost_aware_calibration_interval", self.cost_aware_calibration_interval, 1)
        _int_at_least("cost_aware_calibration_rows", self.cost_aware_calibration_rows, 3)
        message = paper_proxy_warning(self.cost_aware_proxy, loss_type=self.loss_type, method=self.cost_aware_method)
        if message is not None:  # only when chosen explicitly: 'auto' resolves to 'calibrated' here
            warnings.warn(message, UserWarning, stacklevel=3)
        drawing = self.cost_aware_method != "none"
        if drawing and (self.entropy_coef != 0.0 or self.use_adaptive_entropy):
            raise ValueError(
                f"entropy_coef={self.entropy_coef!r} (use_adaptive_entropy={self.use_adaptive_entropy!r}): the "
                "entropy bonus is a token mean over the micro-batch, not a per-sequence loss, so importance "
                "weights cannot reach it; set entropy_coef=0 or cost_aware_method='none'"
            )
        if drawing and self.cost_aware_merge_duplicates and self.top_entropy_quantile < 1.0:
            raise ValueError(
                f"top_entropy_quantile={self.top_entropy_quantile!r} takes a quantile over the micro-batch's tokens, "
                "which merging duplicates changes; set cost_aware_merge_duplicates=False"
            )
        # The KL term has a gradient on rows with A = 0 too. A method that gives them p = 0 never feeds
        # them, so its expected KL gradient misses theirs; with full support (every p_i > 0) the KL term
        # gets the same importance factor as the policy term and the estimate is unbiased.
        if self.beta != 0.0 and not sampling.full_support:
            raise ValueError(
                f"beta={self.beta!r} with cost_aware_method={self.cost_aware_method!r} (alpha={self.cost_aware_alpha!r}): "
                "the KL term has a gradient on zero-advantage rows, which this method never draws, so their KL "
                "gradient would be lost; use cost_aware_method='p_smooth' with cost_aware_alpha > 0 (full support), "
                "or beta=0"
            )

    def _check_generation(self) -> None:
        if self.cost_aware_generation not in GENERATION_ENGINES:
            raise ValueError(
                f"cost_aware_generation must be one of {GENERATION_ENGINES}, got {self.cost_aware_generation!r}"
            )
        if self.cost_aware_generation != "kv":
            return
        refused = {"use_vllm": self.use_vllm, "use_transformers_continuous_batching":
                   self.use_transformers_continuous_batching, "generation_kwargs": self.generation_kwargs}  # fmt: skip
        for name, value in refused.items():
            if value:
                raise ValueError(f"cost_aware_generation='kv' is its own rollout engine; {name}={value!r} asks for "
                                 "another: use cost_aware_generation='transformers'")  # fmt: skip
        try:  # temperature, top_k, top_p as the sampler takes them; min_p and repetition_penalty refused
            SamplingParams(temperature=self.temperature, top_k=self.top_k or 0, top_p=self.top_p,
                           min_p=self.min_p, repetition_penalty=self.repetition_penalty)  # fmt: skip
        except ValueError as e:
            raise ValueError(f"cost_aware_generation='kv': {e}") from None

    def sampling_config(self) -> SamplingConfig:
        """The engine-neutral :class:`SamplingConfig` these options describe, the proxy resolved for
        ``loss_type`` (under ``'calibrated'`` ``proxy_beta`` is the starting β: the loss family's prior)."""
        if self.cost_aware_proxy == "calibrated" and self.cost_aware_proxy_beta is not None:
            raise ValueError(
                f"cost_aware_proxy_beta={self.cost_aware_proxy_beta!r} with cost_aware_proxy='calibrated' (β is "
                "fitted); use cost_aware_proxy='length_aware' for a fixed β"
            )
        proxy, beta = resolve_proxy(
            self.cost_aware_proxy, self.cost_aware_proxy_beta, loss_type=self.loss_type, method=self.cost_aware_method
        )
        return SamplingConfig(
            method=self.cost_aware_method,
            alpha=self.cost_aware_alpha,
            proxy_noise=self.cost_aware_proxy_noise,
            weights=self.cost_aware_weights,
            merge_duplicates=self.cost_aware_merge_duplicates,
            budget=self.cost_aware_budget,
            pods_keep=self.cost_aware_pods_keep,
            zero_tol=self.cost_aware_zero_tol,
            max_draws_factor=self.cost_aware_max_draws_factor,
            proxy=proxy,
            proxy_beta=None if proxy == "advantage" else beta,
            adaptive_alpha_max_weight=self.cost_aware_adaptive_alpha_max_weight,
        )
