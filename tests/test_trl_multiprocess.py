"""CostAwareGRPOTrainer on 2 CPU processes (gloo, torchrun) against one process on the same global batch.

Every configuration trains 4 optimiser steps of a tiny Qwen2 in ``tests/_mp/trl_worker.py``; one
launch runs many configurations in turn (torch start-up dominates on small machines). Generation is
a fixed ``rollout_func`` of the row's global index, with completions of unequal lengths, so that 1
and 2 processes see the same global batch; the claim under test is the policy-optimisation step.

With a global plan (drawn identically on every rank from a shared seed, sharded across ranks) the
2-process run must reach the parameters of one process fed the whole global batch per step. The
optimiser is plain SGD so that a parameter difference is a gradient difference (Adam's
normalisation would amplify float noise in near-zero gradients).

A hang must fail, not block CI: a launch in which no case starts or finishes for 150 s is killed with
its whole process tree (``ddp_timeout`` also bounds most collectives); a case that crashes or hangs is
recorded as failed and a new launch resumes with the next case. However the wait ends (Ctrl-C included),
the launch's process group and its workers are killed (``tests/process_group.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_group import process_group

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")

WORKER = Path(__file__).parent / "_mp" / "trl_worker.py"
SRC = Path(__file__).resolve().parents[1] / "src"
GLOBAL_ROWS = 8  # rows per optimiser micro-step over all processes: 2 groups of 4
LOSS_TYPES = ("grpo", "dapo", "bnpo", "cispo")
BASE = {"optim": "sgd", "learning_rate": 0.5, "cost_aware_method": "p_star"}


def _case(name, zero="none", stock=False, **config):
    return {"name": name, "zero": zero, "stock": stock, "config": {**BASE, **config}}


# loss type x merge duplicates x {one rank's pool all zero, none}
MATRIX = [
    _case(f"{lt}-merge{int(merge)}-{zero}", zero=zero, loss_type=lt, cost_aware_merge_duplicates=merge)
    for lt in LOSS_TYPES
    for merge in (True, False)
    for zero in ("none", "rank1")
]
EXTRAS = [
    _case("dapo-iters2", loss_type="dapo", num_iterations=2),
    _case("grpo-iters2-rank1", zero="rank1", loss_type="grpo", num_iterations=2),
    _case("grpo-spg4-ga2", loss_type="grpo", steps_per_generation=4, gradient_accumulation_steps=2),
    _case("bnpo-spg4-ga2", loss_type="bnpo", steps_per_generation=4, gradient_accumulation_steps=2),
    # beta > 0 needs a full-support method (the KL term must reach every row)
    _case("grpo-beta", loss_type="grpo", beta=0.1, cost_aware_method="p_smooth", cost_aware_alpha=0.1),
    _case(
        "dapo-beta-rank1",
        zero="rank1",
        loss_type="dapo",
        beta=0.1,
        cost_aware_method="p_smooth",
        cost_aware_alpha=0.1,
    ),
    _case("dapo-all-zero", zero="all", loss_type="dapo"),
    _case("grpo-all-zero", zero="all", loss_type="grpo"),
    _case("bnpo-tokens", loss_type="bnpo", cost_aware_budget="tokens"),
    _case(
        "grpo-raw-pool-rank1",
        zero="rank1",
        loss_type="grpo",
        cost_aware_weights="raw",
        cost_aware_normaliser="pool",
    ),
    _case(
        "dapo-raw-pool-rank1",
        zero="rank1",
        loss_type="dapo",
        cost_aware_weights="raw",
        cost_aware_normaliser="pool",
    ),
    _case("bnpo-nonzero-rank1", zero="rank1", loss_type="bnpo", cost_aware_method="nonzero"),
    _case("dapo-pods", loss_type="dapo", cost_aware_method="pods"),
    # β fitted every pool from rows of the global pool; the same β on every rank (else the
    # second pool's plans, and the parameters, would differ from one process's)
    _case(
        "dapo-calibrated-every1-rank1",
        zero="rank1",
        loss_type="dapo",
        cost_aware_proxy="calibrated",
        cost_aware_calibration_interval=1,
        cost_aware_calibration_rows=6,
    ),
    # proxy-fidelity diagnostics on rows of the global pool: a rank whose own rows are all A = 0 still
    # joins every collective of the single-row losses (it used to return early and leave the other waiting)
    _case(
        "grpo-diagnostics-rank1",
        zero="rank1",
        loss_type="grpo",
        cost_aware_diagnostics_interval=1,
        cost_aware_diagnostics_rows=6,
    ),
    _case("dapo-diagnostics", loss_type="dapo", cost_aware_diagnostics_interval=1, cost_aware_diagnostics_rows=5),
    # old and reference log-probs over every row (stock) instead of the fed rows only (the default)
    _case("dapo-iters2-allrows", loss_type="dapo", num_iterations=2, cost_aware_logprob_rows="all"),
    _case("grpo-iters2-rank1-allrows", zero="rank1", loss_type="grpo", num_iterations=2, cost_aware_logprob_rows="all"),
    _case(
        "grpo-spg4-ga2-allrows",
        loss_type="grpo",
        steps_per_generation=4,
        gradient_accumulation_steps=2,
        cost_aware_logprob_rows="all",
    ),
    _case(
        "grpo-beta-allrows",
        loss_type="grpo",
        beta=0.1,
        cost_aware_method="p_smooth",
        cost_aware_alpha=0.1,
        cost_aware_logprob_rows="all",
    ),
    _case(
        "dapo-beta-rank1-allrows",
        zero="rank1",
        loss_type="dapo",
        beta=0.1,
        cost_aware_method="p_smooth",
        cost_aware_alpha=0.1,
        cost_aware_logprob_rows="all",
    ),
    # the prompt stage: every process draws the same prompts from the same gathered rewards (else the groups,
    # and the parameters, would differ from one process's); weighted prompts scale the global advantages
    _case("grpo-greso", loss_type="grpo", cost_aware_rollout="greso"),
    _case("dapo-cost_aware_prompts-rank1", zero="rank1", loss_type="dapo", cost_aware_rollout="cost_aware"),
    _case(
        "grpo-nonzero-cost_aware_skip",
        loss_type="grpo",
        cost_aware_method="nonzero",
        cost_aware_rollout="cost_aware_skip",
    ),
]
DIAGNOSED = [c["name"] for c in EXTRAS if c["config"].get("cost_aware_diagnostics_interval")]
# method none against stock GRPOTrainer, both on 2 processes: exactly stock's split and loss
NONE_VS_STOCK = [
    _case(
        f"{kind}-{lt}{'-rank1' if zero == 'rank1' else ''}",
        zero=zero,
        stock=kind == "stock",
        loss_type=lt,
        cost_aware_method="none",
    )
    for lt, zero in [
        ("grpo", "none"),
        ("dapo", "none"),
        ("bnpo", "none"),
        ("cispo", "none"),
        ("dapo", "rank1"),
    ]
    for kind in ("none", "stock")
]
COMPARED = MATRIX + EXTRAS  # 2 processes against 1
# in their own launches: the PO-token budget stops every process at the end of the round that
# reaches it (budget 1: the first round), and a β fitted on pool 1 plans pool 2 alike on every process
BUDGETED = [
    _case("dapo-auto-budget-rank1", zero="rank1", loss_type="dapo", cost_aware_method="auto",
          cost_aware_token_budget=1, max_steps=6),
    _case("grpo-kl-iters2-budget", loss_type="grpo", beta=0.1, cost_aware_method="p_smooth", cost_aware_alpha=0.1,
          num_iterations=2, cost_aware_token_budget=1, max_steps=8),
    _case("bnpo-spg4-ga2-budget", loss_type="bnpo", steps_per_generation=4, gradient_accumulation_steps=2,
          cost_aware_token_budget=1, max_steps=6),
]  # fmt: skip
CALIBRATED = [_case("dapo-calibrated-every1", loss_type="dapo", cost_aware_proxy="calibrated",
                    cost_aware_calibration_interval=1, cost_aware_calibration_rows=6)]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    env.update(TRL_EXPERIMENTAL_SILENCE="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _launch_once(cases, nproc, out: Path, stall_s: float, worker: Path) -> tuple[int | None, str]:
    """One launch of the worker on ``cases``; returns (exit code, or None when it stalled, output tail).

    A launch stalls when no case starts or finishes for ``stall_s`` seconds: a hang costs that long,
    whatever the number of cases left.
    """
    spec = out / f"spec-{len(list(out.glob('spec-*.json')))}.json"
    spec.write_text(json.dumps({"global_rows": GLOBAL_ROWS, "cases": cases}))
    cmd = [sys.executable]
    if nproc > 1:
        cmd += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd += [str(worker), str(spec), str(out)]
    log = out / f"{spec.stem}.log"

    def progress() -> float:
        marks = [f.stat().st_mtime for f in [*out.glob("*.started"), *out.glob("*.pt")]]
        return max([started, *marks])

    # the launcher and its workers go with the block, however it ends (a stall, a failure, Ctrl-C)
    with open(log, "w") as f, process_group(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env()) as proc:
        started = time.time()
        rc: int | None = None
        while True:
            try:
                rc = proc.wait(timeout=2)
                break
            except subprocess.TimeoutExpired:
                if time.time() - progress() > stall_s:
                    rc = None
                    break
    return rc, log.read_text()[-3000:]


def run_cases(cases, nproc: int, out: Path, stall_s: float = 150.0, worker: Path = WORKER) -> dict[str, dict]:
    """Run every case; a case that crashes or hangs gets {"error": ...} and the rest still run."""
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    todo = list(cases)
    start = time.perf_counter()
    while todo:
        left = len(todo)
        rc, tail = _launch_once(todo, nproc, out, stall_s, worker)
        for case in list(todo):
            name = case["name"]
            files = [out / f"{name}.rank{r}.pt" for r in range(nproc)]
            if all(f.exists() for f in files):
                results[name] = {"ranks": [torch.load(f, weights_only=False) for f in files]}
                todo.remove(case)
            elif (out / f"{name}.started").exists():  # the case this launch died in
                errors = sorted(out.glob(f"{name}.rank*.error"))
                # the rank that failed first often dies in C++ (gloo enforce): its reason is in the log
                detail = "\n".join(e.read_text()[-1200:] for e in errors) + "\n--- launch log ---\n" + tail
                why = "timed out (hang)" if rc is None else f"exit code {rc}"
                results[name] = {"error": f"{name} on {nproc} process(es): {why}\n{detail}"}
                todo.remove(case)
                break
            else:
                if rc == 0:
                    raise RuntimeError(f"worker exited 0 without running {name}:\n{tail}")
                if len(todo) == left:  # died or stalled before its first case: a relaunch would too, forever
                    why = f"stalled for {stall_s:g} s" if rc is None else f"exited {rc}"
                    raise RuntimeError(f"the launch {why} before starting a case:\n{tail}")
                break
        else:
            continue
        if rc == 0 and todo:
            raise RuntimeError(f"worker exited 0 with cases left:\n{tail}")
    results["_seconds"] = {"value": time.perf_counter() - start}
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_mp")
    two = run_cases(COMPARED + NONE_VS_STOCK, 2, root / "two")
    one = run_cases(COMPARED, 1, root / "one")
    print(
        f"\nlaunch wall time: 2 processes {two['_seconds']['value']:.0f} s, 1 process {one['_seconds']['value']:.0f} s"
    )
    return two, one


@pytest.fixture(scope="module")
def budget_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_mp_budget")
    return run_cases(BUDGETED + CALIBRATED, 2, root / "two"), run_cases(BUDGETED + CALIBRATED, 1, root / "one")


def _get(results, name):
    r = results[name]
    if "error" in r:
        pytest.fail(r["error"], pytrace=False)
    return r["ranks"]


def _assert_same_step(two, one, init):
    """Displacements from the initial parameters agree to float noise, and are not zero."""
    d2, d1 = two - init, one - init
    assert float(d1.norm()) > 1e-3, "the one-process run did not move: this comparison would be vacuous"
    rel = float((d2 - d1).norm() / d1.norm())
    assert rel < 1e-4, f"2-process parameters differ from 1-process by {rel:.3g} (relative displacement)"


@pytest.mark.parametrize("case", COMPARED, ids=[c["name"] for c in COMPARED])
def test_two_processes_match_one_process_on_the_global_batch(runs, case):
    two, one = runs
    ranks = _get(two, case["name"])
    (ref,) = _get(one, case["name"])
    assert all(r["global_step"] == 4 for r in ranks) and ref["global_step"] == 4
    torch.testing.assert_close(ranks[0]["params"], ranks[1]["params"], rtol=0, atol=0)  # DDP kept in step
    if case["zero"] == "all":  # nothing to learn: no parameter moves on either run
        torch.testing.assert_close(ranks[0]["params"], ref["params"], rtol=0, atol=0)
        torch.testing.assert_close(ref["params"], ref["init"], rtol=0, atol=0)
    else:
        _assert_same_step(ranks[0]["params"], ref["params"], ref["init"])


def _total(rank_result, name):
    """Last logged cumulative counter (``cost_aware/total/<name>``), summed over ranks by the adapter."""
    rows = [h for h in rank_result["logged"] if f"cost_aware/total/{name}" in h]
    assert rows, f"cost_aware/total/{name} was never logged"
    return rows[-1][f"cost_aware/total/{name}"]


@pytest.mark.parametrize("case", COMPARED, ids=[c["name"] for c in COMPARED])
def test_counters_are_summed_over_ranks_and_epochs(runs, case):
    two, one = runs
    ranks = _get(two, case["name"])
    (ref,) = _get(one, case["name"])
    fed = sum(sum(r["fed"]) for r in ranks)  # every forward/backward of every rank, each PPO epoch
    logged = _total(ranks[0], "tokens") + _total(ranks[0], "tokens_padding")  # padding rows kept apart
    assert logged == fed, f"rank 0 logged {logged} tokens (with padding rows), the ranks fed {fed}"
    assert _total(ref, "tokens") == sum(ref["fed"]) and _total(ref, "tokens_padding") == 0
    # the same global pools and plans: the same counts as one process, padding aside
    for name in ("tokens", "tokens_plain", "tokens_nonzero", "rows_drawn", "skipped", "generations"):
        assert _total(ranks[0], name) == _total(ref, name), name
    cfg = case["config"]
    micro_steps = 4 * cfg.get("gradient_accumulation_steps", 1)  # 4 optimiser steps
    pools = micro_steps // (cfg.get("steps_per_generation", 2) * cfg.get("num_iterations", 1))
    assert _total(ref, "generations") == pools
    if case["zero"] == "all":
        assert _total(ref, "skipped") == pools and _total(ref, "tokens") == 0


@pytest.mark.parametrize("name", DIAGNOSED)
def test_diagnostics_log_the_same_fidelity_on_every_rank(runs, name):
    two, one = runs
    ranks, (ref,) = _get(two, name), _get(one, name)

    def logged(r):
        return [h["cost_aware/pearson"] for h in r["logged"] if "cost_aware/pearson" in h]

    assert logged(ranks[0]), "no cost_aware/pearson was logged: the diagnostics did not run"
    assert logged(ranks[0]) == logged(ranks[1])  # the same global rows, gathered: the same numbers
    assert logged(ranks[0]) == pytest.approx(logged(ref), rel=1e-4)  # and the same rows as one process


@pytest.mark.parametrize("lt", ["grpo", "dapo", "bnpo", "cispo", "dapo-rank1"])
def test_method_none_reproduces_stock_trl_on_two_processes(runs, lt):
    two, _ = runs
    ours, stock = _get(two, f"none-{lt}"), _get(two, f"stock-{lt}")
    for a, b in zip(ours, stock, strict=True):
        torch.testing.assert_close(a["params"], b["params"], rtol=0, atol=0)
    assert float((stock[0]["params"] - stock[0]["init"]).norm()) > 1e-3
    assert _total(ours[0], "tokens") == sum(sum(r["fed"]) for r in stock)


@pytest.mark.parametrize("fed", ["dapo-iters2", "grpo-iters2-rank1", "grpo-spg4-ga2", "grpo-beta", "dapo-beta-rank1"])
def test_logprobs_of_the_fed_rows_give_stocks_steps_on_two_processes(runs, fed):
    """'fed' (the default) computes old and reference log-probs for the rows each rank feeds, every rank
    running as many forward chunks as the busiest (rank 1 of a rank1 case feeds padding rows only): the
    same parameters as 'all', stock's passes over every row."""
    two, _ = runs
    for a, b in zip(_get(two, fed), _get(two, f"{fed}-allrows"), strict=True):
        torch.testing.assert_close(a["params"], b["params"], rtol=1e-4, atol=1e-6)
    assert float((_get(two, fed)[0]["params"] - _get(two, fed)[0]["init"]).norm()) > 1e-3


@pytest.mark.parametrize("case", BUDGETED, ids=[c["name"] for c in BUDGETED])
def test_token_budget_stops_every_process_at_the_end_of_the_same_round(budget_runs, case):
    two, one = budget_runs
    ranks, (ref,) = _get(two, case["name"]), _get(one, case["name"])
    cfg = case["config"]
    round_steps = (
        cfg.get("steps_per_generation", 2) * cfg.get("num_iterations", 1) // cfg.get("gradient_accumulation_steps", 1)
    )
    assert [r["global_step"] for r in ranks] == [round_steps, round_steps] and ref["global_step"] == round_steps
    assert round_steps < cfg["max_steps"]  # the budget, not max_steps, ended the run
    assert all(r["state"]["tokens"] == ref["state"]["tokens"] >= 1 for r in ranks) and ref["state"]["generations"] == 1
    torch.testing.assert_close(ranks[0]["params"], ranks[1]["params"], rtol=0, atol=0)
    _assert_same_step(ranks[0]["params"], ref["params"], ref["init"])
    for r in (*ranks, ref):  # the end-of-training summary carries the totals on every process
        assert "train_runtime" in r["logged"][-1] and r["logged"][-1]["cost_aware/total/tokens"] == r["state"]["tokens"]


def test_calibrated_beta_is_the_same_on_every_process_and_plans_the_next_pool(budget_runs):
    two, one = budget_runs
    name = CALIBRATED[0]["name"]
    ranks, (ref,) = _get(two, name), _get(one, name)

    def logged(r, key):
        return [h[key] for h in r["logged"] if key in h]

    hat = logged(ranks[0], "cost_aware/proxy_beta_hat")
    assert len(hat) == 2  # a fit on each of the two pools (4 groups, 2 rows each, of the 6 asked)
    for key in ("cost_aware/proxy_beta_hat", "cost_aware/proxy_beta_next", "cost_aware/proxy_beta"):
        assert logged(ranks[0], key) == logged(ranks[1], key), key
        assert logged(ranks[0], key) == pytest.approx(logged(ref, key), rel=1e-4), key
    assert logged(ranks[0], "cost_aware/proxy_beta")[-1] != 1.0  # pool 2 was planned with the fitted β
    _assert_same_step(ranks[0]["params"], ref["params"], ref["init"])


def test_wall_time_is_reported(runs):
    two, one = runs
    assert two["_seconds"]["value"] > 0 and one["_seconds"]["value"] > 0


HANGING_WORKER = """
import json, subprocess, sys, time
from pathlib import Path
import torch
spec, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
for case in spec["cases"]:
    (out / f"{case['name']}.started").write_text("")
    if case["name"].startswith("hang"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        (out / "child.pid").write_text(str(child.pid))
        time.sleep(600)
    torch.save({"ok": True}, out / f"{case['name']}.rank0.pt")
"""


def test_a_hanging_case_fails_in_bounded_time_and_the_rest_still_run(tmp_path):
    """The harness itself: a case that hangs is killed with its process tree, and the next case runs."""
    psutil = pytest.importorskip("psutil")
    worker = tmp_path / "hanging_worker.py"
    worker.write_text(HANGING_WORKER)
    start = time.perf_counter()
    # stall_s covers the worker's torch import on a loaded machine (a stall before the first case is an error)
    results = run_cases([{"name": "hang-a"}, {"name": "ok-b"}], 1, tmp_path / "out", stall_s=20, worker=worker)
    assert time.perf_counter() - start < 120  # a bound, not a timing claim: the worker alone sleeps 600 s
    assert "timed out (hang)" in results["hang-a"]["error"]
    assert results["ok-b"]["ranks"] == [{"ok": True}]
    child = int((tmp_path / "out" / "child.pid").read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_worker_that_dies_before_its_first_case_is_an_error_not_a_relaunch_loop(tmp_path):
    worker = tmp_path / "broken_worker.py"
    worker.write_text("import sys\nprint('cannot start')\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match=r"the launch exited 3 before starting a case:\n(.|\n)*cannot start"):
        run_cases([{"name": "a"}], 1, tmp_path / "out", stall_s=60, worker=worker)
    assert len(list((tmp_path / "out").glob("spec-*.json"))) == 1  # launched once
