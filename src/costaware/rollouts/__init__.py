"""Cost-aware rollouts: the paper's rule applied one stage earlier, to which prompts get generated.

Engine-neutral (numpy/scipy only): the group gradient proxy (:mod:`.group`), the per-prompt online
state (:mod:`.state`), the prompt samplers (:mod:`.prompts`), per-prompt logs (:mod:`.logs`) and the
analysis that predicts each sampler's saving from them (:mod:`.analysis`). See docs/design.md,
"Cost-aware rollouts (beyond the paper)".
"""

from costaware.rollouts.group import (
    abs_adv_sum,
    expected_abs_adv_sum,
    predictive_abs_adv_sum,
    row_abs_advantages,
)
from costaware.rollouts.logs import PromptRound, RecordingReward, read_prompt_rounds, write_prompt_rounds
from costaware.rollouts.prompts import (
    REGISTRY,
    CostModel,
    GresoControl,
    PromptMethod,
    cost_aware_prompts,
    cost_aware_skip,
    fill_prompt_batch,
    greso,
    prompt_method_from_name,
    two_stage,
    uniform_prompts,
)
from costaware.rollouts.state import PromptState, StateConfig

__all__ = [
    "abs_adv_sum",
    "expected_abs_adv_sum",
    "predictive_abs_adv_sum",
    "row_abs_advantages",
    "PromptRound",
    "RecordingReward",
    "read_prompt_rounds",
    "write_prompt_rounds",
    "REGISTRY",
    "PromptMethod",
    "prompt_method_from_name",
    "CostModel",
    "GresoControl",
    "cost_aware_prompts",
    "cost_aware_skip",
    "fill_prompt_batch",
    "greso",
    "two_stage",
    "uniform_prompts",
    "PromptState",
    "StateConfig",
]
