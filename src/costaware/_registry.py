"""Registries of named classes: the row methods (:mod:`costaware.grpo.methods`) and the prompt rules
(:mod:`costaware.rollouts.prompts`) are each a plain ``dict`` filled by one class decorator.

As verl's ``core_algos`` registries do, a name is taken once: registering another class under a name that is
already filed raises, so a copy-pasted rule cannot silently replace the one a config names. The same class
registered again (its module reloaded: same module, same qualified name) replaces its entry.

>>> from typing import ClassVar
>>> RULES: dict[str, type] = {}
>>> register = registrar(RULES, "rule")
>>> @register
... class Half:
...     name: ClassVar[str] = "half"
>>> list(RULES)
['half']
>>> @register
... class Other:
...     name: ClassVar[str] = "half"
Traceback (most recent call last):
...
ValueError: a rule named 'half' is already registered (Half); choose another name
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["registrar"]

T = TypeVar("T", bound=type)


def registrar(registry: dict[str, T], kind: str) -> Callable[[T], T]:
    """A class decorator that files a class under its ``name`` class attribute in ``registry``.

    ``kind`` names what the registry holds, for the error a taken name raises.
    """

    def register(cls: T) -> T:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {kind} needs a non-empty str class attribute 'name', got {name!r}")
        taken = registry.get(name)
        if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(
                f"a {kind} named {name!r} is already registered ({taken.__qualname__}); choose another name"
            )
        registry[name] = cls
        return cls

    return register
