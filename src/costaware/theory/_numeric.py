"""Float64 guards shared by the theory modules: range checks, log-space fallbacks, exact rescaling."""

from __future__ import annotations

import numpy as np

from costaware._checks import pow2_exponent

_TINY = np.finfo(np.float64).tiny
_LOG_MAX = float(np.log(np.finfo(np.float64).max))


def all_normal(*values: float) -> bool:
    """Every value finite and either 0 or a normal float (no overflow, no precision lost in subnormals)."""
    return all(np.isfinite(v) and (v == 0 or abs(v) >= _TINY) for v in values)


def checked_exp(log_value: float, what: str, inputs: str) -> float:
    """exp(log_value), or ValueError when the value itself does not fit in float64."""
    if log_value > _LOG_MAX:
        raise ValueError(f"{what} overflows float64 (≈ e^{log_value:.6g}) for {inputs}")
    return float(np.exp(log_value))


def quiet_log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def scaled(x: np.ndarray) -> np.ndarray:
    """x divided by a power of two near its max: exact, and leaves scale-free ratios unchanged."""
    return np.ldexp(x, -pow2_exponent(x))
