"""A ``cpu`` platform for verl 0.9.x, registered through ``PlatformRegistry``.

verl ships ``cuda``, ``npu`` and ``rocm`` platforms only. Without one for the CPU,
``auto_set_device`` (``verl/utils/device.py:160-170``) silently turns ``trainer.device=cpu`` into
``cuda`` and ``platform_manager.py:113-117`` falls back to ``nvidia``. Ray still schedules workers on
logical GPUs (``ray_resource_name`` is ``GPU``; pass ``ray_init.num_gpus``), because
``single_controller/ray/base.py:210,226-242`` asks for GPUs whenever ``use_gpu`` is true.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


class _CPUDeviceModule(ModuleType):
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes on ``get_torch_device()``.

    ``utils/memory_utils.py:47`` and ``utils/debug`` read ``memory_reserved`` and friends, checkpoints
    save ``get_rng_state``, ``utils/flops_counter.py:79-85`` asks for ``get_device_name``; ``torch.cpu``
    has none of them. Memory figures are 0 (nothing is reserved on a device).
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"

    @staticmethod
    def get_device_properties(device: Any = None) -> Any:
        import psutil

        return SimpleNamespace(name="CPU", total_memory=psutil.virtual_memory().total)

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None


def _zero(device: Any = None) -> int:
    return 0


CPU_DEVICE = _CPUDeviceModule("verl_cpu_device")
for _name in ("memory_reserved", "memory_allocated", "max_memory_reserved", "max_memory_allocated"):
    setattr(CPU_DEVICE, _name, _zero)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:  # type: ignore[override]  # verl annotates int, and means a device
        # verl passes this to .to(device=...) and torch.device(...): an int there means an accelerator
        # ("Cannot access accelerator device", utils/fsdp_utils.py:507); "cpu" is what torch.cpu returns
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # logical GPUs: ray_init.num_gpus=N on a machine without any

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
