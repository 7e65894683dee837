"""Cost-Aware GRPO on TRL's ``GRPOTrainer``: :class:`CostAwareGRPOConfig` and :class:`CostAwareGRPOTrainer`.

>>> from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # doctest: +SKIP
>>> args = CostAwareGRPOConfig(output_dir="out")  # CPU or GPU; method "auto": nonzero under dapo  # doctest: +SKIP
>>> trainer = CostAwareGRPOTrainer(model=model, args=args, reward_funcs=reward, train_dataset=ds,
...                                processing_class=tokenizer)  # doctest: +SKIP
>>> trainer.train(); trainer.cost_aware_counters.tokens  # doctest: +SKIP

See :mod:`costaware.integrations.trl.trainer` for how the plan reaches TRL's loss.
"""

from __future__ import annotations

try:
    import trl
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("costaware.integrations.trl needs TRL: pip install 'costaware[trl]'") from exc

from packaging.version import Version

SUPPORTED_TRL = (Version("1.16.0"), Version("1.17.0"))  # [min, max): the internals overridden here
if not (SUPPORTED_TRL[0] <= Version(trl.__version__) < SUPPORTED_TRL[1]):
    raise ImportError(
        f"costaware.integrations.trl supports TRL >= {SUPPORTED_TRL[0]}, < {SUPPORTED_TRL[1]} "
        f"(it overrides GRPOTrainer internals); found trl {trl.__version__}"
    )

from costaware.grpo.accounting import STATE_FILE  # noqa: E402
from costaware.integrations.trl.config import SUPPORTED_LOSS_TYPES, CostAwareGRPOConfig  # noqa: E402
from costaware.integrations.trl.trainer import CostAwareGRPOTrainer  # noqa: E402

__all__ = ["CostAwareGRPOConfig", "CostAwareGRPOTrainer", "SUPPORTED_TRL", "SUPPORTED_LOSS_TYPES", "STATE_FILE"]
