"""Jobs started from the app: one running model job per store, and a cap on suffixes per request."""

from __future__ import annotations

import shutil
import threading

import pytest

from app import access, jobs
from backend.models import load_engine
from backend.store import StoreHandle
from tests.app.conftest import open_app


@pytest.fixture
def writable(monkeypatch, app_db):
    for name in (access.READ_ONLY_ENV, access.MAX_SUFFIXES_ENV):
        monkeypatch.delenv(name, raising=False)
    return access.settings(app_db)


@pytest.fixture
def demo_engine(app_db):
    handle = StoreHandle(app_db)
    with handle.read() as store:
        info, record = store.run_info("demo"), store.rollout("demo", 0)
    assert info.get("model_dir"), "the bundled demo run lost its model (sample_runs/demo_run.json: model)"
    engine = load_engine(info["model_dir"])
    engine.max_batch = 4  # several chunks, so the job can be held between them
    return handle, info, record, engine


def _samples(db, rollout: int) -> int:
    with StoreHandle(db).read() as store:
        return len(store.resample_samples("demo", rollout))


@pytest.mark.slow
def test_a_second_job_is_refused_while_one_runs(writable, demo_engine, app_db, template_db, tmp_path):
    handle, info, record, engine = demo_engine
    job = jobs.resample_job(handle, "demo", 0, engine, record, info.get("verifier"), [0, 2, 4, 6], 4)
    first_chunk, resume = threading.Event(), threading.Event()
    report = job.progress

    def progress(done: int, total: int) -> None:  # hold the worker after its first chunk
        report(done, total)
        first_chunk.set()
        resume.wait(120)

    job.progress = progress
    try:
        jobs.start(writable, str(app_db), "resample", job)
        assert first_chunk.wait(120) and job.running
        assert jobs.running_job(str(app_db)) == ("resample", job)

        # Another session on the same store asks for a resampling: refused with a message, nothing stored.
        at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
        at.multiselect(key="resample_positions").set_value([0])
        at.number_input(key="resample_m").set_value(2)
        at.button(key="resample_run").click().run()
        assert not at.exception, [e.message for e in at.exception]
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "a resample job is already running on this store" in errors[0], errors
        assert "resample_job" not in at.session_state
        assert _samples(app_db, 2) == 0

        # Teacher and score jobs share the slot: one model job per store.
        for kind in ("teacher", "score"):
            with pytest.raises(access.Refused, match="already running"):
                jobs.start(writable, str(app_db), kind, jobs.Job(_must_not_run))

        # A different store is not held up.
        other = tmp_path / "other" / "runs.duckdb"
        other.parent.mkdir()
        shutil.copy(template_db, other)
        side = jobs.start(writable, str(other), "score", jobs.Job(lambda job: "done"))
        side.thread.join(60)
        assert side.result == "done"
    finally:
        resume.set()
        job.thread.join(120)
    assert not job.running and job.error is None
    assert jobs.running_job(str(app_db)) is None

    # Once the first job is done, the same request goes through.
    at.button(key="resample_run").click().run()
    assert not at.error, [e.value for e in at.error]
    assert any("stored" in s.value for s in at.success), [s.value for s in at.success]
    assert _samples(app_db, 2) == 2


def test_a_request_over_the_suffix_cap_is_refused(writable, app_db, monkeypatch):
    monkeypatch.setenv(access.MAX_SUFFIXES_ENV, "10")
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
    assert any("At most 10 suffixes" in c.value for c in at.caption)
    at.multiselect(key="resample_positions").set_value([0, 1, 2])
    at.number_input(key="resample_m").set_value(4)
    at.button(key="resample_run").click().run()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "3 positions x 4 samples = 12 suffixes" in errors[0], errors
    assert "at most 10 per request" in errors[0]
    assert _samples(app_db, 2) == 0

    at.number_input(key="resample_m").set_value(3).run()  # 9 suffixes: within the cap
    at.button(key="resample_run").click().run()
    assert not at.error, [e.value for e in at.error]
    assert _samples(app_db, 2) == 9


def _must_not_run(job):
    raise AssertionError("a refused job must not start")
