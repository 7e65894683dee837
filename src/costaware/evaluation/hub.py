"""The hub path of :func:`costaware.evaluation.load_benchmark` (no ``--data``): one clear error offline.

Without a network, ``datasets.load_dataset`` retries every file with backoff (about 23 s and a dozen
warning lines) before failing. :func:`hub_rows` first probes the endpoint (:func:`hub_reachable`);
when it cannot be reached the load runs in the libraries' offline mode, which still finds a cached
copy and otherwise fails at once, with their retry warnings silenced. The error names the benchmark
and how to pass a local file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import urlparse


class DatasetUnavailableError(RuntimeError):
    """The benchmark could not be fetched from the hub (no network): pass a local file instead."""


__all__ = ["HubSource", "hub_reachable", "hub_mode", "hub_rows"]


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub ($HF_ENDPOINT, default huggingface.co) opens in ``timeout`` s.

    Already offline (``HF_HUB_OFFLINE=1``): False. Behind a proxy the direct probe says nothing, so a
    set ``HTTPS_PROXY``/``ALL_PROXY`` counts as reachable.
    """
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(_endpoint())
    try:
        socket.create_connection(
            (url.hostname or "", url.port or (80 if url.scheme == "http" else 443)), timeout
        ).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def hub_mode(*, offline: bool) -> Iterator[None]:
    """Quiet hub calls; offline, also datasets' and huggingface_hub's offline mode.

    Offline mode still loads a cached copy, and fails at once otherwise: without it every file is
    retried with backoff (about 23 s, two warning lines per try) before the same error. The retry
    warnings are silenced in both modes: the error raised afterwards says what failed, once.
    """
    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    patched: list[tuple[Any, str, Any]] = []
    loggers = [logging.getLogger(n) for n in ("huggingface_hub", "datasets", "urllib3")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        if offline:
            os.environ.update({k: "1" for k in saved_env})
            for module, names in (
                ("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
                ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
            ):  # read at import: patch a module that is already loaded
                mod = sys.modules.get(module)
                for name in names:
                    if mod is not None and hasattr(mod, name):
                        patched.append((mod, name, getattr(mod, name)))
                        setattr(mod, name, True)
        yield
    finally:
        for mod, name, value in patched:
            setattr(mod, name, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


class HubSource(Protocol):
    """Where a benchmark lives on the hub: what :func:`hub_rows` reads of a benchmark's spec
    (:class:`costaware.evaluation.data.BenchmarkSpec` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def hub_id(self) -> str | None: ...
    @property
    def hub_config(self) -> str | None: ...


def hub_rows(spec: HubSource, split: str) -> list[dict[str, Any]]:
    hint = (
        f"Download {spec.hub_id} ({split} split) on a machine with network access, e.g. "
        f"datasets.load_dataset({spec.hub_id!r}{', ' + repr(spec.hub_config) if spec.hub_config else ''}, "
        f"split={split!r}).to_json('{spec.name}.jsonl'), and pass the file: --data {spec.name}.jsonl "
        f"(jsonl, json, parquet or csv in the hub's format)"
    )
    if spec.hub_id is None:
        raise ValueError(f"benchmark {spec.name!r} has no hub copy: pass a local file (--data PATH)")
    offline = not hub_reachable()
    try:
        with hub_mode(offline=offline):
            import datasets

            ds = datasets.load_dataset(spec.hub_id, spec.hub_config, split=split)
    except Exception as err:  # offline, hub down, gated: all end the same way for the user
        if offline:
            raise DatasetUnavailableError(
                f"could not load benchmark {spec.name!r}: the hub ({_endpoint()}) cannot be reached "
                f"from here and no cached copy of {spec.hub_id} was found. {hint}"
            ) from None
        raise DatasetUnavailableError(
            f"could not load benchmark {spec.name!r} from the hub ({spec.hub_id}): "
            f"{type(err).__name__}: {str(err)[:300]}. {hint}"
        ) from err
    return [dict(r) for r in ds]
