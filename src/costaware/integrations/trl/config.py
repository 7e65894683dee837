"""``CostAwareGRPOConfig``: TRL's ``GRPOConfig`` plus the Cost-Aware GRPO options, with grouped help.

Every option's help starts with its group: ``[sampling]`` (how the plan draws rows), ``[loss]`` (how
the drawn rows' losses are normalised), ``[proxy]`` (the gradient-norm proxy behind p and its online
calibration), ``[budget]`` (when training stops), ``[generation]``
(the rollout engine), ``[zvf]`` (DAPO zero-variance filtering),
``[diagnostics]`` and ``[monitoring]``.

Defaults differ from ``GRPOConfig`` in two places. ``bf16`` left unset is True only where a GPU (or
XLA device) supports it and ``use_cpu`` is False, so a bare ``CostAwareGRPOConfig()`` runs on a CPU
(stock TRL sets it True and then refuses a CPU). ``cost_aware_method="auto"`` resolves per loss type
to the method the project's own measurements favour (:func:`resolve_method`, the core's function, which
verl's ``algorithm.cost_aware.method=auto`` calls too).

>>> from costaware.grpo import config as core
>>> resolve_method is core.resolve_method and AUTO_METHOD is core.AUTO_METHOD
True
>>> resolve_method("auto", loss_type="dapo", names={"method": "cost_aware_method"})
'nonzero'
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available
from trl import GRPOConfig

from costaware._checks import integer
from costaware.generation.kv_sampler import SamplingParams
from costaware.grpo.config import (  # AUTO_METHOD and resolve_method: the core's, re-exported
    AUTO_METHOD,
    SamplingConfig,
    paper_proxy_warning,
    resolve_method,
    resolve_proxy,
)
from costaware.grpo.factors import NORMALISERS
from costaware.integrations.trl.losses import SUPPORTED_LOSS_TYPES, TRL_LOSS_FAMILY
from costaware.rollouts.prompts import REGISTRY, PromptMethod, prompt_method_options
from costaware.rollouts.stage import PROMPT_METHODS, prompt_method
from costaware.sampling_options import PROMPT_OPTIONS, SAMPLING_OPTIONS, trl_field

__all__ = ["AUTO_METHOD", "CostAwareGRPOConfig", "SUPPORTED_LOSS_TYPES", "resolve_method"]

LOGPROB_ROWS = ("fed", "all")
# the engines' prompt rules, each with its few words and bias label, for cost_aware_rollout's help
_ROLLOUT_CHOICES = [f"'{name}' ({REGISTRY[name]().describe()})" for name in PROMPT_METHODS]
_ROLLOUT_HELP = (", ".join(_ROLLOUT_CHOICES[:-1]) + " or " if len(_ROLLOUT_CHOICES) > 1 else "") + _ROLLOUT_CHOICES[-1]
GENERATION_ENGINES = ("transformers", "kv")


# the prompt options with a field of their own (po_rows follows the row method) -> what sets them: an error
# names the field the user wrote, and cost_aware_prompt_kwargs takes the others
_ROLLOUT_NAMES = {"floor": "cost_aware_rollout_floor", "generation_cost": "cost_aware_generation_cost"}
_SET_ELSEWHERE = {**_ROLLOUT_NAMES, "po_rows": "cost_aware_method (rows the row plan feeds)"}
_PROMPT_KWARGS = [o.name for o in PROMPT_OPTIONS if o.name not in _SET_ELSEWHERE and o.name != "first"]


def _user_names(exc: ValueError, names: dict[str, str]) -> ValueError:
    """``exc`` with each core option name that a message uses as a name (``alpha must``, ``proxy=``) renamed."""
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, names)) + r")(?=\s+must\b|\s+needs\b|=)")
    return ValueError(pattern.sub(lambda m: names[m.group(1)], str(exc)))


def _check_launch(args: GRPOConfig) -> None:
    """Refuse a multi-process launch that the config left unparallel: each process would train alone.

    ``torchrun --nproc_per_node 2`` sets ``WORLD_SIZE=2``; on a CPU without ``use_cpu=True`` transformers
    then sets up one process (``parallel_mode`` NOT_PARALLEL, ``world_size`` 1) on every rank, which gives
    as many independent one-process runs, each with the full batch and its own copy of the model.
    """
    launched = os.environ.get("WORLD_SIZE", "1")
    if not launched.isdigit() or int(launched) <= 1 or args.world_size > 1:
        return
    raise ValueError(
        f"WORLD_SIZE={launched} processes were launched, but this config set up one (world_size=1, "
        f"parallel_mode={args.parallel_mode.value}), so each process would train alone on a copy of the model; "
        "on a CPU set use_cpu=True in the config (with torchrun, or with `accelerate launch --multi_gpu "
        f"--num_processes {launched}`, whose --multi_gpu only picks the multi-process launcher); on GPUs check "
        "that every process sees its own device"
    )


# TRL's spelling of the core's option names, for resolve_method's errors
_METHOD_NAMES = {"method": "cost_aware_method", "alpha": "cost_aware_alpha", "beta": "beta"}


@dataclass
class CostAwareGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the Cost-Aware GRPO options (see :class:`costaware.grpo.config.SamplingConfig`).

    >>> CostAwareGRPOConfig(output_dir="o", cost_aware_method="p_smooth", cost_aware_alpha=0.05)  # doctest: +SKIP
    """

    # -- [sampling] and [proxy]: the core's options, defaults and help from costaware.sampling_options ----------
    cost_aware_method: str = trl_field("method")
    cost_aware_alpha: float = trl_field("alpha")
    cost_aware_proxy_noise: float = trl_field("proxy_noise")
    cost_aware_weights: str = trl_field("weights")
    cost_aware_merge_duplicates: bool = trl_field("merge_duplicates")
    cost_aware_budget: str = trl_field("budget")
    cost_aware_pods_keep: int | None = trl_field("pods_keep")
    cost_aware_zero_tol: float = trl_field("zero_tol")
    cost_aware_max_draws_factor: float = trl_field("max_draws_factor")
    cost_aware_proxy: str = trl_field("proxy")
    cost_aware_proxy_beta: float | None = trl_field("proxy_beta")
    cost_aware_adaptive_alpha_max_weight: float | None = trl_field("adaptive_alpha_max_weight")
    # -- [proxy], TRL's own: the online β fit ---------------------------------------------------------------
    cost_aware_calibration_interval: int = field(
        default=8,
        metadata={
            "help": "[proxy] 'calibrated': start a β fit every k generation batches (it may take rows from "
            "the next batches, see cost_aware_calibration_rows)."
        },
    )
    cost_aware_calibration_rows: int = field(
        default=16,
        metadata={
            "help": "[proxy] 'calibrated': rows (A ≠ 0) whose exact gradient norm each β fit uses, at most "
            "ceil(rows/4) from one group, so at least min(4, rows) groups; when a batch holds fewer, the fit "
            "waits and the next batches add theirs (β stays at the loss family's prior until the first fit)."
        },
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
    # -- [budget] -----------------------------------------------------------------------------------
    cost_aware_token_budget: int = field(
        default=0,
        metadata={
            "help": "[budget] Stop training once the policy-optimisation tokens (cost_aware/total/tokens: prompt "
            "+ completion tokens fed to forward/backward, over every process and PPO epoch, padding rows "
            "excluded) reach this. Checked when a generation batch is spent, so no batch is cut short: the "
            "run overshoots by less than one batch's tokens. 0 = off (max_steps / num_train_epochs only)."
        },
    )
    # -- [generation] -------------------------------------------------------------------------------
    cost_aware_generation: str = field(
        default="transformers",
        metadata={
            "help": "[generation] Rollout engine: 'transformers' TRL's own path (generate, or vLLM), 'kv' the "
            "batched KV-cached sampler of costaware.generation for small Qwen2 policies (the same law; "
            "temperature, top_k and top_p only)."
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
    # -- [rollouts] ---------------------------------------------------------------------------------
    cost_aware_rollout: str = field(
        default="all",
        metadata={
            "help": f"[rollouts] Which prompts get generated: 'all' (TRL's sampler), {_ROLLOUT_HELP}; "
            "see costaware.rollouts."
        },
    )
    cost_aware_rollout_floor: float = trl_field("floor")
    cost_aware_generation_cost: float = trl_field("generation_cost")
    cost_aware_prompt_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "[rollouts] The prompt rule's other options, by name (a JSON object on the command line), as "
            f"costaware.sampling_options.PROMPT_OPTIONS declares them: {', '.join(_PROMPT_KWARGS)}; e.g. "
            "{\"min_keep\": 0.1} with cost_aware_rollout='cost_aware_skip'. A key the rule does not take is refused."
        },
    )
    # -- [diagnostics] ------------------------------------------------------------------------------
    cost_aware_diagnostics_interval: int = field(
        default=0,
        metadata={"help": "[diagnostics] Every k generation batches log Pearson(|A|, ‖∇ℓ‖) and χ² (0 = off)."},
    )
    cost_aware_diagnostics_rows: int = field(
        default=16, metadata={"help": "[diagnostics] Rows whose exact gradient norm the diagnostics compute."}
    )
    cost_aware_mse_interval: int = field(
        default=0,
        metadata={
            "help": "[diagnostics] Every k generation batches log each step's squared error against the pool's "
            "expected step, ‖ĝ_s − ḡ‖² averaged over the batch's steps (cost_aware/mse_measured), beside J's closed "
            "form of it (cost_aware/mse_predicted), from every fed row's exact gradient: one backward per row with "
            "A ≠ 0 (expensive; one process, a row-mean loss, beta=0). 0 = off."
        },
    )
    # -- [monitoring] -------------------------------------------------------------------------------
    cost_aware_warn_after_skips: int = field(
        default=8,
        metadata={"help": "[monitoring] Warn after this many consecutive skipped pools (every advantage 0); 0 = off."},
    )

    # TrainingArguments parses these fields from a JSON string (a command line) into a dict
    _VALID_DICT_FIELDS = [*GRPOConfig._VALID_DICT_FIELDS, "cost_aware_prompt_kwargs"]

    def __post_init__(self) -> None:
        if self.bf16 is None:  # stock TRL: True unless fp16, which then fails on a CPU unless use_cpu
            gpu = is_torch_bf16_gpu_available() or is_torch_xla_available()
            self.bf16 = not self.fp16 and not self.use_cpu and gpu
        super().__post_init__()
        _check_launch(self)
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {SUPPORTED_LOSS_TYPES} here, got {self.loss_type!r}")
        sampling = self.sampling_config()  # validates every field SamplingConfig holds
        # int, numpy integers and integral floats (2.0), stored as an int
        self.cost_aware_token_budget = integer(self.cost_aware_token_budget, "cost_aware_token_budget", minimum=0)
        if self.cost_aware_normaliser not in NORMALISERS:
            raise ValueError(f"cost_aware_normaliser must be one of {NORMALISERS}, got {self.cost_aware_normaliser!r}")
        if self.cost_aware_logprob_rows not in LOGPROB_ROWS:
            raise ValueError(
                f"cost_aware_logprob_rows must be one of {LOGPROB_ROWS}, got {self.cost_aware_logprob_rows!r}"
            )
        self._check_generation()
        integer(self.cost_aware_zvf_max_rounds, "cost_aware_zvf_max_rounds", minimum=1, strict=True)
        self._check_rollout()
        integer(self.cost_aware_diagnostics_interval, "cost_aware_diagnostics_interval", minimum=0, strict=True)
        integer(self.cost_aware_diagnostics_rows, "cost_aware_diagnostics_rows", minimum=2, strict=True)
        integer(self.cost_aware_mse_interval, "cost_aware_mse_interval", minimum=0, strict=True)
        if self.cost_aware_mse_interval and (TRL_LOSS_FAMILY[self.loss_type] != "row_mean" or self.beta != 0.0):
            raise ValueError(
                f"cost_aware_mse_interval={self.cost_aware_mse_interval!r} with loss_type={self.loss_type!r} and "
                f"beta={self.beta!r}: the step error is measured for a row-mean loss "
                f"({', '.join(k for k, v in TRL_LOSS_FAMILY.items() if v == 'row_mean')}) with beta=0"
            )
        integer(self.cost_aware_warn_after_skips, "cost_aware_warn_after_skips", minimum=0, strict=True)
        integer(self.cost_aware_calibration_interval, "cost_aware_calibration_interval", minimum=1, strict=True)
        integer(self.cost_aware_calibration_rows, "cost_aware_calibration_rows", minimum=3, strict=True)
        method = sampling.method
        message = paper_proxy_warning(
            self.cost_aware_proxy, loss_type=self.loss_type, method=method, field="cost_aware_proxy"
        )
        if message is not None:  # 'auto' with p*/p_smooth under a token-sum loss: the measured advice
            warnings.warn(message, UserWarning, stacklevel=3)
        drawing = not sampling.rule.plain
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
                f"beta={self.beta!r} with cost_aware_method={method!r} (alpha={self.cost_aware_alpha!r}): "
                "the KL term has a gradient on zero-advantage rows, which this method never draws, so their KL "
                "gradient would be lost; use cost_aware_method='p_smooth' with cost_aware_alpha > 0 (full support), "
                "or beta=0"
            )

    def _check_rollout(self) -> None:
        if self.cost_aware_rollout not in ("all", *PROMPT_METHODS):
            raise ValueError(
                f"cost_aware_rollout must be 'all' or one of {PROMPT_METHODS}, got {self.cost_aware_rollout!r}"
            )
        try:  # the floor is checked whatever the method, so a bad value fails before it is used
            prompt_method(
                "cost_aware", floor=self.cost_aware_rollout_floor, generation_cost=self.cost_aware_generation_cost
            )
        except ValueError as exc:
            raise _user_names(exc, _ROLLOUT_NAMES) from None
        self._check_prompt_kwargs()
        if self.cost_aware_rollout != "all":
            self.prompt_rule(po_rows="nonzero")  # every option's value, checked before a model is loaded
        if self.cost_aware_rollout != "all" and self.cost_aware_zvf:
            raise ValueError(
                f"cost_aware_rollout={self.cost_aware_rollout!r} with cost_aware_zvf=True: ZVF's refills "
                "generate prompts the prompt stage did not draw; choose one"
            )
        if self.cost_aware_rollout == "cost_aware" and self.sampling_config().rule.needs_groups:
            raise ValueError(
                f"cost_aware_rollout='cost_aware' with cost_aware_method={self.cost_aware_method!r}: that "
                "method recomputes the advantages from the rewards, which would drop the prompt weight"
            )
        if self.cost_aware_rollout == "cost_aware" and self.beta != 0.0:
            raise ValueError(
                f"cost_aware_rollout='cost_aware' with beta={self.beta!r}: the prompt weight scales the "
                "advantages, which the KL term does not see; use beta=0"
            )

    def _check_prompt_kwargs(self) -> None:
        kwargs, rollout = self.cost_aware_prompt_kwargs, self.cost_aware_rollout
        if kwargs is None:
            return
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise ValueError(f"cost_aware_prompt_kwargs must be a dict of option names to values, got {kwargs!r}")
        takes = () if rollout == "all" else prompt_method_options(rollout)
        allowed = [k for k in takes if k not in _SET_ELSEWHERE]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            elsewhere = "; ".join(f"{k} is set by {_SET_ELSEWHERE[k]}" for k in unknown if k in _SET_ELSEWHERE)
            raise ValueError(
                f"cost_aware_prompt_kwargs has unknown key(s) {unknown} for cost_aware_rollout={rollout!r}; "
                f"its keys are {allowed}" + (f" ({elsewhere})" if elsewhere else "")
            )

    def prompt_rule(self, po_rows: str) -> PromptMethod:
        """The prompt rule ``cost_aware_rollout`` names (not ``'all'``), with its options: ``cost_aware_rollout_floor``,
        ``cost_aware_generation_cost``, ``cost_aware_prompt_kwargs`` and ``po_rows`` (the rows the row plan feeds:
        ``"all"`` under plain GRPO, else ``"nonzero"``)."""
        given = self.cost_aware_prompt_kwargs  # a dict once checked (TrainingArguments parsed a JSON string)
        kwargs: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
        names = {**_ROLLOUT_NAMES, **{k: f"cost_aware_prompt_kwargs[{k!r}]" for k in kwargs}}
        options = {"floor": self.cost_aware_rollout_floor, "generation_cost": self.cost_aware_generation_cost}
        try:
            return prompt_method(self.cost_aware_rollout, **options, po_rows=po_rows, **kwargs)
        except ValueError as exc:
            raise _user_names(exc, names) from None

    @property
    def resolved_method(self) -> str:
        """The sampling method the plan uses: ``cost_aware_method`` with ``"auto"`` resolved for ``loss_type``."""
        return resolve_method(self.cost_aware_method, loss_type=self.loss_type, beta=self.beta, names=_METHOD_NAMES)

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
        """The engine-neutral :class:`SamplingConfig` these options describe, the method and the proxy resolved
        for ``loss_type`` (under ``'calibrated'`` ``proxy_beta`` is the starting β: the loss family's prior)."""
        method = self.resolved_method
        if self.cost_aware_proxy == "calibrated" and self.cost_aware_proxy_beta is not None:
            raise ValueError(
                f"cost_aware_proxy_beta={self.cost_aware_proxy_beta!r} with cost_aware_proxy='calibrated' (β is "
                "fitted); use cost_aware_proxy='length_aware' for a fixed β"
            )
        names = {f.name: f"cost_aware_{f.name}" for f in fields(SamplingConfig)}
        try:
            return self._sampling_config(method)
        except ValueError as exc:
            raise _user_names(exc, names) from None

    def _sampling_config(self, method: str) -> SamplingConfig:
        proxy, beta = resolve_proxy(
            self.cost_aware_proxy, self.cost_aware_proxy_beta, loss_type=self.loss_type, method=method
        )
        options = {o.name: getattr(self, f"cost_aware_{o.name}") for o in SAMPLING_OPTIONS}
        return SamplingConfig(
            **{**options, "method": method, "proxy": proxy, "proxy_beta": None if proxy == "advantage" else beta}
        )
