"""Run a child process in the foreground of this one (`creditlens app` starts the app's launcher, which
starts Streamlit): Ctrl-C reaches the child directly (same process group) and a SIGTERM sent to this
process is passed on to it, so stopping the command stops the server it started instead of orphaning it."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

GRACE_SECONDS = 2.0
"""After a Ctrl-C, how long the children have to stop on their own before they are sent one."""


def run_in_foreground(command: list[str], **popen_kwargs) -> int:
    """The child's exit code; 0 when it stopped on Ctrl-C. A Ctrl-C from the terminal reaches the child too;
    one sent to this process alone (`kill -INT`, `creditlens watch` stopping its app) is passed on to the
    child when it has not stopped within `GRACE_SECONDS`, so the child is never left running."""
    proc = subprocess.Popen(command, **popen_kwargs)
    forward = threading.current_thread() is threading.main_thread()  # signal handlers: main thread only
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate()) if forward else None
    interrupted = False
    try:
        while True:
            try:
                code = proc.wait(timeout=GRACE_SECONDS if interrupted else None)
                return 0 if interrupted else code
            except KeyboardInterrupt:  # the child got the same Ctrl-C, or not: see the timeout above
                interrupted = True
            except subprocess.TimeoutExpired:  # this process alone was interrupted
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                return 0
    finally:
        if forward:
            signal.signal(signal.SIGTERM, previous)


def _wait_all(procs: list[subprocess.Popen], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:  # a second Ctrl-C: the children have it too
            pass


def run_together(commands: list[list[str]], stop_seconds: float = 15.0, **popen_kwargs) -> int:
    """Run the commands side by side as one process tree in the foreground (`creditlens watch`: a follower
    and the app). When one ends, the others are stopped (SIGINT, as Ctrl-C: each finishes its unit of work);
    Ctrl-C reaches every child directly (same process group) and a SIGTERM is passed on. A child that does
    not stop within `stop_seconds` is killed. Returns 0 after Ctrl-C, else the first nonzero exit code."""
    procs = [subprocess.Popen(command, **popen_kwargs) for command in commands]
    forward = threading.current_thread() is threading.main_thread()
    previous = (
        signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs if p.poll() is None])
        if forward
        else None
    )
    interrupted = False
    try:
        try:
            while all(p.poll() is None for p in procs):
                time.sleep(0.2)
        except (
            KeyboardInterrupt
        ):  # from a terminal every child got the same Ctrl-C; from `kill -INT` only we did
            interrupted = True
            _wait_all(procs, GRACE_SECONDS)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + stop_seconds
        for p in procs:
            while p.returncode is None:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    deadline = time.monotonic() + stop_seconds  # reaped at once after SIGKILL
                except KeyboardInterrupt:  # a second Ctrl-C: keep waiting for the children to stop
                    interrupted = True
    finally:
        if forward:
            signal.signal(signal.SIGTERM, previous)
    codes = [p.returncode for p in procs]
    return 0 if interrupted else next((c for c in codes if c), 0)
