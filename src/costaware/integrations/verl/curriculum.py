"""verl 0.9's missing curriculum-sampler hook, put back by the plugin: ``data.sampler.class_path`` and
``sampler.update(batch)``.

verl ≤ 0.8 built ``data.sampler.class_path`` / ``class_name`` as ``cls(data_source=dataset,
data_config=config.data)`` in ``create_rl_sampler`` and called ``sampler.update(batch=batch)`` at the end of
every ``RayPPOTrainer.fit`` step. verl 0.9 kept ``create_rl_sampler`` (now in ``verl.trainer.ppo.utils``,
bound by name in ``ray_trainer``, ``main_ppo_v0`` and ``v1.trainer_base``) but builds only its
Random/Sequential samplers, and nothing calls ``update``. The plugin (``_hook.TARGETS``):

* wraps ``verl.trainer.ppo.utils.create_rl_sampler`` (:func:`patch_sampler_factory`): with
  ``data.sampler.class_path`` set it builds that class as verl ≤ 0.8 did; without it, verl's own function
  runs untouched;
* calls ``update(batch)`` from the trainer v0 ``_update_actor`` wrapper (:func:`feed_sampler`), once per
  step, with the scored batch, before verl saves the step's checkpoint;
* refuses the key on trainer v1 (:func:`patch_sampler_factory_v1`), which draws its prompts through
  TransferQueue in ``gen_batch_size`` chunks (1 in its async modes), ahead of the rewards, and updates
  ``parameter_sync_step`` times per step: no scored batch per drawn round exists to hand to ``update``.

Cheap to import (stdlib only): ``_hook`` imports it at ``import verl``.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

from costaware.integrations.verl.state import PATCH_MARK, mark_patched

CLASS_PATH_KEY = "data.sampler.class_path"
# modules that bind ``create_rl_sampler`` by name (``from verl.trainer.ppo.utils import create_rl_sampler``)
_V0_USERS = ("verl.trainer.ppo.ray_trainer", "verl.trainer.main_ppo_v0")


def _get(node: Any, key: str, default: Any = None) -> Any:
    if node is None:
        return default
    getter = getattr(node, "get", None)
    return getter(key, default) if getter is not None else getattr(node, key, default)


def sampler_class_path(data_config: Any) -> str | None:
    """``data.sampler.class_path``, or None when the key is absent, null or empty (verl's own sampler)."""
    path = _get(_get(data_config, "sampler"), "class_path")
    return str(path) if path else None


def _critic_warmup(data_config: Any) -> Any:
    try:  # the data node of verl's Hydra config reaches the root through its parent
        from omegaconf import OmegaConf

        return OmegaConf.select(data_config, "..trainer.critic_warmup", default=0)
    except Exception:  # a plain mapping (no root): nothing to check
        return 0


def _load_class(path: str, name: str) -> Any:
    """verl's own loader (``pkg://dotted.module`` or a file path), as verl ≤ 0.8 loaded the class."""
    try:
        from verl.utils.import_utils import load_extern_object
    except ImportError:  # a verl without it: ``pkg://`` or a dotted module path through importlib
        return getattr(importlib.import_module(path.removeprefix("pkg://").replace("/", ".")), name)
    return load_extern_object(path, name)


def _v1_refusal(path: str) -> str:
    return (
        f"{CLASS_PATH_KEY}={path!r} is not supported by verl's trainer v1 (trainer.use_v1=true, the "
        "default): it draws prompts in gen_batch_size chunks through TransferQueue ahead of their "
        "rewards, so no scored batch per drawn round reaches the sampler's update(); set "
        "trainer.use_v1=false (trainer v0) to use a curriculum sampler"
    )


def check_sampler_config(data_config: Any, *, use_v1: bool, critic_warmup: Any = 0) -> None:
    """The checks ``data.sampler.class_path`` gets before any dataset or class is loaded (nothing when unset).

    Refused, one ``ValueError`` naming the key: the key on trainer v1, ``data.dataloader_num_workers`` other
    than 0 (a worker fetches the next round before this one's rewards reach ``update``), a missing
    ``data.sampler.class_name``, and ``trainer.critic_warmup`` > 0 (verl skips ``_update_actor``, where
    ``update`` is called, while the critic warms up).
    """
    path = sampler_class_path(data_config)
    if path is None:
        return
    if use_v1:
        raise ValueError(_v1_refusal(path))
    name = _get(_get(data_config, "sampler"), "class_name")
    workers = _get(data_config, "dataloader_num_workers", 8)  # verl ≤ 0.8's default when the key is absent
    if workers != 0:
        raise ValueError(
            f"data.dataloader_num_workers must be 0 when {CLASS_PATH_KEY} is set (a worker would "
            f"fetch the next round before this one's scored batch reaches update()), got {workers!r}"
        )
    if not name:
        raise ValueError(f"data.sampler.class_name must name the class in {CLASS_PATH_KEY}={path!r}, got {name!r}")
    if critic_warmup:
        raise ValueError(
            f"trainer.critic_warmup must be 0 with {CLASS_PATH_KEY} (verl skips _update_actor, "
            f"which feeds the sampler, during the warm-up), got {critic_warmup!r}"
        )


def build_sampler(data_config: Any, dataset: Any) -> Any:
    """``cls(data_source=dataset, data_config=data_config)`` for the class at ``data.sampler.class_path``,
    after :func:`check_sampler_config` (trainer v0)."""
    check_sampler_config(data_config, use_v1=False, critic_warmup=_critic_warmup(data_config))
    path = sampler_class_path(data_config)
    name = _get(_get(data_config, "sampler"), "class_name")
    assert path is not None  # verl's factory calls this only with the key set
    cls = _load_class(path, str(name))
    if not isinstance(cls, type):
        raise TypeError(f"data.sampler.class_name={name!r} in {CLASS_PATH_KEY}={path!r} must be a class, got {cls!r}")
    return cls(data_source=dataset, data_config=data_config)


def feed_sampler(trainer: Any, batch: Any) -> None:
    """``trainer.train_dataloader.sampler.update(batch)`` when the config built it and it has ``update``."""
    if sampler_class_path(_get(getattr(trainer, "config", None), "data")) is None:
        return
    update = getattr(getattr(getattr(trainer, "train_dataloader", None), "sampler", None), "update", None)
    if callable(update):
        update(batch)


def _rebind(names: tuple[str, ...], original: Any, wrapper: Any) -> None:
    for name in names:  # modules imported before the patch hold verl's function under their own name
        user: Any = sys.modules.get(name)  # a module of verl's: create_rl_sampler is set on it
        if user is not None and getattr(user, "create_rl_sampler", None) is original:
            user.create_rl_sampler = wrapper


def _verl_original(fn: Any) -> Any:
    return fn.__wrapped__ if getattr(fn, PATCH_MARK, False) else fn


def patch_sampler_factory(module: Any) -> None:
    """Wrap ``verl.trainer.ppo.utils.create_rl_sampler(data_config, dataset)`` (idempotent).

    Patched where it is defined, when it is first imported: ``ray_trainer`` and ``main_ppo_v0`` import it
    by name afterwards and so bind the wrapper (those already imported are rebound here); ``v1.trainer_base``
    gets :func:`patch_sampler_factory_v1` from its own hook.
    """
    original = module.create_rl_sampler
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def create_rl_sampler(data_config, dataset):
        if sampler_class_path(data_config) is None:
            return original(data_config, dataset)
        return build_sampler(data_config, dataset)

    module.create_rl_sampler = mark_patched(create_rl_sampler)
    _rebind(_V0_USERS, original, module.create_rl_sampler)


def patch_sampler_factory_v1(module: Any) -> None:
    """Make ``v1.trainer_base.create_rl_sampler`` refuse ``data.sampler.class_path`` (idempotent); without
    the key, verl's own function runs untouched."""
    current = module.create_rl_sampler
    if getattr(current, "__costaware_v1__", False):
        return
    original = _verl_original(current)

    @functools.wraps(original)
    def create_rl_sampler(data_config, dataset):
        path = sampler_class_path(data_config)
        if path is not None:
            raise ValueError(_v1_refusal(path))
        return original(data_config, dataset)

    create_rl_sampler.__costaware_v1__ = True  # type: ignore[attr-defined]  # a marker on the wrapper function
    module.create_rl_sampler = mark_patched(create_rl_sampler)
