"""Group-relative advantages and per-row costs of GRPO rollouts (paper §5, steps 2–3).

Rows of one group (the M responses to one prompt) are contiguous: rows ``[g·M, (g+1)·M)`` form
group g. The advantage of row i is ``A_i = (r_i − mean_g) / (std_g + eps)``; its cost is its token
count, prompt plus response.

Engine conventions (both read from the installed sources):

* verl 0.9.1 ``core_algos.compute_grpo_outcome_advantage``: ``torch.std`` (unbiased, Bessel's
  correction), ``epsilon=1e-6``; a group of size 1 gets mean 0 and std 1, so ``A = r/(1+eps)``.
* TRL 1.16 ``GRPOTrainer`` (``scale_rewards="group"``): ``trl.trainer.utils.nanstd`` (also unbiased),
  ``eps=1e-4`` hard-coded; a group of size 1 gets std 0, so ``A = 0``.

So both use the unbiased std; they differ in ``eps`` (pass ``eps=1e-4`` to reproduce TRL) and in the
singleton group. Here a group of size 1 gets ``A = 0`` (TRL's choice: one response carries no
relative signal). ``unbiased_std=False`` gives the population std instead.

>>> import torch
>>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), group_size=3)
tensor([ 1.1547, -0.5773, -0.5773, -1.1547,  0.5773,  0.5773])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from costaware._checks import boolean, check_container, integer, real_scalar, show

__all__ = ["group_advantages", "sequence_costs", "sequence_costs_from_masks", "rewards_vector", "check_group_size"]


_F32_MAX = float(torch.finfo(torch.float32).max)


def _rewards_and_dtype(rewards: Any) -> tuple[torch.Tensor, torch.dtype]:
    """``(rewards in the dtype to compute in, dtype of the result)``; ValueError for any bad value."""
    if isinstance(rewards, torch.Tensor):
        r = rewards.detach()
        if r.is_complex():
            raise ValueError(f"rewards must be real, got complex dtype {r.dtype}")
        out = torch.float64 if r.dtype == torch.float64 else torch.float32
    else:
        check_container(rewards, "rewards")
        try:
            arr = np.asarray(rewards)
            if arr.dtype == object:
                arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"rewards must be a 1-D array of numbers, got {show(rewards)}") from exc
        if np.iscomplexobj(arr):
            raise ValueError(f"rewards must be real, got complex values {show(arr)}")
        if not (arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.number)):
            raise ValueError(f"rewards must be numeric, got dtype {arr.dtype}: {show(arr)}")
        # a plain list gives float32 advantages (torch's default), a float64 array float64
        lst = isinstance(rewards, (list, tuple))
        out = torch.float64 if arr.dtype == np.float64 and not lst else torch.float32
        r = torch.as_tensor(arr)
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D (one scalar per row), got shape {tuple(r.shape)}")
    if r.numel() == 0:
        raise ValueError("rewards must not be empty")
    if not (r.is_floating_point() or r.dtype in _INT_DTYPES):
        raise ValueError(f"rewards must be numeric, got dtype {r.dtype}")
    r64 = r.to(torch.float64)
    bad = ~torch.isfinite(r64)
    if bad.any():
        i = int(torch.nonzero(bad)[0])
        raise ValueError(f"rewards must be finite, got {r64[i].item()} at index {i}")
    # Compute in the result's dtype (bit-identical to verl/TRL), unless a value does not fit float32.
    work = out if out == torch.float64 or float(r64.abs().max()) <= _F32_MAX else torch.float64
    return r.to(work), out


def rewards_vector(rewards: Any) -> torch.Tensor:
    """The checked rewards (float32, or float64 if given float64 or beyond float32's range)."""
    return _rewards_and_dtype(rewards)[0]


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def check_group_size(n: int, group_size: Any) -> int:
    m = integer(group_size, "group_size", minimum=1)
    if n % m != 0:
        raise ValueError(f"the number of rows ({n}) must be a multiple of group_size ({m})")
    return m


def _pow2(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.pow(torch.tensor(2.0, dtype=dtype, device=k.device), k.to(dtype))


def _ldexp(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """x·2^k in two exact steps, so that 2^k itself never over- or underflows."""
    k1 = torch.div(k, 2, rounding_mode="floor")
    return x * _pow2(k1, x.dtype) * _pow2(k - k1, x.dtype)


def group_advantages(
    rewards: Any,
    group_size: int,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    *,
    unbiased_std: bool = True,
) -> torch.Tensor:
    """Group-relative advantages ``(r − mean_g)/(std_g + eps)`` of contiguous groups.

    Args:
        rewards: (N,) scalar reward per row; N must be a multiple of ``group_size``.
        group_size: M, the responses per prompt.
        scale_by_std: divide by ``std_g + eps`` (GRPO); ``False`` gives Dr. GRPO's ``r − mean_g``.
        eps: added to the std (verl default 1e-6; TRL uses 1e-4).
        unbiased_std: Bessel-corrected std (verl and TRL); ``False`` for the population std.

    Returns:
        (N,) float32 advantages (float64 if ``rewards`` is float64). Constant groups give exact zeros.

    Each group is divided by a power of two near its largest |reward| before the mean and std are
    taken (exact: moderate rewards give the plain formula bit for bit), so rewards near 1e300 keep
    their signs; ValueError if an unscaled ``r − mean_g`` does not fit the result's dtype.

    >>> group_advantages(torch.tensor([2.0, 0.0]), 2, scale_by_std=False)
    tensor([ 1., -1.])
    """
    r, out = _rewards_and_dtype(rewards)
    m = check_group_size(r.numel(), group_size)
    eps = real_scalar(eps, "eps")
    if eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    scale_by_std = boolean(scale_by_std, "scale_by_std")
    unbiased_std = boolean(unbiased_std, "unbiased_std")
    if m == 1:  # no relative signal in a single response (TRL's convention; verl returns r)
        return torch.zeros(r.shape, dtype=out, device=r.device)
    grouped = r.view(-1, m)
    _, e = torch.frexp(grouped.abs().amax(dim=1, keepdim=True))  # max|r_g| in [2^(e−1), 2^e); 0 → 0
    scaled = _ldexp(grouped, -e)
    centred = scaled - scaled.mean(dim=1, keepdim=True)
    if scale_by_std:
        std = scaled.std(dim=1, keepdim=True, correction=1 if unbiased_std else 0)
        if eps == 0 and (std == 0).any():
            g = int(torch.nonzero(std.squeeze(1) == 0)[0])
            raise ValueError(f"eps=0 with a constant group (group {g}) divides 0 by 0; use eps > 0")
        # (r − mean)/(std + eps) = (r′ − mean′)/(std′ + eps·2^−e); an overflowing eps·2^−e (tiny
        # rewards) correctly sends A to 0.
        eps_scaled = _ldexp(torch.full_like(std, eps), -e)
        adv = centred / (std + eps_scaled)
    else:
        with torch.no_grad():
            adv = _ldexp(centred, e)
    adv = adv.reshape(-1).to(out)
    if not torch.isfinite(adv).all():
        i = int(torch.nonzero(~torch.isfinite(adv))[0])
        raise ValueError(
            f"rewards span too wide a range: the advantage of row {i} overflows {out} "
            f"(rewards = {show(r.cpu().numpy())}, scale_by_std={scale_by_std})"
        )
    return adv


def _mask_matrix(mask: Any, name: str) -> torch.Tensor:
    if isinstance(mask, torch.Tensor):
        t = mask.detach()
    else:
        check_container(mask, name, "a 2-D array-like of 0/1")
        try:
            arr = np.asarray(mask)
            if arr.dtype == object:
                arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a rectangular 2-D array of 0/1, got {show(mask)}") from exc
        if not (arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.number)):
            raise ValueError(f"{name} must be numeric 0/1, got dtype {arr.dtype}: {show(arr)}")
        t = torch.as_tensor(arr)
    if t.is_complex():
        raise ValueError(f"{name} must be real 0/1, got complex dtype {t.dtype}")
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, tokens), got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} must have at least one row, got shape {tuple(t.shape)}")
    if t.is_floating_point() and not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite")
    bad = (t != 0) & (t != 1)
    if bad.any():
        i, j = (int(v) for v in torch.nonzero(bad)[0])
        raise ValueError(f"{name} must hold only 0/1, got {t[i, j].item()} at [{i}, {j}]")
    return t.to(torch.int64)


def _positive_costs(costs: torch.Tensor, name: str) -> torch.Tensor:
    zero = costs <= 0
    if zero.any():
        i = int(torch.nonzero(zero)[0])
        raise ValueError(f"{name}: row {i} has no tokens, so its cost would be 0 (costs must be > 0)")
    return costs


def sequence_costs(attention_mask: Any) -> torch.Tensor:
    """c_i = number of real tokens of row i (prompt + response): ``attention_mask.sum(-1)`` as in verl.

    >>> sequence_costs(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
    tensor([3, 4])
    """
    return _positive_costs(_mask_matrix(attention_mask, "attention_mask").sum(dim=-1), "attention_mask")


def sequence_costs_from_masks(prompt_mask: Any, completion_mask: Any) -> torch.Tensor:
    """c_i = prompt tokens + completion tokens of row i, from TRL's separate masks.

    >>> sequence_costs_from_masks(torch.tensor([[0, 1], [1, 1]]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    tensor([3, 3])
    """
    p = _mask_matrix(prompt_mask, "prompt_mask")
    c = _mask_matrix(completion_mask, "completion_mask")
    if p.shape[0] != c.shape[0]:
        raise ValueError(f"mismatched rows: prompt_mask has {p.shape[0]}, completion_mask has {c.shape[0]}")
    return _positive_costs(p.sum(dim=-1) + c.sum(dim=-1), "prompt_mask + completion_mask")
