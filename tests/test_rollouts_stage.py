"""PromptStage: the round-by-round prompt draw the engines call (costaware.rollouts.stage)."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from costaware.rollouts.prompts import cost_aware_prompts, cost_aware_skip, greso, two_stage, uniform_prompts
from costaware.rollouts.stage import PromptStage

N, G, B = 12, 4, 3
TOKENS = np.arange(N) + 5.0
METHODS = [uniform_prompts(), cost_aware_prompts(floor=0.2), cost_aware_skip(), greso()]


def _rewards(ids: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt j passes with probability j/N: low ids fail, high ids pass, the middle varies."""
    r = (rng.random((ids.size, G)) < (ids[:, None] + 0.5) / N).astype(float)
    return r, rng.integers(1, 20, (ids.size, G)).astype(float)


def _run(stage: PromptStage, rounds: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        d = stage.draw()
        r, ln = _rewards(d.prompt_ids, rng)
        stage.update(d.prompt_ids, r, ln)
        out.append(d.prompt_ids)
    return out


def _stage(method, seed: int = 3) -> PromptStage:
    return PromptStage(method, num_prompts=N, group_size=G, prompts_per_round=B, seed=seed, prompt_tokens=TOKENS)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_same_seed_and_feedback_draw_the_same_prompts(method) -> None:
    a, b = _run(_stage(method), 25), _run(_stage(method), 25)
    assert all((x == y).all() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_a_resumed_stage_draws_what_the_uninterrupted_one_draws(method) -> None:
    whole = _stage(method)
    _run(whole, 10)
    saved = json.loads(json.dumps(whole.state_dict()))  # through JSON, as a checkpoint holds it
    resumed = _stage(method)
    resumed.load_state_dict(saved)
    rest_whole, rest_resumed = _run(whole, 10, seed=9), _run(resumed, 10, seed=9)
    assert all((x == y).all() for x, y in zip(rest_whole, rest_resumed, strict=True))


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_draw_before_update_returns_the_same_round(method) -> None:
    st = _stage(method)
    d1, d2 = st.draw(), st.draw()
    assert d1 is d2 and st.round == 0


def test_unweighted_methods_give_factor_one_and_weighted_ones_one_over_n_q() -> None:
    for m in (uniform_prompts(), cost_aware_skip(), greso()):
        st = _stage(m)
        _run(st, 5)
        assert (st.draw().factors == 1.0).all()
    # E_q[1/(N q_j)] = 1: the prompt factor is an importance weight of the uniform mean
    st = _stage(cost_aware_prompts(floor=0.2))
    _run(st, 15)
    q = cost_aware_prompts(floor=0.2).probabilities(st.state, st.round)
    d = st.draw()
    assert np.allclose(d.factors, 1.0 / (N * q[d.prompt_ids]), rtol=1e-12)


def test_skip_rules_examine_more_candidates_and_skip_all_correct_prompts_more() -> None:
    uni, skip = _stage(uniform_prompts()), _stage(greso(p_easy=0.2, p_hard=0.2))
    drawn_u, drawn_s = np.concatenate(_run(uni, 60)), np.concatenate(_run(skip, 60))
    assert uni.examined == 60 * B and skip.examined > 60 * B
    easy = N - 1  # passes almost always: zero variance, all correct
    assert (drawn_s == easy).sum() < (drawn_u == easy).sum()


def test_skip_rule_candidates_visit_every_prompt_once_per_epoch_when_nothing_is_skipped() -> None:
    st = _stage(greso(oversample=1.0))  # keeps every prompt whose last group varied; no over-sampling
    ids = []
    for _ in range(N // B * 2):
        d = st.draw()
        st.update(d.prompt_ids, np.tile([0.0, 1.0], (B, G // 2)), np.ones((B, G)))
        ids.append(d.prompt_ids)
    ids = np.concatenate(ids)
    assert sorted(ids[:N].tolist()) == list(range(N)) and sorted(ids[N:].tolist()) == list(range(N))


def test_bad_calls_name_the_argument() -> None:
    with pytest.raises(TypeError, match="method"):
        PromptStage(two_stage(), num_prompts=N, group_size=G, prompts_per_round=B)
    with pytest.raises(ValueError, match="prompts_per_round"):
        PromptStage(greso(), num_prompts=N, group_size=G, prompts_per_round=N + 1)
    st = _stage(greso())
    with pytest.raises(ValueError, match="draw"):
        st.update([0, 1, 2], np.zeros((3, G)), np.ones((3, G)))
    d = st.draw()
    with pytest.raises(ValueError, match="prompt_ids"):
        st.update(
            d.prompt_ids[::-1] + 1 if d.prompt_ids[0] != d.prompt_ids[-1] + 1 else d.prompt_ids + 1,
            np.zeros((B, G)),
            np.ones((B, G)),
        )
    with pytest.raises(ValueError, match="completion_lengths"):
        st.update(d.prompt_ids, np.zeros((B, G)), -np.ones((B, G)))
    with pytest.raises(ValueError, match="method"):
        other = _stage(uniform_prompts())
        other.load_state_dict(st.state_dict())


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_a_checkpoint_taken_after_a_draw_resumes_to_the_same_draw(method) -> None:
    st = _stage(method)
    _run(st, 7)
    drawn = st.draw()  # an engine prefetches the next round, then checkpoints
    resumed = _stage(method)
    resumed.load_state_dict(json.loads(json.dumps(st.state_dict())))
    again = resumed.draw()
    assert (again.prompt_ids == drawn.prompt_ids).all() and np.allclose(again.factors, drawn.factors)
    assert resumed.examined == st.examined


@pytest.mark.parametrize("method", [uniform_prompts(), cost_aware_prompts(floor=0.2)], ids=lambda m: m.name)
def test_a_weighted_round_is_the_cost_aware_samplers_stream(method) -> None:
    """The weighted draw keeps the stream of a CostAwareSampler seeded from the round's stream, draw for draw:
    a run's prompts do not move with how the draw is made."""
    from costaware.sampler import CostAwareSampler

    st = _stage(method)
    rng = np.random.default_rng(0)
    for _ in range(8):
        g, c, alpha = st.method.draw_inputs(st.state, st.round)
        sampler = CostAwareSampler(
            c,
            g,
            alpha=alpha,
            num_samples=B,
            weights="raw",
            seed=int(st._rng(2).integers(2**62)),
            rank=0,
            world_size=1,
            yield_weights=True,
        )
        want = np.asarray(list(sampler), dtype=np.float64).reshape(-1, 2)
        d = st.draw()
        assert (
            d.prompt_ids.tolist() == want[:, 0].astype(np.int64).tolist() and d.factors.tolist() == want[:, 1].tolist()
        )
        r, ln = _rewards(d.prompt_ids, rng)
        st.update(d.prompt_ids, r, ln)


def test_greso_in_the_stage_oversamples_and_adapts_from_its_second_epoch() -> None:
    rule = greso(step=0.1)
    st = _stage(rule)
    control = rule.initial
    for t in range(10):
        d = st.draw()
        if t == 0:  # a fresh state keeps every prompt: one candidate batch of ceil(1.5 B)
            assert d.examined == 5
        r = np.ones((B, G))  # every group all correct: zero variance, easy
        st.update(d.prompt_ids, r, np.ones((B, G)))
        control = rule.adapt(control, r, st.cursor // N)  # GRESO's epoch: the candidates' epoch
        assert st.state_dict()["control"] == asdict(control)
        if t == 0:
            assert control == rule.initial  # nothing moves in the first epoch
    assert control.p_easy < rule.initial.p_easy and rule.control == rule.initial  # the caller's rule is untouched
