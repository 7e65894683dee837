"""Child processes that never outlive the test that started them: torchrun launches, and anything else.

``torchrun`` starts each worker in a session of its own, so killing the launcher leaves its workers running,
and so does an interrupted test (Ctrl-C in pytest) that waited on ``subprocess.run``. :func:`process_group`
starts the command as the leader of a new process group and, on any exit of its block (normal end, failure,
timeout, KeyboardInterrupt), SIGKILLs that group, every process under the launcher and the groups they lead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

__all__ = ["kill_group", "process_group", "run_in_group"]


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (psutil, a dependency of accelerate; else /proc; else none)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the group that ``proc`` leads, every process under it and the groups those lead; then reap it."""
    if proc.poll() is None:
        under = _descendants(proc.pid)  # before the launcher dies and its children are reparented
        groups = {proc.pid}
        for pid in under:
            with contextlib.suppress(OSError):
                groups.add(os.getpgid(pid))  # a torchrun worker leads its own session
        groups.discard(os.getpgrp())  # never the test's own group
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for pid in under:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    else:  # the launcher has ended: what it left in its group still goes
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def process_group(cmd: list[str], **popen_kwargs: Any) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)``, killed with its group on leaving."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)
    try:
        yield proc
    finally:
        kill_group(proc)


def run_in_group(cmd: list[str], *, timeout: float, **popen_kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)`` whose timeout or interruption
    kills the whole group (``subprocess.run`` kills the launcher only)."""
    with process_group(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs) as proc:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
