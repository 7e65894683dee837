"""Fuzz of every public callable, the list derived from each public package's ``__all__``.

:data:`PACKAGES` are the public packages; every callable their ``__all__`` exports must have an entry:

* ``FUZZ`` here (hypothesis strategies, run under the rule of tests/test_fuzz.py: a per-call time
  limit, ValueError/TypeError only, naming an argument, no NaN or ±inf returned),
* ``ELSEWHERE``: the fuzz case in tests/test_fuzz.py or tests/test_fuzz_grpo.py that covers it,
* ``RECORDS``: a typed record the API returns (a dataclass, checked to be one), or ``TYPES``: a type
  alias, enum, protocol or abstract base (checked to be one), which takes no arguments to check,
* ``KERNELS``: a kernel on checked inputs (compiled, or named ``*_kernel``), whose public edge is named.

So the next callable added to an ``__all__`` fails :func:`test_every_public_callable_has_a_fuzz_entry`
until it gets one.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import tempfile
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import CASES as CORE_CASES
from test_fuzz import EXAMPLES, _vector, check_call, floats, int_scalar, moderate, rng, scalar, vector
from test_fuzz_grpo import CASES as GRPO_CASES
from test_fuzz_grpo import count, real, tensor2d

import costaware.rollouts as ro
from costaware import sampler
from costaware import sgd as sgd_pkg
from costaware.generation import SamplingParams, kv_generate, process_logits
from costaware.grpo import (
    cost_pods_select,
    fill_batch,
    method_from_name,
    nonzero_variance_groups,
    pods_select,
)
from costaware.grpo.diagnostics import per_sequence_grad_norms
from costaware.rollouts.analysis import AnalysisConfig, analyse
from costaware.rollouts.stage import PromptStage
from costaware.tiny import char_tokenizer, tiny_qwen2

PACKAGES = (
    "costaware",
    "costaware.distributions",
    "costaware.theory",
    "costaware.alias",
    "costaware.subset",
    "costaware.sampler",
    "costaware.grpo",
    "costaware.rollouts",
    "costaware.generation",
    "costaware.sgd",
)


def public_callables() -> dict[str, object]:
    """``{"package.name": object}`` for every callable in a public package's ``__all__`` (modules skipped)."""
    out = {}
    for pkg in PACKAGES:
        module = importlib.import_module(pkg)
        for name in module.__all__:
            obj = getattr(module, name)
            if not inspect.ismodule(obj) and (callable(obj) or typing.get_origin(obj) is not None):
                out[f"{pkg}.{name}"] = obj
    return out


# -- strategies ------------------------------------------------------------------------------------

std = st.sampled_from(["sample", "population", "x", None, 1])
po_rows = st.sampled_from(["all", "nonzero", "x", None])
unit = st.one_of(st.sampled_from([0.0, 0.05, 0.3, 0.5, 0.95, 1.0]), real)
rewards01 = st.one_of(
    _vector(st.sampled_from([0.0, 1.0]), 4, 4), _vector(st.sampled_from([0.0, 1.0, 0.5, -1.0, 2.0]), 1, 6), vector
)
matrix01 = st.one_of(
    st.lists(_vector(st.sampled_from([0.0, 1.0]), 2, 2), min_size=1, max_size=3),
    st.sampled_from([[[1.0, float("nan")]], [[2.0, 0.0]], [[1, 0], [1]], None, "ab", [[]]]),
    vector,
)
lengths2 = st.one_of(
    st.lists(_vector(st.sampled_from([0, 3, 7.0]), 2, 2), min_size=1, max_size=3),
    st.sampled_from([[[-1, 2]], [[1.5, float("inf")]], None]),
)
huge = st.sampled_from([2**40, 10**30, 1e300, float("inf"), -1, 0, 2.5, True, None, "3", 2.0, np.int64(3)])
small_count = st.one_of(st.integers(1, 6), st.integers(1, 4).map(np.int64), huge)

_DIR = Path(tempfile.mkdtemp(prefix="costaware-fuzz-"))
_LOGS = {
    "good": '{"round": 0, "prompt_id": 1, "rewards": [1, 0], "completion_lengths": [3, 4]}\n',
    "nan": '{"round": 0, "prompt_id": 1, "rewards": [NaN, 0], "completion_lengths": [3, 4]}\n',
    "ragged": '{"round": 0, "prompt_id": 1, "rewards": [1], "completion_lengths": [3, 4]}\n',
    "huge": '{"round": 1e300, "prompt_id": 1, "rewards": [1, 0], "completion_lengths": [3, 4]}\n',
    "list": "[1, 2]\n",
    "text": "not json\n",
}
for _k, _v in _LOGS.items():
    (_DIR / f"{_k}.jsonl").write_text(_v)
(_DIR / "binary.jsonl").write_bytes(bytes(range(128, 256)))
log_paths = st.one_of(
    st.lists(
        st.sampled_from([str(_DIR / f"{k}.jsonl") for k in [*_LOGS, "binary"]] + [str(_DIR / "missing.jsonl")]),
        min_size=1,
        max_size=2,
    ),
    st.sampled_from([None, 3, str(_DIR / "good.jsonl"), {"a": 1}]),
)
record = st.builds(ro.PromptRound, st.integers(0, 3), st.integers(0, 3), st.just((1.0, 0.0)), st.just((3, 4)))
records = st.one_of(st.lists(record, min_size=1, max_size=4), st.sampled_from([None, [1, 2], "x", [], {1: 2}]))

_TOK = char_tokenizer("abc")
_MODEL = tiny_qwen2(_TOK, hidden_size=16, num_layers=1)
token_rows = st.one_of(
    st.lists(_vector(st.integers(0, 6), 1, 3), min_size=1, max_size=3),
    st.lists(_vector(st.integers(0, 6), 2, 2), min_size=1, max_size=2).map(torch.tensor),
    st.sampled_from(
        [
            [[1.5, 2.0]],
            [[float("nan")]],
            [[-1]],
            [[10**6]],
            [[]],
            [],
            None,
            "ab",
            [[True]],
            [1, 2],
            {1: [2]},
            np.zeros((1, 2, 2)),
        ]
    ),
)
token_count = st.one_of(st.integers(1, 4), st.integers(1, 4).map(np.int64), st.sampled_from([2.0, 4.0]), huge)
token_id = st.one_of(
    st.integers(0, 6),
    st.sampled_from([np.int64(1), 2.0, [1, 2], np.array([2]), [], -1, 10**6, 1.5, None, "1", float("nan")]),
)
params = st.one_of(
    st.none(),
    st.builds(SamplingParams, st.sampled_from([0.0, 0.7, 1.0]), st.sampled_from([0, 2]), st.sampled_from([0.9, 1.0])),
    st.sampled_from([{"top_k": 1}, "greedy"]),
)


def _session(method, n, g, b, seed, rewards, lengths):
    """A prompt stage run for two rounds on drawn rewards (the engines' two calls, and a resume)."""
    stage = PromptStage(method, num_prompts=n, group_size=g, prompts_per_round=b, seed=seed)
    for _ in range(2):
        d = stage.draw()
        k = d.prompt_ids.size
        shape = (k, stage.state.config.group_size)
        stage.update(d.prompt_ids, np.full(shape, rewards), np.full(shape, lengths))
    stage.load_state_dict(stage.state_dict())
    return d.factors


def _state_session(g, n, tokens, ids, rewards, lengths, rnd):
    state = ro.PromptState(ro.StateConfig(group_size=g), n, tokens)
    state.update(ids, rewards, lengths, round=rnd)
    return ro.PromptState.from_state_dict(state.state_dict()).successes


def _fill(keep, b, m, r, calls):
    return ro.fill_prompt_batch(lambda k: np.arange(k) % 3, keep, b, m, rng=r, max_calls=calls)


def _fill_batch(target, g, rounds, per_round, pattern):
    def generate(k):
        rows = k * 2
        return {"x": torch.arange(rows)}, torch.tensor(np.resize(pattern, rows), dtype=torch.float64)

    return fill_batch(generate, target, g, rounds, groups_per_round=per_round).report.groups_kept


def _grad_norms(x, method):
    model = torch.nn.Linear(3, 1, dtype=torch.float64)
    return per_sequence_grad_norms(model, lambda mdl, rows: (mdl(rows["x"]) ** 2).sum(), {"x": x}, method=method)


def _generate(prompts, new, eos, pad, p):
    out = kv_generate(
        _MODEL,
        prompts,
        max_new_tokens=new,
        eos_token_ids=eos,
        pad_token_id=pad,
        params=p,
        generator=torch.Generator().manual_seed(0),
    )
    return out.sequences


def _no_filtered(scores: torch.Tensor) -> torch.Tensor:
    """A filtered token's score is -inf by design (documented); anything else must be finite."""
    return torch.where(scores == float("-inf"), 0.0, scores)


def _analyse(recs, bins, gen_cost):
    return analyse(recs, AnalysisConfig(size_bins=bins, generation_cost=gen_cost)).row_level.overall


# key: the public name; value: (call, strategies, the argument names a message may give)
FUZZ: dict[str, tuple] = {
    "costaware.rollouts.abs_adv_sum": (
        lambda k, g, s, e: ro.abs_adv_sum(k, g, std=s, eps=e),
        (vector, count, std, real),
        ["k", "group_size", "std", "eps"],
    ),
    "costaware.rollouts.expected_abs_adv_sum": (
        lambda p, g, s, e, m: ro.expected_abs_adv_sum(p, g, std=s, eps=e, moment=m),
        (vector, count, std, real, st.one_of(st.sampled_from([1, 2]), count)),
        ["pass_rate", "group_size", "std", "eps", "moment"],
    ),
    "costaware.rollouts.predictive_abs_adv_sum": (
        lambda a, b, g, f, fc, m: ro.predictive_abs_adv_sum(a, b, g, first=f, first_correct=fc, moment=m),
        (
            vector,
            vector,
            count,
            st.one_of(st.integers(0, 3), count),
            st.one_of(st.integers(0, 2), vector),
            st.one_of(st.sampled_from([1, 2]), count),
        ),
        ["a", "b", "group_size", "first", "first_correct", "moment"],
    ),
    "costaware.rollouts.row_abs_advantages": (
        lambda r, s, e: ro.row_abs_advantages(r, std=s, eps=e),
        (matrix01, std, real),
        ["rewards", "std", "eps"],
    ),
    "costaware.rollouts.PromptRound": (
        ro.PromptRound,
        (
            int_scalar,
            int_scalar,
            st.one_of(st.just((1.0, 0.0)), vector),
            st.one_of(st.just((3, 4)), vector),
            int_scalar,
        ),
        ["round", "prompt_id", "rewards", "completion_lengths", "prompt_tokens"],
    ),
    "costaware.rollouts.RecordingReward": (
        lambda g, path: ro.RecordingReward(lambda **kw: [1.0], path, g).group_size,
        (count, st.sampled_from([str(_DIR / "rec.jsonl"), _DIR / "rec2.jsonl", None, 3])),
        ["reward_fn", "path", "group_size"],
    ),
    "costaware.rollouts.read_prompt_rounds": (
        lambda paths: len(ro.read_prompt_rounds(paths)),
        (log_paths,),
        ["paths", "record", "round", "prompt_id", "rewards", "completion_lengths", "jsonl"],
    ),
    "costaware.rollouts.write_prompt_rounds": (
        lambda recs, append: ro.write_prompt_rounds(_DIR / "out.jsonl", recs, append=append),
        (records, st.sampled_from([True, False, 1, None])),
        ["path", "records", "append"],
    ),
    "costaware.rollouts.CostModel": (ro.CostModel, (real, po_rows), ["generation_cost", "po_rows"]),
    "costaware.rollouts.GresoControl": (ro.GresoControl, (unit, unit), ["p_easy", "p_hard"]),
    "costaware.rollouts.cost_aware_prompts": (
        ro.cost_aware_prompts,
        (unit, real, po_rows),
        ["floor", "generation_cost", "po_rows"],
    ),
    "costaware.rollouts.cost_aware_skip": (
        ro.cost_aware_skip,
        (unit, unit, real, po_rows),
        ["min_keep", "reference", "generation_cost", "po_rows"],
    ),
    "costaware.rollouts.fill_prompt_batch": (
        _fill,
        (st.one_of(_vector(st.sampled_from([0.0, 0.5, 1.0]), 3, 3), vector), count, count, rng, count),
        ["keep_probability", "batch_size", "candidates_per_call", "rng", "max_calls", "prompt_ids"],
    ),
    "costaware.rollouts.greso": (
        lambda t, e, s, pe, ph, o: ro.greso(t, e, s, pe, ph, o),
        (unit, unit, unit, unit, unit, st.one_of(st.sampled_from([1.0, 1.5]), real)),
        ["target", "easy_split", "step", "p_easy", "p_hard", "oversample", "min_p", "max_p"],
    ),
    "costaware.rollouts.two_stage": (
        ro.two_stage,
        (small_count, unit, real, po_rows),
        ["first", "floor", "generation_cost", "po_rows"],
    ),
    "costaware.rollouts.uniform_prompts": (lambda: ro.uniform_prompts().name, (), []),
    "costaware.rollouts.prompt_method_from_name": (
        lambda name, opts: ro.prompt_method_from_name(name, **opts).name,
        (
            st.sampled_from(["uniform", "greso", "cost_aware_skip", "cost_aware", "two_stage", "x", None, 3]),
            st.sampled_from(
                [
                    {},
                    {"floor": 0.2},
                    {"floor": np.float32(0.2)},
                    {"floor": float("nan")},
                    {"p_easy": 0.0},
                    {"target": 2.0},
                    {"min_keep": 0.1},
                    {"generation_cost": -1.0},
                    {"po_rows": 2**70},
                    {"zzz": 1},
                ]
            ),
        ),
        ["method", "options", "floor", "p_easy", "target", "min_keep", "generation_cost", "po_rows"],
    ),
    "costaware.rollouts.PromptState": (
        _state_session,
        (
            small_count,
            small_count,
            st.one_of(st.none(), vector),
            st.one_of(st.just([0]), vector),
            matrix01,
            lengths2,
            int_scalar,
        ),
        ["group_size", "num_prompts", "prompt_tokens", "prompt_ids", "rewards", "completion_lengths", "round"],
    ),
    "costaware.rollouts.StateConfig": (
        lambda g, p, s, d, lp, lw, sd, e: ro.StateConfig(g, p, s, d, lp, lw, sd, e),
        (small_count, unit, real, unit, st.one_of(st.none(), real), real, std, real),
        [
            "group_size",
            "prior_pass_rate",
            "prior_strength",
            "decay",
            "length_prior",
            "length_prior_weight",
            "std",
            "eps",
        ],
    ),
    "costaware.grpo.cost_pods_select": (
        lambda r, c, g, k: cost_pods_select(r, c, g, k),
        (rewards01, st.one_of(_vector(st.sampled_from([1.0, 3.0, 1e19]), 4, 4), vector), small_count, small_count),
        ["rewards", "costs", "group_size", "keep"],
    ),
    "costaware.grpo.pods_select": (
        lambda r, g, k: pods_select(r, g, k),
        (rewards01, small_count, small_count),
        ["rewards", "group_size", "keep"],
    ),
    "costaware.grpo.nonzero_variance_groups": (
        nonzero_variance_groups,
        (rewards01, small_count),
        ["rewards", "group_size"],
    ),
    "costaware.grpo.method_from_name": (
        lambda name, opts: method_from_name(name, **opts).name,
        (
            st.sampled_from(["p_star", "p_smooth", "pods", "cost_pods", "nonzero", "x", None, 3]),
            st.sampled_from(
                [
                    {},
                    {"alpha": 0.5},
                    {"alpha": np.float32(0.5)},
                    {"keep": 2.0},
                    {"keep": 2.5},
                    {"alpha": float("nan")},
                    {"beta": 1.0},
                    {"keep": 2**70},
                ]
            ),
        ),
        ["name", "method", "options", "alpha", "keep", "adaptive_max_weight"],
    ),
    "costaware.grpo.fill_batch": (
        _fill_batch,
        (
            small_count,
            st.one_of(st.just(2), small_count),
            small_count,
            st.one_of(st.none(), small_count),
            st.sampled_from([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0, 1.0, 0.0]]),
        ),
        ["target_groups", "group_size", "max_rounds", "groups_per_round", "generate", "rewards"],
    ),
    "costaware.grpo.per_sequence_grad_norms": (
        # the rows go to the caller's model, which takes float64 rows of 3 features (another dtype is its error)
        _grad_norms,
        (
            st.one_of(
                _vector(_vector(st.one_of(moderate, floats), 3, 3), 1, 3).map(
                    lambda m: torch.tensor(m, dtype=torch.float64)
                ),
                st.sampled_from([torch.zeros(0, 3, dtype=torch.float64)]),
            ),
            st.sampled_from(["loop", "vmap", "x", None]),
        ),
        ["model", "loss_fn", "rows", "method"],
    ),
    "costaware.generation.SamplingParams": (
        lambda t, k, p: SamplingParams(t, k, p),
        (scalar, st.one_of(st.none(), int_scalar), st.one_of(st.none(), scalar)),
        ["temperature", "top_k", "top_p"],
    ),
    "costaware.generation.process_logits": (
        lambda lg, p: _no_filtered(process_logits(lg, p)),
        (
            st.one_of(_vector(_vector(moderate, 3, 3), 1, 2).map(torch.tensor), tensor2d),
            st.builds(
                SamplingParams,
                st.sampled_from([0.5, 1.0, 2.0]),
                st.sampled_from([0, 1, 2]),
                st.sampled_from([0.5, 1.0]),
            ),
        ),
        ["logits", "params"],
    ),
    "costaware.generation.kv_generate": (
        _generate,
        (token_rows, token_count, token_id, token_id, params),
        ["prompts", "max_new_tokens", "eos_token_ids", "pad_token_id", "params"],
    ),
    "costaware.sgd.LeastSquares": (
        lambda a, b, c, r: sgd_pkg.LeastSquares(a, b, c, r).n,
        (
            st.one_of(st.just(np.eye(3)), st.sampled_from([np.ones(3), [[1.0, float("nan")], [0, 1]], None, "A"])),
            st.one_of(st.just(np.ones(3)), vector),
            st.one_of(st.none(), vector),
            st.one_of(st.none(), real),
        ),
        ["A", "b", "c", "radius"],
    ),
    "costaware.sgd.LogisticRegression": (
        lambda a, y, c, r: sgd_pkg.LogisticRegression(a, y, c, r).n,
        (
            st.one_of(st.just(np.eye(3)), st.sampled_from([np.ones(3), [[1.0, float("inf")], [0, 1]], None])),
            st.one_of(st.just([1.0, -1.0, 1.0]), vector),
            st.one_of(st.none(), vector),
            real,
        ),
        ["A", "y", "c", "radius"],
    ),
    "costaware.sgd.runner_indices": (
        sgd_pkg.runner_indices,
        (st.one_of(st.just([0.2, 0.8]), vector), count, count, count),
        ["p", "steps", "seed", "trial"],
    ),
    "costaware.sampler.WeightedIndexDataset": (
        lambda ds, key: sampler.WeightedIndexDataset(ds)[key][1],
        (
            st.sampled_from([[10, 11, 12], np.arange(3), None, 3, "abc"]),
            st.sampled_from([0, 1, (1, 0.5), (2, 2.0), np.int64(1)]),
        ),
        ["dataset", "key", "index", "weight"],
    ),
}

# not derived from a package's __all__ (they live in its submodules), fuzzed here as well
EXTRA = {
    "costaware.rollouts.stage.PromptStage": (
        _session,
        (
            st.sampled_from([ro.uniform_prompts(), ro.cost_aware_prompts(), ro.greso(), ro.cost_aware_skip()]),
            small_count,
            st.one_of(st.just(2), small_count),
            small_count,
            st.one_of(st.just(0), int_scalar),
            st.one_of(st.sampled_from([0.0, 1.0]), scalar),
            st.one_of(st.just(3), scalar, count),
        ),
        [
            "method",
            "num_prompts",
            "group_size",
            "prompts_per_round",
            "seed",
            "rewards",
            "completion_lengths",
            "prompt_ids",
        ],
    ),
    "costaware.rollouts.analysis.analyse": (
        _analyse,
        (records, small_count, real),
        ["records", "config", "size_bins", "generation_cost"],
    ),
}

ELSEWHERE = {  # public name -> (the registry or module holding its case, the case's key)
    **{
        f"costaware.{n}": (CORE_CASES, n)
        for n in [
            "importance_weights",
            "inverse_sqrt_cost",
            "noisy_proxy",
            "optimal",
            "smoothed",
            "uniform",
            "variance",
        ]
    },
    **{
        f"costaware.distributions.{n}": (CORE_CASES, n)
        for n in [
            "uniform",
            "variance",
            "optimal",
            "smoothed",
            "inverse_sqrt_cost",
            "noisy_proxy",
            "support_size",
            "importance_weights",
        ]
    },
    **{
        f"costaware.theory.{n}": (CORE_CASES, n)
        for n in [
            "S",
            "C",
            "J",
            "J_optimal",
            "expected_cost",
            "ratio_optimal_to_uniform",
            "ratio_optimal_to_variance",
            "ratio_variance_to_uniform",
            "cost_biased",
            "suboptimality",
            "pearson",
            "noise_variance_from_pearson",
            "expected_suboptimality_noisy",
            "expected_suboptimality_pearson",
            "lower_bound",
        ]
    },
    "costaware.theory.chi2_divergence": (CORE_CASES, "chi2_divergence"),
    **{f"costaware.alias.{n}": (CORE_CASES, n) for n in ["build_alias", "draw", "alias_probabilities", "AliasTable"]},
    **{
        f"costaware.subset.{n}": (CORE_CASES, n)
        for n in [
            "required_mass",
            "greedy_subset",
            "exact_subset",
            "subset_cost",
            "bias",
            "biased_cost",
            "restricted_optimal",
        ]
    },
    "costaware.sampler.CostAwareSampler": (
        "test_fuzz",
        "test_sampler_session_returns_finite_or_raises_naming_an_argument",
    ),
    **{
        f"costaware.grpo.{n}": (GRPO_CASES, n)
        for n in [
            "SamplingConfig",
            "StepCounts",
            "aggregate",
            "cispo_token_loss",
            "global_tokens",
            "grpo_token_loss",
            "importance_ratio",
            "plan_seed",
            "proxy_fidelity",
            "row_factors",
            "shard_minibatches",
            "step_normalisers",
        ]
    },
    **{
        f"costaware.grpo.{n}": (CORE_CASES, n)
        for n in ["group_advantages", "sequence_costs", "sequence_costs_from_masks"]
    },
    "costaware.grpo.plan_minibatches": (
        "test_fuzz",
        "test_plan_minibatches_returns_finite_or_raises_naming_an_argument",
    ),
    "costaware.sgd.log_checkpoints": (GRPO_CASES, "log_checkpoints"),
    **{
        f"costaware.sgd.{n}": ("test_fuzz_grpo", "test_fuzz_sgd_schedule_and_runs")
        for n in ["cost_aware_sgd", "run_trials", "step_schedule"]
    },
}

RECORDS = {  # what the API returns; built by it, not by a caller
    "costaware.grpo.Counters",
    "costaware.grpo.FillReport",
    "costaware.grpo.FillResult",
    "costaware.grpo.MiniBatch",
    "costaware.grpo.Plan",
    "costaware.grpo.ShardStep",
    "costaware.grpo.StepNormaliser",
    "costaware.generation.Rollout",
    "costaware.sgd.SGDResult",
    "costaware.sgd.StepRule",
    "costaware.sgd.TrialCurves",
    "costaware.theory.LowerBound",
}
TYPES = {  # annotations and bases: nothing to call with data
    "costaware.distributions.WeightMode",
    "costaware.sgd.StepSize",
    "costaware.sgd.FiniteSum",
    "costaware.sgd.Loss",
    "costaware.grpo.SamplingMethod",
    "costaware.rollouts.PromptMethod",
}
KERNELS = {  # kernels on checked inputs (numba, or named *_kernel) -> their public edge, fuzzed in tests/test_fuzz.py
    "costaware.alias.alias_draw": "draw",
    "costaware.alias.alias_draw_single": "draw",
    "costaware.alias.build_alias_kernel": "build_alias",
    "costaware.distributions.importance_weights_kernel": "importance_weights",
    "costaware.distributions.inverse_sqrt_cost_kernel": "inverse_sqrt_cost",
    "costaware.distributions.optimal_kernel": "optimal",
    "costaware.distributions.ratio_normalise_kernel": "optimal",
    "costaware.distributions.smoothed_kernel": "smoothed",
    "costaware.distributions.variance_kernel": "variance",
}


def test_every_public_callable_has_a_fuzz_entry():
    found = public_callables()
    assert len(found) > 100  # the derivation sees the packages (a broken import would empty it)
    entries = set(FUZZ) | set(ELSEWHERE) | RECORDS | TYPES | set(KERNELS)
    missing = sorted(set(found) - entries)
    assert not missing, f"public callables with no fuzz entry (add one to tests/test_fuzz_public.py): {missing}"
    stale = sorted(entries - set(found))
    assert not stale, f"fuzz entries for names no package exports: {stale}"


def test_the_entries_are_what_they_claim():
    found = public_callables()
    for name, (where, key) in ELSEWHERE.items():
        if isinstance(where, dict):
            assert key in where, f"{name}: no case {key!r}"
        else:
            assert callable(getattr(importlib.import_module(where), key)), f"{name}: no test {where}::{key}"
    for name in RECORDS:
        assert dataclasses.is_dataclass(found[name]), f"{name} is not a record"
    for name in TYPES:
        obj = found[name]
        assert (
            typing.get_origin(obj) is not None
            or (isinstance(obj, type) and issubclass(obj, enum.Enum))
            or getattr(obj, "_is_protocol", False)
            or inspect.isabstract(obj)
            or getattr(obj, "__abstractmethods__", None) is not None
        ), f"{name} is not a type-only object"
    for name, edge in KERNELS.items():
        compiled = hasattr(found[name], "py_func")
        assert edge in CORE_CASES and (compiled or name.endswith("_kernel")), f"{name} is not a kernel"


@pytest.mark.parametrize("name", sorted({**FUZZ, **EXTRA}))
def test_public_callable_returns_finite_or_raises_naming_an_argument(name):
    fn, strategies, names = {**FUZZ, **EXTRA}[name]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.tuples(*strategies))
    def run(args):
        check_call(fn, names, *args)

    run()


def test_strategies_reach_valid_calls():
    """Each fuzz case also succeeds on plain valid input, so the rule is checked on results too."""
    assert floats is not None  # the shared strategies are imported from tests/test_fuzz.py
    assert _fill([1.0, 1.0, 1.0], 2, 2, 0, 4)[0].size == 2
    assert _fill_batch(2, 2, 4, None, [0.0, 1.0]) == 2
    assert _generate([[4, 5]], 2, 2, 0, None).shape == (1, 4)
    assert _session(ro.cost_aware_prompts(), 4, 2, 2, 0, [1.0, 0.0], [3, 4]).size == 2
