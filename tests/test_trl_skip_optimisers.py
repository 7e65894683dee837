"""The premise of the trainer's skipped steps: an optimiser step with every ``.grad`` None changes nothing.

``CostAwareGRPOTrainer`` skips a step that is padding on every process by running no forward, so every
parameter's ``.grad`` stays ``None`` when HF's ``Trainer`` calls ``optimizer.step()``. That leaves the
optimiser untouched only if the optimiser skips parameters without a gradient: checked here for every
optimiser name ``TrainingArguments(optim=...)`` offers that can be built on this machine, with weight
decay on and after a real step (so that moments and step counts exist and would move).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import Trainer, TrainingArguments  # noqa: E402
from transformers.training_args import OptimizerNames  # noqa: E402

# built from torch and transformers alone: these must never be skipped
CORE = {"adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop"}


def _build(name: str, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    args = TrainingArguments(output_dir=str(tmp_path), optim=name, use_cpu=True, weight_decay=0.1,
                             learning_rate=1e-2, report_to="none")  # fmt: skip
    try:
        cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
        opt = cls(model.parameters(), **kwargs)
    except Exception as exc:  # a missing optional package, or an optimiser that needs a device or a model
        if name in CORE:
            raise
        pytest.skip(f"optim={name!r} cannot be built here: {type(exc).__name__}: {str(exc)[:120]}")
    return model, opt


@pytest.mark.parametrize("name", [o.value for o in OptimizerNames])
def test_a_step_without_gradients_leaves_parameters_and_state_alone(name, tmp_path):
    model, opt = _build(name, tmp_path)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    model(x).square().sum().backward()
    opt.step()  # a real step: moments, step counts and decayed weights now exist
    opt.zero_grad(set_to_none=True)
    params = [p.detach().clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())
    opt.step()  # every .grad is None: what a skipped step gives the optimiser
    for before, p in zip(params, model.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), before, rtol=0, atol=0)
    after = opt.state_dict()
    assert after["state"].keys() == state["state"].keys()
    for i, per_param in state["state"].items():
        for key, value in per_param.items():
            got = after["state"][i][key]
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(got, value, rtol=0, atol=0)
            else:
                assert got == value, (i, key)


def test_the_core_optimisers_are_all_offered():
    assert CORE <= {o.value for o in OptimizerNames}
