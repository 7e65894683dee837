"""Typed records of one training run: what every experiment emits and the report reads.

They belong to the main job (``costaware.experiments``) but sit below both the experiments, which write them,
and the report, which reads them: with :mod:`~costaware.experiments.arms`, they are all the report imports
from the package (``tests/test_import_graph.py`` holds the layers). A run is
identified by a :class:`RunId` (task, registry method name, weights mode, setting, learning rate, seed, ...).
The report groups runs by ``RunId.arm``, a typed :class:`~costaware.experiments.arms.Arm`, and never by display labels.
Every count in an :class:`EvalPoint` is cumulative since the start of the run, so that one curve can be read
against each of the report's x-axes: policy-optimisation tokens, generation rounds, and total cost.

>>> rid = RunId(task="arith", method="p_star", seed=0, learning_rate=1e-4, loss_type="grpo", weights="raw")
>>> rid.arm
Arm(method='p_star', weights='raw', alpha=0.01, proxy_noise=0.0, step_budget='rows', proxy='auto', rollout='all')
>>> rid.arm.key
'p_star:raw'
>>> run = RunResult(rid, (EvalPoint(rounds=0, po_tokens=0, generated_tokens=0, heldout_accuracy=0.25),))
>>> RunResult.from_json(run.to_json()) == run
True
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from costaware._checks import (
    in_interval,
    in_unit_interval,
    integer,
    nonempty_string,
    positive_scalar,
    real_scalar,
    value_error,
)
from costaware._io import write_json_atomic
from costaware.experiments.arms import Arm, ArmOptions

__all__ = ["ID_ORDER", "SCHEMA_VERSION", "RunId", "EvalPoint", "ProxyFidelityPoint", "StepErrorPoint", "RunResult"]

SCHEMA_VERSION = 1
# The order of a run id's fields in a record's file: the order RunId declared them in before its arm's
# options came from ArmOptions (a dataclass puts a base's fields first), so that a file is written as before.
ID_ORDER = ("task", "method", "seed", "learning_rate", "loss_type", "weights", "setting", "group", "alpha",
            "proxy_noise", "step_budget", "proxy", "rollout")  # fmt: skip


@dataclass(frozen=True)
class RunId(ArmOptions):
    """Identity of one run. ``arm`` is what the report groups and names baselines by.

    The fields stay flat, as recorded files hold them: ``to_json`` writes and ``from_json`` reads the same
    schema as before :class:`~costaware.experiments.arms.Arm` existed. The arm's options (``weights``,
    ``alpha``, ...) come from :class:`~costaware.experiments.arms.ArmOptions`, keyword-only.
    """

    task: str
    method: str
    seed: int
    learning_rate: float
    loss_type: str
    _: KW_ONLY  # a sixth positional argument was ``weights``: an error now, never another field
    setting: str = "grpo"
    group: str = "headline"

    def __post_init__(self) -> None:
        for name in ("task", "loss_type", "setting", "group"):
            nonempty_string(getattr(self, name), f"RunId.{name}")
        if self.loss_type == "profile":  # the run resolves it; a record holds what ran
            raise value_error("RunId.loss_type", self.loss_type, "must be the resolved TRL loss_type")
        integer(self.seed, "RunId.seed", minimum=0, strict=True)
        positive_scalar(self.learning_rate, "RunId.learning_rate", strict=True)
        super().__post_init__()

    def as_dict(self) -> dict[str, Any]:
        """The fields, in the order a record's file holds them (:data:`ID_ORDER`)."""
        return {name: getattr(self, name) for name in ID_ORDER}

    @property
    def arm(self) -> Arm:
        """The run's arm; ``arm.key`` is its id, e.g. ``p_star``, ``p_star:raw``, ``p_smooth:a0.05``."""
        return Arm.of(self)


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation. Counts are cumulative since the start of the run; accuracies are in [0, 1]."""

    rounds: int
    po_tokens: int
    generated_tokens: int
    heldout_accuracy: float
    validation_accuracy: float | None = None
    step: int = 0
    po_seconds: float = 0.0
    po_tokens_plain: int | None = None
    po_tokens_nonzero: int | None = None

    def __post_init__(self) -> None:
        for name in ("rounds", "po_tokens", "generated_tokens", "step"):
            integer(getattr(self, name), f"EvalPoint.{name}", minimum=0, strict=True)
        for name in ("po_tokens_plain", "po_tokens_nonzero"):
            if getattr(self, name) is not None:
                integer(getattr(self, name), f"EvalPoint.{name}", minimum=0, strict=True)
        in_unit_interval(self.heldout_accuracy, "EvalPoint.heldout_accuracy", strict=True)
        if self.validation_accuracy is not None:
            in_unit_interval(self.validation_accuracy, "EvalPoint.validation_accuracy", strict=True)
        positive_scalar(self.po_seconds, "EvalPoint.po_seconds", allow_zero=True, strict=True)


@dataclass(frozen=True)
class ProxyFidelityPoint:
    """The trainer's proxy diagnostics at one logged step (None: not measured at that step)."""

    step: int
    po_tokens: int
    pearson: float | None = None
    chi2: float | None = None
    j_vs_uniform: float | None = None

    def __post_init__(self) -> None:
        integer(self.step, "ProxyFidelityPoint.step", minimum=0, strict=True)
        integer(self.po_tokens, "ProxyFidelityPoint.po_tokens", minimum=0, strict=True)
        if self.pearson is not None:
            in_interval(self.pearson, "ProxyFidelityPoint.pearson", -1.0, 1.0, strict=True)
        for name in ("chi2", "j_vs_uniform"):
            if getattr(self, name) is not None:
                positive_scalar(getattr(self, name), f"ProxyFidelityPoint.{name}", allow_zero=True, strict=True)


@dataclass(frozen=True)
class StepErrorPoint:
    """The trainer's step-error measurement at one logged step (``cost_aware_mse_interval``): the mean over a
    round's steps of ‖ĝ_s − ḡ‖², measured from exact per-row gradients, beside J's closed form of it (None:
    the plan has none), and ‖ḡ‖² (ḡ the pool's expected step)."""

    step: int
    po_tokens: int
    measured: float
    predicted: float | None = None
    grad_sq: float | None = None

    def __post_init__(self) -> None:
        integer(self.step, "StepErrorPoint.step", minimum=0, strict=True)
        integer(self.po_tokens, "StepErrorPoint.po_tokens", minimum=0, strict=True)
        for name in ("measured", "predicted", "grad_sq"):
            if getattr(self, name) is not None:
                positive_scalar(getattr(self, name), f"StepErrorPoint.{name}", allow_zero=True, strict=True)


_MONOTONE = ("rounds", "po_tokens", "generated_tokens", "step")


@dataclass(frozen=True)
class RunResult:
    """One finished run: identity, evaluation curve, and what the report shows beside it.

    ``po_seconds_controlled`` is True only when the PO seconds were measured under control (one
    process, fixed threads); otherwise the report labels them as contended. ``generation_seconds`` is the
    wall time of the training's generation rounds and ``eval_seconds`` that of its evaluations, both
    within ``wall_seconds`` (None: a record from before they were measured). ``step_errors``: the step-error
    measurements of a run that asked for them (a record without them is written as before they existed).
    """

    id: RunId
    evals: tuple[EvalPoint, ...]
    po_seconds_controlled: bool = False
    wall_seconds: float = 0.0
    fidelity: tuple[ProxyFidelityPoint, ...] = ()
    counters: dict[str, float] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    generation_seconds: float | None = None
    eval_seconds: float | None = None
    step_errors: tuple[StepErrorPoint, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.id, RunId):
            raise value_error("RunResult.id", self.id, "must be a RunId")
        object.__setattr__(self, "evals", tuple(self.evals))
        object.__setattr__(self, "fidelity", tuple(self.fidelity))
        object.__setattr__(self, "step_errors", tuple(self.step_errors))
        if not self.evals:
            raise value_error("RunResult.evals", self.evals, "must hold at least one EvalPoint")
        for name in _MONOTONE:
            seq = [getattr(e, name) for e in self.evals]
            if any(b < a for a, b in zip(seq[:-1], seq[1:], strict=True)):
                raise value_error(f"RunResult.evals[].{name}", seq, "must be non-decreasing")
        positive_scalar(self.wall_seconds, "RunResult.wall_seconds", allow_zero=True, strict=True)
        for name in ("generation_seconds", "eval_seconds"):
            if getattr(self, name) is not None:
                positive_scalar(getattr(self, name), f"RunResult.{name}", allow_zero=True, strict=True)
        for k, v in self.counters.items():
            real_scalar(v, f"RunResult.counters[{k!r}]", strict=True)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the schema version; :meth:`from_json` inverts it."""
        d = dataclasses.asdict(self)
        d["id"] = self.id.as_dict()
        d["evals"], d["fidelity"] = list(d["evals"]), list(d["fidelity"])
        if d["id"]["rollout"] == "all":  # added later: at its default a record is written as before it existed
            del d["id"]["rollout"]
        if d["step_errors"]:
            d["step_errors"] = list(d["step_errors"])
        else:  # added later: a record without them is written as before they existed
            del d["step_errors"]
        return {"schema_version": SCHEMA_VERSION, **d}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunResult:
        """Build and validate a record from :meth:`to_json`'s output; unknown fields are an error."""
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise value_error("schema_version", version, f"must be {SCHEMA_VERSION}")
        try:
            return cls(
                id=RunId(**d["id"]),
                evals=tuple(EvalPoint(**e) for e in d["evals"]),
                po_seconds_controlled=bool(d.get("po_seconds_controlled", False)),
                wall_seconds=float(d.get("wall_seconds", 0.0)),
                fidelity=tuple(ProxyFidelityPoint(**f) for f in d.get("fidelity", ())),
                counters={k: float(v) for k, v in d.get("counters", {}).items()},
                spec=dict(d.get("spec", {})),
                **{k: None if d.get(k) is None else float(d[k]) for k in ("generation_seconds", "eval_seconds")},
                step_errors=tuple(StepErrorPoint(**e) for e in d.get("step_errors", ())),
            )
        except (KeyError, TypeError) as e:  # missing or unknown field: say which
            raise ValueError(f"not a RunResult record: {e}") from e

    def save(self, path: str | Path) -> Path:
        """Write the record atomically: a killed writer leaves no half-written file."""
        return write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        return cls.from_json(json.loads(Path(path).read_text()))
