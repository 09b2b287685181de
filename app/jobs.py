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


def resample_job(
    handle, run: str, rollout_id: int, engine, record: dict, verifier: str | None, positions, samples: int
) -> Job:
    """A (not yet started) job resampling `positions` of a rollout with a loaded engine, M = `samples`.

    It saves what it finished to the store behind `handle` (a `StoreHandle`), also when cancelled: the
    engine stops after its current chunk and the finished suffixes are kept.
    """
    from backend import analysis

    positions, samples = list(positions), int(samples)

    def work(job: Job):
        result = analysis.resample_rollout(
            engine, record, verifier, positions, samples, progress=job.progress, cancel=job.cancel.is_set
        )
        if result.samples:
            with handle.write() as store:
                store.save_resample(run, rollout_id, result.table())
        return result

    return Job(work)
