"""costaware: cost-aware importance sampling for SGD and for GRPO policy optimisation.

Sample components with p_i ∝ G_i/√c_i (G_i a gradient-norm bound or proxy, c_i the cost of its
gradient) and correct with importance weights, so that a target error is reached at lower cost.
"""

from costaware import distributions, theory
from costaware.distributions import (
    importance_weights,
    inverse_sqrt_cost,
    noisy_proxy,
    optimal,
    smoothed,
    uniform,
    variance,
)

__version__ = "0.1.0"

__all__ = [
    "distributions",
    "theory",
    "importance_weights",
    "inverse_sqrt_cost",
    "noisy_proxy",
    "optimal",
    "smoothed",
    "uniform",
    "variance",
]
