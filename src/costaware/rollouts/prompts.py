"""Prompt samplers: which prompts to generate, as small frozen objects made by factories.

Each sampler has the class-level flags ``name``, ``biased`` (it never trains on what it skips, so its
update is not full-dataset GRPO's in expectation), ``weighted`` (its rows carry a prompt factor) and
``uses_costs``. Those a :class:`~costaware.rollouts.stage.PromptStage` runs are :class:`PromptMethod` objects:
:meth:`PromptMethod.choose` picks a round's prompts from the stage's state, :meth:`PromptMethod.observe`
folds the round's rewards into the rule's own state (GRESO's exploration probabilities). Each rule's class
is filed in :data:`REGISTRY` under its ``name`` by :func:`register_prompt_method` (a name taken twice
raises); its dataclass fields are its options, with their defaults and help from
:data:`costaware.sampling_options.PROMPT_OPTIONS`, and :func:`prompt_method_from_name` is the one parser.
A new rule is one registered class: the stage, the engines' option checks, the analysis and the arms read
the registry. The lowercase factories (:func:`greso`, ...) are the classes under the names of earlier
releases.

Unbiased (weighted):

* :func:`uniform_prompts` — today's behaviour, q_j = 1/N, every factor 1.
* :func:`cost_aware_prompts` — q = (1 − α)·q̂ + α/N, q̂_j ∝ Ĝ_j/√ĉ_j (Ĝ: predicted E[Σ|A|] of the
  group, ĉ: predicted cost). Draw B prompts i.i.d. from q; every row of a drawn prompt's group carries
  the **prompt factor** f_j = 1/(N·q_j), multiplied into its row factor from the row plan. With the
  loss normalised as today (by the B·G rows a round of B draws holds), E[update] is full-dataset
  GRPO's (1/N)Σ_j g_j; uniform q gives f ≡ 1 exactly, so nothing changes for it.
* :func:`two_stage` — m responses for every drawn prompt, the other G − m always where the first m
  disagree, else with probability ρ_j ≥ ``floor``; a completed group's rows carry 1/ρ_j on top.

Biased (no weights): :func:`cost_aware_skip` and :func:`greso` skip prompts before generation.

>>> from costaware.rollouts.state import PromptState, StateConfig
>>> st = PromptState(StateConfig(group_size=4), num_prompts=4, prompt_tokens=[10, 10, 10, 10])
>>> st.update([0, 1], [[1, 1, 1, 1], [1, 0, 1, 0]], [[8] * 4, [8] * 4], round=0)
>>> s = cost_aware_prompts(floor=0.5)
>>> q = s.probabilities(st, round=1)
>>> bool(q[0] < q[1]), float(q.sum())                      # the all-correct prompt is drawn less
(True, 1.0)
>>> uniform_prompts().prompt_factors(uniform_prompts().probabilities(st, 1), [0, 3]).tolist()
[1.0, 1.0]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

from costaware import distributions as dist
from costaware._checks import (
    as_array,
    as_generator,
    in_open_unit_interval,
    in_unit_interval,
    index_vector,
    integer,
    real_scalar,
    show,
)
from costaware._checks import generation_cost as check_generation_cost
from costaware._registry import registrar
from costaware.alias import build_alias, draw
from costaware.rollouts.group import predictive_abs_adv_sum
from costaware.rollouts.state import ALL_CORRECT, ALL_WRONG, PromptState
from costaware.sampling_options import PO_ROWS, prompt_field

__all__ = [
    "REGISTRY",
    "PromptMethod",
    "SkipRule",
    "StageRound",
    "prompt_method_from_name",
    "prompt_method_names",
    "prompt_method_options",
    "register_prompt_method",
    "FLOOR_WHY",
    "CostModel",
    "UniformPrompts",
    "CostAwarePrompts",
    "CostAwareSkip",
    "GresoControl",
    "Greso",
    "TwoStage",
    "uniform_prompts",
    "cost_aware_prompts",
    "cost_aware_skip",
    "greso",
    "two_stage",
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


def _check_state(state: Any) -> PromptState:
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

# The rules a PromptStage runs, by the name configs use, filled by @register_prompt_method in the order below.
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
        return None, np.ones(_check_state(state).num_prompts), 0.0

    def choose(self, r: StageRound) -> tuple[np.ndarray, np.ndarray, int]:
        g, c, alpha = self.draw_inputs(r.state, r.round)
        ids, factors = iid_draw(g, c, alpha, r.batch, int(r.rng(2).integers(2**62)))
        return ids, factors, r.batch

    def probabilities(self, state: PromptState, round: int) -> np.ndarray:
        return dist.uniform(_check_state(state).num_prompts)

    def prompt_factors(self, q: Any, prompt_ids: Any) -> np.ndarray:
        """f_j = 1/(N·q_j) of each drawn prompt: exactly 1 under uniform q."""
        qq = as_array(q, "q").reshape(-1)
        ids = index_vector(prompt_ids, qq.size, "prompt_ids", integral_floats=True)
        return 1.0 / (qq.size * qq[ids])


# -- biased skip rules ---------------------------------------------------------------------------


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


@dataclass(frozen=True)
class GresoControl:
    """GRESO's adaptive exploration probabilities (the probability of *keeping*), one per class."""

    p_easy: float = prompt_field("p_easy")
    p_hard: float = prompt_field("p_hard")

    def __post_init__(self) -> None:
        for name in ("p_easy", "p_hard"):
            object.__setattr__(self, name, in_unit_interval(getattr(self, name), name))


@register_prompt_method
@dataclass(frozen=True)
class Greso(SkipRule):
    """BIASED. GRESO's pre-rollout filter (Zheng et al. 2025, "Act Only When It Pays").

    A prompt whose last z ≥ 1 groups all had zero variance is kept with probability p^z (skipped with
    1 − p^z), p = ``p_easy`` if its last group was all correct, ``p_hard`` if all wrong; any other prompt
    is kept. :meth:`adapt` moves each p by ``step`` towards a target share of zero-variance groups among
    those generated (``target`` in total, ``easy_split`` of it easy, the rest hard): a share at or above
    its target lowers p (skip more), below it raises p, clipped to [min_p, max_p]; nothing moves
    during the first epoch. GRESO's reference code calls it once per training step (its notes say per
    epoch): the cadence is the caller's. The candidate batch is ``oversample`` × the train batch
    (384/256), filtered, and refilled until the train batch is full (:func:`fill_prompt_batch`).

    Its state, :attr:`control` (:attr:`initial` at the start), moves by :meth:`observe`, once per round.
    """

    name: ClassVar[str] = "greso"
    summary: ClassVar[str] = "GRESO's pre-rollout skip"
    target: float = prompt_field("target")
    easy_split: float = prompt_field("easy_split")
    step: float = prompt_field("step")
    p_easy: float = prompt_field("p_easy")
    p_hard: float = prompt_field("p_hard")
    oversample: float = prompt_field("oversample")
    min_p: float = prompt_field("min_p")
    max_p: float = prompt_field("max_p")
    control: GresoControl = field(init=False, repr=False, compare=False)  # the state: initial, then observe()'s

    def __post_init__(self) -> None:
        for name in ("p_easy", "p_hard"):
            object.__setattr__(self, name, in_open_unit_interval(getattr(self, name), name, why=FLOOR_WHY))
        for name in ("target", "easy_split", "min_p", "max_p"):
            in_open_unit_interval(getattr(self, name), name, why=FLOOR_WHY)
        in_open_unit_interval(self.step, "step")
        if not self.min_p <= self.max_p:
            raise ValueError(f"min_p must be <= max_p, got {self.min_p!r} > {self.max_p!r}")
        if real_scalar(self.oversample, "oversample") < 1:
            raise ValueError(f"oversample must be >= 1, got {self.oversample!r}")
        object.__setattr__(self, "control", self.initial)

    @property
    def initial(self) -> GresoControl:
        """The exploration probabilities at the start: ``p_easy``, ``p_hard``."""
        return GresoControl(self.p_easy, self.p_hard)

    def candidates_per_call(self, batch: int) -> int:
        return self.sampling_batch_size(batch)

    def keep(self, state: PromptState, round: int) -> np.ndarray:
        return self.keep_probabilities(state, self.control)

    def observe(self, rewards: np.ndarray, epoch: int) -> None:
        """GRESO adapts every step from its second epoch on."""
        object.__setattr__(self, "control", self.adapt(self.control, rewards, epoch))

    def rule_state(self) -> dict[str, Any] | None:
        return asdict(self.control)

    def load_rule_state(self, saved: dict[str, Any] | None) -> None:
        if not isinstance(saved, dict):
            raise ValueError(f"greso's saved control must be a dict of p_easy, p_hard, got {saved!r}")
        object.__setattr__(self, "control", GresoControl(**saved))

    def sampling_batch_size(self, train_batch_size: int) -> int:
        return int(np.ceil(self.oversample * integer(train_batch_size, "train_batch_size", minimum=1)))

    def keep_probabilities(self, state: PromptState, control: GresoControl) -> np.ndarray:
        st = _check_state(state)
        p = np.where(st.status == ALL_CORRECT, control.p_easy, np.where(st.status == ALL_WRONG, control.p_hard, 1.0))
        return np.where(st.zero_streak > 0, p**st.zero_streak, 1.0)

    def adapt(self, control: GresoControl, rewards: Any, epoch: int) -> GresoControl:
        """The next control from one step's generated groups' rewards (B, G) at ``epoch`` (0-based)."""
        r = as_array(rewards, "rewards")
        if r.ndim != 2 or r.shape[0] == 0:
            raise ValueError(f"rewards must have shape (groups, group_size) with groups >= 1, got {r.shape}")
        if integer(epoch, "epoch", minimum=0) == 0:
            return control
        zero = r.max(axis=1) == r.min(axis=1)
        easy = float((zero & (r[:, 0] >= 1.0)).mean())
        hard = float((zero & (r[:, 0] <= 0.0)).mean())

        def move(p: float, share: float, target: float) -> float:
            return max(p - self.step, self.min_p) if share >= target else min(p + self.step, self.max_p)

        return replace(
            control,
            p_easy=move(control.p_easy, easy, self.target * self.easy_split),
            p_hard=move(control.p_hard, hard, self.target * (1.0 - self.easy_split)),
        )


@register_prompt_method
@dataclass(frozen=True)
class CostAwareSkip(SkipRule):
    """BIASED. Keep prompt j with min(1, max(min_keep, s_j / s_ref)), s = Ĝ/√ĉ, s_ref = the
    ``reference`` quantile of s over all prompts: the skip probability rises as Ĝ/√ĉ falls. No weights."""

    name: ClassVar[str] = "cost_aware_skip"
    uses_costs: ClassVar[bool] = True
    summary: ClassVar[str] = "skip as the predicted G/sqrt(c) falls"
    min_keep: float = prompt_field("min_keep")
    reference: float = prompt_field("reference")
    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")
    cost: CostModel = field(init=False, repr=False, compare=False)  # built from the two above

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", CostModel(self.generation_cost, self.po_rows))
        in_open_unit_interval(self.min_keep, "min_keep", why=FLOOR_WHY)
        in_open_unit_interval(self.reference, "reference", why=FLOOR_WHY)

    def keep_probabilities(self, state: PromptState, round: int) -> np.ndarray:
        e = self.cost.expected(_check_state(state), round)
        s = e["abs_adv_sum"] / np.sqrt(e["cost"])
        ref = float(np.quantile(s, self.reference))
        if not ref > 0:
            return np.ones_like(s)
        return np.clip(s / ref, self.min_keep, 1.0)

    def keep(self, state: PromptState, round: int) -> np.ndarray:
        return self.keep_probabilities(state, round)


# -- cost-aware prompts: unbiased, weighted --------------------------------------------------------


@register_prompt_method
@dataclass(frozen=True)
class CostAwarePrompts(UniformPrompts):
    """The paper's rule applied to prompts: q = (1 − floor)·q̂ + floor/N with q̂_j ∝ Ĝ_j/√ĉ_j (ĉ priced by
    ``generation_cost`` and ``po_rows``, :class:`CostModel`); every weight f_j ≤ 1/floor. Unbiased, weighted."""

    name: ClassVar[str] = "cost_aware"
    plain: ClassVar[bool] = False
    weighted: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True
    summary: ClassVar[str] = "q ∝ G/sqrt(c) with prompt weights 1/(N q)"
    floor: float = prompt_field("floor")
    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")
    cost: CostModel = field(init=False, repr=False, compare=False)  # built from the two above

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", CostModel(self.generation_cost, self.po_rows))
        in_open_unit_interval(self.floor, "floor", why=FLOOR_WHY)

    def sampler_inputs(self, state: PromptState, round: int) -> tuple[np.ndarray, np.ndarray]:
        """(proxies Ĝ, costs ĉ) for :class:`costaware.sampler.CostAwareSampler` with ``alpha=floor``,
        ``weights="raw"``: its p is then this q and its weights these prompt factors."""
        e = self.cost.expected(_check_state(state), round)
        return e["abs_adv_sum"], e["cost"]

    def draw_inputs(self, state: PromptState, round: int) -> tuple[np.ndarray | None, np.ndarray, float]:
        g, c = self.sampler_inputs(state, round)
        return g, c, self.floor

    def probabilities(self, state: PromptState, round: int) -> np.ndarray:
        g, c = self.sampler_inputs(state, round)
        return dist.smoothed_kernel(dist.optimal(g, c), self.floor)


# -- the factories: each rule's class under its name -------------------------------------------------

uniform_prompts = UniformPrompts
cost_aware_prompts = CostAwarePrompts
cost_aware_skip = CostAwareSkip
greso = Greso


# -- two-stage rollout ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TwoStage:
    """Unbiased two-stage rollout over a base prompt sampler.

    Stage 1: m = ``first`` responses for every drawn prompt. Stage 2: the other G − m responses,
    always where the first m disagree (the group is informative whatever comes next), otherwise with
    probability ρ_j ∈ [floor, 1]. A completed group's rows carry 1/ρ_j (times the base's prompt
    factor); a stopped group feeds no rows but stays in the round's normaliser (B·G rows), as a group
    with zero gradient. ρ_j depends only on the first stages, so conditional on every reward of the
    round the expected update over the stage-2 coins is the full groups' update: unbiased.

    ρ_j minimises the round's variance × cost (docs/design.md): with a_j = f_j²·E[(Σ|A|)² | first m]
    and c_j the predicted stage-2 cost, ρ_j = clip(√(C/A)·√(a_j/c_j), floor, 1), where A sums a_j over
    the prompts that complete surely and C is the cost of every stage 1 plus those completions.
    """

    name: ClassVar[str] = "two_stage"
    biased: ClassVar[bool] = False
    weighted: ClassVar[bool] = True
    uses_costs: ClassVar[bool] = True
    first: int = prompt_field("first")
    floor: float = prompt_field("floor")
    generation_cost: float = prompt_field("generation_cost")
    po_rows: str = prompt_field("po_rows")
    base: UniformPrompts = UniformPrompts()  # None: uniform
    cost: CostModel = field(init=False, repr=False, compare=False)  # built from generation_cost and po_rows

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", CostModel(self.generation_cost, self.po_rows))
        if self.base is None:
            object.__setattr__(self, "base", UniformPrompts())
        integer(self.first, "first", minimum=1)
        in_open_unit_interval(self.floor, "floor", why=FLOOR_WHY)
        if not isinstance(self.base, UniformPrompts):
            raise TypeError(
                f"base must be uniform_prompts() or cost_aware_prompts(...), got {type(self.base).__name__}"
            )

    def probabilities(self, state: PromptState, round: int) -> np.ndarray:
        return self.base.probabilities(state, round)

    def continue_probabilities(
        self,
        state: PromptState,
        round: int,
        prompt_ids: Any,
        first_rewards: Any,
        first_lengths: Any | None = None,
        prompt_factors: Any | None = None,
    ) -> np.ndarray:
        """ρ of each drawn prompt given its first m rewards (B, m); 1 where they disagree."""
        st = _check_state(state)
        G, m = st.config.group_size, self.first
        if m >= G:
            raise ValueError(f"first must be < group_size={G}, got {m}")
        ids = index_vector(prompt_ids, st.num_prompts, "prompt_ids", integral_floats=True)
        r1 = as_array(first_rewards, "first_rewards")
        if r1.shape != (ids.size, m) or not (np.isfinite(r1).all() and (r1 >= 0).all() and (r1 <= 1).all()):
            raise ValueError(f"first_rewards must be 0/1 rewards of shape ({ids.size}, {m}), got {show(r1)}")
        f = np.ones(ids.size) if prompt_factors is None else as_array(prompt_factors, "prompt_factors").reshape(-1)
        if f.shape != (ids.size,) or not (np.isfinite(f).all() and (f > 0).all()):
            raise ValueError(f"prompt_factors must be {ids.size} positive numbers, got {show(f)}")
        ell = st.expected_length(round, ids)
        if first_lengths is None:
            stage1 = self.cost.generation_cost * m * ell
        else:
            ln = as_array(first_lengths, "first_lengths")
            if ln.shape != r1.shape or not (np.isfinite(ln).all() and (ln >= 0).all()):
                raise ValueError(f"first_lengths must be lengths >= 0 of shape {r1.shape}, got {show(ln)}")
            stage1 = self.cost.generation_cost * ln.sum(axis=1)
        agree = r1.max(axis=1) == r1.min(axis=1)
        k1 = np.rint(r1.sum(axis=1))
        a, b = st.posterior(round, ids)
        sq = predictive_abs_adv_sum(a, b, G, first=m, first_correct=k1, moment=2, std=st.config.std, eps=st.config.eps)
        p_inf = np.where(agree, _p_informative_given_first(a, b, G, m, k1), 1.0)
        row = st.expected_prompt_tokens(ids) + ell
        rest = self.cost.generation_cost * (G - m) * ell + self.cost.po_tokens(row, G, p_inf)
        A = float((f[~agree] ** 2 * sq[~agree]).sum())
        C = float(stage1.sum() + rest[~agree].sum())
        if not A > 0:
            return np.ones(ids.size)
        rho = np.sqrt(C / A) * f * np.sqrt(sq / np.maximum(rest, 1e-12))
        return np.where(agree, np.clip(rho, self.floor, 1.0), 1.0)


def _p_informative_given_first(a: np.ndarray, b: np.ndarray, G: int, m: int, k1: np.ndarray) -> np.ndarray:
    """P(the whole group is informative | its first m agree with k1 ∈ {0, m}) under Beta(a, b)."""
    from costaware.rollouts.group import beta_binomial_pmf

    pmf = beta_binomial_pmf(a + k1, b + (m - k1), G - m)
    return np.where(k1 > 0, 1.0 - pmf[..., -1], 1.0 - pmf[..., 0])


two_stage = TwoStage
