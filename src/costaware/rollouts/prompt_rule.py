"""The prompt-stage rule: its interface, its registry, the plain uniform rule and the draws the rules share.

:class:`PromptMethod` is what a :class:`~costaware.rollouts.stage.PromptStage` runs; :class:`SkipRule` is a
biased rule that skips candidates before generation (:func:`fill_prompt_batch`). :data:`REGISTRY` files each
rule's class under its ``name`` (:func:`register_prompt_method`) and :func:`prompt_method_from_name` parses a
config's options into one. :class:`CostModel` prices a prompt for the rules that use costs. The rules
themselves: :class:`UniformPrompts` here (registered first), the skip rules in
:mod:`costaware.rollouts.skip_rules`, the weighted ones in :mod:`costaware.rollouts.weighted_prompts`; all are
importable from :mod:`costaware.rollouts.prompts`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np

from costaware import distributions as dist
from costaware._checks import as_array, as_generator, index_vector, integer, show
from costaware._checks import generation_cost as check_generation_cost
from costaware._registry import registrar
from costaware.alias import build_alias, draw
from costaware.rollouts.state import PromptState
from costaware.sampling_options import PO_ROWS, prompt_field

__all__ = [
    "MAX_PROMPTS",
    "MAX_CALLS",
    "MAX_EXAMINED",
    "FLOOR_WHY",
    "CostModel",
    "check_state",
    "StageRound",
    "PromptMethod",
    "SkipRule",
    "iid_draw",
    "REGISTRY",
    "register_prompt_method",
    "prompt_method_options",
    "prompt_method_names",
    "prompt_method_from_name",
    "UniformPrompts",
    "fill_prompt_batch",
]

# Bounds on the counts that size a round's arrays or loops (a huge count is a ValueError, not a hang
# or a MemoryError): prompts per round or per candidate batch, candidate batches per round, and the
# candidates one round may examine in all.
MAX_PROMPTS = 2**20
MAX_CALLS = 2**16
MAX_EXAMINED = 2**28

# why a floor (or a GRESO probability) lies strictly inside (0, 1), in its error message
FLOOR_WHY = " (0 lets a weight be infinite, 1 is uniform)"


@dataclass(frozen=True)
class CostModel:
    """A prompt's cost in PO-token units: generated tokens × ``generation_cost`` + the PO tokens fed.

    ``po_rows``: which rows the row plan feeds: ``"all"`` (GRPO, ``none``) or ``"nonzero"`` (``nonzero``,
    p*: a zero-variance group feeds nothing), in expectation under the posterior.
    """

    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")

    def __post_init__(self) -> None:
        check_generation_cost(self.generation_cost)
        if self.po_rows not in PO_ROWS:
            raise ValueError(f"po_rows must be one of {PO_ROWS}, got {self.po_rows!r}")

    def po_tokens(self, tokens_per_row: np.ndarray, group_size: int, informative: np.ndarray) -> np.ndarray:
        fed = group_size * tokens_per_row
        return fed if self.po_rows == "all" else fed * informative

    def expected(self, state: PromptState, round: int) -> dict[str, np.ndarray]:
        """Per prompt: Ĝ (predicted E[Σ|A|]), its second moment, P(informative) and ĉ."""
        G = state.config.group_size
        mom = state.group_moments(round)
        ell = state.expected_length(round)
        row = state.expected_prompt_tokens() + ell
        cost = self.generation_cost * G * ell + self.po_tokens(row, G, mom["informative"])
        return {**mom, "length": ell, "cost": np.maximum(cost, 1e-12)}


def check_state(state: Any) -> PromptState:
    """``state`` itself when it is a :class:`PromptState`, else a TypeError naming its type."""
    if not isinstance(state, PromptState):
        raise TypeError(f"state must be a PromptState, got {type(state).__name__}")
    return state


# -- the prompt-stage rule ------------------------------------------------------------------------


@dataclass(frozen=True)
class StageRound:
    """What a rule sees when it chooses a round's prompts: the stage's state, the round, B and its streams."""

    state: PromptState
    round: int
    batch: int
    candidates: Callable[[int], np.ndarray]  # the next k prompts of the epoch permutations
    rng: Callable[[int], np.random.Generator]  # the round's stream for a purpose (fixed by seed, round, purpose)
    max_calls: int  # candidate batches a skip rule may examine


class PromptMethod(ABC):
    """A rule a :class:`~costaware.rollouts.stage.PromptStage` runs: which prompts each round generates.

    The dataclass fields are the rule's options (frozen); state the rule keeps across rounds lives on the
    object too, moved by :meth:`observe` only, and :meth:`start` gives the fresh copy a stage runs, so one
    object can configure many stages. ``plain``: the engines' own sampler does the same (they name it ``all``).
    """

    name: ClassVar[str]
    biased: ClassVar[bool] = False
    weighted: ClassVar[bool] = False
    uses_costs: ClassVar[bool] = False
    plain: ClassVar[bool] = False
    summary: ClassVar[str] = ""  # a few words for help texts

    @abstractmethod
    def choose(self, r: StageRound) -> tuple[np.ndarray, np.ndarray, int]:
        """The round's prompt ids (B,), their prompt factors (B,) and the candidates examined."""

    def observe(self, rewards: np.ndarray, epoch: int) -> None:
        """Fold the round's rewards (B, G) into the rule's own state; ``epoch``: the candidates' epoch (0-based).
        A rule that keeps no state ignores them."""
        return None

    def start(self) -> PromptMethod:
        """A copy with the rule's state at its start (the options' initial values)."""
        return replace(self)  # type: ignore[type-var]

    def rule_state(self) -> dict[str, Any] | None:
        """The rule's own state as plain JSON (None: it keeps none); a stage saves it under ``control``."""
        return None

    def load_rule_state(self, saved: dict[str, Any] | None) -> None:
        if saved is not None:
            raise ValueError(f"{self.name} keeps no state of its own, got {saved!r}")

    @classmethod
    def describe(cls) -> str:
        """``summary`` with the bias label, for help texts."""
        return f"{cls.summary}, {'biased' if cls.biased else 'unbiased'}"


class SkipRule(PromptMethod):
    """A biased rule that skips prompts before generation: candidates from the epoch permutations are kept
    with :meth:`keep` until the round is full (:func:`fill_prompt_batch`); no weights."""

    biased: ClassVar[bool] = True

    @abstractmethod
    def keep(self, state: PromptState, round: int) -> np.ndarray:
        """Each prompt's probability of being kept this round, (N,)."""

    def candidates_per_call(self, batch: int) -> int:
        return batch

    def choose(self, r: StageRound) -> tuple[np.ndarray, np.ndarray, int]:
        keep = self.keep(r.state, r.round)
        ids, examined = fill_prompt_batch(
            r.candidates, keep, r.batch, self.candidates_per_call(r.batch), rng=r.rng(1), max_calls=r.max_calls
        )
        if ids.size < r.batch:  # nothing left worth generating: fill from fresh candidates, unskipped
            ids = np.concatenate([ids, r.candidates(r.batch - ids.size)])
        return ids, np.ones(ids.size), examined


def iid_draw(
    proxies: np.ndarray | None, costs: np.ndarray, alpha: float, size: int, seed: int, chunk: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """``size`` i.i.d. ids from p ∝ G/√c mixed with uniform at ``alpha``, and their raw weights 1/(N p).

    The stream of :class:`costaware.sampler.CostAwareSampler` (``seed``, epoch 0, rank 0; alias draws in
    chunks of ``chunk``) without building one, so draws stay those it gave.
    """
    g = np.ones(costs.size) if proxies is None else proxies
    p = dist.optimal(g, costs)
    p = dist.smoothed(p, alpha) if alpha else p
    w = dist.importance_weights(p, mode="raw")
    prob, alias = build_alias(p)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 0, 0])))
    ids = np.concatenate(
        [
            draw(prob, alias, min(chunk, size - k), rng, validate=False)  # built here: trusted
            for k in range(0, size, chunk)
        ]
    )
    return ids, w[ids]


# -- the registry ---------------------------------------------------------------------------------

# The rules a PromptStage runs, by the name configs use, filled by @register_prompt_method in the order
# costaware.rollouts.prompts imports them: uniform (below), greso, cost_aware_skip, cost_aware.
REGISTRY: dict[str, type[PromptMethod]] = {}
register_prompt_method = registrar(REGISTRY, "prompt method")


def prompt_method_options(name: str) -> tuple[str, ...]:
    """The options the rule called ``name`` takes: its class's dataclass fields.

    >>> prompt_method_options("cost_aware")
    ('floor', 'generation_cost', 'po_rows')
    """
    return tuple(f.name for f in fields(REGISTRY[name]) if f.init)  # type: ignore[arg-type]


def prompt_method_names(where: Callable[[PromptMethod], bool] = lambda m: True) -> tuple[str, ...]:
    """The registered names whose rule (built with default options) satisfies ``where``, in registry order,
    e.g. ``prompt_method_names(lambda m: not m.plain)`` for the engines' choices."""
    return tuple(name for name, cls in REGISTRY.items() if where(cls()))


def prompt_method_from_name(name: str, **options: Any) -> PromptMethod:
    """The rule called ``name`` (a :data:`REGISTRY` key), built with the ``options`` its class takes.

    A config holds every rule's options (``floor``, ``generation_cost``, ``po_rows``, ...), so those this
    rule does not take are ignored; one that no registered rule takes is a TypeError.

    >>> prompt_method_from_name("cost_aware", floor=0.2, min_keep=0.1).floor
    0.2
    """
    if not (isinstance(name, str) and name in REGISTRY):
        raise ValueError(f"the prompt method must be one of {tuple(REGISTRY)}, got {name!r}")
    known = sorted({o for rule in REGISTRY for o in prompt_method_options(rule)})
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"prompt method options must be among {known}, got {unknown}")
    takes = prompt_method_options(name)
    return REGISTRY[name](**{k: v for k, v in options.items() if k in takes})


# -- uniform prompts -------------------------------------------------------------------------------


@register_prompt_method
@dataclass(frozen=True)
class UniformPrompts(PromptMethod):
    """q_j = 1/N: today's behaviour. A stage draws B prompts i.i.d. from q; a drawn prompt's factor is
    1/(N q_j)."""

    name: ClassVar[str] = "uniform"
    plain: ClassVar[bool] = True
    summary: ClassVar[str] = "uniform draws, i.i.d."

    def draw_inputs(self, state: PromptState, round: int) -> tuple[np.ndarray | None, np.ndarray, float]:
        """(proxies, costs, alpha) of the draw: q ∝ proxies/√costs mixed with uniform at alpha."""
        return None, np.ones(check_state(state).num_prompts), 0.0

    def choose(self, r: StageRound) -> tuple[np.ndarray, np.ndarray, int]:
        g, c, alpha = self.draw_inputs(r.state, r.round)
        ids, factors = iid_draw(g, c, alpha, r.batch, int(r.rng(2).integers(2**62)))
        return ids, factors, r.batch

    def probabilities(self, state: PromptState, round: int) -> np.ndarray:
        return dist.uniform(check_state(state).num_prompts)

    def prompt_factors(self, q: Any, prompt_ids: Any) -> np.ndarray:
        """f_j = 1/(N·q_j) of each drawn prompt: exactly 1 under uniform q."""
        qq = as_array(q, "q").reshape(-1)
        ids = index_vector(prompt_ids, qq.size, "prompt_ids", integral_floats=True)
        return 1.0 / (qq.size * qq[ids])


# -- the candidates a skip rule keeps ------------------------------------------------------------


def fill_prompt_batch(
    draw_candidates: Callable[[int], Any],
    keep_probability: Any,
    batch_size: int,
    candidates_per_call: int,
    rng: Any = None,
    max_calls: int = 64,
) -> tuple[np.ndarray, int]:
    """Draw candidate batches, keep each candidate j with ``keep_probability[j]``, until ``batch_size`` are kept.

    Returns the first ``batch_size`` kept prompt ids (fewer if ``max_calls`` batches did not fill it)
    and the number of candidates examined. GRESO fills its train batch this way from an over-sampled
    candidate batch.
    """
    keep = as_array(keep_probability, "keep_probability").reshape(-1)
    if not (np.isfinite(keep).all() and (keep >= 0).all() and (keep <= 1).all()):
        raise ValueError(f"keep_probability must lie in [0, 1], got {show(keep)}")
    b = integer(batch_size, "batch_size", minimum=1, maximum=MAX_PROMPTS)
    m = integer(candidates_per_call, "candidates_per_call", minimum=1, maximum=MAX_PROMPTS)
    calls = integer(max_calls, "max_calls", minimum=1, maximum=MAX_CALLS)
    if m * calls > MAX_EXAMINED:
        raise ValueError(
            f"candidates_per_call × max_calls must be at most {MAX_EXAMINED} candidates, got {m} × {calls}"
        )
    gen = as_generator(rng)
    kept: list[np.ndarray] = []
    seen = have = 0
    for _ in range(calls):
        cand = index_vector(draw_candidates(m), keep.size, "prompt_ids", integral_floats=True)
        seen += cand.size
        k = cand[gen.random(cand.size) < keep[cand]]
        kept.append(k)
        have += k.size
        if have >= b:
            break
    out = np.concatenate(kept) if kept else np.empty(0, dtype=np.int64)
    return out[:b], seen
