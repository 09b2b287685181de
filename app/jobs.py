"""Background jobs for long work (suffix resampling, model-credit scores) with progress and a cancel flag.

The model runs in a worker thread so the page can draw a progress bar and a Cancel button while it
works; Streamlit calls stay on the script thread. The worker saves what it finished to the store.

Jobs started from the app go through `start`: read-only mode refuses them, and one store runs at most
one model job (resample, teacher, score) at a time in this server process; another session asking
meanwhile is refused with a message. Sessions share the process, so the slot is a module-level table.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import access
from backend.core.batch import MODEL_SCORED
from backend.models import agent_resample
from backend.models.model_credit_run import ModelCreditSettings, run_model_credit

MODEL_JOBS = ("resample", "teacher", "score", "model_credit")
MODEL_CREDIT_METHODS = MODEL_SCORED
"""What the Resample page's model-credit button offers (the estimators of the same names)."""


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
    handle,
    run: str,
    rollout_id: int,
    engine,
    record: dict,
    verifier: str | None,
    positions,
    samples: int,
    on_policy: bool | None = None,
    environment=None,
) -> Job:
    """A (not yet started) job resampling `positions` of a rollout with a loaded engine, M = `samples`;
    `on_policy` (whether the engine's model sampled the rollout's step) is stored with the suffixes;
    `environment` (`backend.models.environments`): an agent run's suffixes go through its tool loop.

    It saves what it finished to the store behind `handle` (a `StoreHandle`), also when cancelled: the
    engine stops after its current chunk and the finished suffixes are kept.
    """
    positions, samples = list(positions), int(samples)

    def work(job: Job):
        result = agent_resample.resample_rollout(
            engine,
            record,
            verifier,
            positions,
            samples,
            progress=job.progress,
            cancel=job.cancel.is_set,
            environment=environment,
        )
        if result.samples:
            with handle.write() as store:
                store.save_resample(run, rollout_id, result.table().assign(on_policy=on_policy))
        return result

    return Job(work)


_running: dict[str, tuple[str, Job]] = {}
_running_lock = threading.Lock()


def running_job(db: str) -> tuple[str, Job] | None:
    """(kind, job) of the model job running on store `db` in this process, if any."""
    with _running_lock:
        held = _running.get(str(Path(db).resolve()))
    return held if held is not None and held[1].running else None


def start(current: access.Settings, db: str, kind: str, job: Job) -> Job:
    """Start `job` (a `MODEL_JOBS` kind) unless read-only mode or another running job on `db` refuses it."""
    if kind not in MODEL_JOBS:
        raise ValueError(f"unknown job kind {kind!r}; known: {', '.join(MODEL_JOBS)}")
    access.require_writable(current, kind)
    key = str(Path(db).resolve())
    with _running_lock:
        _refuse_if_busy(_running.get(key))
        _running[key] = (kind, job)
        job.start()
    return job


def _refuse_if_busy(held: tuple[str, Job] | None) -> None:
    if held is not None and held[1].running:
        other, busy = held
        raise access.Refused(
            f"a {other} job is already running on this store ({busy.done}/{busy.total or '?'} done); "
            "one model job runs at a time: wait for it to finish or cancel it where it was started"
        )


def start_resample(
    current: access.Settings,
    db: str,
    handle,
    run: str,
    rollout_id: int,
    load_engine: Callable[[], Any],
    record: dict,
    verifier: str | None,
    positions,
    samples: int,
    on_policy: bool | None = None,
    environment=None,
) -> Job:
    """Check the request (read-only mode, the size cap, the store's job slot), then load the engine and
    start a `resample_job`. The engine loads only for a request that would be allowed."""
    positions = list(positions)
    access.require_writable(current, "resample")
    access.check_job_size(current, len(positions), int(samples))
    _refuse_if_busy(running_job(db))  # checked again, atomically, in `start`; this spares loading the engine
    job = resample_job(
        handle, run, rollout_id, load_engine(), record, verifier, positions, samples, on_policy, environment
    )
    return start(current, db, "resample", job)


def start_model_credit(
    current: access.Settings,
    db: str,
    handle,
    run: str,
    rollout_id: int,
    load_engine: Callable[[], Any],
    method: str,
    model_dir: str,
    engine_name: str,
) -> Job:
    """Check the request (read-only mode, the store's job slot), then load the engine and start scoring the
    rollout's group with `method` (one of MODEL_CREDIT_METHODS). The job stores its scores in one
    transaction when it finishes; a cancelled job stores nothing."""
    access.require_writable(current, "model_credit")
    _refuse_if_busy(running_job(db))
    settings = ModelCreditSettings(method=method, model_dir=model_dir, engine=engine_name)
    engine = load_engine()

    def work(job: Job):
        return run_model_credit(
            handle,
            run,
            settings,
            rollout=rollout_id,
            engine=engine,
            progress=job.progress,
            cancel=job.cancel.is_set,
        )

    return start(current, db, "model_credit", Job(work))
