"""Theory quantities of Cost-Aware SGD (paper §4, Appendices D–E), as pure numpy functions.

Notation: n components, gradient-norm bounds G, costs c > 0, sampling distribution p.
S(p) = (1/n²) Σ G_i²/p_i bounds the estimator's second moment, C(p) = Σ p_i c_i is the expected
cost per step, and J(p) = S(p)·C(p) is what the expected cost to reach ε scales with.

By topic:

* :mod:`.cost`: S, C, J, J(p*), K(ε, p) and the closed-form ratios between p*, variance and uniform;
* :mod:`.proxy_quality`: the cost-biased distribution, χ² and J(p′)/J(p*), Pearson ρ and Theorem D.5;
* :mod:`.lower_bounds`: the lower bound of §4.6 and its set S*.

Every name is importable from here (``from costaware.theory import J``).
"""

from costaware.theory.cost import (
    C,
    J,
    J_optimal,
    S,
    expected_cost,
    ratio_optimal_to_uniform,
    ratio_optimal_to_variance,
    ratio_variance_to_uniform,
)
from costaware.theory.lower_bounds import LowerBound, lower_bound
from costaware.theory.proxy_quality import (
    chi2_divergence,
    cost_biased,
    expected_suboptimality_noisy,
    expected_suboptimality_pearson,
    noise_variance_from_pearson,
    pearson,
    suboptimality,
)

__all__ = [
    "S",
    "C",
    "J",
    "J_optimal",
    "expected_cost",
    "ratio_optimal_to_uniform",
    "ratio_optimal_to_variance",
    "ratio_variance_to_uniform",
    "cost_biased",
    "chi2_divergence",
    "suboptimality",
    "pearson",
    "noise_variance_from_pearson",
    "expected_suboptimality_noisy",
    "expected_suboptimality_pearson",
    "LowerBound",
    "lower_bound",
]
