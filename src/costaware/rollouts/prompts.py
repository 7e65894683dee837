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

This module gathers them: the interface, the registry and the uniform rule are in
:mod:`costaware.rollouts.prompt_rule`, the skip rules in :mod:`costaware.rollouts.skip_rules`, the weighted
rules in :mod:`costaware.rollouts.weighted_prompts`.

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

# Imported in registry order: the uniform rule (in prompt_rule), the skip rules, then the weighted ones.
from costaware.rollouts.prompt_rule import (
    FLOOR_WHY,
    MAX_CALLS,
    MAX_EXAMINED,
    MAX_PROMPTS,
    REGISTRY,
    CostModel,
    PromptMethod,
    SkipRule,
    StageRound,
    UniformPrompts,
    fill_prompt_batch,
    iid_draw,
    prompt_method_from_name,
    prompt_method_names,
    prompt_method_options,
    register_prompt_method,
)
from costaware.rollouts.skip_rules import CostAwareSkip, Greso, GresoControl
from costaware.rollouts.weighted_prompts import CostAwarePrompts, TwoStage

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
    "iid_draw",
    "MAX_PROMPTS",
    "MAX_CALLS",
    "MAX_EXAMINED",
]

# -- the factories: each rule's class under its name -------------------------------------------------

uniform_prompts = UniformPrompts
cost_aware_prompts = CostAwarePrompts
cost_aware_skip = CostAwareSkip
greso = Greso
two_stage = TwoStage
