"""The prompt-rule registry (costaware.rollouts.prompts.REGISTRY): a rule registered at run time reaches the
stage, verl's option checks and the analysis with no other edit; a name is taken once; the flags of the
registered rules; their options are those costaware.sampling_options declares."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pytest
from omegaconf import OmegaConf

from costaware.experiments import arms
from costaware.integrations.verl.prompts import CostAwarePromptSampler
from costaware.rollouts.analysis import analyse
from costaware.rollouts.prompts import (
    REGISTRY,
    SkipRule,
    UniformPrompts,
    prompt_method_from_name,
    prompt_method_names,
    prompt_method_options,
    register_prompt_method,
)
from costaware.rollouts.stage import PROMPT_METHODS, PromptStage
from costaware.rollouts.synthetic import simulate_prompt_rounds

N, G, B = 12, 4, 3


@dataclass(frozen=True)
class KeepOdd(SkipRule):
    """A toy skip: odd prompt ids are kept, even ones with probability ``even`` once it has seen ``after``
    rounds (every prompt before); it counts the rounds it saw."""

    name: ClassVar[str] = "keep_odd"
    summary: ClassVar[str] = "a toy skip"
    even: float = 0.25
    after: int = 0
    seen: int = field(default=0, init=False, compare=False)  # its own state

    def keep(self, state: Any, round: int) -> np.ndarray:
        k = np.full(state.num_prompts, self.even if self.seen >= self.after else 1.0)
        k[1::2] = 1.0
        return k

    def observe(self, rewards: np.ndarray, epoch: int) -> None:
        object.__setattr__(self, "seen", self.seen + 1)

    def rule_state(self) -> dict[str, Any] | None:
        return {"seen": self.seen}

    def load_rule_state(self, saved: dict[str, Any] | None) -> None:
        object.__setattr__(self, "seen", int(saved["seen"]))


@dataclass(frozen=True)
class Tilted(UniformPrompts):
    """A toy weighted rule: q ∝ j + 1 mixed with uniform at 0.1."""

    name: ClassVar[str] = "tilted"
    plain: ClassVar[bool] = False
    weighted: ClassVar[bool] = True

    def draw_inputs(self, state: Any, round: int) -> tuple[np.ndarray | None, np.ndarray, float]:
        return np.arange(1.0, state.num_prompts + 1.0), np.ones(state.num_prompts), 0.1


@pytest.fixture
def toys():
    for cls in (KeepOdd, Tilted):
        register_prompt_method(cls)
    yield
    for cls in (KeepOdd, Tilted):
        del REGISTRY[cls.name]


def _run(stage: PromptStage, rounds: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(rounds):
        d = stage.draw()
        stage.update(d.prompt_ids, (rng.random((B, G)) < 0.5).astype(float), np.ones((B, G)))
        out.append(d.prompt_ids)
    return out


def test_the_stage_runs_a_registered_rule_and_saves_its_state(toys) -> None:
    method = prompt_method_from_name("keep_odd", even=0.0, floor=0.3)  # floor is another rule's option: ignored
    assert method.even == 0.0
    stage = PromptStage(method, num_prompts=N, group_size=G, prompts_per_round=B, seed=1)
    drawn = np.concatenate(_run(stage, 6))
    assert (drawn % 2 == 1).all() and stage.examined > 6 * B  # the evens were examined and skipped
    assert stage.state_dict()["control"] == {"seen": 6} and method.seen == 0  # the stage runs its own copy
    resumed = PromptStage(KeepOdd(even=0.0), num_prompts=N, group_size=G, prompts_per_round=B, seed=1)
    resumed.load_state_dict(json.loads(json.dumps(stage.state_dict())))
    assert resumed.method.seen == 6
    assert all((a == b).all() for a, b in zip(_run(stage, 4), _run(resumed, 4), strict=True))


def test_a_registered_weighted_rule_gets_its_prompt_factors(toys) -> None:
    stage = PromptStage(prompt_method_from_name("tilted"), num_prompts=N, group_size=G, prompts_per_round=B)
    d = stage.draw()
    q = 0.9 * np.arange(1.0, N + 1) / np.arange(1.0, N + 1).sum() + 0.1 / N
    np.testing.assert_allclose(d.factors, 1.0 / (N * q[d.prompt_ids]), rtol=1e-12)


def _verl_config(method: str, **options: Any) -> Any:
    cfg = OmegaConf.create(
        {
            "data": {
                "train_batch_size": B,
                "gen_batch_size": None,
                "dataloader_num_workers": 0,
                "seed": None,
                "sampler": {"costaware": {"method": method, "seed": 5, **options}},
            },
            "actor_rollout_ref": {"rollout": {"n": G}},
        }
    )
    return cfg.data


class _Rows:
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict:
        return {"index": 100 + i}


def test_verl_accepts_a_registered_unweighted_rule_and_its_options(toys) -> None:
    sampler = CostAwarePromptSampler(_Rows(), _verl_config("keep_odd", even=0.5))
    assert isinstance(sampler.stage.method, KeepOdd) and sampler.stage.method.even == 0.5
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['floor'\]"):
        CostAwarePromptSampler(_Rows(), _verl_config("keep_odd", floor=0.1))
    with pytest.raises(ValueError, match="method='tilted' is not offered in verl: its prompt factor"):
        CostAwarePromptSampler(_Rows(), _verl_config("tilted"))
    with pytest.raises(ValueError, match="method='uniform' is not offered in verl: use verl's own sampler"):
        CostAwarePromptSampler(_Rows(), _verl_config("uniform"))


@dataclass(frozen=True)
class KeepOddLater(KeepOdd):
    """KeepOdd that skips from its second round on."""

    after: int = 1


def test_the_analysis_reports_every_registered_skip_rule_and_lets_it_observe() -> None:
    register_prompt_method(KeepOddLater)
    try:
        result = analyse(simulate_prompt_rounds(num_prompts=32, group_size=4, batch_size=8, rounds=4, seed=0))
    finally:
        del REGISTRY["keep_odd"]
    skips = {s.name: s for s in result.skips}
    assert list(skips) == ["greso", "cost_aware_skip", "keep_odd"]
    assert 0 < skips["keep_odd"].overall_tokens_skipped < 1
    # round 0 is seen before any observe(): nothing skipped; later rounds follow the rule's own state
    assert skips["keep_odd"].tokens_skipped[0] == 0 and min(skips["keep_odd"].tokens_skipped[1:]) > 0


def test_the_engines_names_and_the_arms_come_from_the_registry() -> None:
    assert PROMPT_METHODS == prompt_method_names(lambda m: not m.plain) == ("greso", "cost_aware_skip", "cost_aware")
    assert arms.ROLLOUTS == ("all", *PROMPT_METHODS, "dapo")
    with pytest.raises(ValueError, match="must be one of"):
        prompt_method_from_name("two_stage")
    with pytest.raises(TypeError, match="among"):
        prompt_method_from_name("greso", florr=0.1)


def test_a_name_is_registered_once(toys) -> None:
    @dataclass(frozen=True)
    class Impostor(SkipRule):
        name: ClassVar[str] = "greso"

        def keep(self, state: Any, round: int) -> np.ndarray:
            return np.ones(state.num_prompts)

    with pytest.raises(ValueError, match=r"a prompt method named 'greso' is already registered \(Greso\)"):
        register_prompt_method(Impostor)
    assert REGISTRY["greso"].__name__ == "Greso"
    assert register_prompt_method(KeepOdd) is KeepOdd  # the same class again (a module reloaded) is no duplicate
    assert list(REGISTRY) == ["uniform", "greso", "cost_aware_skip", "cost_aware", "keep_odd", "tilted"]


def test_the_registered_rules_options_are_the_declared_prompt_options() -> None:
    """Every built-in rule's field is a prompt option of costaware.sampling_options, with its default and help."""
    import dataclasses

    from costaware.rollouts.prompts import CostModel, TwoStage
    from costaware.sampling_options import PROMPT_OPTIONS, option

    names = [o.name for o in PROMPT_OPTIONS]
    assert len(names) == len(set(names)) and all(o.group == "rollouts" and o.help for o in PROMPT_OPTIONS)
    seen = set()
    for cls in (*REGISTRY.values(), TwoStage, CostModel):
        for f in dataclasses.fields(cls):
            if not f.init or f.name == "base":  # base: two_stage's prompt sampler, an object
                continue
            seen.add(f.name)
            assert (f.default, f.metadata["help"]) == (option(f.name).default, option(f.name).help), (cls, f.name)
    assert seen == set(names)
    assert prompt_method_options("greso") == ("target", "easy_split", "step", "p_easy", "p_hard", "oversample",
                                              "min_p", "max_p")  # fmt: skip


def test_the_registered_rules_flags() -> None:
    flags = {
        name: (m.name, m.biased, m.weighted, m.uses_costs, m.plain) for name, cls in REGISTRY.items() for m in [cls()]
    }
    assert flags == {
        "uniform": ("uniform", False, False, False, True),
        "greso": ("greso", True, False, False, False),
        "cost_aware_skip": ("cost_aware_skip", True, False, True, False),
        "cost_aware": ("cost_aware", False, True, True, False),
    }
