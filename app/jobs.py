"""Background jobs for long work (suffix resampling) with progress and a cancel flag.

The model runs in a worker thread so the page can draw a progress bar and a Cancel button while it
works; Streamlit calls stay on the script thread. The worker saves what it finished to the store.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Job:
    target: Callable[[Job], Any]
    done: int = 0
    total: int = 0
    result: Any = None
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Job:
        self.thread = threading.Thread(target=self._run, name="creditlens-job", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.result = self.target(self)
        except Exception as exc:  # noqa: BLE001 - reported on the page, not lost in a thread
            self.error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = int(done), int(total)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0
