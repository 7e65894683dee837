"""Proxy fidelity of Cost-Aware GRPO (paper §5.4, Figure 3, G.8).

Cost-Aware GRPO samples with p ∝ |A_i|/√c_i, using |A_i| as a proxy for the true per-sequence
gradient norm G_i = ‖∇_θ ℓ_i‖. These helpers measure G_i exactly on a few rows and compare:

* Pearson correlation between |A_i| and G_i;
* χ² = D_χ²(p̃*_true ‖ p̃_proxy) between the cost-biased distributions (``theory.cost_biased``) of
  p*_true ∝ G_i/√c_i and p_proxy ∝ |A_i|/√c_i, and J(p_proxy)/J(p*_true) = 1 + χ² (Theorem 4.2).

>>> out = proxy_fidelity([1.0, 2.0, 0.5], [1.0, 2.0, 0.5], [10, 20, 30])
>>> round(out["pearson"], 6), round(out["chi2"], 12), round(out["j_ratio"], 12)
(1.0, 0.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from costaware import distributions as dist
from costaware import theory
from costaware._checks import nonnegative_vector, positive_vector, same_length
from costaware.theory._numeric import scaled

__all__ = ["per_sequence_grad_norms", "per_sequence_grads", "proxy_fidelity"]


def _row_count(rows: Mapping[str, torch.Tensor]) -> int:
    if not isinstance(rows, Mapping) or not rows:
        raise ValueError(f"rows must be a non-empty dict of per-row tensors, got {type(rows).__name__}")
    counts = {k: v.shape[0] if isinstance(v, torch.Tensor) and v.ndim else None for k, v in rows.items()}
    if None in counts.values() or len(set(counts.values())) != 1 or next(iter(counts.values())) == 0:
        raise ValueError(f"rows must hold tensors with the same non-zero number of rows, got {counts}")
    n = next(iter(counts.values()))
    assert n is not None  # None was refused above
    return n


def _finite_norms(norms: torch.Tensor) -> torch.Tensor:
    """The norms, or a ValueError naming the rows whose gradient overflowed (a NaN or inf norm)."""
    bad = ~torch.isfinite(norms)
    if bad.any():
        i = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"rows give a non-finite gradient norm ({norms[i].item()!r} at row {i}): "
            "the loss or its gradient overflows on these inputs"
        )
    return norms


def per_sequence_grad_norms(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor],
    rows: Mapping[str, torch.Tensor],
    *,
    method: str = "loop",
) -> torch.Tensor:
    """Exact ‖∇_θ ℓ_i‖₂ over the trainable parameters, for each of the k rows in ``rows``.

    Args:
        model: the policy; parameters with ``requires_grad`` count. ``.grad`` fields are left alone.
        loss_fn: ``loss_fn(model, one_row) -> scalar ℓ_i``, where ``one_row`` holds each tensor of
            ``rows`` sliced to a leading dimension of 1 (a batch of one sequence).
        rows: dict of per-row tensors (k rows) — select the few rows to measure beforehand.
        method: ``"loop"``: one ``torch.autograd.grad`` per row (robust with any HF model);
            ``"vmap"``: ``torch.func.vmap(grad(...))`` over rows via ``functional_call`` (faster when
            the model traces under vmap; it raises otherwise).

    Returns:
        (k,) float64 gradient norms.

    >>> lin = torch.nn.Linear(2, 1, bias=False)
    >>> _ = torch.nn.init.ones_(lin.weight)
    >>> norms = per_sequence_grad_norms(lin, lambda m, b: m(b["x"]).sum(), {"x": torch.tensor([[3.0, 4.0]])})
    >>> norms.tolist()
    [5.0]
    """
    k = _row_count(rows)
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if not named:
        raise ValueError("model has no parameters with requires_grad=True")
    if method == "loop":
        norms = torch.empty(k, dtype=torch.float64)
        params = list(named.values())
        for i in range(k):  # a handful of diagnostic rows, each a full backward
            loss = loss_fn(model, {key: v[i : i + 1] for key, v in rows.items()})
            _check_loss(loss, i)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            sq = sum((g.detach().double() ** 2).sum() for g in grads if g is not None)
            norms[i] = torch.sqrt(torch.as_tensor(sq, dtype=torch.float64))
        return _finite_norms(norms)
    if method == "vmap":
        from torch.func import functional_call, grad, vmap

        frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
        buffers = dict(model.named_buffers())
        keys = list(rows)

        class _Bound(torch.nn.Module):  # lets loss_fn call "model(...)" with the functional params
            def __init__(self, params: dict[str, torch.Tensor]) -> None:
                super().__init__()
                self._params = params

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                return functional_call(model, (self._params, frozen, buffers), args, kwargs)

            def __getattr__(self, name: str) -> Any:
                try:
                    return super().__getattr__(name)
                except AttributeError:
                    return getattr(model, name)

        def row_loss(params: dict[str, torch.Tensor], *row: torch.Tensor) -> torch.Tensor:
            return loss_fn(_Bound(params), {key: v.unsqueeze(0) for key, v in zip(keys, row, strict=True)})

        detached = {n: p.detach() for n, p in named.items()}
        grads = vmap(grad(row_loss), in_dims=(None, *([0] * len(keys))))(detached, *(rows[key] for key in keys))
        sq = sum((g.double() ** 2).flatten(1).sum(dim=1) for g in grads.values())
        return _finite_norms(torch.sqrt(sq))
    raise ValueError(f"method must be 'loop' or 'vmap', got {method!r}")


def per_sequence_grads(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor],
    rows: Mapping[str, torch.Tensor],
) -> Iterator[torch.Tensor]:
    """Each row's exact gradient ∇_θ ℓ_i over the trainable parameters, flattened to float64, one row at a
    time (one backward each, as :func:`per_sequence_grad_norms` with ``method="loop"``), so that a caller
    summing them holds one gradient at a time; ``loss_fn`` and ``rows`` as there.

    >>> lin = torch.nn.Linear(2, 1, bias=False)
    >>> _ = torch.nn.init.ones_(lin.weight)
    >>> [g.tolist() for g in per_sequence_grads(lin, lambda m, b: m(b["x"]).sum(), {"x": torch.eye(2)})]
    [[1.0, 0.0], [0.0, 1.0]]
    """
    k = _row_count(rows)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no parameters with requires_grad=True")
    for i in range(k):
        loss = loss_fn(model, {key: v[i : i + 1] for key, v in rows.items()})
        _check_loss(loss, i)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        flat = torch.cat([(torch.zeros_like(p) if g is None else g).detach().double().flatten()
                          for p, g in zip(params, grads, strict=True)])  # fmt: skip
        if not bool(torch.isfinite(flat).all()):
            raise ValueError(f"rows give a non-finite gradient at row {i}: the loss or its gradient overflows")
        yield flat


def _check_loss(loss: Any, i: int) -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError(f"loss_fn must return a scalar tensor, got {type(loss).__name__} for row {i}")
    if not torch.isfinite(loss.detach()).all():
        raise ValueError(f"loss_fn returned {loss.item()} for row {i}")


def proxy_fidelity(abs_adv: Any, grad_norms: Any, costs: Any) -> dict[str, float]:
    """How well |A| stands in for the true gradient norms: Pearson, cost-biased χ², J ratio.

    Args:
        abs_adv: (k,) |A_i| >= 0, not all zero (the proxy).
        grad_norms: (k,) true ‖∇ℓ_i‖ >= 0, not all zero.
        costs: (k,) token costs c_i > 0.

    Returns:
        ``{"pearson": ρ(|A|, G), "chi2": D_χ²(p̃*_true ‖ p̃_proxy), "j_ratio": J(p_proxy)/J(p*_true),
        "j_vs_uniform": J(p_proxy)/J(uniform)}``. The last is the cost × variance the proxy buys against
        uniform sampling of the same rows (< 1: cost-aware sampling is predicted to pay off).
        ``pearson`` is NaN when |A| or G is constant over the rows (correlation undefined, e.g. a
        group with half its rewards 1); ``chi2`` is +inf when the proxy gives zero mass to a row
        with a non-zero gradient. ``j_ratio == 1 + chi2``.
    """
    a = nonnegative_vector(abs_adv, "abs_adv", not_all_zero=True)
    g = nonnegative_vector(grad_norms, "grad_norms", not_all_zero=True)
    c = positive_vector(costs, "costs")
    same_length(abs_adv=a, grad_norms=g, costs=c)
    try:
        rho = theory.pearson(a, g)
    except ValueError:  # constant input: correlation undefined
        rho = float("nan")
    # Every quantity below is scale-free in G and in c: scale both by a power of two near their max
    # (exact), so that tiny norms (1e-300) cannot underflow J(uniform) to 0 and divide by zero.
    g, c = scaled(g), scaled(c)
    p_true = dist.optimal(g, c)
    p_proxy = dist.optimal(a, c)
    chi2 = theory.chi2_divergence(theory.cost_biased(p_true, c), theory.cost_biased(p_proxy, c))
    j_ratio = 1.0 + chi2 if np.isinf(chi2) else theory.suboptimality(p_proxy, g, c)
    j_vs_uniform = theory.J(p_proxy, g, c) / theory.J(dist.uniform(len(g)), g, c)
    return {"pearson": float(rho), "chi2": float(chi2), "j_ratio": float(j_ratio), "j_vs_uniform": float(j_vs_uniform)}
