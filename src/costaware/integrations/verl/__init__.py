"""Cost-Aware GRPO for verl 0.9.x, loaded as a verl plugin.

verl imports this module from ``import verl`` through the ``verl.plugins`` entry point (pyproject:
``[project.entry-points."verl.plugins"] costaware = "costaware.integrations.verl"``), or through
``VERL_USE_EXTERNAL_MODULES=costaware.integrations.verl``. Because every Ray worker runs ``import verl``,
every process gets it, the trainer's included.

Importing is cheap and changes nothing in verl: it only installs an import hook (``_hook.TARGETS``
maps each verl module to the function that patches it). When verl imports ``ray_trainer`` (trainer v0)
or ``v1.trainer_base`` (trainer v1, the default), the hook wraps the trainer's ``_update_actor``; when it
imports ``workers.utils.losses``, it wraps ``ppo_loss`` so that the entropy and KL terms get the row's
factor too; when it imports ``v1.utils``, it makes the metrics window keep the cumulative counters; and
``main_ppo``'s driver checks every plugin setting before Ray starts (``driver``). Every
wrapper calls verl's original untouched unless the Hydra config holds ``algorithm.cost_aware`` with
``enable=true`` (the default once the key exists), or, for ``ppo_loss``, unless the batch carries
``cost_aware_weights``::

    python -m verl.trainer.main_ppo ... algorithm.adv_estimator=grpo \\
        actor_rollout_ref.actor.ppo_epochs=1 actor_rollout_ref.actor.shuffle=false \\
        +algorithm.cost_aware.method=p_star +algorithm.cost_aware.alpha=0.01

Set ``COSTAWARE_VERL_PLUGIN=0`` to keep even the import hook out.

>>> from costaware.integrations.verl import CostAwareConfig
>>> CostAwareConfig.from_mapping({"method": "p_smooth", "alpha": 0.05}).method
'p_smooth'
"""

from __future__ import annotations

import os
from typing import Any

from costaware.integrations.verl._hook import install_import_hook, is_patched

__all__ = [
    "CONFIG_KEY",
    "VERL_METHODS",
    "CostAwareConfig",
    "ResampleResult",
    "install_import_hook",
    "is_patched",
    "plan_resampling",
    "resample_dataproto",
    "sequence_advantages",
    "sequence_costs",
]

_LAZY = {
    "CONFIG_KEY": "costaware.integrations.verl.config",
    "VERL_METHODS": "costaware.integrations.verl.config",
    "CostAwareConfig": "costaware.integrations.verl.config",
    "ResampleResult": "costaware.integrations.verl.resample",
    "plan_resampling": "costaware.integrations.verl.resample",
    "resample_dataproto": "costaware.integrations.verl.resample",
    "sequence_advantages": "costaware.integrations.verl.resample",
    "sequence_costs": "costaware.integrations.verl.resample",
}


def __getattr__(name: str) -> Any:
    # Lazy: the math pulls in torch, which the plugin import must not pay for.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if os.environ.get("COSTAWARE_VERL_PLUGIN", "1").strip().lower() not in ("0", "false", "no", "off"):
    install_import_hook()
