"""The prompt stage of a training run: which prompts each generation round generates, engine-neutral.

:class:`PromptStage` holds a prompt method (:mod:`costaware.rollouts.prompts`), the per-prompt state
(:class:`costaware.rollouts.state.PromptState`) and the random streams, and answers two calls that an
engine adapter makes once per generation round, identically on every rank:

* :meth:`PromptStage.draw` — the round's B prompt ids, with each drawn prompt's factor (1 unless the
  method is weighted) and how many candidates were examined (the skip rules look at more than B);
* :meth:`PromptStage.update` — fold the round's rewards and completion lengths (B, G) into the state.

A draw depends only on the seed, the round and the state updated by past rounds, so every rank that
feeds the same global rewards draws the same prompts, and a resumed run (:meth:`state_dict`) draws
what the uninterrupted one would have.

Candidates of the skip rules come from epoch permutations of the N prompts (TRL's and verl's default
order), so with nothing skipped a skip rule visits every prompt once per epoch, as uniform does.

>>> from costaware.rollouts.prompts import greso
>>> stage = PromptStage(greso(), num_prompts=8, group_size=2, prompts_per_round=2, seed=0)
>>> d = stage.draw()
>>> d.prompt_ids.size, d.factors.tolist()
(2, [1.0, 1.0])
>>> stage.update(d.prompt_ids, [[1, 1], [0, 1]], [[3, 4], [5, 6]])
>>> stage.round
1
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from costaware._checks import as_array, integer
from costaware.rollouts.prompts import (
    MAX_CALLS,
    MAX_PROMPTS,
    CostAwarePrompts,
    CostAwareSkip,
    Greso,
    GresoControl,
    UniformPrompts,
    cost_aware_prompts,
    cost_aware_skip,
    fill_prompt_batch,
    greso,
)
from costaware.rollouts.state import PromptState, StateConfig
from costaware.sampler import CostAwareSampler

__all__ = ["RoundDraw", "PromptStage", "METHODS_IN_ENGINES", "PROMPT_METHODS", "prompt_method"]

# The prompt methods an engine can run through this stage: uniform draws i.i.d. from q = 1/N (use the
# engine's own sampler for its epoch permutations instead), the two skip rules, and q ∝ Ĝ/√ĉ.
# Two-stage rollouts need a second generation call inside the round, which the engines do not have.
METHODS_IN_ENGINES = (UniformPrompts, CostAwarePrompts, CostAwareSkip, Greso)
# The engines' names for them (a config's ``cost_aware_rollout``), parsed here only.
PROMPT_METHODS = ("greso", "cost_aware_skip", "cost_aware")


def prompt_method(name: str, *, floor: float = 0.1, generation_cost: float = 1.0 / 3.0,
                  po_rows: str = "nonzero") -> Any:
    """The prompt method an engine config names: ``greso`` (biased), ``cost_aware_skip`` (biased) or
    ``cost_aware`` (unbiased, q ∝ Ĝ/√ĉ mixed with uniform at ``floor``); ``po_rows`` says which rows the row
    plan feeds (``"all"`` under plain GRPO), for the predicted cost.

    >>> prompt_method("cost_aware", floor=0.2).floor
    0.2
    """
    if name == "greso":
        return greso()
    if name == "cost_aware_skip":
        return cost_aware_skip(generation_cost=generation_cost, po_rows=po_rows)
    if name == "cost_aware":
        return cost_aware_prompts(floor=floor, generation_cost=generation_cost, po_rows=po_rows)
    raise ValueError(f"the prompt method must be one of {PROMPT_METHODS}, got {name!r}")


@dataclass(frozen=True)
class RoundDraw:
    """One round's prompts: ids (B,), prompt factors (B,), candidates examined, the round index."""

    round: int
    prompt_ids: np.ndarray
    factors: np.ndarray
    examined: int


class PromptStage:
    """Draws each round's prompts by ``method`` from the state, and keeps that state.

    Args:
        method: a prompt method made by :func:`costaware.rollouts.prompts.uniform_prompts`,
            :func:`~costaware.rollouts.prompts.cost_aware_prompts`, :func:`~costaware.rollouts.prompts.greso`
            or :func:`~costaware.rollouts.prompts.cost_aware_skip`.
        num_prompts: N, the train set's size.
        group_size: G, completions per prompt.
        prompts_per_round: B, prompts generated per round.
        seed: the base seed; a round's draw is fixed by (seed, round, state).
        prompt_tokens: each prompt's length in tokens (optional; it enters the predicted cost).
        state_config: the state's priors and decay (default: ``StateConfig(group_size)``).
        max_candidate_batches: a skip rule examines at most this many candidate batches per round; a
            round it could not fill is filled from the last candidates examined (never an empty round).
    """

    def __init__(self, method: Any, *, num_prompts: int, group_size: int, prompts_per_round: int, seed: int = 0,
                 prompt_tokens: Any | None = None, state_config: StateConfig | None = None,
                 max_candidate_batches: int = 64) -> None:
        if not isinstance(method, METHODS_IN_ENGINES):
            raise TypeError(f"method must be one of {[m.__name__ for m in METHODS_IN_ENGINES]}, got {type(method).__name__}")
        self.method = method
        n = integer(num_prompts, "num_prompts", minimum=1)
        g = integer(group_size, "group_size", minimum=2)  # one completion has no group advantage
        self.batch = integer(prompts_per_round, "prompts_per_round", minimum=1,
                             maximum=min(n, MAX_PROMPTS) if method.biased else MAX_PROMPTS)
        self.seed = integer(seed, "seed", minimum=0)
        self.max_candidate_batches = integer(max_candidate_batches, "max_candidate_batches", minimum=1,
                                             maximum=MAX_CALLS)
        config = state_config or StateConfig(group_size=g)
        if config.group_size != g:
            raise ValueError(f"state_config.group_size must equal group_size={g}, got {config.group_size}")
        self.state = PromptState(config, n, prompt_tokens)
        self.round = 0  # the next round to draw
        self.cursor = 0  # candidates taken from the epoch permutations so far
        self.control = method.initial if isinstance(method, Greso) else None
        self.examined = 0  # candidates examined over the run
        self.pending: RoundDraw | None = None  # drawn, not yet updated
        self._before_draw = (0, 0)

    # -- streams ------------------------------------------------------------------------------

    def _rng(self, purpose: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.round, purpose])

    def _candidates(self, k: int) -> np.ndarray:
        """The next k prompts of the epoch permutations (epoch e shuffled by (seed, e))."""
        n = self.state.num_prompts
        out = []
        while k > 0:
            epoch, pos = divmod(self.cursor, n)
            perm = np.random.default_rng([self.seed, epoch, 7]).permutation(n)
            take = perm[pos:pos + k]
            out.append(take)
            self.cursor += take.size
            k -= take.size
        return np.concatenate(out)

    # -- the two calls ------------------------------------------------------------------------

    def draw(self) -> RoundDraw:
        """The next round's prompts. Drawing again before :meth:`update` returns the same draw."""
        if self.pending is not None:
            return self.pending
        self._before_draw = (self.cursor, self.examined)  # what a checkpoint taken mid-round saves
        m = self.method
        t = self.round
        if isinstance(m, (Greso, CostAwareSkip)):
            keep = (m.keep_probabilities(self.state, cast(GresoControl, self.control)) if isinstance(m, Greso)
                    else m.keep_probabilities(self.state, t))
            per_call = m.sampling_batch_size(self.batch) if isinstance(m, Greso) else self.batch
            ids, examined = fill_prompt_batch(self._candidates, keep, self.batch, per_call, rng=self._rng(1),
                                              max_calls=self.max_candidate_batches)
            if ids.size < self.batch:  # nothing left worth generating: fill from fresh candidates, unskipped
                ids = np.concatenate([ids, self._candidates(self.batch - ids.size)])
            factors = np.ones(ids.size)
        else:
            ids, factors = self._weighted_draw(m, t)
            examined = self.batch
        self.examined += int(examined)
        self.pending = RoundDraw(round=t, prompt_ids=ids.astype(np.int64), factors=factors, examined=int(examined))
        return self.pending

    def _weighted_draw(self, m: UniformPrompts, t: int) -> tuple[np.ndarray, np.ndarray]:
        """B i.i.d. draws from q by :class:`costaware.sampler.CostAwareSampler` (raw weights 1/(N q_j)
        are the prompt factors; uniform q gives exactly 1)."""
        n = self.state.num_prompts
        if isinstance(m, CostAwarePrompts):
            g, c = m.sampler_inputs(self.state, t)
            alpha = m.floor
        else:
            g, c, alpha = None, np.ones(n), 0.0
        sampler = CostAwareSampler(c, g, alpha=alpha, num_samples=self.batch, weights="raw",
                                   seed=int(self._rng(2).integers(2**62)),
                                   rank=0, world_size=1, yield_weights=True)
        drawn = np.asarray(list(sampler), dtype=np.float64).reshape(-1, 2)
        return drawn[:, 0].astype(np.int64), drawn[:, 1]

    def update(self, prompt_ids: Any, rewards: Any, completion_lengths: Any, prompt_tokens: Any | None = None) -> None:
        """Fold the drawn round's rewards and lengths, shape (B, G), in the drawn order, and move on."""
        if self.pending is None:
            raise ValueError("update() needs a draw() first: there is no round in progress")
        ids = as_array(prompt_ids, "prompt_ids").reshape(-1)
        if ids.shape != self.pending.prompt_ids.shape or not (ids == self.pending.prompt_ids).all():
            raise ValueError(f"prompt_ids must be the drawn round's ids {self.pending.prompt_ids.tolist()}, "
                             f"got {ids.tolist()}")
        self.state.update(ids, rewards, completion_lengths, round=self.round, prompt_tokens=prompt_tokens)
        if isinstance(self.method, Greso):  # GRESO adapts every step from its second epoch on
            epoch = self.cursor // self.state.num_prompts if self.cursor else 0
            self.control = self.method.adapt(cast(GresoControl, self.control), as_array(rewards, "rewards"), epoch)
        self.round += 1
        self.pending = None

    # -- save / restore -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON: the state, the round, the permutation cursor and GRESO's control.

        A round drawn but not yet updated is saved as not drawn (engines prefetch the next round before
        they checkpoint): the resumed stage draws it again, the same prompts from the same candidates.
        """
        cursor, examined = self._before_draw if self.pending is not None else (self.cursor, self.examined)
        return {"state": self.state.state_dict(), "round": self.round, "cursor": cursor,
                "examined": examined, "method": self.method.name,
                "control": asdict(self.control) if self.control is not None else None}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the method must be the same kind."""
        if not isinstance(saved, dict):
            raise TypeError(f"saved must be a dict from PromptStage.state_dict, got {type(saved).__name__}")
        for key in ("state", "round", "cursor", "examined", "method", "control"):
            if key not in saved:
                raise ValueError(f"saved is missing the key {key!r}")
        if saved["method"] != self.method.name:
            raise ValueError(f"saved holds the state of method {saved['method']!r}, not {self.method.name!r}")
        state = PromptState.from_state_dict(saved["state"])
        if state.num_prompts != self.state.num_prompts or state.config != self.state.config:
            raise ValueError(f"saved state is for {state.num_prompts} prompts with {state.config}, "
                             f"not {self.state.num_prompts} with {self.state.config}")
        self.state = state
        self.round = integer(saved["round"], "saved['round']", minimum=0)
        self.cursor = integer(saved["cursor"], "saved['cursor']", minimum=0)
        self.examined = integer(saved["examined"], "saved['examined']", minimum=0)
        self.control = GresoControl(**saved["control"]) if saved["control"] is not None else None
        self.pending = None
