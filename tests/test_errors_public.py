"""Bad inputs to the prompt stage, the KV sampler, the PODS methods, plan_round, the losses and the
theory functions: each is a ValueError naming the argument (TypeError only for a wrong container),
integers come as np.int64(2) or 2.0, huge counts are refused before they hang or allocate, and no inf
or NaN comes back where docs/index.md promises an error."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from test_fuzz import TIMEOUT_S, time_limit

from costaware import theory
from costaware.generation import SamplingParams, kv_generate
from costaware.grpo import SamplingConfig, losses, methods, plan_minibatches, proxy
from costaware.grpo.diagnostics import proxy_fidelity
from costaware.grpo.step import GlobalPool, plan_round
from costaware.rollouts import PromptState, StateConfig, fill_prompt_batch, uniform_prompts
from costaware.rollouts.analysis import AnalysisConfig, analyse
from costaware.rollouts.prompts import MAX_CALLS, MAX_PROMPTS, cost_aware_prompts
from costaware.rollouts.stage import PromptStage
from costaware.tiny import char_tokenizer, tiny_qwen2


def raises(exc: type[Exception], name: str, call) -> None:
    """``call()`` raises ``exc`` naming ``name``, within the fuzzers' time limit (no hang)."""
    with pytest.raises(exc, match=rf"(?<!\w){name}(?!\w)"), time_limit(TIMEOUT_S):
        call()


def _never(m: int) -> np.ndarray:
    return np.zeros(m, dtype=np.int64)


# -- the prompt stage ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_calls": 2**40}, "max_calls"),
        ({"max_calls": MAX_CALLS + 1}, "max_calls"),
        ({"candidates_per_call": 2**40}, "candidates_per_call"),
        ({"batch_size": 2**40}, "batch_size"),
        ({"candidates_per_call": MAX_PROMPTS, "max_calls": MAX_CALLS}, "candidates_per_call"),
        ({"max_calls": 2.5}, "max_calls"),
    ],
)
def test_fill_prompt_batch_bounds_its_loop_and_arrays(kwargs, name):
    args = {"batch_size": 1, "candidates_per_call": 1, "max_calls": 4} | kwargs
    raises(
        ValueError,
        name,
        lambda: fill_prompt_batch(_never, [0.0], args.pop("batch_size"), args.pop("candidates_per_call"), **args),
    )


def test_fill_prompt_batch_takes_integral_floats_and_numpy_counts():
    ids, seen = fill_prompt_batch(_never, [1.0], 2.0, np.int64(3), rng=0, max_calls=4.0)
    assert ids.tolist() == [0, 0] and seen == 3


@pytest.mark.parametrize("method", [uniform_prompts(), cost_aware_prompts()])
def test_prompt_stage_bounds_an_unbiased_round(method):
    raises(
        ValueError,
        "prompts_per_round",
        lambda: PromptStage(method, num_prompts=4, group_size=2, prompts_per_round=2**40).draw(),
    )
    raises(
        ValueError,
        "max_candidate_batches",
        lambda: PromptStage(method, num_prompts=4, group_size=2, prompts_per_round=2, max_candidate_batches=2**40),
    )


def test_prompt_stage_refuses_a_group_of_one_at_construction():
    # cost_aware_prompts used to accept it and fail inside draw(): one completion has no advantage
    raises(
        ValueError,
        "group_size",
        lambda: PromptStage(cost_aware_prompts(), num_prompts=4, group_size=1, prompts_per_round=2),
    )
    stage = PromptStage(cost_aware_prompts(), num_prompts=4, group_size=2.0, prompts_per_round=np.int64(2))
    assert stage.draw().prompt_ids.size == 2


def test_analysis_config_bounds_size_bins_and_takes_integral_floats():
    raises(ValueError, "size_bins", lambda: AnalysisConfig(size_bins=2**40))
    raises(ValueError, "size_bins", lambda: AnalysisConfig(size_bins=2.5))
    raises(ValueError, "first", lambda: AnalysisConfig(first=(1, 0)))
    cfg = AnalysisConfig(size_bins=2.0, first=(np.int64(1), 2.0))
    assert cfg.size_bins == 2 and cfg.first == (1, 2) and type(cfg.size_bins) is int


@pytest.mark.parametrize("records", [[1, 2, 3], None, "logs.jsonl", {"a": 1}])
def test_analyse_names_records_of_the_wrong_type(records):
    raises(TypeError, "records", lambda: analyse(records))


@pytest.mark.parametrize(
    "key, value",
    [
        ("successes", float("nan")),
        ("failures", -1.0),
        ("length_sum", float("inf")),
        ("length_weight", float("nan")),
        ("last_round", float("nan")),
        ("last_round", -2),
        ("status", 7),
        ("status", float("nan")),
        ("zero_streak", 1.5),
        ("prompt_tokens", -3.0),
    ],
)
def test_prompt_state_refuses_impossible_saved_values(key, value):
    state = PromptState(StateConfig(group_size=2), 2)
    state.update([0, 1], [[1, 0], [1, 1]], [[3, 4], [5, 6]], round=0)
    saved = state.state_dict()
    saved[key] = [value, saved[key][1]]
    raises(ValueError, rf"state\['{key}'\]", lambda: PromptState.from_state_dict(saved))


def test_prompt_state_round_trip_keeps_unknown_prompt_lengths():
    state = PromptState(StateConfig(group_size=2), 2)
    state.update([0], [[1, 0]], [[3, 4]], round=0)
    back = PromptState.from_state_dict(state.state_dict())
    assert np.isnan(back.prompt_tokens).all() and back.successes.tolist() == state.successes.tolist()


# -- the KV sampler --------------------------------------------------------------------------------

_TOK = char_tokenizer("abc")
_MODEL = tiny_qwen2(_TOK, hidden_size=16, num_layers=1)
_VOCAB = _MODEL.get_input_embeddings().weight.shape[0]


def _generate(prompts=((4, 5),), **kwargs):
    args = {
        "max_new_tokens": 3,
        "eos_token_ids": _TOK.eos_token_id,
        "pad_token_id": _TOK.pad_token_id,
        "generator": torch.Generator().manual_seed(0),
    } | kwargs
    return kv_generate(_MODEL, prompts, **args)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_new_tokens": np.int64(3)},
        {"max_new_tokens": 3.0},
        {"pad_token_id": np.int64(_TOK.pad_token_id)},
        {"pad_token_id": float(_TOK.pad_token_id)},
        {"eos_token_ids": np.int64(_TOK.eos_token_id)},
        {"eos_token_ids": np.array([_TOK.eos_token_id])},
        {"prompts": torch.tensor([[4, 5]])},
        {"prompts": np.array([[4, 5]])},
        {"prompts": [torch.tensor([4, 5])]},
        {"prompts": [[4.0, 5.0]]},
    ],
)
def test_kv_generate_takes_numpy_and_integral_inputs_as_the_plain_ones(kwargs):
    assert _generate(**kwargs).sequences.tolist() == _generate().sequences.tolist()


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"max_new_tokens": 10**30}, ValueError, "max_new_tokens"),
        ({"max_new_tokens": 2**40}, ValueError, "max_new_tokens"),
        ({"max_new_tokens": 2.5}, ValueError, "max_new_tokens"),
        ({"pad_token_id": 10**6}, ValueError, "pad_token_id"),
        ({"pad_token_id": -1}, ValueError, "pad_token_id"),
        ({"eos_token_ids": [10**6]}, ValueError, "eos_token_ids"),
        ({"eos_token_ids": []}, ValueError, "eos_token_ids"),
        ({"prompts": [[1.5, 2.7]]}, ValueError, "prompts"),
        ({"prompts": [[float("nan")]]}, ValueError, "prompts"),
        ({"prompts": [[4, 10**6]]}, ValueError, "prompts"),
        ({"prompts": [[]]}, ValueError, "prompts"),
        ({"prompts": None}, TypeError, "prompts"),
        ({"prompts": "ab"}, TypeError, "prompts"),
        ({"params": {"top_k": 2}}, TypeError, "params"),
    ],
)
def test_kv_generate_names_the_bad_argument(kwargs, exc, name):
    raises(exc, name, lambda: _generate(**kwargs))


def test_sampling_params_take_numpy_numbers():
    p = SamplingParams(temperature=np.float32(0.5), top_k=np.int64(2), top_p=np.float64(0.9))
    assert (p.temperature, p.top_k, p.top_p) == (0.5, 2, pytest.approx(0.9)) and type(p.top_k) is int
    assert SamplingParams(top_k=2.0).top_k == 2
    raises(ValueError, "top_k", lambda: SamplingParams(top_k=2.5))
    raises(ValueError, "temperature", lambda: SamplingParams(temperature=float("nan")))


# -- the GRPO methods, plan_round and the losses ---------------------------------------------------


@pytest.mark.parametrize("factory", [methods.pods, methods.cost_pods])
def test_pods_keep_follows_the_integer_rule(factory):
    assert factory(keep=2.0).keep == factory(keep=np.int64(2)).keep == factory(keep=2).keep == 2
    raises(ValueError, "keep", lambda: factory(keep=2.5))
    raises(ValueError, "keep", lambda: factory(keep=True))


@pytest.mark.parametrize("method", ["pods", "cost_pods"])
def test_pods_plans_take_an_integral_float_group_size(method):
    adv, costs, rewards = [1.0, -1.0, 0.5, -0.5], [3.0, 4.0, 5.0, 6.0], [1.0, 0.0, 1.0, 0.0]

    def plan(g):
        return plan_minibatches(
            adv,
            costs,
            num_minibatches=1,
            config=SamplingConfig(method),
            rewards=rewards,
            group_size=g,
            generator=torch.Generator().manual_seed(0),
        )

    want = plan(2)
    for g in (2.0, np.int64(2)):
        got = plan(g)
        assert [m.indices.tolist() for m in got.minibatches] == [m.indices.tolist() for m in want.minibatches]
    raises(ValueError, "group_size", lambda: plan(2.5))
    raises(ValueError, "group_size", lambda: plan(3))


def test_p_smooth_takes_a_numpy_alpha():
    assert methods.p_smooth(alpha=np.float32(0.5)).alpha == 0.5
    assert methods.p_smooth(alpha=np.float64(0.25), adaptive_max_weight=np.float32(4.0)).adaptive_max_weight == 4.0
    raises(ValueError, "alpha", lambda: methods.p_smooth(alpha=np.float32(1.5)))


_POOL = GlobalPool(advantages=[1.0, -1.0, 0.5, 0.0], costs=[3.0, 4.0, 5.0, 6.0], lengths=[3.0, 4.0, 5.0, 6.0])


def _round(**kwargs):
    args = {"seed": 0, "step": 3, "family": "row_mean", "num_steps": 2} | kwargs
    config = args.pop("config", SamplingConfig("p_star"))
    return plan_round(_POOL, config, **args)


def test_plan_round_takes_integral_floats_and_names_step_and_seed():
    want = _round()
    got = _round(step=3.0, seed=np.int64(0))
    assert got.seed == want.seed and [s.shard.global_rows.tolist() for s in got.steps[0]] == [
        s.shard.global_rows.tolist() for s in want.steps[0]
    ]
    raises(ValueError, "step", lambda: _round(step=2.5))
    raises(ValueError, "step", lambda: _round(step=-1))
    raises(ValueError, "seed", lambda: _round(seed=float("nan")))
    raises(TypeError, "config", lambda: _round(config=None))
    raises(TypeError, "config", lambda: _round(config="p_star"))


_LP = torch.zeros(2, 3, dtype=torch.float32)


@pytest.mark.parametrize("loss", [losses.grpo_token_loss, losses.cispo_token_loss])
def test_a_huge_clip_high_is_no_clip(loss):
    logp = torch.tensor([[0.0, 0.5, 3.0], [-1.0, 0.0, 25.0]])
    adv = torch.tensor([1.0, -2.0])
    huge = loss(logp, _LP, adv, 0.2, 1e300)
    assert torch.isfinite(huge).all()
    assert torch.equal(huge, loss(logp, _LP, adv, 0.2, 1e9))  # ρ ≤ e^20 < 1e9: neither bound binds
    raises(ValueError, "clip_high", lambda: loss(logp, _LP, adv, 0.2, float("inf")))


# -- theory: a result beyond float64 is an error, the documented +inf only where p misses a row -----


def test_suboptimality_of_an_underflowed_cost_biased_mass_is_finite_or_an_error():
    # p_proxy·c = 1e-330 underflows to 0 in p̃', but p_proxy does not miss the row
    assert theory.suboptimality([1e-300, 1 - 1e-300], [1e-300, 1.0], [1e-30, 1.0]) == pytest.approx(1.0)
    assert theory.suboptimality([1e-300, 1 - 1e-300], [1.0, 1.0], [1e-30, 1.0]) == pytest.approx(1e300, rel=1e-9)
    raises(ValueError, "suboptimality", lambda: theory.suboptimality([1e-320, 1.0], [1.0, 1.0], [1e-30, 1.0]))
    assert theory.suboptimality([0.0, 1.0], [1.0, 1.0], [1.0, 1.0]) == float("inf")  # documented: p misses a row


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.S([1e-300, 1.0], [1e10, 1.0]),
        lambda: theory.J([1e-300, 1.0], [1e10, 1.0], [1.0, 1.0]),
        lambda: theory.expected_cost(0.1, [1e-300, 1.0], [1e10, 1.0], [1.0, 1.0], D=1.0),
        lambda: theory.chi2_divergence([0.5, 0.5], [5e-324, 1.0]),
        lambda: proxy.predicted_j_ratios([1e-310, 1.0], [0.5, 1.0], [1.0, 1.0]),
    ],
)
def test_a_result_beyond_float64_is_a_value_error(call):
    raises(ValueError, "overflows", call)


def test_tiny_but_representable_results_stay_finite():
    assert theory.S([1e-300, 1.0], [1.0, 1.0]) == pytest.approx(2.5e299)
    assert theory.chi2_divergence([0.5, 0.5], [1e-300, 1.0]) == pytest.approx(2.5e299)
    out = proxy.predicted_j_ratios([1e-300, 1.0], [1.0, 1.0], [1.0, 1.0])
    assert all(np.isfinite(v) for v in out.values())
    assert proxy.predicted_j_ratios([0.0, 1.0], [1.0, 1.0], [1.0, 1.0])["j_vs_optimal"] == float("inf")


def test_proxy_fidelity_reports_an_undefined_pearson_as_nan_and_the_rest_finite():
    # documented: the correlation of a constant |A| is undefined (theory.pearson raises for it); the
    # diagnostic still reports χ² and the J ratios, which are defined
    out = proxy_fidelity([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], [5, 5, 9])
    assert np.isnan(out["pearson"]) and all(np.isfinite(out[k]) for k in ("chi2", "j_ratio", "j_vs_uniform"))
    raises(ValueError, "x", lambda: theory.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


# -- the CLI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("job, suffix", [("rollouts", ".jsonl"), ("eval", ".csv"), ("eval", ".json")])
def test_cli_error_for_a_binary_file_names_the_file(tmp_path, job, suffix):
    path = tmp_path / f"data{suffix}"
    path.write_bytes(bytes(range(128, 256)) * 4)
    args = (
        ["rollouts", "analyse", str(path)]
        if job == "rollouts"
        else [
            "eval",
            "--responses",
            str(path.with_suffix(".jsonl")),
            "--benchmark",
            "gsm8k",
            "--data",
            str(path),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    if job == "eval":
        path.with_suffix(".jsonl").write_text("")
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from costaware.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"costaware {job}: error: {path}") and "UTF-8" in lines[0]
