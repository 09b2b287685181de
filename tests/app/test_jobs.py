"""The resample job behind the Resample page's Cancel button, with the bundled tiny model."""

from __future__ import annotations

import threading

import pytest

from app import jobs
from backend.models import load_engine
from backend.store import StoreHandle

POSITIONS, SAMPLES = [0, 2, 4, 6], 16  # 64 suffixes: several engine chunks


@pytest.fixture
def demo(app_db):
    handle = StoreHandle(app_db)
    with handle.read() as store:
        # a rollout the bundled Monte Carlo teacher did not value: its resample rows start empty
        valued = set(store.resample_values("demo")["rollout_id"])
        rid = min(set(store.rollout_index("demo")["rollout_id"]) - valued)
        info, record = store.run_info("demo"), store.rollout("demo", rid)
    assert info.get("model_dir"), "the bundled demo run lost its model (sample_runs/demo_run.json: model)"
    engine = load_engine(info["model_dir"], engine="transformers")  # auto would take vLLM on a GPU box
    engine.max_batch = 16  # several chunks for 64 suffixes (cancel is checked between chunks)
    return handle, info, record, engine, rid


def test_cancel_stops_after_the_current_chunk_and_keeps_finished_samples(demo):
    handle, info, record, engine, rid = demo
    job = jobs.resample_job(handle, "demo", rid, engine, record, info.get("verifier"), POSITIONS, SAMPLES)
    first_chunk, resume = threading.Event(), threading.Event()
    report = job.progress

    def progress(done: int, total: int) -> None:  # hold the worker after its first chunk
        report(done, total)
        first_chunk.set()
        resume.wait(60)

    job.progress = progress
    job.start()
    assert first_chunk.wait(120), "the worker reported no progress"
    assert job.running and 0 < job.done < job.total == len(POSITIONS) * SAMPLES
    job.cancel.set()  # what the page's Cancel button does
    resume.set()
    job.thread.join(120)

    assert not job.running and job.error is None
    result = job.result
    assert result.cancelled
    assert 0 < len(result.samples) < len(POSITIONS) * SAMPLES
    assert len(result.samples) == job.done  # nothing after the chunk that saw the flag
    with handle.read() as store:
        stored = store.resample_samples("demo", rid)
    assert len(stored) == len(result.samples)  # the finished samples were saved
    assert set(stored["pos"]) <= set(POSITIONS)


def test_uncancelled_job_stores_every_sample(demo):
    handle, info, record, engine, rid = demo
    job = jobs.resample_job(handle, "demo", rid, engine, record, info.get("verifier"), [1], 3).start()
    job.thread.join(120)
    assert job.error is None and not job.result.cancelled and job.fraction == 1.0
    with handle.read() as store:
        assert len(store.resample_samples("demo", rid)) == 3
