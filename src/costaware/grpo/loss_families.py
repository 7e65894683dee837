"""How a loss aggregates a row's tokens (sequence mean or token sum), and the prior on β it implies.

The gradient-norm proxy G ≈ |A|·c^β (:mod:`costaware.grpo.proxy`) has β ≈ 0 under a loss that averages a
row's tokens and β ≈ ½..1 under one that sums them. :func:`loss_family` maps an engine's loss name (a TRL
``loss_type`` or a verl ``loss_agg_mode``) to its :class:`LossFamily`.

>>> loss_family("dapo").name, loss_family("seq-mean-token-mean").name
('token_sum', 'sequence_mean')
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BETA_BOUNDS", "LOSS_FAMILY_PRIOR_BETA", "LossFamily", "loss_family"]

# β outside this range has no mechanism behind it: a mean of independent token gradients gives −½,
# a sum of aligned ones 1, and the largest measured slope was 1.60; 2 leaves margin above it.
BETA_BOUNDS: tuple[float, float] = (-0.5, 2.0)


@dataclass(frozen=True)
class LossFamily:
    """How a loss aggregates a row's tokens, and the prior on β it implies.

    name: ``"sequence_mean"`` (a row's loss is the mean over its tokens) or ``"token_sum"`` (the sum
        over its tokens, divided by something that does not depend on that row's length).
    prior_beta, prior_sd: the normal prior on β used by :func:`shrink`.
    source: where the prior numbers come from.
    """

    name: str
    prior_beta: float
    prior_sd: float
    source: str


# Measured slopes of log(G/|A|) on log c (exact per-row gradients, TRL, lr ≈ 0 pools):
#   demo default-profile SFT (examples/proxy_fidelity_probe.py): grpo 0.01-0.41, dapo 1.17-1.60;
#   quick-profile SFT (benchmarks/bench_proxy_calibration.py --sft): grpo -0.71..-0.31, dapo 0.56-0.77,
#   on the same pools dapo - grpo = 1.1-1.3.
# Theory (c token gradients of similar norm): row mean -1/2 (independent) to 0 (aligned), row sum 1/2 to 1.
_SEQUENCE_MEAN = LossFamily(
    "sequence_mean",
    prior_beta=0.0,
    prior_sd=0.35,
    source=(
        "paper §G.3 (G ≈ |A|, beta 0, the aligned-token value); measured -0.71..0.41 over two checkpoints "
        "(examples/proxy_fidelity_probe.py; bench_proxy_calibration --sft), within 0 ± 2 sd"
    ),
)
_TOKEN_SUM = LossFamily(
    "token_sum",
    prior_beta=1.0,
    prior_sd=0.4,
    source=(
        "measured 1.17-1.60 under TRL dapo on the demo SFT (examples/proxy_fidelity_probe.py) and "
        "0.56-0.77 on the quick-profile SFT (bench_proxy_calibration --sft); 1.0 (aligned tokens) sits "
        "mid-range, sd 0.4 keeps every measured slope within 1.5 sd"
    ),
)

LOSS_FAMILY_PRIOR_BETA: dict[str, float] = {f.name: f.prior_beta for f in (_SEQUENCE_MEAN, _TOKEN_SUM)}

# Engine loss names -> family, read off each loss's aggregation (TRL 1.16 GRPOTrainer._compute_loss,
# verl core_algos.agg_loss). What matters is whether a row's loss is divided by its own length.
_LOSS_FAMILIES: dict[str, LossFamily] = {
    # TRL: ((l·m).sum(-1) / m.sum(-1)).mean() -> mean over the row's tokens
    "grpo": _SEQUENCE_MEAN,
    "sapo": _SEQUENCE_MEAN,
    # TRL bnpo: (l·m).sum() / m.sum() over the micro-batch; dr_grpo: (l·m).sum() / (B · max_len);
    # dapo, cispo, vespo: (l·m).sum() / global token count. Each row enters as its token sum.
    "bnpo": _TOKEN_SUM,
    "dr_grpo": _TOKEN_SUM,
    "dapo": _TOKEN_SUM,
    "cispo": _TOKEN_SUM,
    "vespo": _TOKEN_SUM,
    # TRL luspo: (l·m).sum(-1).mean(): a sequence-level ratio (a mean over tokens) times the length, so the
    # row's gradient is the sum of its token gradients ("length-unbiased").
    "luspo": _TOKEN_SUM,
    # verl agg_loss modes
    "seq-mean-token-mean": _SEQUENCE_MEAN,
    "token-mean": _TOKEN_SUM,  # sum over all tokens / global token count
    "token-sum": _TOKEN_SUM,
    "seq-mean-token-sum": _TOKEN_SUM,  # per-row token sum, mean over rows
    "seq-mean-token-sum-norm": _TOKEN_SUM,  # the same divided by a constant horizon
}


def loss_family(loss_type: str) -> LossFamily:
    """The :class:`LossFamily` of a TRL ``loss_type`` or a verl ``loss_agg_mode``."""
    try:
        return _LOSS_FAMILIES[loss_type]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_LOSS_FAMILIES))
        raise ValueError(f"loss_type must be one of {known}; got {loss_type!r}") from None
