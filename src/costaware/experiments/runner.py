"""How `costaware reproduce` runs its runs: checked arguments, one lock per ``--out``, worker processes
that stop with their parent, and atomic, resumable results.

- :func:`resolve` checks every argument and builds the profile and the run list *before any work*
  (the SFT warm-up included): a bad value is a ``ValueError`` naming the option, which the CLI prints as
  one line with exit status 2. An option given as 0 is never replaced by the profile's value.
- :func:`out_lock` takes ``fcntl.flock`` on ``--out/.lock``: a second job on the same folder is refused.
- Workers ignore SIGINT; the parent, on Ctrl-C or SIGTERM, terminates them at once, removes partial
  files and the work folders of unfinished runs, and exits 130. Each worker also watches its parent
  (``PR_SET_PDEATHSIG`` on Linux and a thread polling ``os.getppid()``), so a SIGKILLed parent leaves
  no orphan training on.
- A finished run is one ``runs/<name>.json`` written by tmp + ``os.replace``; a rerun skips it.
- The report is written, still under the lock, by the :class:`ReportWriter` the caller passes
  (``costaware.jobs`` passes ``costaware.report.grpo.write_report``): the experiments import no report.
- Workers are spawned (a fresh interpreter each, safe after the parent's multi-threaded SFT) and serve
  many runs: each imports torch, transformers and TRL once, in its initializer, and keeps what does not
  change between runs (``experiments.worker``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from costaware.experiments.keys import run_file
from costaware.experiments.profile import GROUPS, HEADLINE, PROFILES, Profile
from costaware.experiments.specs import RunSpec, run_specs
from costaware.experiments.tasks import get_task

if TYPE_CHECKING:
    from costaware.experiments.arms import Arm
    from costaware.experiments.records import RunId, RunResult

LOCK_NAME = ".lock"
# The quick profile trains a tiny policy on one seed for a few rounds: enough to exercise every step and the
# comparison, too little to say anything about the methods. Its report opens with this.
QUICK_NOTICE = (
    "Smoke test (--profile quick): a tiny policy, one seed, a few rounds. These figures exercise the "
    "pipeline and the comparison; they mean nothing about the methods."
)


class ReportWriter(Protocol):
    """Writes the job's report into ``out`` from its finished runs; returns the paths written by kind, the
    ``markdown`` and ``html`` pages among them (``costaware.report.grpo.write_report``)."""

    def __call__(
        self,
        results: Sequence[RunResult],
        out: Path,
        *,
        command: str,
        profile: dict[str, Any] | None,
        sft: dict[str, Any] | None,
        baseline: str | Arm,
        candidate: str | Arm,
        generation_cost: float,
        notice: str | None,
        logs: Mapping[RunId, Path] | None,
    ) -> Mapping[str, Path]: ...


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's share), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``--set field=value`` pairs as Profile changes, each value read as its field's type.

    >>> parse_overrides(["hidden_size=96", "lr_sweep=0.5,2", "task=arith", "seeds=0,1"])
    {'hidden_size': 96, 'lr_sweep': (0.5, 2.0), 'task': 'arith', 'seeds': (0, 1)}
    """
    fields = {f.name: f for f in dataclasses.fields(Profile)}
    scalars = {"int": int, "float": float, "str": str}
    out: dict[str, Any] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or name not in fields:
            raise ValueError(f"--set takes field=value with a Profile field (see --show-profile), got {item!r}")
        if name in out:
            raise ValueError(f"--set gives {name} twice, got {item!r}")
        kind = cast(str, fields[name].type)  # the annotation, a string: "int", "float", "str", "tuple[int, ...]"
        try:
            if kind.startswith("tuple["):
                elem = scalars[kind[len("tuple[") :].split(",")[0]]
                out[name] = tuple(elem(v) for v in text.split(",") if v.strip())
            else:
                out[name] = scalars[kind](text)
        except ValueError:
            raise ValueError(f"--set {name} takes a value like {fields[name].default!r}, got {text!r}") from None
    return out


def resolve(args: argparse.Namespace) -> tuple[Profile, list[RunSpec]]:
    """The profile and the runs the arguments ask for; every argument is checked here, before any work."""
    if args.jobs is None:  # one single-threaded worker per CPU this process may use
        args.jobs = available_cpus()
    if args.jobs < 1:
        raise ValueError(f"--jobs must be an integer >= 1, got {args.jobs}")
    changes: dict[str, Any] = parse_overrides(getattr(args, "set", None))
    if args.seeds is not None:
        bad = [s for s in args.seeds if s < 0]
        if bad or len(set(args.seeds)) != len(args.seeds):
            raise ValueError(f"--seeds must be distinct integers >= 0, got {' '.join(map(str, args.seeds))}")
        changes["seeds"] = tuple(args.seeds)
    if args.rounds is not None:
        if args.rounds < 1:
            raise ValueError(f"--rounds must be an integer >= 1, got {args.rounds}")
        changes["rounds"] = args.rounds
    if args.token_budget is not None:
        if args.token_budget < 0:
            raise ValueError(f"--token-budget must be an integer >= 0, got {args.token_budget}")
        changes["token_budget"] = args.token_budget
    if args.learning_rate is not None:
        if not (math.isfinite(args.learning_rate) and args.learning_rate > 0):
            raise ValueError(f"--learning-rate must be a finite number > 0, got {args.learning_rate}")
        changes["learning_rate"] = args.learning_rate
    if args.loss_type is not None:
        from costaware.integrations.trl import SUPPORTED_LOSS_TYPES

        if args.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(f"--loss-type must be one of {', '.join(SUPPORTED_LOSS_TYPES)}, got {args.loss_type!r}")
        changes["loss_type"] = args.loss_type
    if args.task is not None:
        changes["task"] = args.task
    known = sorted({m for m, _ in HEADLINE})
    if args.methods is not None:
        bad = [m for m in args.methods if m not in known]
        if bad:
            raise ValueError(f"--methods must be among {', '.join(known)}, got {' '.join(bad)}")
        if "none" not in args.methods:  # the report measures every method against GRPO
            args.methods = ["none", *args.methods]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder, got the file {str(out)!r}")
    archive = getattr(args, "archive", None)
    if archive is not None and Path(archive).exists() and not Path(archive).is_dir():
        raise ValueError(f"--archive must be a folder, got the file {str(archive)!r}")
    try:
        profile = dataclasses.replace(PROFILES[args.profile], **changes)
    except ValueError as e:
        raise ValueError(f"--set/options: {e}") from None
    for name in profile.tasks():
        try:
            get_task(name)
        except ValueError as e:
            raise ValueError(f"--task {name!r} (profile {args.profile}) is not a task family here: {e}") from None
    specs = run_specs(profile, args.methods, tuple(args.only or GROUPS))
    if not any(s.method == "none" for s in specs):
        raise ValueError(f"--only {' '.join(args.only or ())} selects no GRPO run ('none'), the baseline the "
                         "report compares every method against")  # fmt: skip
    from costaware.experiments.grpo_run import trainer_args

    for spec in {dataclasses.replace(s, seed=0) for s in specs if s.method != "sft"}:  # what TRL would refuse
        trainer_args(spec, profile, out / "runs" / "check")
    return profile, specs


@contextlib.contextmanager
def out_lock(out: Path) -> Iterator[None]:
    """Hold ``out/.lock`` for the job; a second job on the same ``out`` gets a ValueError."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_NAME, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"--out {str(out)!r} is in use by another costaware reproduce "
                f"(lock {out / LOCK_NAME} held); wait for it or choose another --out"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_partial(out: Path) -> None:
    """Temporary files of writes that did not finish, and the work folders of runs that did not (an
    interrupted job; we hold the lock): only finished runs are kept. A finished run removes its own."""
    # the atomic writers' temporary names (.<name>.<pid>.tmp: costaware._io), then the runs' work folders
    for pattern in ("runs/*.tmp", "runs/.*.tmp", ".*.tmp", "runs/*-s[0-9]*-" + "[0-9a-f]" * 10):
        for p in out.glob(pattern):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(0.5)


def worker_init(parent: int) -> None:
    """In each worker: leave Ctrl-C to the parent, die with it, and import what the runs need, once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _preload()


def _preload() -> None:
    """Import torch, transformers, TRL and the adapter before the first run, then freeze the GC.

    A worker serves many runs; without this its first run's ``wall_seconds`` would hold the imports.
    ``gc.freeze`` moves the imported objects out of the collector's reach: every full collection (TRL's
    trainer forces one per run) otherwise walks them all, about 0.3 s each.
    """
    import gc

    try:
        import datasets  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401

        import costaware.experiments.policy  # noqa: F401
        import costaware.experiments.runs  # noqa: F401 - a run, and what it imports at module level
        import costaware.integrations.trl  # noqa: F401
    except Exception:  # noqa: BLE001 - e.g. a missing extra: the run raises it again with its own message;
        return  # an initializer that raises makes the pool respawn the worker forever
    gc.collect()
    gc.freeze()


def _run_one_star(job: tuple[Any, ...]) -> tuple[str, Any]:
    from costaware.experiments.runs import run_one_recorded

    return run_one_recorded(*job)


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_pool(jobs: list[tuple[Any, ...]], processes: int, on_finished: Any = None) -> None:
    """Run ``run_one(*job)`` for every job in ``processes`` spawned workers; on any exit path the workers
    are terminated (not waited for), so Ctrl-C and errors stop everything at once. ``on_finished(path)`` is
    called with each finished run's file, as it finishes."""
    import multiprocessing as mp

    from tqdm import tqdm

    from costaware.experiments.quiet import WarningLog

    log, finished = WarningLog(), 0
    pool = mp.get_context("spawn").Pool(processes, initializer=worker_init, initargs=(os.getpid(),))
    try:
        for out_file, caught in tqdm(pool.imap_unordered(_run_one_star, jobs), total=len(jobs), desc="runs"):
            log.add(Path(out_file).stem.rsplit("-", 1)[0], caught)  # the run's name, without its key
            if on_finished is not None:
                on_finished(Path(out_file))
            finished += 1
        pool.close()
        pool.join()  # the workers exit on their own: one terminated while exiting could leak a semaphore
    finally:
        pool.terminate()
        pool.join()
        for line in log.lines(finished):  # each condition once, also when interrupted
            print(line, file=sys.stderr, flush=True)


def show_profile(profile: Profile, name: str, specs: list[RunSpec]) -> str:
    """The profile that would run, field by field with its help, each change from profile ``name`` marked."""
    base = PROFILES[name]
    lines, group = [f"profile {name!r} with the options given: {len(specs)} runs"], None
    for f in dataclasses.fields(Profile):
        if f.metadata["group"] != group:
            group = f.metadata["group"]
            lines.append(f"[{group}]")
        value, was = getattr(profile, f.name), getattr(base, f.name)
        changed = "" if value == was else f" (changed; {name!r} has {was!r})"
        lines.append(f"  {f.name} = {value!r}{changed}: {profile.field_help(f.name)}")
    return "\n".join(lines)


def reproduce(args: argparse.Namespace, *, command: str, write_report: ReportWriter) -> int:
    """The job: checks ``args``, then under the lock on ``--out`` trains the runs that have not finished and
    writes the report with ``write_report``; ``command``: the command line the report shows."""
    profile, specs = resolve(args)
    if args.show_profile:
        print(show_profile(profile, args.profile, specs))
        return 0
    out = Path(args.out)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        with out_lock(out):
            remove_partial(out)
            try:
                return _reproduce(
                    profile,
                    specs,
                    out,
                    args.jobs,
                    command,
                    write_report,
                    report_only=bool(getattr(args, "report_only", False)),
                    notice=QUICK_NOTICE if args.profile == "quick" else None,
                    recorded_generation_cost=PROFILES[args.profile].generation_cost,
                    archive=Path(args.archive) if getattr(args, "archive", None) else None,
                )
            finally:
                remove_partial(out)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _reproduce(
    profile: Profile,
    specs: list[RunSpec],
    out: Path,
    jobs: int,
    command: str,
    write_report: ReportWriter,
    *,
    report_only: bool = False,
    notice: str | None = None,
    recorded_generation_cost: float | None = None,
    archive: Path | None = None,
) -> int:
    from costaware.experiments import archive as archived
    from costaware.experiments.arms import Arm
    from costaware.experiments.records import RunResult
    from costaware.experiments.sft import warm_up

    keyed = profile  # the profile the run files are named by
    if archive is not None:
        runs, checkpoints = archived.restore(archive, out)
        print(f"[costaware] --archive {archive}: restored {runs} runs and {checkpoints} SFT checkpoints", flush=True)
    if report_only:  # an interrupted job: report what finished, say what did not, train nothing
        files = {spec: run_file(out, spec, profile) for spec in specs}
        if (
            not any(f.exists() for f in files.values())
            and recorded_generation_cost is not None
            and profile.generation_cost != recorded_generation_cost
        ):
            # Re-pricing finished runs: generation_cost is in the run key (the cost-aware prompt rules train
            # with it), so the runs are found under the price they ran at and reported at the one given.
            keyed = dataclasses.replace(profile, generation_cost=recorded_generation_cost)
            files = {spec: run_file(out, spec, keyed) for spec in specs}
            if any(f.exists() for f in files.values()):
                print(f"[costaware] --report-only: runs recorded at generation_cost={recorded_generation_cost:g}, "
                      f"reported at {profile.generation_cost:g} (the cost-aware prompt rules chose their prompts "
                      f"at {recorded_generation_cost:g})", flush=True)  # fmt: skip
        missing = [f.name for f in files.values() if not f.exists()]
        if len(missing) == len(files):
            raise ValueError(f"--report-only: no run of this profile has finished in {str(out)!r}")
        print(f"[costaware] report from {len(files) - len(missing)} of {len(files)} runs; missing: "
              + (", ".join(missing) if missing else "none"), flush=True)  # fmt: skip
        specs = [s for s, f in files.items() if f.exists()]
    (out / "runs").mkdir(parents=True, exist_ok=True)
    sft_dirs = {}
    for task in dict.fromkeys(s.task for s in specs):
        print(f"[costaware] SFT warm-up ({task}) ...", flush=True)
        sft_dirs[task] = warm_up(profile, task, out)
        if archive is not None and not report_only:
            archived.store_sft(archive, sft_dirs[task])
    files = {spec: run_file(out, spec, keyed) for spec in specs}
    todo = [(dataclasses.asdict(s), dataclasses.asdict(profile), str(sft_dirs[s.task]), str(f))
            for s, f in files.items() if not f.exists()]  # fmt: skip
    print(f"[costaware] {len(specs)} runs, {len(specs) - len(todo)} already finished, {jobs} at a time", flush=True)
    if archive is not None and not report_only:
        for f in files.values():  # finished before the archive was named
            if f.exists():
                archived.store_run(archive, f)
    if todo:
        run_pool(todo, min(jobs, len(todo)), None if archive is None else lambda f: archived.store_run(archive, f))
    results = [RunResult.load(f) for f in files.values()]  # exactly this profile's runs
    sft_info = json.loads((sft_dirs[profile.task] / "sft.json").read_text()) if profile.task in sft_dirs else None
    candidate = Arm("p_star", proxy=profile.headline_proxy)  # the headline's p*, with the profile's proxy
    paths = write_report(results, out, baseline="none", candidate=candidate, command=command,
                         profile=dataclasses.asdict(profile),
                         sft=sft_info, generation_cost=profile.generation_cost, notice=notice,
                         logs={r.id: f.with_suffix(".prompts.jsonl")
                               for r, f in zip(results, files.values(), strict=True)})  # fmt: skip
    print(f"[costaware] report: {paths['markdown']}  {paths['html']}")
    return 0
