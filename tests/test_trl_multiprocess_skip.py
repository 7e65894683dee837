"""Skipped optimiser steps on 2 CPU processes (gloo) against one process, under AdamW with weight decay.

A step in which every process's rows are padding (an all-zero pool, or a step the plan leaves empty)
must leave the optimiser untouched on any number of processes: no parameter, step count, moment or
weight decay moves. With one process no forward runs and every ``.grad`` stays ``None``; on two,
if some rank fed zero-factor padding rows instead, the gradients would be zeros, and AdamW would
advance its step count, decay its moments and apply weight decay, which SGD without weight decay
cannot show. The learning-rate schedule advances on every optimiser step, skipped or not, as in
stock TRL (the scheduler steps with ``global_step``).

Zero modes (``tests/_mp/trl_worker.py``): ``first`` (the first generation batch is all zero, later
ones are not), ``rank1`` (rank 1's half of every batch is zero: some ranks hold rows, some only
padding) and ``all`` (every pool zero). The launch harness is ``tests/test_trl_multiprocess.py``'s.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")

from test_trl_multiprocess import LOSS_TYPES, _get, _total, run_cases  # noqa: E402

LR = 1e-2
ADAMW = {"optim": "adamw_torch", "learning_rate": LR, "weight_decay": 0.1, "cost_aware_method": "p_star"}
SGD = {"optim": "sgd", "learning_rate": 0.5, "cost_aware_method": "p_star"}
ZERO_MODES = ("first", "rank1", "all")
# 4 nonzero rows in 6 micro-steps: `nonzero` fills steps 0-3, leaves 4 and 5 empty; with 3 micro-steps per
# optimiser step, step 5 closes an optimiser step whose step 3 ran, so DDP must still sync in it
SYNC_AFTER_SKIP = {"cost_aware_method": "nonzero", "steps_per_generation": 6, "gradient_accumulation_steps": 3}


def _case(name, zero, base=ADAMW, **config):
    return {"name": name, "zero": zero, "stock": False, "config": {**base, **config}}


CASES = [
    *[_case(f"adamw-{lt}-{zero}", zero, loss_type=lt) for lt in LOSS_TYPES for zero in ZERO_MODES],
    _case("adamw-grpo-nomerge-first", "first", loss_type="grpo", cost_aware_merge_duplicates=False),
    # gradient accumulation: two micro-steps per optimiser step, so a skipped micro-step can share its
    # optimiser step with one that fed rows
    _case("adamw-grpo-spg4-ga2-first", "first", loss_type="grpo", steps_per_generation=4,
          gradient_accumulation_steps=2),
    _case("adamw-bnpo-spg4-ga2-rank1", "rank1", loss_type="bnpo", steps_per_generation=4,
          gradient_accumulation_steps=2),
    _case("adamw-grpo-nonzero-ga3-group0", "group0", loss_type="grpo", **SYNC_AFTER_SKIP),
    _case("adamw-dapo-nonzero-ga3-group0", "group0", loss_type="dapo", **SYNC_AFTER_SKIP),
    _case("adamw-dapo-iters2-first", "first", loss_type="dapo", num_iterations=2, max_steps=8),
    _case("adamw-dapo-tokens-first", "first", loss_type="dapo", cost_aware_budget="tokens"),
    _case("adamw-grpo-nonzero-first", "first", loss_type="grpo", cost_aware_method="nonzero"),
    # the prompt stages: prompts drawn from the gathered rewards, weighted ones scale the advantages
    _case("adamw-grpo-greso-first", "first", loss_type="grpo", cost_aware_rollout="greso"),
    _case("adamw-dapo-cost_aware-first", "first", loss_type="dapo", cost_aware_rollout="cost_aware"),
    _case("adamw-dapo-cost_aware-rank1", "rank1", loss_type="dapo", cost_aware_rollout="cost_aware"),
    _case("adamw-grpo-cost_aware_skip-first", "first", loss_type="grpo", cost_aware_method="nonzero",
          cost_aware_rollout="cost_aware_skip"),
    _case("adamw-cispo-cost_aware-all", "all", loss_type="cispo", cost_aware_rollout="cost_aware"),
    # plain SGD as well: a parameter difference is a gradient difference
    *[_case(f"sgd-{lt}-first", "first", base=SGD, loss_type=lt) for lt in LOSS_TYPES],
    _case("sgd-dapo-cost_aware-first", "first", base=SGD, loss_type="dapo", cost_aware_rollout="cost_aware"),
]  # fmt: skip
ADAM_CASES = [c for c in CASES if c["config"]["optim"] == "adamw_torch"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_mp_skip")
    return run_cases(CASES, 2, root / "two"), run_cases(CASES, 1, root / "one")


def _relative(a: torch.Tensor, b: torch.Tensor, origin: torch.Tensor | float = 0.0) -> float:
    """|a − b| relative to b's distance from ``origin`` (its displacement, for parameters)."""
    return float((a - b).norm() / (b - origin).norm())


def _steps_taken(result) -> list[float]:
    """AdamW's step count of every parameter (none: the optimiser never stepped it)."""
    state = result["optimizer_state"]
    return [float(state[i]["step"]) for i in sorted(state)]


def _max_steps(case) -> int:
    return case["config"].get("max_steps", 4)  # the worker's default


def _rounds(case) -> tuple[int, int]:
    """(optimiser steps per generation batch, generation batches) of the worker's run."""
    cfg = case["config"]
    per_round = (
        cfg.get("steps_per_generation", 2) * cfg.get("num_iterations", 1) // cfg.get("gradient_accumulation_steps", 1)
    )
    return per_round, _max_steps(case) // per_round


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_two_processes_match_one_after_skipped_and_partly_zero_rounds(runs, case):
    two, one = runs
    ranks, (ref,) = _get(two, case["name"]), _get(one, case["name"])
    assert all(r["global_step"] == _max_steps(case) for r in (*ranks, ref))
    assert _rounds(case)[1] >= 2, "a first-round skip needs a later round to compare"
    torch.testing.assert_close(ranks[0]["params"], ranks[1]["params"], rtol=0, atol=0)  # DDP kept in step
    if case["zero"] == "all":  # no update at all: weight decay must not shrink θ either
        for r in (*ranks, ref):
            torch.testing.assert_close(r["params"], r["init"], rtol=0, atol=0)
        return
    assert float((ref["params"] - ref["init"]).norm()) > 1e-4, "the one-process run did not move"
    rel = _relative(ranks[0]["params"], ref["params"], ref["init"])
    assert rel < 1e-4, f"2-process parameters differ from 1-process by {rel:.3g} (relative displacement)"


@pytest.mark.parametrize("case", ADAM_CASES, ids=[c["name"] for c in ADAM_CASES])
def test_a_skipped_step_leaves_adamw_state_alone_on_every_process(runs, case):
    two, one = runs
    ranks, (ref,) = _get(two, case["name"]), _get(one, case["name"])
    per_round, rounds = _rounds(case)
    every = per_round * rounds
    stepped = {"all": 0, "first": per_round * (rounds - 1), "rank1": every, "group0": every}[case["zero"]]
    for r in (*ranks, ref):
        counts = _steps_taken(r)
        assert counts == [float(stepped)] * len(counts), f"AdamW step counts {sorted(set(counts))}, want {stepped}"
        assert (len(counts) > 0) == (stepped > 0)
    for i, st in ref["optimizer_state"].items():  # the same moments as one process
        for key in ("exp_avg", "exp_avg_sq"):
            got, want = ranks[0]["optimizer_state"][i][key], st[key]
            if float(want.norm()) > 0:
                assert _relative(got, want) < 1e-3, (i, key)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_learning_rate_schedule_advances_on_every_optimiser_step(runs, case):
    """TRL's convention: the scheduler steps with every optimiser step, skipped or not (stock TRL steps on
    an all-zero pool too). The worker's linear schedule logs lr·(1 − k/K) at step k = 0..K−1."""
    two, one = runs
    ranks, (ref,) = _get(two, case["name"]), _get(one, case["name"])
    lr = case["config"]["learning_rate"]
    total = _max_steps(case)
    want = [pytest.approx(lr * (1 - k / total)) for k in range(total)]
    for r in (*ranks, ref):
        assert r["learning_rates"] == want


def test_an_all_zero_run_runs_no_forward_on_any_process(runs):
    """Every step of every pool is padding on every process: no process runs the policy's forward."""
    two, one = runs
    for case in (c for c in CASES if c["zero"] == "all"):
        for r in (*_get(two, case["name"]), *_get(one, case["name"])):
            assert r["fed"] == [], case["name"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_counters_count_what_every_process_fed(runs, case):
    """Tokens fed by every process, padding included, equal the logged totals; the same pools and plans as one
    process, so the same counts, padding aside (one process feeds none)."""
    two, one = runs
    ranks, (ref,) = _get(two, case["name"]), _get(one, case["name"])
    fed = sum(sum(r["fed"]) for r in ranks)
    assert _total(ranks[0], "tokens") + _total(ranks[0], "tokens_padding") == fed
    assert _total(ref, "tokens") == sum(ref["fed"]) and _total(ref, "tokens_padding") == 0
    for name in ("tokens", "rows_drawn", "skipped", "generations"):
        assert _total(ranks[0], name) == _total(ref, name), name
