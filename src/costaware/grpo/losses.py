"""Per-token GRPO and CISPO losses and their aggregation with per-sequence weights.

Cost-Aware GRPO multiplies each drawn row's loss by its importance weight ``w_i``; ``aggregate``
takes those as ``seq_weights`` and never renormalises them (that would bias the estimator).

Formulas (matching verl 0.9.1 ``core_algos``; ρ_t = exp(log π_t − log π_old,t), log-ratio clamped to
[−20, 20] as verl does):

* GRPO (``compute_policy_loss_vanilla`` without dual clip):
  ``ℓ_t = −min(ρ_t A, clip(ρ_t, 1−ε_low, 1+ε_high) A) + β·k3_t`` with
  ``k3_t = exp(log π_ref − log π) − (log π_ref − log π) − 1`` (unclamped, as TRL computes it).
* CISPO (``compute_policy_loss_cispo``): ``ℓ_t = −sg(clip(ρ_t, 1−ε_low, 1+ε_high)) · A · log π_t``.

>>> import torch
>>> logp = torch.log(torch.tensor([[0.5, 0.25]]))
>>> grpo_token_loss(logp, logp, torch.tensor([1.0]))
tensor([[-1., -1.]])
>>> aggregate(torch.tensor([[1.0, 3.0], [2.0, 0.0]]), torch.tensor([[1, 1], [1, 0]]), "seq-mean-token-mean")
tensor(2.)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from costaware._checks import check_container, in_interval, positive_scalar, real_scalar

__all__ = ["AGG_MODES", "grpo_token_loss", "cispo_token_loss", "aggregate", "importance_ratio"]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
_LOG_RATIO_CLAMP = 20.0  # verl clamps log π − log π_old for numerical stability
_NEVER_BINDS = 2.0 * math.exp(_LOG_RATIO_CLAMP)  # a clip_high above the largest ratio


def _finite_matrix(x: Any, name: str) -> torch.Tensor:
    check_container(x, name, "a 2-D torch.Tensor")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor (it carries the gradient), got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, tokens), got shape {tuple(x.shape)}")
    if not x.is_floating_point():  # complex and integer tensors alike
        raise ValueError(f"{name} must be real floating point, got dtype {x.dtype}")
    if not torch.isfinite(x.detach()).all():
        i, j = (int(v) for v in torch.nonzero(~torch.isfinite(x.detach()))[0])
        raise ValueError(f"{name} must be finite, got {x[i, j].item()} at [{i}, {j}]")
    return x


def _real_tensor(x: Any, name: str, device: torch.device | None = None) -> torch.Tensor:
    """``x`` as a real tensor: TypeError for a wrong container, ValueError for complex/bool/non-numbers."""
    check_container(x, name)
    try:
        t = torch.as_tensor(x, device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name} must be a rectangular array of numbers, got {x!r:.80}: {exc}") from None
    if t.is_complex():
        raise ValueError(f"{name} must be real, got complex dtype {t.dtype}")
    return t


def _per_token_advantages(advantages: Any, shape: torch.Size) -> torch.Tensor:
    a = _real_tensor(advantages, "advantages")
    if a.dtype == torch.bool:
        raise ValueError("advantages must hold numbers, not booleans")
    if a.ndim == 1:
        if a.shape[0] != shape[0]:
            raise ValueError(f"advantages has {a.shape[0]} rows, logp has {shape[0]}")
        a = a.unsqueeze(1)
    elif a.ndim == 2:
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"advantages shape {tuple(a.shape)} does not match logp shape {tuple(shape)}")
    else:
        raise ValueError(f"advantages must be (rows,) or (rows, tokens), got shape {tuple(a.shape)}")
    if not torch.isfinite(a.detach()).all():
        raise ValueError(f"advantages must be finite, got {a.flatten()[~torch.isfinite(a.flatten())][0].item()}")
    return a.detach()


def _check_clip(clip_low: float, clip_high: float) -> tuple[float, float]:
    lo = in_interval(clip_low, "clip_low", 0.0, 1.0, open_high=True)
    hi = positive_scalar(clip_high, "clip_high", allow_zero=True)
    # ρ never exceeds e^20 (the log-ratio clamp), so a larger bound never binds; capping it keeps
    # 1 + clip_high inside float32 (1e300 would overflow the clamp) without changing any loss
    return lo, min(hi, _NEVER_BINDS)


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """ρ_t = exp(clamp(log π − log π_old, −20, 20)), differentiable in ``logp``."""
    _finite_matrix(logp, "logp")
    _finite_matrix(old_logp, "old_logp")
    if logp.shape != old_logp.shape:
        raise ValueError(f"logp shape {tuple(logp.shape)} != old_logp shape {tuple(old_logp.shape)}")
    return torch.exp(torch.clamp(logp - old_logp.detach(), -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))


def grpo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: Any,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
) -> torch.Tensor:
    """Per-token PPO-clipped GRPO loss ``−min(ρA, clip(ρ)A) + β·k3`` (rows, tokens), to be minimised.

    Args:
        logp: (B, T) log π_θ of the sampled tokens (carries the gradient).
        old_logp: (B, T) log π_old (detached).
        advantages: (B,) per-row or (B, T) per-token advantages (detached).
        clip_low, clip_high: ε_low, ε_high of ``clip(ρ, 1−ε_low, 1+ε_high)``.
        ref_logp: (B, T) log π_ref; needed when ``beta > 0``.
        beta: KL coefficient of the k3 estimator.

    >>> lp = torch.zeros(1, 1)
    >>> grpo_token_loss(lp + 0.5, lp, torch.tensor([1.0]))  # ρ = e^0.5 > 1.2: clipped at 1.2
    tensor([[-1.2000]])
    """
    clip_low, clip_high = _check_clip(clip_low, clip_high)
    beta = real_scalar(beta, "beta")
    if not beta >= 0.0:
        raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
    ratio = importance_ratio(logp, old_logp)
    a = _per_token_advantages(advantages, logp.shape)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(-ratio * a, -clipped * a)
    if beta > 0:
        if beta > torch.finfo(logp.dtype).max:  # it would round to inf, and inf · (k3 = 0) is NaN
            raise ValueError(f"beta must fit {logp.dtype} (at most {torch.finfo(logp.dtype).max:.4g}), got {beta!r}")
        if ref_logp is None:
            raise ValueError("ref_logp is required when beta > 0")
        _finite_matrix(ref_logp, "ref_logp")
        if ref_logp.shape != logp.shape:
            raise ValueError(f"ref_logp shape {tuple(ref_logp.shape)} != logp shape {tuple(logp.shape)}")
        d = ref_logp.detach() - logp
        loss = loss + beta * (torch.exp(d) - d - 1.0)
        if not torch.isfinite(loss.detach()).all():
            raise ValueError(f"beta={beta!r} times the KL term overflows {loss.dtype}; use a smaller beta")
    return loss


def cispo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: Any,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> torch.Tensor:
    """Per-token CISPO loss ``−sg(clip(ρ, 1−ε_low, 1+ε_high)) · A · log π`` (rows, tokens).

    The gradient flows only through ``log π``: every token contributes, however far its ratio is
    clipped (unlike PPO clipping, which zeroes the gradient of clipped tokens).

    >>> lp = torch.log(torch.tensor([[0.5]]))
    >>> cispo_token_loss(lp, lp, torch.tensor([2.0]))  # −1 · 2 · log 0.5
    tensor([[1.3863]])
    """
    clip_low, clip_high = _check_clip(clip_low, clip_high)
    ratio = importance_ratio(logp, old_logp)
    a = _per_token_advantages(advantages, logp.shape)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high).detach()
    return -clipped * a * logp


def aggregate(
    token_losses: torch.Tensor,
    mask: Any,
    mode: str = "token-mean",
    seq_weights: Any | None = None,
    *,
    num_tokens: float | torch.Tensor | None = None,  # a 0-dim tensor is read as its value
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Reduce (B, T) token losses to a scalar as verl's ``agg_loss``, each row times ``seq_weights[i]``.

    With w = ``seq_weights`` (default 1), m the mask, ℓ the token losses:

    * ``"token-mean"``: ``Σ_i w_i Σ_t m ℓ / num_tokens`` (default Σ m over the batch);
    * ``"seq-mean-token-mean"``: ``Σ_i w_i (Σ_t m ℓ / Σ_t m) / num_sequences``;
    * ``"seq-mean-token-sum"``: ``Σ_i w_i Σ_t m ℓ / num_sequences``;

    ``num_sequences`` defaults to the number of rows with at least one unmasked token (verl). Pass
    ``num_tokens`` / ``num_sequences`` for a global normaliser across micro-batches. The weights are
    used as given: they are never divided by their mean.

    >>> aggregate(torch.ones(2, 2), torch.ones(2, 2), "token-mean", seq_weights=torch.tensor([3.0, 1.0]))
    tensor(2.)
    """
    _finite_matrix(token_losses, "token_losses")
    if not (isinstance(mode, str) and mode in AGG_MODES):
        raise ValueError(f"mode must be one of {AGG_MODES}, got {mode!r}")
    m = _real_tensor(mask, "mask", token_losses.device)
    if tuple(m.shape) != tuple(token_losses.shape):
        raise ValueError(f"mask shape {tuple(m.shape)} != token_losses shape {tuple(token_losses.shape)}")
    if ((m != 0) & (m != 1)).any():
        raise ValueError("mask must hold only 0/1 values")
    m = m.to(token_losses.dtype)
    rows = token_losses.shape[0]
    if seq_weights is None:
        w = torch.ones(rows, dtype=token_losses.dtype, device=token_losses.device)
    else:
        w = _real_tensor(seq_weights, "seq_weights", token_losses.device)
        if w.ndim != 1 or w.shape[0] != rows:
            raise ValueError(f"seq_weights must have shape ({rows},), got {tuple(w.shape)}")
        w = w.detach().to(token_losses.dtype)
        if not torch.isfinite(w).all() or (w < 0).any():
            i = int(torch.nonzero(~torch.isfinite(w) | (w < 0))[0])
            raise ValueError(f"seq_weights must be finite and >= 0, got {w[i].item()} at index {i}")
    row_tokens = m.sum(dim=1)
    row_sums = (token_losses * m).sum(dim=1)
    if mode == "token-mean":
        denom = row_tokens.sum() if num_tokens is None else torch.tensor(real_scalar(num_tokens, "num_tokens"))
        if not denom > 0:
            raise ValueError(f"token-mean needs a positive token count, got num_tokens={float(denom)} (empty mask?)")
        return _finite_loss((w * row_sums).sum() / denom, "num_tokens")
    denom = (
        (row_tokens > 0).sum() if num_sequences is None else torch.tensor(real_scalar(num_sequences, "num_sequences"))
    )
    if not denom > 0:
        raise ValueError(f"{mode} needs a positive sequence count, got num_sequences={float(denom)} (empty mask?)")
    if mode == "seq-mean-token-mean":
        # Fully masked rows contribute 0 (their sum is 0); clamp avoids 0/0.
        row_sums = row_sums / row_tokens.clamp(min=1.0)
    return _finite_loss((w * row_sums).sum() / denom, "num_sequences")


def _finite_loss(loss: torch.Tensor, normaliser: str) -> torch.Tensor:
    """The loss, or ValueError when finite inputs overflow (a tiny normaliser, weights near 1e308)."""
    if not torch.isfinite(loss.detach()).all():
        raise ValueError(
            f"the aggregated loss overflows {loss.dtype}: token_losses × seq_weights / {normaliser} is too large"
        )
    return loss
