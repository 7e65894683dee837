"""The plugin's settings checked on verl's driver, before Ray starts any worker.

``main_ppo``'s driver calls ``verl.utils.config.validate_config(config, ...)`` and then
``run_ppo(config, task_runner_class)``, which starts Ray (``ray.init``) and the ``TaskRunner`` actor that
builds the workers. The trainer reads ``algorithm.cost_aware`` only in its first update, minutes later; so
the import hook (``_hook.TARGETS``) wraps both driver functions with :func:`check_driver_config`, and a bad
value fails in seconds, naming the field. Both are wrapped because ``python -m verl.trainer.main_ppo`` runs
the module as ``__main__`` (the hook never sees it imported, but its ``validate_config`` is the wrapped one),
while verl's recipes import ``run_ppo`` and may skip ``validate_config``.

Cheap to import (stdlib only): ``_hook`` imports it at ``import verl``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from costaware.integrations.verl.state import PATCH_MARK, mark_patched

_last_checked: list[Any] = []  # the config checked last: run_ppo after validate_config checks it once


def check_driver_config(config: Any) -> Any:
    """Every plugin setting of a full verl config, checked as the trainer will: ``algorithm.cost_aware``
    with the actor's loss (:func:`config.read_trainer_config`), its method against the chosen trainer
    (:func:`config.check_trainer`), and ``data.sampler`` (the curriculum hook and, when it names
    :class:`prompts.CostAwarePromptSampler`, its ``data.sampler.costaware`` options).

    Returns the validated ``CostAwareConfig``, or None when the key is absent or disabled. Raises one
    ``ValueError`` naming the setting and its value.
    """
    from costaware.integrations.verl.config import check_trainer, get_dotted, read_trainer_config, uses_trainer_v1
    from costaware.integrations.verl.curriculum import check_sampler_config, sampler_class_path

    use_v1 = uses_trainer_v1(config)
    data = get_dotted(config, "data")
    if sampler_class_path(data) is not None:
        check_sampler_config(data, use_v1=use_v1, critic_warmup=get_dotted(config, "trainer.critic_warmup", 0))
        from costaware.integrations.verl.prompts import check_options, is_prompt_sampler

        if is_prompt_sampler(data):
            check_options(data)
    cfg = read_trainer_config(config)
    if cfg is not None:
        check_trainer(cfg, use_v1=use_v1)
    return cfg


def _check_once(config: Any) -> None:
    if _last_checked and _last_checked[0] is config:
        return
    check_driver_config(config)
    _last_checked[:] = [config]


def patch_validate_config(module: Any) -> None:
    """Wrap ``verl.utils.config.validate_config`` (idempotent): verl's checks, then the plugin's."""
    original = module.validate_config
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        out = original(config, *args, **kwargs)
        _check_once(config)
        return out

    module.validate_config = mark_patched(validate_config)
    for name in ("verl.utils", "verl.trainer.main_ppo", "verl.trainer.main_ppo_v0"):  # bound by name
        user: Any = sys.modules.get(name)  # a module of verl's: validate_config is set on it
        if user is not None and getattr(user, "validate_config", None) is original:
            user.validate_config = module.validate_config


def patch_main_ppo(module: Any) -> None:
    """Wrap ``verl.trainer.main_ppo.run_ppo(config, task_runner_class)`` (idempotent): the plugin's
    settings are checked before ``ray.init`` and before the ``TaskRunner`` actor starts."""
    original = module.run_ppo
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def run_ppo(config, *args, **kwargs):
        _check_once(config)
        return original(config, *args, **kwargs)

    module.run_ppo = mark_patched(run_ppo)
