"""The launch helper of the multi-process tests: an interrupted or timed-out wait kills the launcher, its process
group and the processes it started in sessions of their own (as torchrun starts its workers)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from process_group import process_group, run_in_group

# A launcher like torchrun: one child in its own group, one in a session of its own; it prints their pids.
LAUNCHER = """
import subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
same = subprocess.Popen(sleep)
own = subprocess.Popen(sleep, start_new_session=True)
with open(sys.argv[1], "w") as f:
    f.write(f"{same.pid} {own.pid}")
print(same.pid, own.pid, flush=True)
time.sleep(600)
"""


def _state(pid: int) -> str:
    """The process's state letter ('' when there is no such process; 'Z' for one dead but not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _dead(pid: int) -> bool:
    """Whether ``pid`` has died, waiting up to 30 s for a SIGKILL to land (a bound, not a timing claim)."""
    deadline = time.monotonic() + 30
    while _state(pid) not in ("", "Z", "X") and time.monotonic() < deadline:
        time.sleep(0.05)
    return _state(pid) in ("", "Z", "X")


@pytest.fixture(autouse=True)
def _linux():
    if not sys.platform.startswith("linux"):
        pytest.skip("reads process states from /proc")


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_wait_kills_the_launcher_and_every_process_it_started(tmp_path, interrupt):
    cmd = [sys.executable, "-c", LAUNCHER, str(tmp_path / "pids")]
    with pytest.raises(interrupt):
        with process_group(cmd, stdout=subprocess.PIPE, text=True) as proc:
            same, own = map(int, proc.stdout.readline().split())
            assert _state(same) not in ("", "Z") and _state(own) not in ("", "Z")  # running
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                raise interrupt("Ctrl-C while the test waits on the launch") from None
    assert proc.returncode == -9  # reaped: SIGKILL
    assert _dead(same) and _dead(own)


def test_a_timed_out_run_kills_the_group_and_a_finished_one_returns_its_output(tmp_path):
    pids = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):  # the launcher never ends: it sleeps 600 s
        run_in_group([sys.executable, "-c", LAUNCHER, str(pids)], timeout=8)
    assert pids.exists()  # started its children before the timeout
    assert all(_dead(int(pid)) for pid in pids.read_text().split())
    done = run_in_group([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")
