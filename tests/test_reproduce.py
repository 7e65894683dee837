"""The main job's runner: the profile and its runs, one run's record, the round cap, determinism,
Ctrl-C and a killed parent (no worker left, nothing partial), resume, and `--profile quick` end to end."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from costaware.experiments.grpo_run import SkipWatch
from costaware.experiments.profile import HEADLINE, PROFILES, Profile
from costaware.experiments.specs import RunSpec, run_specs
from costaware.experiments.worker import EvalSchedule, eval_sets

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the profile and its runs (pure)


def test_profile_is_built_by_keyword_and_checks_every_field():
    assert Profile() == PROFILES["default"]
    assert Profile(seeds=(3,)).seeds == (3,)
    for bad, field in [(dict(eval_k=0), "eval_k"), (dict(learning_rate=0.0), "learning_rate"),
                       (dict(learning_rate=float("nan")), "learning_rate"), (dict(token_budget=-5), "token_budget"),
                       (dict(rounds=0), "rounds"), (dict(seeds=(-1,)), "seeds"), (dict(seeds=()), "seeds"),
                       (dict(seeds=(1, 1)), "seeds"), (dict(max_size=1), "max_size"),
                       (dict(mistake_prob=1.0), "mistake_prob"),
                       (dict(steps_per_generation=3), "steps_per_generation"), (dict(lr_sweep=(0.0,)), "lr_sweep"),
                       (dict(generation_cost=-1.0), "generation_cost"), (dict(sft_steps=True), "sft_steps"),
                       (dict(long_budget=1.0), "long_budget"), (dict(second_max_size=1), "second_max_size"),
                       (dict(extra_tasks=("sort",)), "extra_tasks"), (dict(extra_tasks=("sort:1",)), "extra_tasks"),
                       (dict(extra_tasks=("sort:x",)), "extra_tasks"),
                       (dict(extra_tasks=("sort:9", "sort:9")), "extra_tasks"),
                       (dict(extra_tasks="sort:9"), "extra_tasks"),
                       (dict(logprob_rows="some"), "logprob_rows")]:  # fmt: skip
        with pytest.raises(ValueError, match=field):
            Profile(**bad)
    help_ = Profile.help()
    for group in ("[policy]", "[task]", "[sft]", "[rl]", "[eval]", "[runs]"):
        assert group in help_
    assert "generation_cost = 0.333" in help_ and "6N" in help_  # the default is argued where it is set


def test_default_profile_runs_the_decomposition_with_five_seeds():
    p = PROFILES["default"]
    specs = run_specs(p)
    assert len(p.seeds) >= 5 and p.token_budget > 0 and p.rounds * p.prompts_per_round > 0
    for s in p.seeds:
        arms = {x.slug for x in specs if x.seed == s and x.group != "rollout"}
        assert arms == {"none", "nonzero", "p_star", "p_star:raw", "p_smooth", "pods", "none:lr0.5", "none:lr2"}
        rollout = {x.slug for x in specs if x.seed == s and x.group == "rollout"}  # the prompt stage, its own train set
        assert rollout == {
            "none",
            "nonzero",
            "none:rollout-greso",
            "none:rollout-dapo",
            "p_star:rollout-cost_aware_skip",
        }
    assert {x.setting for x in specs if x.group == "rollout"} == {f"grpo-{p.rollout_train_prompts}-prompts"}
    assert {x.group for x in specs} == {"headline", "lr_sweep", "rollout"}  # the rest is in --profile full
    full = run_specs(PROFILES["full"])
    assert {x.task for x in full if x.group == "headline"} == {"arith", "sort", "sort:9", "sortcheck:7"}
    for group in ("zvf", "cispo", "dapo", "proxy"):
        assert len({x.seed for x in full if x.group == group}) >= 3
    for loss in ("cispo", "dapo"):  # calibrated ('auto') and the paper's proxy, with the controls
        assert {x.slug for x in full if x.group == loss} == {"none", "nonzero", "p_star", "p_star:advantage"}
        assert {x.setting for x in full if x.group == loss} == {loss}
    assert {(x.slug, x.setting) for x in full if x.group == "proxy"} == {("p_star:calibrated", "grpo")}
    assert not [x for x in full if x.group == "long"]  # the default's budget already reaches GRPO's plateau
    with_long = dataclasses.replace(PROFILES["full"], long_budget=4.0)  # the option stays, for another setting
    long = [x for x in run_specs(with_long) if x.group == "long"]  # GRPO, its step control and p* at 4x the budget
    assert {x.slug for x in long} == {"none", "nonzero", "p_star"} and {x.seed for x in long} == set(p.seeds)
    assert {x.setting for x in long} == {"grpo-4x-budget"}
    scaled = long[0].scaled(with_long)
    assert (scaled.token_budget, scaled.rounds) == (4 * p.token_budget, 4 * p.rounds)
    assert specs[0].scaled(p) is p
    assert {x.method for x in full if x.group == "control"} == {"sft"}
    assert {x.slug for x in full if x.group == "ablation"} >= {"p_star:noise0.1", "inv_sqrt_cost", "p_smooth:a0.05"}
    assert len({x for x in full}) == len(full)  # no run twice
    # the full profile differs from the default only in which runs it holds: it reuses the default's runs
    from costaware.experiments.keys import run_file

    default_files = {run_file(Path("o"), x, p) for x in specs}
    assert default_files <= {run_file(Path("o"), x, PROFILES["full"]) for x in full}


def test_extra_task_is_a_family_at_its_own_sizes_with_a_ten_fold_length_spread():
    from costaware.experiments.keys import run_file
    from costaware.experiments.runner import parse_overrides
    from costaware.experiments.tasks import get_task

    full = PROFILES["full"]
    assert full.tasks() == ("sort", "arith", "sort:9", "sortcheck:7")
    assert full.sizes("sortcheck:7") == (2, 7)  # responses of uneven length within a group (experiments.sortcheck)
    assert (full.sizes("sort"), full.sizes("arith"), full.sizes("sort:9")) == ((2, 7), (2, 6), (2, 9))
    # a family other than digit sums whose prompt + response lengths span >= 10x
    task, (lo, hi) = get_task("sort:9"), full.sizes("sort:9")
    small = task.make_tasks(1, min_size=lo, max_size=lo, rng=np.random.default_rng(0))
    large = task.make_tasks(1, min_size=hi, max_size=hi, rng=np.random.default_rng(0))
    cost = [len(t.prompts[0]) + len(task.demonstrations(t)[0]) + 1 for t in (small, large)]  # char tokens + EOS
    assert cost == [6, 62] and cost[1] / cost[0] >= 10
    wide = [x for x in run_specs(full) if x.task == "sort:9"]
    head = {(x.group, x.slug) for x in run_specs(full) if x.task == "sort" and x.group in ("headline", "lr_sweep")}
    assert {(x.group, x.slug) for x in wide} == head and {x.seed for x in wide} == set(full.seeds)
    # its own run files and SFT checkpoint, apart from the headline task's
    names = {run_file(Path("o"), x, full).name for x in wide}
    assert len(names) == len(wide) and all(n.startswith("sort-9-") for n in names)
    from costaware.experiments.keys import sft_key

    (a, cfg_a), (b, cfg_b) = sft_key(full, "sort:9"), sft_key(dataclasses.replace(full, max_size=9), "sort")
    assert (
        a.startswith("sft-sort-9-") and b.startswith("sft-sort-") and a[-10:] == b[-10:] and cfg_a == cfg_b
    )  # the same warm-up as sort with max_size 9
    assert parse_overrides(["extra_tasks=sort:9,arith:8"]) == {"extra_tasks": ("sort:9", "arith:8")}


def test_logprob_rows_reaches_the_trainer_and_only_a_changed_value_changes_the_run_key(tmp_path):
    from costaware.experiments.grpo_run import trainer_args
    from costaware.experiments.keys import run_file

    p = PROFILES["default"]
    spec = run_specs(p)[0]
    assert p.logprob_rows == "all"  # the recorded runs' setting: stock TRL's pass over every row
    assert trainer_args(spec, p, tmp_path).cost_aware_logprob_rows == "all"
    fed = dataclasses.replace(p, logprob_rows="fed")
    assert trainer_args(spec, fed, tmp_path).cost_aware_logprob_rows == "fed"
    assert run_file(tmp_path, spec, fed) != run_file(tmp_path, spec, p)  # another computation: another run
    # fields added after the default's runs were recorded stay out of the key at the value those runs had:
    # the README's runs (recorded before logprob_rows, extra_tasks and generation existed, with generate)
    # keep their files under generation='transformers'; the default, the KV sampler, makes new runs
    assert (spec.slug, spec.seed) == ("none", 0)
    recorded = dataclasses.replace(p, generation="transformers")
    assert run_file(tmp_path, spec, recorded).name == "sort-headline-grpo-none-s0-28a4eb52c4.json"
    assert p.generation == "kv" and run_file(tmp_path, spec, p).name == "sort-headline-grpo-none-s0-7c7b52e74d.json"


def test_generation_reaches_the_trainer_and_the_evaluation(tmp_path):
    from costaware.experiments.grpo_run import trainer_args
    from costaware.experiments.sft import held_out_config

    p = PROFILES["default"]
    spec = run_specs(p)[0]
    assert trainer_args(spec, p, tmp_path).cost_aware_generation == "kv"
    old = dataclasses.replace(p, generation="transformers")
    assert trainer_args(spec, old, tmp_path).cost_aware_generation == "transformers"
    # the SFT scores cached by the recorded runs stay valid under 'transformers'; 'kv' re-scores them
    assert held_out_config(old) == {"eval_prompts": p.eval_prompts, "eval_k": p.eval_k}
    assert held_out_config(p) == {**held_out_config(old), "generation": "kv"}
    with pytest.raises(ValueError, match="generation must be 'kv' or 'transformers', got 'vllm'"):
        dataclasses.replace(p, generation="vllm")


def test_set_changes_any_profile_field_and_the_named_options_win():
    import argparse

    from costaware.experiments.runner import parse_overrides, resolve

    assert parse_overrides(["hidden_size=96", "lr_sweep=0.5,2", "task=arith", "generation_cost=0.5"]) == {
        "hidden_size": 96,
        "lr_sweep": (0.5, 2.0),
        "task": "arith",
        "generation_cost": 0.5,
    }
    ns = argparse.Namespace(
        jobs=1,
        seeds=[3],
        rounds=None,
        token_budget=None,
        learning_rate=None,
        loss_type=None,
        task=None,
        methods=["none"],
        out="unused-out",
        only=["headline"],
        profile="quick",
        set=["hidden_size=40", "seeds=0,1", "token_budget=700"],
    )
    profile, specs = resolve(ns)
    assert (profile.hidden_size, profile.token_budget, profile.seeds) == (40, 700, (3,))  # --seeds wins over --set
    assert {(s.method, s.seed) for s in specs} == {("none", 3)}
    # no --jobs: one single-threaded worker per CPU this process may use
    from costaware.experiments.runner import available_cpus

    ns.jobs = None
    resolve(ns)
    assert ns.jobs == available_cpus() == len(os.sched_getaffinity(0))


def test_run_specs_methods_and_groups_select():
    p = Profile(seeds=(0,), setting_seeds=(0,), ablation_seeds=(0,))
    only = run_specs(p, ["p_star"], ("headline",))
    assert [(s.method, s.weights) for s in only] == [("p_star", "centred"), ("p_star", "raw")]
    assert {s.group for s in run_specs(p, None, ("zvf", "control"))} == {"zvf", "control"}
    assert [m for m, _ in HEADLINE] == ["none", "nonzero", "p_star", "p_star", "p_smooth", "pods"]


def test_validation_split_is_disjoint_from_the_held_out_set():
    p = dataclasses.replace(PROFILES["quick"], eval_prompts=200, validation_prompts=150, max_size=3)
    held, val = eval_sets(p, "arith")
    assert len(held) == 200 and len(val) == 150
    assert not set(held.prompts) & set(val.prompts) and len(set(val.prompts)) == 150
    assert eval_sets(p, "arith")[1].prompts == val.prompts  # fixed seeds: the same split every time
    with pytest.raises(ValueError, match="validation_prompts"):  # 2..3 terms of 1..9 have 810 prompts
        eval_sets(dataclasses.replace(p, validation_prompts=1000), "arith")


def test_eval_schedule_by_tokens_and_by_rounds():
    prof = dataclasses.replace(PROFILES["quick"], token_budget=100, eval_points=4)
    due = EvalSchedule(prof)
    assert [due(r, t) for r, t in enumerate([10, 30, 40, 55, 90])] == [False, True, False, True, True]
    assert not due.done(99) and due.done(100)
    assert due(9, 200)  # past the budget: always the final evaluation
    by_rounds = EvalSchedule(dataclasses.replace(prof, token_budget=0, eval_every=3))
    assert [by_rounds(r, 10**9) for r in range(1, 7)] == [False, False, True, False, False, True]
    assert by_rounds(7, 0, last=True)


def test_skip_watch_warns_once_after_k_rounds_that_fed_nothing():
    watch = SkipWatch(3, "p_star")
    with pytest.warns(RuntimeWarning, match="3 consecutive rounds fed no token") as rec:
        for tokens in [0, 0, 0, 10, 10, 10, 10, 10, 10]:
            watch(tokens)
    assert len(rec) == 1 and watch.longest == 5
    quiet = SkipWatch(3, "p_star")
    for tokens in [0, 5, 5, 9, 9, 12]:  # never 3 in a row
        quiet(tokens)
    assert quiet.longest == 1 and not quiet.warned


def test_remove_partial_removes_unfinished_runs_work_folders_and_unfinished_writes(tmp_path):
    """Only finished runs are kept: the trainer's work folder of a run that did not finish and the temporary
    files and folders of writes that did not finish go, on Ctrl-C and on the next run; a finished record, the
    SFT checkpoint and other folders stay."""
    from costaware.experiments.keys import run_file
    from costaware.experiments.runner import remove_partial

    p = PROFILES["quick"]
    done, todo = (run_file(tmp_path, s, p) for s in run_specs(p)[:2])
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    work = todo.with_suffix("")  # run_one's trainer output_dir
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "x.bin").write_bytes(b"0")
    keep = [tmp_path / "sft-arith-0123456789", tmp_path / "runs" / "notes"]
    for k in keep:
        k.mkdir()
    # what a killed atomic write leaves (costaware._io: .<name>.<pid>.tmp): the SFT checkpoint's folder, a record
    partial = [tmp_path / f".{keep[0].name}.{os.getpid()}.tmp", done.parent / f".{todo.name}.{os.getpid()}.tmp"]
    partial[0].mkdir()
    (partial[0] / "model.safetensors").write_bytes(b"0")
    partial[1].write_text("{")
    remove_partial(tmp_path)
    assert not work.exists() and done.exists() and all(k.exists() for k in keep)
    assert not any(p.exists() for p in partial)


def test_arith_lengths_vary_at_least_five_fold():
    from costaware.experiments import arith

    tasks = arith.make_tasks(2000, min_terms=2, max_terms=12, rng=np.random.default_rng(0))
    demos = arith.demonstrations(tasks)
    assert arith.sequence_lengths(tasks, demos).max() / arith.sequence_lengths(tasks, demos).min() >= 5
    assert arith.is_correct(demos, tasks.answers).all()
    noisy = arith.demonstrations(tasks, mistake_prob=0.15, rng=np.random.default_rng(1))
    assert 0.1 < 1 - arith.is_correct(noisy, tasks.answers).mean() < 0.9


# ---------------------------------------------------------------- one run, in this process


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    from costaware.experiments.sft import warm_up

    return warm_up(PROFILES["quick"], "arith", tmp_path_factory.mktemp("sft"))


def _record(spec: RunSpec, profile: Profile, sft: Path, out: Path):
    from costaware.experiments.records import RunResult
    from costaware.experiments.runs import run_one

    run_one(dataclasses.asdict(spec), dataclasses.asdict(profile), str(sft), str(out))
    assert not list(out.parent.glob("*.tmp"))
    return RunResult.load(out)


def test_budget_run_ends_at_the_round_cap_warns_and_repeats_exactly(sft_dir, tmp_path):
    # a budget no run can reach: the round cap must end it, with a warning
    prof = dataclasses.replace(PROFILES["quick"], token_budget=10**9, rounds=4, skipped_warn_rounds=2)
    spec = RunSpec("headline", "p_star", 0, weights="raw")
    with pytest.warns(RuntimeWarning, match="round cap") as rec:
        a = _record(spec, prof, sft_dir, tmp_path / "a.json")
    assert a.counters["round_cap_hit"] == 1.0 and a.evals[-1].rounds == 4
    if a.counters["longest_skipped_run"] >= 2:
        assert any("consecutive rounds fed no token" in str(w.message) for w in rec)
    assert a.id.method == "p_star" and a.id.weights == "raw" and a.id.loss_type == "grpo"
    first, last = a.evals[0], a.evals[-1]
    assert (first.rounds, first.po_tokens, first.generated_tokens) == (0, 0, 0)
    assert last.generated_tokens > 0 and last.validation_accuracy is not None
    with pytest.warns(RuntimeWarning, match="round cap"):
        b = _record(spec, prof, sft_dir, tmp_path / "b.json")  # same seed, same numbers

    def numbers(r):
        return [dataclasses.replace(e, po_seconds=0.0) for e in r.evals], {
            k: v for k, v in r.counters.items() if "seconds" not in k
        }

    assert numbers(a) == numbers(b)


def test_lr_sweep_and_control_records(sft_dir, tmp_path):
    prof = dataclasses.replace(PROFILES["quick"], token_budget=300, rounds=6)
    sweep = _record(RunSpec("lr_sweep", "none", 1, lr_scale=2.0), prof, sft_dir, tmp_path / "s.json")
    assert sweep.id.group == "lr_sweep" and sweep.id.learning_rate == pytest.approx(2 * prof.learning_rate)
    control = _record(RunSpec("control", "sft", 0), prof, sft_dir, tmp_path / "c.json")
    assert control.id.method == "sft" and control.id.loss_type == "sft"
    assert control.evals[-1].po_tokens >= prof.token_budget and control.evals[-1].generated_tokens == 0
    # generation's share: the training rounds' generation and the evaluations, both inside the run's wall time
    assert (
        0 < sweep.generation_seconds
        and 0 < sweep.eval_seconds
        and (sweep.generation_seconds + sweep.eval_seconds < sweep.wall_seconds)
    )
    assert control.generation_seconds == 0.0 and 0 < control.eval_seconds < control.wall_seconds
    from costaware.report.markdown_appendix import generation_share_lines
    from costaware.report.run_tables import generation_share

    share = generation_share([sweep, dataclasses.replace(sweep, generation_seconds=None)])
    line = generation_share_lines(share)[0]
    share = round(100 * sweep.generation_seconds / sweep.wall_seconds)
    assert line.startswith("Generation's share of the run wall time (1 runs") and f"{share}% in the training" in line


# ---------------------------------------------------------------- what a worker keeps between runs


def test_a_worker_reads_a_checkpoint_once_and_every_run_gets_its_own_copy(sft_dir):
    from transformers import AutoModelForCausalLM

    from costaware.experiments import worker

    fresh = AutoModelForCausalLM.from_pretrained(str(sft_dir))
    _, a = worker.load_checkpoint(sft_dir)
    _, b = worker.load_checkpoint(sft_dir)
    assert a is not b and len(worker._CHECKPOINTS) >= 1
    for (name, p), q in zip(fresh.state_dict().items(), a.state_dict().values(), strict=True):
        assert (p == q).all(), name  # the weights a fresh load gives
    assert a.lm_head.weight is a.model.embed_tokens.weight  # tied, as after a load
    with __import__("torch").no_grad():
        a.lm_head.weight.add_(1.0)  # training one run's copy leaves the next run's untouched
    assert (b.lm_head.weight == fresh.lm_head.weight).all()
    assert (worker.load_checkpoint(sft_dir)[1].lm_head.weight == fresh.lm_head.weight).all()


def test_prompts_tokenised_once_sample_what_strings_sample(sft_dir):
    from costaware.experiments import policy
    from costaware.experiments.worker import load_checkpoint

    tok, model = load_checkpoint(sft_dir)
    prompts = ["3+4=", "1+2+3+4+5=", "9+9="]
    enc = policy.encode_prompts(tok, prompts, k=3, batch_size=4)  # batches of 4 and 4 and 1 rows
    assert [b["input_ids"].shape[0] for b in enc.batches] == [4, 4, 1]
    kw = dict(k=3, max_new_tokens=12, seed=7)
    assert policy.sample(model, tok, enc, **kw) == policy.sample(model, tok, prompts, batch_size=4, **kw)
    with pytest.raises(ValueError, match="k=3"):
        policy.sample(model, tok, enc, k=2, max_new_tokens=4, seed=0)


# ---------------------------------------------------------------- the job in real processes


def _start(out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # A terminal's job gets SIGINT's default action; a test run launched in the background ("cmd &" in a
    # script) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt: restore the default.
    return subprocess.Popen([sys.executable, "-m", "costaware.cli", "reproduce", "--quick", "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip


def _live_in_group(pgid: int) -> list[int]:
    """Processes of the process group that are not zombies."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            after = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(after[2]) == pgid and after[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _wait_for_workers(proc: subprocess.Popen, n: int, timeout: float = 300) -> None:
    """Until the job has started ``n`` processes besides itself (workers + the resource tracker)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stdout.read()
        if len([p for p in _live_in_group(proc.pid) if p != proc.pid]) >= n:
            time.sleep(3)  # let them load the model and start training
            return
        time.sleep(0.5)
    raise AssertionError("the job started no worker")


def _assert_gone(pgid: int, within: float) -> None:
    end = time.monotonic() + within
    while _live_in_group(pgid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _live_in_group(pgid), f"processes left: {_live_in_group(pgid)}"


def _assert_nothing_partial(out: Path) -> None:
    from costaware.experiments.records import RunResult

    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    assert not [p for p in (out / "runs").iterdir() if p.is_dir()]  # no work folder of an unfinished run
    for f in (out / "runs").glob("*.json"):
        RunResult.load(f)  # every file there is a whole record
    for sft in out.glob("sft-*"):
        assert (sft / "sft.json").exists()


def _assert_quiet(said: str) -> None:
    """Each warning condition once, no echoed source line, no progress bar per load, no leaked semaphore."""
    assert "leaked semaphore" not in said and "Loading weights" not in said and "Writing model shards" not in said
    assert "warnings.warn(" not in said  # Python's default warning format echoes the source line
    conditions = [line for line in said.splitlines() if line.startswith("  ") and "Warning: " in line]
    assert len(conditions) == len(set(conditions)) <= 4, conditions


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_exit_when_the_parent_is_killed(tmp_path):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    proc = _start(tmp_path / "out", "--jobs", "2")
    try:
        _wait_for_workers(proc, 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _assert_gone(proc.pid, within=10)  # no orphan trains on
    finally:
        if _live_in_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_every_worker_then_resume_finishes_the_quick_profile(tmp_path, capfd):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    pytest.importorskip("matplotlib", reason="the 'plot' extra is not installed")
    from costaware.cli import main

    out = tmp_path / "rq"
    proc = _start(out, "--jobs", "2")
    try:
        _wait_for_workers(proc, 2)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert proc.wait(timeout=15) == 130
        _assert_gone(proc.pid, within=5)
    finally:
        if _live_in_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    said = proc.stdout.read()
    assert "interrupted" in said
    _assert_quiet(said)
    _assert_nothing_partial(out)
    done_before = len(list((out / "runs").glob("*.json")))
    stale = out / "runs" / "arith-headline-grpo-pods-s0-0123456789"  # a work folder a SIGKILLed job left
    stale.mkdir()
    # --report-only trains nothing: a report of the finished runs, or a one-line error when none finished
    code = main(["reproduce", "--quick", "--out", str(out), "--report-only"])
    said = capfd.readouterr()
    assert not stale.exists()  # removed by the next invocation
    if done_before:
        assert code == 0 and f"report from {done_before} of {len(run_specs(PROFILES['quick']))} runs" in said.out
        assert (out / "report.md").exists()
    else:
        assert code == 2 and "no run of this profile has finished" in said.err
    assert len(list((out / "runs").glob("*.json"))) == done_before
    # resume: finishes what is left and writes the report
    assert main(["reproduce", "--quick", "--out", str(out), "--jobs", "2"]) == 0
    said = capfd.readouterr()  # the workers' output too: they write to the same descriptors
    assert f"{done_before} already finished" in said.out
    _assert_quiet(said.out + said.err)
    _assert_nothing_partial(out)
    from report_html import Page

    text = Page((out / "report.html").read_text()).text  # as rendered: the Markdown escapes '*' and '|'
    for needle in (
        "Decomposition",
        "Verdicts",
        "Plateau check",
        "p* beats GRPO",
        "sort / grpo",
        "sort / dapo",
        "sort / cispo",
        "p* beats p* (paper's proxy |A|):",
        "p* (calibrated proxy) beats p*",
        "Under loss dapo, p* uses proxy 'auto' = calibrated",
        "they mean nothing about the methods",
        "Generation's share of the run wall time",
        "sort / grpo-40-prompts",
        "The prompt-stage target",
        "Predicted beside measured",
    ):
        assert needle in text, needle
    # one seed: point estimates, no interval and no verdict; a 1280-px screenshot of the page as a CI artefact
    assert "CI excludes zero" not in text and "1 seed: no interval" in text
    assert not any(w in text for w in (": yes.", ": no, it is worse.", ": not shown."))
    from report_html import save_artefact

    save_artefact(out / "report.html", "report-quick")
    # the quick policy learns: a target lies above the start, so the report computes the comparison (one seed
    # and 96 samples per evaluation: which sections clear their target is noise, that some do is not)
    import json

    sections = json.loads((out / "summary.json").read_text())["sections"]
    assert any(s["informative"] and s["decomposition"] for s in sections), sections
    # re-pricing the finished runs: generation_cost is in the run key, so --report-only finds the runs at the
    # price they ran at and reports at the one given, saying so
    assert main(["reproduce", "--quick", "--out", str(out), "--report-only", "--set", "generation_cost=1"]) == 0
    said = capfd.readouterr()
    assert "runs recorded at generation_cost=0.333333, reported at 1" in said.out, said.out[-2000:]
    assert json.loads((out / "summary.json").read_text())["generation_cost"] == 1
    for axis in ("po_tokens", "rounds", "total_cost", "generated_tokens"):
        assert (out / f"accuracy_vs_{axis}.png").stat().st_size > 5_000
    assert any("rollout" in s for s in sections)  # the prompt-stage section's numbers
    assert list((out / "runs").glob("*.prompts.jsonl"))  # every GRPO run's per-prompt log
    runs = sorted((out / "runs").glob("*.json"))
    assert len(runs) == len(run_specs(PROFILES["quick"]))
    first = {f.name: f.stat().st_mtime_ns for f in runs}
    assert main(["reproduce", "--quick", "--out", str(out), "--jobs", "1"]) == 0
    assert f"{len(runs)} already finished" in capfd.readouterr().out
    assert {f.name: f.stat().st_mtime_ns for f in sorted((out / "runs").glob("*.json"))} == first  # nothing re-run
