"""Run a child process in the foreground of this one (`creditlens app` starts the app's launcher, which
starts Streamlit): Ctrl-C reaches the child directly (same process group) and a SIGTERM sent to this
process is passed on to it, so stopping the command stops the server it started instead of orphaning it."""

from __future__ import annotations

import signal
import subprocess
import threading


def run_in_foreground(command: list[str], **popen_kwargs) -> int:
    """The child's exit code; 0 when it stopped on Ctrl-C."""
    proc = subprocess.Popen(command, **popen_kwargs)
    forward = threading.current_thread() is threading.main_thread()  # signal handlers: main thread only
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate()) if forward else None
    interrupted = False
    try:
        while True:
            try:
                code = proc.wait()
                return 0 if interrupted else code
            except KeyboardInterrupt:  # the child got the same Ctrl-C; wait for it to finish stopping
                interrupted = True
    finally:
        if forward:
            signal.signal(signal.SIGTERM, previous)
