"""``algorithm.cost_aware``: the Hydra key that switches Cost-Aware GRPO on in verl, and its validation.

>>> cfg = CostAwareConfig.from_mapping({"method": "p_star", "seed": 3})
>>> (cfg.enable, cfg.method, cfg.weights, cfg.merge_duplicates)
(True, 'p_star', 'centred', True)
>>> CostAwareConfig.from_mapping({"alpha": 2.0})
Traceback (most recent call last):
...
ValueError: algorithm.cost_aware.alpha must be 0 or lie in [1e-300, 1], got 2.0
>>> CostAwareConfig.from_mapping({"method": "nonzero"}).method
'nonzero'
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from costaware._checks import integer, positive_scalar
from costaware.sampling_options import SAMPLING_OPTIONS, verl_field

CONFIG_KEY = "algorithm.cost_aware"
# verl's default actor.loss_agg_mode: a token sum over the global token count
DEFAULT_LOSS_AGG_MODE = "token-mean"
# a sequence-mean mode, where method "auto" picks p_star: a config's options are checked there before the loss is known
AUTO_CHECK_LOSS_AGG_MODE = "seq-mean-token-mean"
VERL_PROXIES = ("auto", "advantage", "length_aware")
# verl loss_agg_mode -> the normaliser family of costaware.grpo.factors. verl's normalisers are global
# (the whole mini-batch, summed over data-parallel ranks), so each is that family with one rank.
VERL_LOSS_FAMILY = {
    "token-mean": "token_mean",  # / response tokens of the mini-batch
    "seq-mean-token-mean": "row_mean",  # / rows of the mini-batch
    "seq-mean-token-sum": "row_mean",
    "seq-mean-token-sum-norm": "row_mean",  # / rows / loss_scale_factor (a constant)
    "token-sum": "global_tokens",  # no normaliser
}
WEIGHTS_KEY = "cost_aware_weights"  # per-token copy of the row factor, read by ``patch.weighted_ppo_loss``
PLAN_KEY = "cost_aware_plan"  # trainer v1's extra_info entry: each rank's draws and factors (``transfer.fed_rows``)
logger = logging.getLogger(__name__)


def verl_methods() -> tuple[str, ...]:
    """Every method of the core: each step's rows are padded with zero-factor rows to one size S per pool
    (``resample.plan_resampling``) and the workers are told S (``state.fed_minibatch_size``), so a plan
    that feeds fewer rows (merged duplicates, ``nonzero``, PODS) runs with fewer rows on verl too."""
    from costaware.grpo.methods import METHODS

    return tuple(METHODS)


def __getattr__(name: str) -> Any:
    if name == "VERL_METHODS":  # derived from the core's registry, on first use (this module stays cheap)
        return verl_methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class CostAwareConfig:
    """Settings read from ``algorithm.cost_aware``; every field is validated on construction.

    The sampling fields (``method``, ``alpha``, ``proxy_noise``, ``weights``, ``merge_duplicates``,
    ``proxy``, ``proxy_beta``, ``adaptive_alpha_max_weight``) take their defaults and one-line help
    (``metadata["help"]``) from :mod:`costaware.sampling_options`, the records the core's
    ``SamplingConfig`` and TRL's config are built from; ``budget``, ``pods_keep``, ``zero_tol`` and
    ``max_draws_factor`` are not keys here (each record's ``verl_omits`` says why). In verl:

    method: ``auto`` (default) resolves with the actor's ``loss_agg_mode`` (:meth:`resolved`, called by
        :func:`read_trainer_config`): ``p_star`` under ``seq-mean-token-mean``, ``nonzero`` under the
        token-sum modes (verl's default ``token-mean`` among them); it is refused with ``use_kl_loss`` or
        ``entropy_coeff != 0``. ``none`` runs every row once in a shuffled order with weight 1 -- the GRPO
        baseline, with the same token accounting.
    merge_duplicates: the fed mini-batches shrink to the largest step's unique rows (``docs/verl-saving.md``).
    proxy: ``auto`` is ``advantage`` under ``seq-mean-token-mean`` and ``length_aware`` with the loss
        family's prior beta (1.0) under the token-sum modes; that default rests on the per-pool J
        measurements in ``costaware.grpo.proxy`` (LossFamily.source). ``calibrated`` is refused: fitting
        beta needs exact per-sequence gradient norms, which only the actor workers could compute and the
        driver, where the plan is drawn, does not have.

    verl's own settings:

    enable: switch; the key's presence alone turns the feature on (``enable=false`` turns it off again).
    seed: draws at step t use a generator seeded from (seed, t), so a resumed run repeats them.
    balance_dp: reorder each mini-batch so that data-parallel ranks get near-equal token counts.
    logprob_rows: ``fed`` (default) runs the old and reference log-prob passes after the plan, on the rows
        some step feeds (``integrations/verl/logprobs.py``; settings that read every row's log-probs, such
        as verl's default ``rollout.calculate_log_probs=true``, keep stock's); ``all`` keeps stock's passes.
    token_budget: stop training once the PO tokens (prompt + response tokens fed to policy
        optimisation, ``cost_aware/total/tokens``) reach this many; 0 turns it off. The update that
        crosses it runs in full; no later update or generation does (TRL: ``cost_aware_token_budget``).

    A config built by hand and never resolved answers :meth:`sampling_config` for a ``loss_agg_mode``
    without a KL or entropy term (``method="auto"`` resolved there).
    """

    enable: bool = True
    method: str = verl_field("method")
    alpha: float = verl_field("alpha")
    proxy_noise: float = verl_field("proxy_noise")
    weights: str = verl_field("weights")
    merge_duplicates: bool = verl_field("merge_duplicates")
    seed: int = 0
    balance_dp: bool = True
    proxy: str = verl_field("proxy")
    proxy_beta: float | None = verl_field("proxy_beta")
    adaptive_alpha_max_weight: float | None = verl_field("adaptive_alpha_max_weight")
    token_budget: int = 0
    logprob_rows: str = "fed"

    def __post_init__(self) -> None:
        # verl's own fields here; the sampling fields are checked by the core's SamplingConfig, built below
        for name in ("enable", "merge_duplicates", "balance_dp"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"{CONFIG_KEY}.{name} must be true or false, got {value!r}")
        if self.logprob_rows not in ("fed", "all"):
            raise ValueError(f"{CONFIG_KEY}.logprob_rows must be 'fed' or 'all', got {self.logprob_rows!r}")
        for name in ("seed", "token_budget"):
            integer(getattr(self, name), f"{CONFIG_KEY}.{name}", minimum=0, strict=True)
        if self.proxy == "calibrated":
            raise ValueError(
                f"{CONFIG_KEY}.proxy='calibrated' is not supported in verl, got {self.proxy!r}: fitting beta needs "
                "exact per-sequence gradient norms, which only the actor workers could compute, while the plan is "
                "drawn on the driver; use proxy=auto or length_aware (a fixed beta, default the loss family's prior)"
            )
        if not isinstance(self.proxy, str) or self.proxy not in VERL_PROXIES:
            raise ValueError(f"{CONFIG_KEY}.proxy must be one of {VERL_PROXIES}, got {self.proxy!r}")
        # The core checks method, alpha, noise, weights and the proxy options. "auto" is checked where it picks
        # p_star (a sequence-mean loss), the method that reads the most options; read_trainer_config checks
        # the config again once the actor's loss is known.
        mode = AUTO_CHECK_LOSS_AGG_MODE if self.method == "auto" else DEFAULT_LOSS_AGG_MODE
        rule = self.sampling_config(mode).rule
        object.__setattr__(self, "_rule", rule)  # not a field: equality and repr unchanged

    def resolved(
        self, loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE, *, use_kl_loss: bool = False, entropy_coeff: float = 0.0
    ) -> CostAwareConfig:
        """This config with ``method``, ``proxy`` and ``proxy_beta`` fixed for the actor's loss: the core's
        rules (:func:`costaware.grpo.config.resolve_method`; :func:`costaware.grpo.config.resolve_proxy`
        for an engine that cannot fit β online). ``method="auto"`` is refused when the loss has a KL or
        entropy term, which has a gradient on the zero-advantage rows that both measured choices drop."""
        method = self._method(loss_agg_mode, use_kl_loss=use_kl_loss, entropy_coeff=entropy_coeff)
        proxy, beta = self._proxy(loss_agg_mode, method)
        return replace(self, method=method, proxy=proxy, proxy_beta=None if proxy == "advantage" else beta)

    def _method(self, loss_agg_mode: str, *, use_kl_loss: bool = False, entropy_coeff: float = 0.0) -> str:
        from costaware.grpo.config import resolve_method

        actor = "actor_rollout_ref.actor"
        term, weight = (
            (f"{actor}.use_kl_loss", use_kl_loss) if use_kl_loss else (f"{actor}.entropy_coeff", entropy_coeff)
        )
        names = {"method": f"{CONFIG_KEY}.method", "alpha": f"{CONFIG_KEY}.alpha", "beta": term}
        return resolve_method(self.method, loss_type=loss_agg_mode, beta=weight, names=names)

    def _proxy(self, loss_agg_mode: str, method: str) -> tuple[str, float]:
        from costaware.grpo.config import resolve_proxy

        try:
            return resolve_proxy(self.proxy, self.proxy_beta, loss_type=loss_agg_mode, method=method, fitted=False)
        except ValueError as exc:
            raise ValueError(f"{CONFIG_KEY}.{exc}") from None

    @property
    def rule(self) -> Any:
        """The core's method object (:mod:`costaware.grpo.methods`) ``method`` names.

        For ``method="auto"`` not yet resolved, the one it picks under a sequence-mean loss (``p_star``):
        its ``needs_groups``, ``plain`` and ``full_support``, which the plugin reads, are those of every
        method ``auto`` picks (``tests/test_option_spec.py``).
        """
        return self._rule  # type: ignore[attr-defined]

    @property
    def full_support(self) -> bool:
        """True when every row with a positive cost can be drawn (p_i > 0 for all i).

        Needed whenever the loss has terms with a gradient on zero-advantage rows (KL to the reference,
        entropy): those rows must be drawable for the weighted terms to be unbiased.
        """
        return self.rule.full_support

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
        for f in fields(cls):  # Hydra reads `alpha=1` as an int: a float field takes it as a float
            value = values.get(f.name)
            if "float" in str(f.type) and isinstance(value, int) and not isinstance(value, bool):
                values[f.name] = float(value)
        return cls(**values)

    def sampling_config(self, loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE) -> Any:
        """The engine-neutral ``costaware.grpo.config.SamplingConfig`` this maps to (budget='rows').

        ``method=auto`` and ``proxy=auto`` are resolved for ``loss_agg_mode`` (:meth:`resolved`;
        :func:`read_trainer_config` resolves them with the actor's own loss, so the default here only serves a
        config built by hand).
        Errors name the ``algorithm.cost_aware`` field.
        """
        from costaware.grpo.config import SamplingConfig

        method = self._method(loss_agg_mode)
        proxy, beta = self._proxy(loss_agg_mode, method)
        options = {o.name: getattr(self, o.name) for o in SAMPLING_OPTIONS if not o.verl_omits}
        try:  # budget: verl runs the row budget only; the other keys verl omits take the core's defaults
            resolved = {"method": method, "proxy": proxy, "proxy_beta": None if proxy == "advantage" else beta}
            return SamplingConfig(**{**options, **resolved, "budget": "rows"})
        except ValueError as exc:
            raise ValueError(f"{CONFIG_KEY}.{exc}") from None


def uses_trainer_v1(config: Any) -> bool:
    """True when a full verl config runs trainer v1 (``trainer.use_v1``, verl 0.9's default)."""
    return bool(get_dotted(config, "trainer.use_v1", True))


def check_trainer(cfg: CostAwareConfig, *, use_v1: bool) -> None:
    """Refuse a method the chosen trainer cannot run: one that recomputes group advantages (PODS) on trainer v1."""
    if use_v1 and cfg.rule.needs_groups:
        raise ValueError(
            f"{CONFIG_KEY}.method={cfg.method!r} recomputes group advantages, which the plugin does on "
            "trainer v0 only (trainer.use_v1=false); on trainer v1 use nonzero, p_star or p_smooth"
        )


def get_dotted(node: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        if node is None:
            return default
        getter = getattr(node, "get", None)
        node = getter(part, None) if getter is not None else getattr(node, part, None)
    return default if node is None else node


def actor_loss(config: Any) -> tuple[str, bool]:
    """(``loss_agg_mode``, whether the loss has a KL or entropy term on every row) of a full verl config."""
    actor = "actor_rollout_ref.actor"
    mode = get_dotted(config, f"{actor}.loss_agg_mode", DEFAULT_LOSS_AGG_MODE)
    use_kl = bool(get_dotted(config, f"{actor}.use_kl_loss", False))
    return mode, use_kl or float(get_dotted(config, f"{actor}.entropy_coeff", 0.0)) != 0.0


def read_trainer_config(config: Any) -> CostAwareConfig | None:
    """The validated ``algorithm.cost_aware`` of a full verl config, or None when absent or disabled.

    ``enable=false`` returns None before anything else is read: a disabled key validates nothing.
    Otherwise also checks the rest of the config for settings that would break the resampled
    mini-batches; each error names the setting, its value and what to set instead.
    """
    node = get_dotted(config, CONFIG_KEY)
    if node is None:
        return None
    enable = get_dotted(node, "enable", True)
    if enable is False:
        return None
    cfg = CostAwareConfig.from_mapping(node)
    actor = "actor_rollout_ref.actor"
    mode = get_dotted(config, f"{actor}.loss_agg_mode", DEFAULT_LOSS_AGG_MODE)
    try:
        from costaware.grpo.proxy import loss_family

        loss_family(mode)
    except ValueError:
        raise ValueError(
            f"{CONFIG_KEY} does not know {actor}.loss_agg_mode={mode!r} (it decides the proxy's beta)"
        ) from None
    from costaware.grpo.config import paper_proxy_warning

    use_kl = bool(get_dotted(config, f"{actor}.use_kl_loss", False))
    entropy_coeff = float(get_dotted(config, f"{actor}.entropy_coeff", 0.0))
    resolved = cfg.resolved(mode, use_kl_loss=use_kl, entropy_coeff=entropy_coeff)
    message = paper_proxy_warning(cfg.proxy, loss_type=mode, method=resolved.method)
    if message is not None:  # 'auto' with p*/p_smooth under a token-sum loss: the measured advice
        warnings.warn(message, UserWarning, stacklevel=2)
        logger.warning("costaware: %s", message)
    cfg = resolved
    epochs = get_dotted(config, f"{actor}.ppo_epochs", 1)
    if epochs != 1:
        raise ValueError(
            f"{CONFIG_KEY} needs {actor}.ppo_epochs=1 (each draw is one gradient contribution), got {epochs!r}"
        )
    shuffle = get_dotted(config, f"{actor}.shuffle", False)
    if shuffle is not False:
        raise ValueError(
            f"{CONFIG_KEY} needs {actor}.shuffle=false (the plan fixes the order of mini-batches and of the "
            f"rows across data-parallel ranks), got {shuffle!r}"
        )
    loss_mode = get_dotted(config, f"{actor}.policy_loss.loss_mode", "vanilla")
    if loss_mode == "bypass_mode":
        raise ValueError(
            f"{CONFIG_KEY} needs a policy loss that multiplies rollout_is_weights into the per-token loss, "
            f"got {actor}.policy_loss.loss_mode={loss_mode!r}"
        )
    if (use_kl or entropy_coeff != 0.0) and not cfg.full_support:
        raise ValueError(
            f"{CONFIG_KEY}.method={cfg.method!r} (alpha={cfg.alpha!r}) gives zero probability to rows with "
            f"zero advantage, but {actor}.use_kl_loss={use_kl} / {actor}.entropy_coeff={entropy_coeff} "
            "add a KL / entropy gradient on every row, which those rows would never contribute; "
            "use method=p_smooth with alpha > 0 (or uniform, inv_sqrt_cost, none), which keeps every row "
            "drawable so the weighted KL and entropy terms stay unbiased"
        )
    scale = get_dotted(config, f"{actor}.loss_scale_factor", None)
    if scale is not None:  # None or a positive number: verl divides the loss by it
        positive_scalar(scale, f"{actor}.loss_scale_factor", strict=True)
    if mode == "seq-mean-token-sum-norm" and scale is None:
        raise ValueError(
            f"{CONFIG_KEY} with {actor}.loss_agg_mode='seq-mean-token-sum-norm' needs "
            f"{actor}.loss_scale_factor (a constant horizon, e.g. the max response length), got None: "
            "without it verl divides each micro-batch by its own padded width, which depends on the rows "
            "drawn into it and biases the weighted update"
        )
    if get_dotted(config, "algorithm.rollout_correction.bypass_mode", False):
        raise ValueError(f"{CONFIG_KEY} does not support algorithm.rollout_correction.bypass_mode=true, got True")
    return cfg
