"""Per-prompt online state over the N train prompts: what a prompt sampler predicts from.

For every prompt j it keeps

* a decayed Beta posterior of the pass rate: Beta(a₀ + S_j, b₀ + F_j), where S_j and F_j sum the
  rewards (and 1 − rewards) of its past responses, each weighted by ``decay``^(age in rounds);
* an expected completion length: a decayed mean of its completions' lengths, shrunk towards a prior
  (``length_prior``, or the mean over every completion seen so far when it is None);
* its last status (never seen / informative / all correct / all wrong) and GRESO's count of
  consecutive zero-variance groups;
* its prompt tokens (the last value logged), which the PO-token part of its cost needs.

The arrays are stored as of each prompt's last update and aged on query, so a round that does not
draw a prompt costs nothing for it. :meth:`PromptState.state_dict` is plain JSON (floats round trip
exactly through ``json``), so a checkpoint restores the same predictions and the same draws.

>>> import numpy as np
>>> st = PromptState(StateConfig(group_size=4, decay=0.5), num_prompts=3)
>>> st.update([0, 2], rewards=[[1, 1, 1, 1], [1, 0, 0, 0]], completion_lengths=[[5] * 4, [9] * 4], round=0)
>>> st.status.tolist(), st.zero_streak.tolist()
([2, 0, 1], [1, 0, 0])
>>> st.pass_rate(round=1).round(3).tolist()    # prior Beta(1, 1); 4 successes aged one round: 1 + 2 / (2 + 2)
[0.75, 0.5, 0.375]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from costaware._checks import (
    as_array,
    check_container,
    in_open_unit_interval,
    index_vector,
    integer,
    positive_scalar,
    real_scalar,
    show,
)
from costaware.rollouts.group import TRL_EPS, Std, abs_adv_sum_kernel, beta_binomial_pmf

__all__ = ["UNSEEN", "INFORMATIVE", "ALL_CORRECT", "ALL_WRONG", "StateConfig", "PromptState"]

UNSEEN, INFORMATIVE, ALL_CORRECT, ALL_WRONG = 0, 1, 2, 3
_STATE_VERSION = 1
# The longest completion or prompt, in tokens, the state takes: its sums then stay far inside float64
MAX_TOKENS = 2**40


@dataclass(frozen=True)
class StateConfig:
    """Frozen settings of :class:`PromptState`.

    Attributes:
        group_size: G, responses per prompt (≥ 1).
        prior_pass_rate: mean of the Beta prior, in (0, 1): a₀ = mean·strength, b₀ = (1 − mean)·strength.
        prior_strength: a₀ + b₀ > 0, the prior's weight in responses.
        decay: weight of an observation per round of age, in (0, 1]; 1 never forgets.
        length_prior: prior completion length (tokens, > 0); None: the mean of every completion
            logged so far (1 token before any).
        length_prior_weight: the prior length's weight, in completions (> 0).
        std, eps: the advantage convention the proxy Σ|A| assumes (TRL: sample std, 1e-4).
    """

    group_size: int
    prior_pass_rate: float = 0.5
    prior_strength: float = 2.0
    decay: float = 0.9
    length_prior: float | None = None
    length_prior_weight: float = 1.0
    std: Std = "sample"
    eps: float = TRL_EPS

    def __post_init__(self) -> None:
        integer(self.group_size, "group_size", minimum=1, maximum=1 << 20)
        in_open_unit_interval(self.prior_pass_rate, "prior_pass_rate", why=" (a pass rate strictly between 0 and 1)")
        positive_scalar(self.prior_strength, "prior_strength")
        d = real_scalar(self.decay, "decay")
        if not 0.0 < d <= 1.0:
            raise ValueError(f"decay must lie in (0, 1], got {d!r}")
        if self.length_prior is not None:
            positive_scalar(self.length_prior, "length_prior")
        positive_scalar(self.length_prior_weight, "length_prior_weight")
        if self.std not in ("sample", "population"):
            raise ValueError(f"std must be 'sample' or 'population', got {self.std!r}")
        if real_scalar(self.eps, "eps") < 0:
            raise ValueError(f"eps must be >= 0, got {self.eps!r}")

    @property
    def a0(self) -> float:
        return self.prior_pass_rate * self.prior_strength

    @property
    def b0(self) -> float:
        return (1.0 - self.prior_pass_rate) * self.prior_strength


_ARRAYS = (
    "successes",
    "failures",
    "length_sum",
    "length_weight",
    "last_round",
    "status",
    "zero_streak",
    "prompt_tokens",
)


def _saved_values(arr: np.ndarray, name: str, key: str) -> np.ndarray:
    """A saved per-prompt array, checked as :meth:`PromptState.update` would have left it: a NaN count
    would make every prompt look unseen-but-informative and the skip rules keep them all silently."""
    ok = np.isfinite(arr)
    if name == "prompt_tokens":  # NaN: the length was never given
        ok |= np.isnan(arr)
        ok &= ~(arr < 0)
    elif name == "last_round":
        ok &= (arr >= -1) & (arr == np.round(arr))
    elif name == "status":
        ok &= np.isin(arr, (UNSEEN, INFORMATIVE, ALL_CORRECT, ALL_WRONG))
    else:  # decayed counts and sums; the streak counts groups
        ok &= arr >= 0
        if name == "zero_streak":
            ok &= arr == np.round(arr)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"{key} holds an impossible value {float(arr[i])!r} at index {i}")
    return arr


class PromptState:
    """The online state of N prompts; :meth:`update` after each round, query before the next."""

    def __init__(self, config: StateConfig, num_prompts: int, prompt_tokens: Any | None = None) -> None:
        if not isinstance(config, StateConfig):
            raise TypeError(f"config must be a StateConfig, got {type(config).__name__}")
        self.config = config
        n = integer(num_prompts, "num_prompts", minimum=1, maximum=1 << 32)
        self.num_prompts = n
        self.successes = np.zeros(n)
        self.failures = np.zeros(n)
        self.length_sum = np.zeros(n)
        self.length_weight = np.zeros(n)
        self.last_round = np.full(n, -1, dtype=np.int64)
        self.status = np.zeros(n, dtype=np.int64)
        self.zero_streak = np.zeros(n, dtype=np.int64)
        self.prompt_tokens = np.full(n, np.nan)
        if prompt_tokens is not None:
            pt = as_array(prompt_tokens, "prompt_tokens").reshape(-1)
            if pt.size != n or not (np.isfinite(pt).all() and (pt >= 0).all() and (pt <= MAX_TOKENS).all()):
                raise ValueError(f"prompt_tokens must be {n} finite lengths >= 0, got {show(pt)}")
            self.prompt_tokens = pt.astype(np.float64)
        self.round = -1  # the latest round updated
        self.total_length = 0.0  # every completion's length, and their count (the default length prior)
        self.total_completions = 0.0

    # -- update -----------------------------------------------------------------------------

    def _check_batch(self, prompt_ids: Any, rewards: Any, lengths: Any, round: Any) -> tuple:
        G = self.config.group_size
        ids = as_array(prompt_ids, "prompt_ids").reshape(-1)
        if not ((ids == np.round(ids)).all() and (ids >= 0).all() and (ids < self.num_prompts).all()):
            raise ValueError(f"prompt_ids must be integers in [0, {self.num_prompts}), got {show(ids)}")
        ids = ids.astype(np.int64)
        r = as_array(rewards, "rewards")
        if r.ndim != 2 or r.shape != (ids.size, G):
            raise ValueError(
                f"rewards must have shape (len(prompt_ids), group_size) = ({ids.size}, {G}), got {r.shape}"
            )
        if not (np.isfinite(r).all() and (r >= 0).all() and (r <= 1).all()):
            raise ValueError(f"rewards must lie in [0, 1] (0/1 correctness), got {show(r)}")
        ln = as_array(lengths, "completion_lengths")
        if ln.shape != r.shape:
            raise ValueError(f"completion_lengths must have shape {r.shape}, got {ln.shape}")
        if not (np.isfinite(ln).all() and (ln >= 0).all() and (ln <= MAX_TOKENS).all()):
            bad = ln[~(np.isfinite(ln) & (ln >= 0) & (ln <= MAX_TOKENS))][0]
            raise ValueError(
                f"completion_lengths must be finite and >= 0 (a negative length is not one) and at "
                f"most {MAX_TOKENS} tokens, got {float(bad)!r}"
            )
        t = integer(round, "round", minimum=0)
        if t < self.round:
            raise ValueError(f"round must not go back: got {t} after round {self.round}")
        return ids, r, ln, t

    def update(
        self, prompt_ids: Any, rewards: Any, completion_lengths: Any, round: int, prompt_tokens: Any | None = None
    ) -> None:
        """Fold one round's groups in: ``rewards`` and ``completion_lengths`` of shape (B, G).

        A prompt drawn twice in the round (draws with replacement) gets both groups, in order: its
        status is its last group's, and its zero-variance streak counts its trailing zero-variance groups.
        """
        ids, r, ln, t = self._check_batch(prompt_ids, rewards, completion_lengths, round)
        if prompt_tokens is not None:
            pt = as_array(prompt_tokens, "prompt_tokens").reshape(-1)
            if pt.size != ids.size or not (np.isfinite(pt).all() and (pt >= 0).all() and (pt <= MAX_TOKENS).all()):
                raise ValueError(f"prompt_tokens must be {ids.size} finite lengths >= 0, got {show(pt)}")
        if ids.size == 0:
            self.round = t
            return
        G = self.config.group_size
        uniq = np.unique(ids)
        age = np.where(self.last_round[uniq] >= 0, t - self.last_round[uniq], 0)
        keep = self.config.decay**age  # age the stored sums to round t before adding
        for arr in (self.successes, self.failures, self.length_sum, self.length_weight):
            arr[uniq] *= keep
        s = r.sum(axis=1)
        np.add.at(self.successes, ids, s)
        np.add.at(self.failures, ids, G - s)
        np.add.at(self.length_sum, ids, ln.sum(axis=1))
        np.add.at(self.length_weight, ids, float(G))
        zero = r.max(axis=1) == r.min(axis=1)
        status = np.where(~zero, INFORMATIVE, np.where(r[:, 0] >= 1.0, ALL_CORRECT, ALL_WRONG))
        # in order: the last occurrence of each prompt sets its status; the streak counts the
        # zero-variance groups after its last informative one (all of them, on top of the old streak)
        pos = np.arange(ids.size)
        last_pos = np.full(self.num_prompts, -1)
        np.maximum.at(last_pos, ids, pos)
        last_inf = np.full(self.num_prompts, -1)
        np.maximum.at(last_inf, ids[~zero], pos[~zero])
        count_after = np.zeros(self.num_prompts, dtype=np.int64)
        np.add.at(count_after, ids, (pos > last_inf[ids]).astype(np.int64))
        had_inf = last_inf[uniq] >= 0
        self.zero_streak[uniq] = np.where(had_inf, 0, self.zero_streak[uniq]) + count_after[uniq]
        self.status[uniq] = status[last_pos[uniq]]
        self.last_round[uniq] = t
        if prompt_tokens is not None:
            self.prompt_tokens[ids] = pt
        self.total_length += float(ln.sum())
        self.total_completions += float(ln.size)
        self.round = t

    # -- queries (at the round about to be drawn) -------------------------------------------

    def _ids(self, ids: Any | None) -> np.ndarray:
        return (
            np.arange(self.num_prompts)
            if ids is None
            else index_vector(ids, self.num_prompts, "ids", integral_floats=True)
        )

    def _aged(self, round: Any, ids: Any | None) -> tuple[np.ndarray, np.ndarray]:
        t = integer(round, "round", minimum=0)
        if t < self.round:
            raise ValueError(f"round must be >= the last round updated ({self.round}), got {t}")
        i = self._ids(ids)
        age = np.where(self.last_round[i] >= 0, t - self.last_round[i], 0)
        return i, self.config.decay**age

    def posterior(self, round: int, ids: Any | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of each prompt's Beta posterior at ``round`` (observations aged to it)."""
        i, w = self._aged(round, ids)
        return self.config.a0 + w * self.successes[i], self.config.b0 + w * self.failures[i]

    def pass_rate(self, round: int, ids: Any | None = None) -> np.ndarray:
        a, b = self.posterior(round, ids)
        return a / (a + b)

    def length_prior(self) -> float:
        if self.config.length_prior is not None:
            return float(self.config.length_prior)
        return self.total_length / self.total_completions if self.total_completions else 1.0

    def expected_length(self, round: int, ids: Any | None = None) -> np.ndarray:
        """Expected completion length: the decayed mean, shrunk towards the length prior."""
        i, w = self._aged(round, ids)
        w0 = self.config.length_prior_weight
        return (w0 * self.length_prior() + w * self.length_sum[i]) / (w0 + w * self.length_weight[i])

    def expected_prompt_tokens(self, ids: Any | None = None) -> np.ndarray:
        """Each prompt's tokens; the mean of the known ones where unknown (0 before any is known)."""
        pt = self.prompt_tokens[self._ids(ids)]
        known = self.prompt_tokens[np.isfinite(self.prompt_tokens)]
        return np.where(np.isfinite(pt), pt, known.mean() if known.size else 0.0)

    def group_moments(self, round: int, ids: Any | None = None) -> dict[str, np.ndarray]:
        """Predictive E[Σ|A|], E[(Σ|A|)²] and P(group informative) under each posterior."""
        a, b = self.posterior(round, ids)
        G = self.config.group_size
        pmf = beta_binomial_pmf(a, b, G)
        s = abs_adv_sum_kernel(np.arange(G + 1, dtype=np.float64), G, self.config.std, float(self.config.eps))
        informative = 1.0 - pmf[..., 0] - pmf[..., -1] if G > 1 else np.zeros(a.shape)
        return {"abs_adv_sum": pmf @ s, "abs_adv_sum_sq": pmf @ (s * s), "informative": informative}

    # -- save / restore ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON: the config, every array as a list, the counters."""
        out: dict[str, Any] = {
            "version": _STATE_VERSION,
            "config": asdict(self.config),
            "num_prompts": self.num_prompts,
            "round": self.round,
            "total_length": self.total_length,
            "total_completions": self.total_completions,
        }
        for name in _ARRAYS:
            arr = getattr(self, name)
            out[name] = (
                [None if not math.isfinite(v) else v for v in arr.tolist()] if arr.dtype.kind == "f" else arr.tolist()
            )
        return out

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PromptState:
        """Rebuild a state saved by :meth:`state_dict`; ValueError naming a missing or bad key."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from PromptState.state_dict, got {type(state).__name__}")
        for key in ("version", "config", "num_prompts", "round", "total_length", "total_completions", *_ARRAYS):
            if key not in state:
                raise ValueError(f"state is missing the key {key!r}")
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"state has version {state['version']!r}; this code reads {_STATE_VERSION}")
        st = cls(StateConfig(**state["config"]), state["num_prompts"])
        for name in _ARRAYS:
            ref = getattr(st, name)
            key = f"state[{name!r}]"
            check_container(state[name], key, "a list of numbers")
            arr = as_array([np.nan if v is None else v for v in state[name]], key)
            if arr.shape != ref.shape:
                raise ValueError(f"{key} must hold {st.num_prompts} values, got {arr.shape}")
            setattr(st, name, _saved_values(arr, name, key).astype(ref.dtype))
        st.round = integer(state["round"], "state['round']", minimum=-1)
        st.total_length = real_scalar(state["total_length"], "state['total_length']")
        st.total_completions = real_scalar(state["total_completions"], "state['total_completions']")
        return st
