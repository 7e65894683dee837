"""Import hook that patches verl modules as soon as they are imported.

Stdlib only (``patch`` imports nothing heavy at module level), so that the plugin import done by
``import verl`` stays cheap: the trainer modules pull in Ray, vLLM clients and TransferQueue, which must
not be imported just because verl was.

``TARGETS`` maps each module name to the callable that patches it. ``patch`` does not import this module,
so the two form no cycle.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType

from costaware.integrations.verl.curriculum import patch_sampler_factory, patch_sampler_factory_v1
from costaware.integrations.verl.driver import patch_main_ppo, patch_validate_config
from costaware.integrations.verl.patch import (
    PATCH_MARK,
    patch_losses,
    patch_metrics_aggregator,
    patch_training_worker,
    patch_v0,
    patch_v1,
)


def _v0(module: ModuleType) -> None:
    patch_v0(module.RayPPOTrainer)


def _v1(module: ModuleType) -> None:
    patch_v1(module.PPOTrainer)
    patch_sampler_factory_v1(module)  # v1 binds create_rl_sampler by name: refuse data.sampler there


def _v1_metrics(module: ModuleType) -> None:
    patch_metrics_aggregator(module.MetricsAggregator)


# module name -> the callable that patches it (the driver's config checks, trainer update, actor loss, v1
# metrics window, the train sampler: ``utils`` before the trainers that bind its ``create_rl_sampler`` by name;
# the actor worker's mini-batch loop, which selects trainer v1's draws)
TARGETS: dict[str, Callable[[ModuleType], None]] = {
    "verl.utils.config": patch_validate_config,
    "verl.trainer.main_ppo": patch_main_ppo,
    "verl.trainer.ppo.utils": patch_sampler_factory,
    "verl.trainer.ppo.ray_trainer": _v0,
    "verl.trainer.ppo.v1.trainer_base": _v1,
    "verl.trainer.ppo.v1.utils": _v1_metrics,
    "verl.workers.utils.losses": patch_losses,
    "verl.workers.engine_workers": patch_training_worker,
}
_lock = threading.Lock()


def _apply(module: ModuleType) -> None:
    TARGETS[module.__name__](module)
    setattr(module, PATCH_MARK, True)


def is_patched(module_name: str) -> bool:
    """True when the module ``module_name`` (a key of ``TARGETS``) has been imported and patched."""
    module = sys.modules.get(module_name)
    return module is not None and bool(getattr(module, PATCH_MARK, False))


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        # get_source, get_filename, is_package ... stay the inner loader's (inspect, tracebacks).
        return getattr(self._inner, name)

    def create_module(self, spec):  # noqa: ANN001 - signature fixed by importlib
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _apply(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # noqa: ANN001 - signature fixed by importlib
        if fullname not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def install_import_hook() -> None:
    """Install the hook (idempotent); target modules already imported are patched at once."""
    with _lock:
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
    for name in TARGETS:
        module = sys.modules.get(name)
        if module is not None and not is_patched(name):
            _apply(module)
