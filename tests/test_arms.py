"""Arms: one typed record per run's sampling, whose key is the string every recorded run file is named with.

The keys must not change (recorded runs are found again by them), so the string builders that existed
before :class:`Arm` are kept here, verbatim, as the oracle: every arm that every profile defines has the
key, the run-file slug and the label it had. The run file names of every profile are pinned too.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.experiments import arms
from costaware.experiments.arms import DEFAULT_ALPHA, KEY_PARTS, Arm, arm_fields
from costaware.experiments.keys import run_file
from costaware.experiments.profile import PROFILES
from costaware.experiments.records import RunId
from costaware.experiments.specs import RunSpec, run_specs
from costaware.report import labels
from costaware.report.labels import label

SRC = Path(__file__).resolve().parents[1] / "src" / "costaware"


# ---------------------------------------------------------------- the builders before Arm (commit e7f6f44)


def old_run_id_arm(r) -> str:  # RunId.arm
    arm = r.method
    if r.weights == "raw":
        arm += ":raw"
    if r.method == "p_smooth" and r.alpha != 0.01:
        arm += f":a{r.alpha:g}"
    if r.proxy_noise:
        arm += f":noise{r.proxy_noise:g}"
    if r.step_budget == "tokens":
        arm += ":tokens"
    if r.proxy != "auto":
        arm += f":{r.proxy}"
    return arm


def old_run_spec_arm(s) -> str:  # RunSpec.arm, the run file's name
    arm = s.method + (":raw" if s.weights == "raw" else "")
    if s.method == "p_smooth" and s.alpha != 0.01:
        arm += f":a{s.alpha:g}"
    arm += f":noise{s.proxy_noise:g}" if s.proxy_noise else ""
    arm += ":tokens" if s.step_budget == "tokens" else ""
    arm += f":{s.proxy}" if s.proxy != "auto" else ""
    return arm + (f":lr{s.lr_scale:g}" if s.lr_scale != 1.0 else "")


_OLD_LABELS = dict(labels.LABELS)
_OLD_OPTIONS = {
    "raw": "raw weights",
    "tokens": "tokens/step matched",
    "advantage": "paper's proxy |A|",
    "calibrated": "calibrated proxy",
    "length_aware": "length-aware proxy",
}


def old_label(arm: str, *, learning_rate=None, default_lr=None) -> str:  # report.labels.label, on the key
    method, *opts = arm.split(":")
    name, extra = _OLD_LABELS.get(method, method), []
    for o in opts:
        if o.startswith("a") and method == "p_smooth":
            name = f"p*_smooth({o[1:]})"
        elif o.startswith("noise"):
            extra.append(f"σ²={o[5:]}")
        else:
            extra.append(_OLD_OPTIONS.get(o, o))
    if learning_rate is not None and default_lr is not None and learning_rate != default_lr:
        extra.append(f"lr ×{learning_rate / default_lr:.3g}")
    return name + (f" ({', '.join(extra)})" if extra else "")


# Every profile's run file names at commit e7f6f44, before Arm: (runs, sha256 of the sorted names).
PINNED_RUN_FILES = {
    "default": (40, "59a81a9114ed91b1b1297cdba74320d0ba09514a0865f5b49fbd5148aeb25066"),
    "full": (174, "f5671aeae65e409ba609cecbd25637c864a9f42cb99ef025996f1a07243530eb"),
    "full+long": (189, "11f9c3319c169a30caf6e392bc34a0edf0e2cbd92f7d15fd05c5697c894251a1"),
    "quick": (18, "eba90a27fcadb9d4eca7e329d493b807b8fcb48652af8592406e13a1f99c8a57"),
}
NEW_GROUPS = ("rollout", "support")  # groups added after the pinned run files were recorded
NEW_TASKS = ("sortcheck:7",)  # tasks added to a profile after the pinned run files were recorded
PROFILE_SETS = {**PROFILES, "full+long": dataclasses.replace(PROFILES["full"], long_budget=4.0)}  # + the long group


def _specs(*, new: bool = False) -> list[RunSpec]:
    """Every profile's specs that existed before Arm (``new``: only the prompt-stage group's, added after)."""
    return [
        s for p in PROFILE_SETS.values() for s in run_specs(p) if (s.group in NEW_GROUPS or s.task in NEW_TASKS) == new
    ]


def _run_id(spec: RunSpec, lr: float = 1e-4) -> RunId:  # as runs.run_one builds it
    loss = "sft" if spec.method == "sft" else ("grpo" if spec.loss_type == "profile" else spec.loss_type)
    return RunId(
        task=spec.task,
        seed=spec.seed,
        learning_rate=lr * spec.lr_scale,
        loss_type=loss,
        setting=spec.setting,
        group=spec.group,
        **arm_fields(spec),
    )


# ---------------------------------------------------------------- keys, slugs and labels unchanged


def test_doctests():
    assert doctest.testmod(arms).failed == 0
    assert doctest.testmod(labels).failed == 0


def test_every_profile_arm_has_its_old_key_slug_and_label():
    specs = _specs()
    assert len({s.arm for s in specs}) >= 14  # every option appears: raw, alpha, noise, tokens, proxies, sft
    for spec in specs:
        arm, rid = spec.arm, _run_id(spec)
        assert arm == Arm.of(spec) == rid.arm == Arm(**dataclasses.asdict(arm))  # one arm, from either record
        assert arm.key == old_run_id_arm(rid) == old_run_id_arm(spec), spec
        assert spec.slug == old_run_spec_arm(spec), spec
        assert label(arm) == old_label(arm.key), spec
        assert label(arm, learning_rate=rid.learning_rate, default_lr=1e-4) == old_label(
            arm.key, learning_rate=rid.learning_rate, default_lr=1e-4
        )


@pytest.mark.parametrize("name", sorted(PINNED_RUN_FILES))
def test_run_file_names_are_the_ones_recorded_before_arms(name):
    profile = PROFILE_SETS[name]
    names = sorted(
        run_file(Path("o"), s, profile).name
        for s in run_specs(profile)
        if s.group not in NEW_GROUPS and s.task not in NEW_TASKS
    )
    assert (len(names), hashlib.sha256("\n".join(names).encode()).hexdigest()) == PINNED_RUN_FILES[name]


def test_prompt_stage_arms_have_their_own_keys_files_and_labels():
    specs = [s for s in _specs(new=True) if s.group == "rollout"]
    assert {s.rollout for s in specs} == {"all", "greso", "cost_aware_skip", "cost_aware", "dapo"}
    for spec in specs:
        assert spec.arm == _run_id(spec).arm
        assert (spec.rollout == "all") == ("rollout-" not in spec.arm.key)
        assert spec.setting.endswith("-prompts")  # its own report section, apart from the headline's fresh prompts
    for name, profile in PROFILE_SETS.items():
        files = [run_file(Path("o"), s, profile).name for s in run_specs(profile)]
        assert len(set(files)) == len(files), name
    assert label(Arm("p_star", rollout="cost_aware_skip")) == "p* (cost-aware skip, biased)"


_arms = st.builds(
    Arm,
    method=st.sampled_from(["none", "nonzero", "p_star", "p_smooth", "pods", "inv_sqrt_cost", "sft"]),
    weights=st.sampled_from(["centred", "raw"]),
    alpha=st.sampled_from([DEFAULT_ALPHA, 0.05, 0.1, 0.5]),
    proxy_noise=st.sampled_from([0.0, 0.1, 1.0, 2.5]),
    step_budget=st.sampled_from(["rows", "tokens"]),
    proxy=st.sampled_from(["auto", "advantage", "calibrated", "length_aware"]),
)


@settings(max_examples=300, deadline=None)
@given(_arms, _arms)
def test_keys_are_the_old_builders_and_tell_arms_apart(a, b):
    assert a.key == old_run_id_arm(a)
    misread = a.method == "p_smooth" and a.proxy.startswith("a")  # the old parser's bug, below
    assert label(a) == old_label(a.key) or misread
    assert (a.key == b.key) == (a == b)  # a key names one arm, so runs grouped by arm are grouped by key
    assert (a < b) == (a.key < b.key)  # tables sorted by arm keep the order they had sorted by key


def test_a_proxy_starting_with_a_is_not_read_as_p_smooth_alpha():
    """Parsing the key read p_smooth's proxy 'advantage' as alpha 'dvantage'; the typed fields cannot."""
    arm = Arm("p_smooth", proxy="advantage")
    assert old_label(arm.key) == "p*_smooth(dvantage)"
    assert label(arm) == "p*_smooth(0.01) (paper's proxy |A|)"


def test_alpha_is_part_of_p_smooth_alone():
    assert Arm("p_star", alpha=0.3) == Arm("p_star") and Arm("p_star", alpha=0.3).key == "p_star"
    assert Arm("p_smooth", alpha=0.3) != Arm("p_smooth") and Arm("p_smooth", alpha=0.3).key == "p_smooth:a0.3"


def test_every_option_has_one_key_part_and_a_label():
    options = [f.name for f in dataclasses.fields(Arm) if f.name != "method"]
    assert [name for name, _ in KEY_PARTS] == options  # key order is field order
    every = Arm(
        "p_smooth",
        weights="raw",
        alpha=0.05,
        proxy_noise=0.1,
        step_budget="tokens",
        proxy="calibrated",
        rollout="greso",
    )
    assert [name for name, _ in every.options()] == options
    assert label(every) == (
        "p*_smooth(0.05) (raw weights, σ²=0.1, tokens/step matched, calibrated proxy, GRESO skip, biased)"
    )


@pytest.mark.parametrize(("kw", "name"), [
    (dict(method="p_star:raw"), "Arm.method"), (dict(method=""), "Arm.method"), (dict(proxy="a:b"), "Arm.proxy"),
    (dict(weights="centered"), "Arm.weights"), (dict(step_budget="steps"), "Arm.step_budget"),
    (dict(alpha=1.5), "Arm.alpha"), (dict(alpha=float("nan")), "Arm.alpha"),
    (dict(proxy_noise=-0.1), "Arm.proxy_noise"),
])  # fmt: skip
def test_bad_arm_field_is_one_error_naming_it(kw, name):
    with pytest.raises(ValueError, match=name):
        Arm(**{"method": "p_star", **kw})


def test_label_takes_an_arm_not_a_key():
    with pytest.raises(TypeError, match="arm must be an Arm"):
        label("p_star:raw")


# ---------------------------------------------------------------- nothing parses an id


_ID_PARSERS = ("split", "rsplit", "partition", "rpartition")
# A task id ("sort:9") is user input (--set extra_tasks=sort:9), read once where it enters: not an arm.
_ALLOWED_PARSES = {("experiments/tasks.py", "split_task_id")}


def _colon_parses(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every ``x.split(":")``-like call in the file."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, fn: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            fn = node.name
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _ID_PARSERS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == ":"
        ):
            out.append((fn, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, fn)

    visit(ast.parse(path.read_text()), "<module>")
    return out


def test_nothing_in_experiments_or_report_parses_an_id_at_its_colons():
    found = []
    for path in sorted([*(SRC / "experiments").glob("*.py"), *(SRC / "report").glob("*.py")]):
        rel = str(path.relative_to(SRC))
        found += [(rel, fn, line) for fn, line in _colon_parses(path) if (rel, fn) not in _ALLOWED_PARSES]
    assert not found, f"ids parsed back from strings: {found}"


def test_the_parse_finder_finds_a_split_on_colons(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(arm):\n    method, *opts = arm.split(":")\n    return arm.partition(":")\n')
    assert [line for _, line in _colon_parses(bad)] == [2, 3]
