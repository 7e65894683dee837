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

from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import as_array, integer
from costaware.rollouts.prompts import (
    MAX_CALLS,
    MAX_PROMPTS,
    REGISTRY,
    PromptMethod,
    StageRound,
    prompt_method_from_name,
    prompt_method_names,
)
from costaware.rollouts.state import PromptState, StateConfig

__all__ = ["RoundDraw", "PromptStage", "PROMPT_METHODS", "prompt_method"]


def _engine_rule(m: PromptMethod) -> bool:
    return not m.plain


# The engines' names for the rules (a config's ``cost_aware_rollout``): every registered rule but the plain
# one, which the engines' own sampler runs (they call it "all"). Two-stage rollouts are no PromptMethod: they
# need a second generation call inside the round, which the engines do not have. A rule registered later is
# run too (prompt_method reads the registry), but named here only if registered before this import.
PROMPT_METHODS = prompt_method_names(_engine_rule)


def prompt_method(name: str, **options: Any) -> PromptMethod:
    """The prompt method an engine config names (a registered rule but the plain one), with the options its
    class takes (:func:`costaware.rollouts.prompt_rule.prompt_method_from_name`): e.g. ``floor``,
    ``generation_cost`` and ``po_rows`` (which rows the row plan feeds, ``"all"`` under plain GRPO).

    >>> prompt_method("cost_aware", floor=0.2).floor
    0.2
    """
    offered = prompt_method_names(_engine_rule)
    if name not in offered:
        raise ValueError(f"the prompt method must be one of {offered}, got {name!r}")
    return prompt_method_from_name(name, **options)


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
        method: a :class:`~costaware.rollouts.prompt_rule.PromptMethod`, e.g. from a factory in
            :data:`costaware.rollouts.prompt_rule.REGISTRY`; the stage runs a fresh copy (:meth:`PromptMethod.start`),
            which holds the rule's own state.
        num_prompts: N, the train set's size.
        group_size: G, completions per prompt.
        prompts_per_round: B, prompts generated per round.
        seed: the base seed; a round's draw is fixed by (seed, round, state).
        prompt_tokens: each prompt's length in tokens (optional; it enters the predicted cost).
        state_config: the state's priors and decay (default: ``StateConfig(group_size)``).
        max_candidate_batches: a skip rule examines at most this many candidate batches per round; a
            round it could not fill is filled from the last candidates examined (never an empty round).
    """

    def __init__(
        self,
        method: Any,
        *,
        num_prompts: int,
        group_size: int,
        prompts_per_round: int,
        seed: int = 0,
        prompt_tokens: Any | None = None,
        state_config: StateConfig | None = None,
        max_candidate_batches: int = 64,
    ) -> None:
        if not isinstance(method, PromptMethod):
            raise TypeError(f"method must be a PromptMethod (one of {tuple(REGISTRY)}), got {type(method).__name__}")
        self.method = method.start()
        n = integer(num_prompts, "num_prompts", minimum=1)
        g = integer(group_size, "group_size", minimum=2)  # one completion has no group advantage
        self.batch = integer(
            prompts_per_round,
            "prompts_per_round",
            minimum=1,
            maximum=min(n, MAX_PROMPTS) if method.biased else MAX_PROMPTS,
        )
        self.seed = integer(seed, "seed", minimum=0)
        self.max_candidate_batches = integer(
            max_candidate_batches, "max_candidate_batches", minimum=1, maximum=MAX_CALLS
        )
        config = state_config or StateConfig(group_size=g)
        if config.group_size != g:
            raise ValueError(f"state_config.group_size must equal group_size={g}, got {config.group_size}")
        self.state = PromptState(config, n, prompt_tokens)
        self.round = 0  # the next round to draw
        self.cursor = 0  # candidates taken from the epoch permutations so far
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
            take = perm[pos : pos + k]
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
        t = self.round
        ids, factors, examined = self.method.choose(
            StageRound(self.state, t, self.batch, self._candidates, self._rng, self.max_candidate_batches)
        )
        self.examined += int(examined)
        self.pending = RoundDraw(round=t, prompt_ids=ids.astype(np.int64), factors=factors, examined=int(examined))
        return self.pending

    def update(self, prompt_ids: Any, rewards: Any, completion_lengths: Any, prompt_tokens: Any | None = None) -> None:
        """Fold the drawn round's rewards and lengths, shape (B, G), in the drawn order, and move on."""
        if self.pending is None:
            raise ValueError("update() needs a draw() first: there is no round in progress")
        ids = as_array(prompt_ids, "prompt_ids").reshape(-1)
        if ids.shape != self.pending.prompt_ids.shape or not (ids == self.pending.prompt_ids).all():
            raise ValueError(
                f"prompt_ids must be the drawn round's ids {self.pending.prompt_ids.tolist()}, got {ids.tolist()}"
            )
        self.state.update(ids, rewards, completion_lengths, round=self.round, prompt_tokens=prompt_tokens)
        self.method.observe(as_array(rewards, "rewards"), self.cursor // self.state.num_prompts)
        self.round += 1
        self.pending = None

    # -- save / restore -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON: the state, the round, the permutation cursor and the rule's own state (``control``).

        A round drawn but not yet updated is saved as not drawn (engines prefetch the next round before
        they checkpoint): the resumed stage draws it again, the same prompts from the same candidates.
        """
        cursor, examined = self._before_draw if self.pending is not None else (self.cursor, self.examined)
        return {
            "state": self.state.state_dict(),
            "round": self.round,
            "cursor": cursor,
            "examined": examined,
            "method": self.method.name,
            "control": self.method.rule_state(),
        }

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
            raise ValueError(
                f"saved state is for {state.num_prompts} prompts with {state.config}, "
                f"not {self.state.num_prompts} with {self.state.config}"
            )
        self.state = state
        self.round = integer(saved["round"], "saved['round']", minimum=0)
        self.cursor = integer(saved["cursor"], "saved['cursor']", minimum=0)
        self.examined = integer(saved["examined"], "saved['examined']", minimum=0)
        self.method.load_rule_state(saved["control"])
        self.pending = None
