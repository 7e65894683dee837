"""Import hook that wraps verl's trainer ``_update_actor`` once the trainer module is imported.

Stdlib only, so that the plugin import done by ``import verl`` stays cheap: the trainer modules pull in
Ray, vLLM clients and TransferQueue, which must not be imported just because verl was.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType

# module name -> (class name, name of the patch function in costaware.integrations.verl.patch)
TARGETS: dict[str, tuple[str, str]] = {
    "verl.trainer.ppo.ray_trainer": ("RayPPOTrainer", "patch_v0"),
    "verl.trainer.ppo.v1.trainer_base": ("PPOTrainer", "patch_v1"),
}
PATCH_MARK = "__costaware_cost_aware__"
_lock = threading.Lock()


def _apply(module: ModuleType) -> None:
    from costaware.integrations.verl import patch

    class_name, patch_name = TARGETS[module.__name__]
    getattr(patch, patch_name)(getattr(module, class_name))


def is_patched(module_name: str) -> bool:
    """True when the trainer class of ``module_name`` (a key of ``TARGETS``) carries the wrapper."""
    module = sys.modules.get(module_name)
    if module is None:
        return False
    cls = getattr(module, TARGETS[module_name][0], None)
    return bool(getattr(getattr(cls, "_update_actor", None), PATCH_MARK, False))


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
    """Install the hook (idempotent); trainer modules already imported are patched at once."""
    with _lock:
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
    for name in TARGETS:
        module = sys.modules.get(name)
        if module is not None and not is_patched(name):
            _apply(module)
