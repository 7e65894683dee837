"""CPU support for running verl 0.9.x's own trainer (``python -m verl.trainer.main_ppo``) on a machine without a GPU.

Loaded in every process through verl's ``VERL_USE_EXTERNAL_MODULES=costaware.integrations.verl.cpu.patches``
hook (``verl/__init__.py`` imports it at ``import verl``, before any trainer or worker module). No verl file is
edited: this registers a ``cpu`` platform (``platform.py``) and an HF rollout server (``rollout.py``), and patches
three verl modules at import time, each standing in for the verl lines named below:

- ``verl.utils.distributed.initialize_global_process_group_ray`` (``utils/distributed.py:89``) builds
  the backend ``f"cpu:gloo,{device}:{backend}"``, which is ``"cpu:gloo,cpu:gloo"`` on the CPU and fails
  with "Duplicate device type cpu"; the wrap passes ``"cpu:gloo"``.
- ``verl.workers.engine.fsdp.transformer_impl``: the FSDP engines are registered for ``cuda`` and ``npu``
  only (``:1143``), so the CPU gets them too; the ref model's FSDP2 offload uses
  ``CPUOffloadPolicy(pin_memory=True)`` (``:459-462``), and pinning needs an accelerator ("Cannot access
  accelerator"), so the policy there never pins.
- ``verl.workers.rollout.base`` / ``.replica``: ``rollout.name=hf`` in both rollout registries.

Everything else the CPU needs is configuration (``run.py`` writes it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

SUPPORTED = ("0.9.",)


def _check_version() -> None:
    import verl

    version = getattr(verl, "__version__", "?")
    if not version.startswith(SUPPORTED):
        raise RuntimeError(
            "costaware.integrations.verl.cpu supports verl 0.9.x (its patches stand in for lines of that "
            f"release), found verl {version}"
        )


def _patch_distributed(module: Any) -> None:  # Any: a verl module whose attributes are set
    inner = module.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):  # noqa: ANN001 - verl's signature
        return inner(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    module.initialize_global_process_group_ray = initialize_global_process_group_ray


def _patch_fsdp_engine(module: Any) -> None:
    from verl.workers.engine.base import EngineRegistry

    policy: type = module.CPUOffloadPolicy

    class UnpinnedCPUOffloadPolicy(policy):  # type: ignore[misc,valid-type]  # torch's class, known at run time
        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for backends in EngineRegistry._engines.values():
        for name in ("fsdp", "fsdp2"):
            devices = backends.get(name, {})
            if "cuda" in devices:
                devices.setdefault("cpu", devices["cuda"])


def _patch_rollout_base(module: ModuleType) -> None:
    module._ROLLOUT_REGISTRY[("hf", "async")] = "costaware.integrations.verl.cpu.rollout.HFServerAdapter"


def _patch_replica(module: ModuleType) -> None:
    def load():
        from costaware.integrations.verl.cpu.rollout import HFReplica

        return HFReplica

    module.RolloutReplicaRegistry.register("hf", load)


TARGETS: dict[str, Callable[[ModuleType], None]] = {
    "verl.utils.distributed": _patch_distributed,
    "verl.workers.engine.fsdp.transformer_impl": _patch_fsdp_engine,
    "verl.workers.rollout.base": _patch_rollout_base,
    "verl.workers.rollout.replica": _patch_replica,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def create_module(self, spec):  # noqa: ANN001
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        TARGETS[module.__name__](module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001
        if name not in TARGETS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    _check_version()
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    from costaware.integrations.verl.cpu import platform  # noqa: F401 - registers the cpu platform

    for name, patch in TARGETS.items():
        if name in sys.modules:  # imported before this hook ran
            patch(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
